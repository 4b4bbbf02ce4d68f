"""How long the bot waits for its memory block, measured inside a real AstrBot (issue 78, item 3).

Run by benches/astrbot_wait.rs (`make bench-astrbot-wait`) with the AstrBot venv:

    python wait_scenario.py --root DIR --plugin-src integrations/astrbot --scopemem URL

The group-chat set's three groups (benches/group_chat/chat.json) are played into AstrBot 4.29's
real core in their order, through its webchat adapter turned into group messages (scenario.py's
GroupChat), with the plugin's defaults (working memory on): members talk among themselves, and
every fact's question is asked of the bot (an @ of the bot) where the set says it is first
restated, as a member would ask it. AstrBot answers through an OpenAI-compatible recording
provider in this process (scenario.py's StubLLM), so each group's `req.contexts` is AstrBot's
own: the bot's earlier exchanges there, in AstrBot's formatting.

For each question it records, as the host sees it:
- the time from the question's arrival (its commit onto AstrBot's event queue) to the model's
  request, which carries the memory block: AstrBot's own stages plus the plugin's hook;
- the plugin's `on_llm_request` hook alone (`hook_latency_ms`: the injection's wait);
- whether scopemem had the recall's context computed ahead (its /metrics counters
  `scopemem_prefetch_history_predicted_total` and `scopemem_prefetch_recalls_total`, read before
  and after the question), and whether the block reached the model.

Protocol: the last stdout line starting with "@@SCENARIO REPORT " holds the report (JSON).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
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
    start_core,
    stop_astrbot,
)

CHAT_SET = Path(__file__).resolve().parents[2] / "benches" / "group_chat" / "chat.json"
# Where the memory block sits in the request the model gets (the plugin's <memory_context>).
BLOCK_TAG = "<memory_context>"


def played(chat_set: dict[str, Any]) -> list[dict[str, Any]]:
    """The groups' member lines in order, each fact's question inserted right before the line
    that restates the fact (or after the fact's own line when nothing restates it): a member
    asking the bot what the group said earlier. The bot's own lines in the set are left out:
    here AstrBot's model answers."""
    groups = {c["conversation_id"] for c in chat_set["chats"] if c["kind"] == "group"}
    lines = [m for m in chat_set["messages"] if m["conversation_id"] in groups]
    ids = [m["id"] for m in lines]
    asks: dict[str, list[dict[str, Any]]] = {}
    for fact in chat_set["facts"]:
        if fact["conversation_id"] not in groups:
            continue
        before = fact.get("restated_by") or fact["message"]
        if before not in ids:
            continue
        asks.setdefault(before, []).append(fact)
    out: list[dict[str, Any]] = []
    by_id = {m["id"]: m for m in lines}
    for m in lines:
        for fact in asks.get(m["id"], []):
            source = by_id[fact["message"]]
            # Asked by another member of the group, a different one from fact to fact.
            others = sorted(
                {
                    (o["sender_id"], o["sender_name"])
                    for o in lines
                    if o["conversation_id"] == m["conversation_id"]
                    and not o["is_bot"]
                    and o["sender_id"] != source["sender_id"]
                }
            ) or [(source["sender_id"], source["sender_name"])]
            asker_id, asker_name = others[len(out) % len(others)]
            out.append(
                {
                    "kind": "ask",
                    "fact": fact["id"],
                    "conversation_id": m["conversation_id"],
                    "sender_id": asker_id,
                    "sender_name": asker_name,
                    "text": fact["question"],
                }
            )
        if not m["is_bot"]:
            out.append({**m, "kind": "line"})
    return out


async def metrics(url: str) -> dict[str, float]:
    """scopemem's prefetch counters from its /metrics."""
    import aiohttp

    names = (
        "scopemem_prefetch_history_predicted_total",
        "scopemem_prefetch_recalls_total",
        "scopemem_questions_prefetched_total",
        "scopemem_query_joins_total",
        "scopemem_query_cache_hits_total",
        "scopemem_query_embedding_seconds_total",
        "scopemem_query_texts_embedded_total",
        "scopemem_prefetch_lead_seconds_total",
    )
    route = 'scopemem_http_request_duration_seconds_sum{route="/v1/events/llm_request"}'
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{url}/metrics", timeout=aiohttp.ClientTimeout(total=60)) as r:
            text = await r.text()
    got: dict[str, float] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] in names:
            got[parts[0]] = float(parts[1])
        elif len(parts) == 2 and parts[0] == route:
            got["injection_seconds"] = float(parts[1])
    return got


async def run(args: argparse.Namespace) -> dict[str, Any]:
    root = os.path.realpath(args.root)
    llm = StubLLM("")
    # When each chat request (not a consolidation pass's) reached the model.
    received: list[float] = []
    handle = llm.handle

    async def timed(request):
        at, before = time.monotonic(), len(llm.requests)
        response = await handle(request)
        if len(llm.requests) > before:
            received.append(at)
        return response

    llm.handle = timed  # type: ignore[method-assign]
    await llm.start()
    prepare_root(root, args.plugin_src, args.scopemem, llm.port, plugin_defaults=True)
    # AstrBot's default rate limit (30 events a chat a minute, then a stall) would make this
    # run wait minutes between lines; what is timed here is one question, not the limit
    # (bench-astrbot-busy measures that).
    cmd_path = os.path.join(root, "data", "cmd_config.json")
    with open(cmd_path, encoding="utf-8") as f:
        cmd = json.load(f)
    cmd["platform_settings"] = {"rate_limit": {"time": 60, "count": 100000, "strategy": "stall"}}
    with open(cmd_path, "w", encoding="utf-8") as f:
        json.dump(cmd, f, ensure_ascii=False, indent=2)
    core = await start_core(root)
    lifecycle, core_task = core.lifecycle, core.task
    star = next(
        s for s in lifecycle.plugin_manager.context.get_all_stars() if s.name == PLUGIN_DIR
    ).star_cls
    group = GroupChat(lifecycle)
    with open(CHAT_SET, encoding="utf-8") as f:
        chat_set = json.load(f)
    script = played(chat_set)
    if args.questions:
        asked = [i for i, s in enumerate(script) if s["kind"] == "ask"]
        if len(asked) > args.questions:
            script = script[: asked[args.questions - 1] + 1]
    webchat_group = {c["conversation_id"]: f"wait-{i}" for i, c in enumerate(chat_set["chats"])}
    pending: list[tuple[str, Any, str]] = []
    asks: list[dict[str, Any]] = []
    for step in script:
        grp = webchat_group[step["conversation_id"]]
        member = (step["sender_id"], step["sender_name"])
        if step["kind"] == "line":
            pending.append(await group.commit(member, grp, step["text"]))
            # Members type; a group's lines come a few at a time, not all in one instant.
            if len(pending) >= args.burst:
                for sent in pending:
                    await group.wait(sent, timeout=300)
                pending.clear()
            continue
        before = await metrics(args.scopemem)
        star.hook_latency_ms.clear()
        seen = len(received)
        requests = len(llm.requests)
        started = time.monotonic()
        sent = await group.commit(member, grp, step["text"], at_bot=True)
        await group.wait(sent, timeout=300)
        after = await metrics(args.scopemem)
        got = llm.requests[requests:]
        ask: dict[str, Any] = {
            "fact": step["fact"],
            "group": grp,
            "hook_ms": list(star.hook_latency_ms),
            "arrival_to_model_ms": (received[seen] - started) * 1000.0
            if len(received) > seen
            else None,
            "block": bool(got) and BLOCK_TAG in (got[0].get("extra") or ""),
            "history_turns": sum(
                1 for m in (got[0]["messages"] if got else []) if m.get("role") != "system"
            )
            - 1,
            "followed": after.get("scopemem_prefetch_recalls_total", 0)
            - before.get("scopemem_prefetch_recalls_total", 0),
            "predicted": after.get("scopemem_prefetch_history_predicted_total", 0)
            - before.get("scopemem_prefetch_history_predicted_total", 0),
            "joins": after.get("scopemem_query_joins_total", 0)
            - before.get("scopemem_query_joins_total", 0),
            "hits": after.get("scopemem_query_cache_hits_total", 0)
            - before.get("scopemem_query_cache_hits_total", 0),
            # Where the wait goes: the model's time for queries (the question's texts, ahead
            # or not), the texts it took, the lead the host gave, and the injection as
            # scopemem served it (the hook's time less the plugin's and HTTP's).
            **{
                key: 1000.0 * (after.get(name, 0) - before.get(name, 0))
                for key, name in (
                    ("query_model_ms", "scopemem_query_embedding_seconds_total"),
                    ("lead_ms", "scopemem_prefetch_lead_seconds_total"),
                    ("served_ms", "injection_seconds"),
                )
            },
            "texts": after.get("scopemem_query_texts_embedded_total", 0)
            - before.get("scopemem_query_texts_embedded_total", 0),
        }
        asks.append(ask)
        say("ASK", ask)
    for sent in pending:
        await group.wait(sent, timeout=300)
    await plugin_sends_ended(star)
    report = {"asks": asks, "lines": sum(1 for s in script if s["kind"] == "line")}
    await stop_astrbot(lifecycle, core_task)
    await llm.stop()
    return report


def more_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--burst", type=int, default=4, help="lines committed before a wait")
    parser.add_argument("--questions", type=int, default=0, help="stop after N questions (0: all)")


if __name__ == "__main__":
    scenario_main(run, more_args)
