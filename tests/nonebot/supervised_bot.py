"""A real NoneBot2 bot process for the supervisor test in test_plugin.py.

Runs `nonebot.run()` (FastAPI driver, uvicorn) with the plugin supervising `scopemem serve`
(`scopemem_binary`), so start-up and shutdown go through NoneBot's own lifespan and uvicorn's
signal handling, not a test harness. After `nonebot.run()` returns it prints
`@@AFTER_RUN {"children": [...]}`: the live child processes left once the driver has shut down
(the test expects none), then exits 0.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
from pathlib import Path

import nonebot


def live_children() -> list[int]:
    me = os.getpid()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[1]) == me and fields[0] != "Z":
            found.append(int(entry.name))
    return found


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--binary", required=True)
    ap.add_argument("--config", required=True)
    ap.add_argument("--token", default="")
    args = ap.parse_args()
    nonebot.init(
        driver="~fastapi",
        host="127.0.0.1",
        port=args.port,
        log_level="INFO",
        scopemem_binary=args.binary,
        scopemem_config=args.config,
        scopemem_token=args.token,
    )
    nonebot.load_plugin("nonebot_plugin_scopemem")
    # uvicorn handles SIGTERM itself (graceful shutdown, running NoneBot's shutdown hooks),
    # then re-raises it to the handler it found: this one, so the process can report.
    signal.signal(signal.SIGTERM, lambda *_: None)
    nonebot.run()
    print("@@AFTER_RUN " + json.dumps({"children": live_children()}), flush=True)


if __name__ == "__main__":
    main()
