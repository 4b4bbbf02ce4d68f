"""A group whose sessions AstrBot isolates per member (``platform_settings.unique_session``,
会话隔离), in a real AstrBot 4.29 with the plugin's defaults (issue 78, item 4).

Run by tests/astrbot.rs with the AstrBot venv:

    python isolation_scenario.py --root DIR --plugin-src integrations/astrbot --scopemem URL

With the setting on, AstrBot's waking stage rewrites a group event's session id to the member's
own before any plugin sees it (``UNIQUE_SESSION_ID_BUILDERS``: ``<sender>_<group>`` on QQ's
aiocqhttp). Its webchat adapter, which these scenarios send through (scenario.py's GroupChat
turns its messages into group messages), has no builder of its own, so the scenario gives it
aiocqhttp's, the one most Chinese groups meet; everything after is AstrBot's own code.

Two members talk in the group, one asks the bot about the other's line, then the other asks
``/scopemem status``. The report holds the model's requests, the status reply, and the rows
scopemem keeps under the group's conversation and under each member's isolated one.
Protocol: the last stdout line starting with "@@SCENARIO REPORT " holds the report (JSON).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from scenario import (  # noqa: E402
    PLUGIN_DIR,
    GroupChat,
    StubLLM,
    plugin_sends_ended,
    prepare_root,
    say,
    scenario_main,
    shown,
    start_core,
    stop_astrbot,
    stored_rows,
    until_stored,
)

GROUP = "iso-group"
MEMBERS = {"mei": ("mei", "小红"), "ming": ("ming", "小明")}
LINES = [("ming", "周六的聚餐改到老地方了，晚上六点"), ("mei", "好的收到")]
QUESTION = "周六的聚餐在哪里"


async def run(args: argparse.Namespace) -> dict[str, Any]:
    root = os.path.realpath(args.root)
    llm = StubLLM("")
    await llm.start()
    prepare_root(root, args.plugin_src, args.scopemem, llm.port, plugin_defaults=True,
                 admins=["mei"])
    cmd_path = os.path.join(root, "data", "cmd_config.json")
    with open(cmd_path, encoding="utf-8") as f:
        cmd = json.load(f)
    cmd["platform_settings"] = {
        "unique_session": True,
        "rate_limit": {"time": 60, "count": 1000, "strategy": "stall"},
    }
    with open(cmd_path, "w", encoding="utf-8") as f:
        json.dump(cmd, f, ensure_ascii=False, indent=2)
    core = await start_core(root)
    lifecycle, core_task = core.lifecycle, core.task
    from astrbot.core.pipeline.waking_check import stage

    stage.UNIQUE_SESSION_ID_BUILDERS["webchat"] = stage.UNIQUE_SESSION_ID_BUILDERS["aiocqhttp"]
    star = next(
        s for s in lifecycle.plugin_manager.context.get_all_stars() if s.name == PLUGIN_DIR
    ).star_cls
    group = GroupChat(lifecycle)
    group_umo = GroupChat.umo(GROUP)
    isolated = {who: GroupChat.umo(f"{who}_{GROUP}") for who in MEMBERS}

    for who, text in LINES:
        await group.send(MEMBERS[who], GROUP, text)
    await plugin_sends_ended(star)
    await until_stored(star, group_umo, LINES[-1][1])
    before = len(llm.requests)
    reply = await group.send(MEMBERS["mei"], GROUP, QUESTION, at_bot=True)
    prompts = [shown(r) for r in llm.requests[before:]]
    await plugin_sends_ended(star)
    await until_stored(star, group_umo, reply.strip())
    status = await group.send(MEMBERS["ming"], GROUP, "/scopemem status")
    report = {
        "group_umo": group_umo,
        "isolated_umos": isolated,
        "reply": reply,
        "prompts": prompts,
        "status_reply": status,
        "group_rows": await stored_rows(star, group_umo),
        "isolated_rows": {who: await stored_rows(star, umo) for who, umo in isolated.items()},
    }
    await stop_astrbot(lifecycle, core_task)
    await llm.stop()
    return report




if __name__ == "__main__":
    scenario_main(run)
