"""What the NoneBot2 suites that drive the loaded plugin share (test_working_memory.py,
test_people.py): the plugin package NoneBot loaded, the wait for its background sends to
scopemem, and the rows scopemem stored as its export has them. Apart from helpers.py, which
the real bot process (supervised_bot.py) imports without the plugin loaded.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import time
from typing import Any

from conftest import Scopemem

# The cap of every wait for scopemem (a message embedded, a send answered) on a loaded machine.
WAIT_S = 180.0


def plugin():
    """The loaded plugin package (importable once conftest has let NoneBot load it)."""
    return importlib.import_module("nonebot_plugin_scopemem")


async def sends_ended() -> None:
    """Until every background send of the plugin has its answer from scopemem."""
    background = plugin().runtime.get_runtime().background
    deadline = time.monotonic() + WAIT_S
    while background:
        assert time.monotonic() < deadline, f"{len(background)} sends never ended"
        await asyncio.sleep(0.05)


async def exported(server: Scopemem, conv: str) -> list[dict[str, Any]]:
    """Every row `conv` may see, as `GET /v1/export` has them."""

    def export() -> str:
        r = server._http.get("/v1/export", params={"conversation_id": conv})
        assert r.status_code == 200, r.text
        return r.text

    return [json.loads(line) for line in (await asyncio.to_thread(export)).splitlines()[1:]]
