"""What consolidation costs, played through a real AstrBot (``make bench-consolidation-cost``).

Why: issue 78 gives LLM passes only to chats that are mapped or addressed the bot lately
(``consolidation.active_days``) and caps their tokens a day (``consolidation.daily_tokens``).
Whether that holds, and what it saves, shows only where the passes are really asked: through
the plugin, whose background loop takes each due pass from scopemem and asks AstrBot's
configured chat model. So this plays the group-chat set (benches/group_chat/chat.json) into a
real AstrBot 4.29.0 core with the plugin at its defaults (working memory on, consolidation
through AstrBot's model) against the `scopemem serve` at ``--scopemem``, whose config the
bench chooses (benches/consolidation_cost.rs). The model is a recording OpenAI-compatible
provider (`CostLLM`, scenario.py's StubLLM with the passes' answers and `usage` made
realistic: counted by Qwen's tokenizer): it counts every consolidation request's tokens and
which chat it was for.

Each of the set's three groups is played three times, as three chats of their own:
- ``<group>-mapped``: in scopemem's scope map (the bench maps it); members @ the bot where the
  set does;
- ``<group>-asks``: not mapped; members @ the bot where the set does ("@小助手 …",
  "@Helper …");
- ``<group>-never``: not mapped; the same lines, none addressed to the bot (no @ of the bot).
The set's private chat is played once, as a private chat (every line addresses the bot).
Lines go in the set's order across chats, each through AstrBot's pipeline to its end; the set's
bot lines are not played: the bot's replies are the model's, to the lines that address it.

The plugin's consolidation rounds (`HostConsolidation.run_due`, its own code: the next due
pass from scopemem, AstrBot's provider asked, the answer handed back) run every SYNC_LINES
lines once they are stored and embedded, as its loop's round does within seconds of a stored
line when a chat's lines come minutes apart. The set's three days pass in minutes here: on the
loop's own timer a pass waited for lines still being embedded and then read up to 50 at once. At the end, once every line is embedded, rounds run
until one finds nothing due: waited for, never slept for.

Protocol: stdout lines "@@SCENARIO REPORT <json>" / "@@SCENARIO FAILED <why>" (scenario.py's
`say`); AstrBot's own output goes to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
import uuid
from typing import Any

from scenario import (
    PLUGIN_DIR,
    Chat,
    GroupChat,
    StubLLM,
    plugin_sends_ended,
    prepare_root,
    say,
    scenario_main,
    start_core,
    stop_astrbot,
)

# How each class of chat is named after the set's group id.
CLASSES = ("mapped", "asks", "never")
# The set's way of addressing the bot in a group.
AT_BOT = ("@小助手", "@Helper")
# Generous caps for the waits (a machine shared with builds).
LINE_TIMEOUT_S = 120.0
EMBED_STALL_S = 180.0
# The plugin's rounds run every this many lines played: about 4 of the busiest chat's, so a
# chat's pass comes within a few lines of its 20th new one.
SYNC_LINES = 30


def chat_name(conversation_id: str, klass: str) -> str:
    """`default:GroupMessage:20001` played as class `mapped` -> group `20001-mapped`."""
    return f"{conversation_id.rsplit(':', 1)[-1]}-{klass}"


def tokenizer() -> Any:
    """Qwen's BPE tokenizer (its vocabulary ships with dashscope, which AstrBot 4.29.0
    installs): a real chat model's token counts, offline."""
    from dashscope.tokenizers import get_tokenizer

    return get_tokenizer("qwen-turbo")


# ChatML, as Qwen's chat models frame a request: `<|im_start|>role\n … <|im_end|>\n` around
# each message, and `<|im_start|>assistant\n` before the reply.
PER_MESSAGE = 5
REPLY_PRIMING = 3


class CostLLM(StubLLM):
    """scenario.py's stub model, whose consolidation answers are what a model would answer on
    this set (an ADD of each shown member message the set marks a fact, else NONE) and whose
    `usage` is counted from the request and the answer by Qwen's tokenizer. Records each pass: the chat
    it was for (`current`, set by the driver when the plugin takes a pass), its tokens, and how
    many messages and memories it showed."""

    def __init__(self, facts: set[str]) -> None:
        super().__init__("")
        self.facts = facts
        self.current = ""
        self.passes: list[dict[str, Any]] = []
        self.tokenizer = tokenizer()

    def tokens(self, text: str) -> int:
        return len(self.tokenizer.encode(text))

    def consolidate(self, body: dict[str, Any], user: str) -> dict[str, Any]:
        shown = json.loads(user)
        adds = [
            {
                "action": "ADD",
                "content": f"{m.get('speaker') or 'A member'}: {m['text']}",
                "source_ids": [m["id"]],
                "about": [m["speaker_id"]] if m.get("speaker_id") else [],
            }
            for m in shown.get("messages", [])
            if m.get("role") == "member" and m.get("text") in self.facts
        ]
        answer = json.dumps({"decisions": adds or [{"action": "NONE"}]}, ensure_ascii=False)
        messages = body.get("messages", [])
        prompt_tokens = REPLY_PRIMING + sum(
            PER_MESSAGE + self.tokens(_content(m.get("content"))) for m in messages
        )
        completion_tokens = self.tokens(answer) + 1  # and <|im_end|>
        self.passes.append(
            {
                "conversation_id": self.current,
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
                "messages_shown": len(shown.get("messages", [])),
                "memories_shown": len(shown.get("memories", [])),
                "adds": len(adds),
            }
        )
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "stub-model"),
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": answer},
                    "finish_reason": "stop",
                }
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }


def _content(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def play_list(chat_set: dict[str, Any]) -> list[dict[str, Any]]:
    """The lines to play, in the set's order: each group line once per class, the private
    chat's member lines once. `to_bot`: sent as addressing the bot."""
    lines: list[dict[str, Any]] = []
    for m in chat_set["messages"]:
        if m["is_bot"]:
            continue  # the bot's replies are AstrBot's own, to the lines that address it
        text = m["text"]
        if ":FriendMessage:" in m["conversation_id"]:
            lines.append(
                {"klass": "private", "chat": m["conversation_id"].rsplit(":", 1)[-1],
                 "sender": (m["sender_id"], m["sender_name"]), "text": text, "to_bot": True}
            )
            continue
        at = next((a for a in AT_BOT if text.startswith(a)), None)
        # An @ arrives as an At of the bot before the words (GroupChat.commit's `at_bot`).
        said = text[len(at):].strip() or text if at is not None else text
        for klass in CLASSES:
            to_bot = at is not None and klass != "never"
            lines.append(
                {"klass": klass, "chat": chat_name(m["conversation_id"], klass),
                 "sender": (m["sender_id"], m["sender_name"]), "text": said, "to_bot": to_bot}
            )
    return lines


async def run(args: argparse.Namespace) -> dict[str, Any]:
    root = os.path.realpath(args.root)
    with open(args.chat_set, encoding="utf-8") as f:
        chat_set = json.load(f)
    facts = {m["text"] for m in chat_set["messages"] if m["kind"] in ("fact", "restatement")}
    llm = CostLLM(facts)
    await llm.start()
    # The plugin's defaults, as an operator installs it: working memory on, consolidation
    # through AstrBot's model.
    prepare_root(root, args.plugin_src, args.scopemem, llm.port, plugin_defaults=True)
    # AstrBot stalls a chat past 30 events a minute; the set, played in minutes instead of
    # three days, would only wait out the stalls.
    cmd_path = os.path.join(root, "data", "cmd_config.json")
    with open(cmd_path, encoding="utf-8") as f:
        cmd_config = json.load(f)
    cmd_config["platform_settings"] = {
        "rate_limit": {"time": 60, "count": 100000, "strategy": "stall"}
    }
    with open(cmd_path, "w", encoding="utf-8") as f:
        json.dump(cmd_config, f, ensure_ascii=False, indent=2)

    core = await start_core(root)
    lifecycle, core_task = core.lifecycle, core.task
    plugin = next(
        (s for s in lifecycle.plugin_manager.context.get_all_stars() if s.name == PLUGIN_DIR),
        None,
    )
    if plugin is None:
        raise RuntimeError(f"AstrBot did not load {PLUGIN_DIR}")
    star = plugin.star_cls
    host = star.consolidation
    if host is None:
        raise RuntimeError("the plugin does not answer consolidation passes (its defaults?)")

    # Watch what the plugin asks scopemem (the same client its consolidation loop uses): the
    # lines stored, and which chat each pass it takes is for (the model is asked next).
    stored = {"accepted": 0, "refused": 0, "retried": 0}
    taken: list[str] = []
    request = star.client.request

    async def watched(method: str, path: str, body: Any = None, **kw: Any) -> Any:
        try:
            status, payload = await request(method, path, body, **kw)
        except Exception as e:
            # ScopememDown("RemoteProtocolError"): a pooled connection the server closed as it
            # was reused (the request never reached it; httpx does not retry). Once more,
            # counted.
            if type(e).__name__ != "ScopememDown" or str(e) != "RemoteProtocolError":
                raise
            stored["retried"] += 1
            status, payload = await request(method, path, body, **kw)
        if path == "/v1/events/message":
            stored["accepted" if status == 202 else "refused"] += 1
        elif path == "/v1/consolidation/next" and status == 200 and isinstance(payload, dict):
            due = payload.get("pass")
            if isinstance(due, dict):
                llm.current = str(due.get("conversation_id", ""))
                taken.append(llm.current)
        return status, payload

    star.client.request = watched

    # The plugin's rounds run when the driver says (`rounds_until_idle`), not on its timer: the
    # set's three days pass in minutes here, and a pass then read up to 50 lines at once
    # where, in real time, the loop's round (within 5 s of a stored line) takes each chat's
    # pass as its 20th new line arrives.
    await host.stop()

    group, private = GroupChat(lifecycle), Chat()
    lines = play_list(chat_set)
    if args.limit:
        lines = lines[: args.limit]
    played: dict[str, int] = {}
    addressed: dict[str, int] = {}
    started = time.monotonic()
    for line in lines:
        if line["klass"] == "private":
            await private.send(line["sender"][0], line["chat"], line["text"], LINE_TIMEOUT_S)
            umo = Chat.umo(line["sender"][0], line["chat"])
        else:
            await group.send(
                line["sender"], line["chat"], line["text"], at_bot=line["to_bot"],
                timeout=LINE_TIMEOUT_S,
            )
            umo = GroupChat.umo(line["chat"])
        played[umo] = played.get(umo, 0) + 1
        addressed[umo] = addressed.get(umo, 0) + int(line["to_bot"])
        if sum(played.values()) % SYNC_LINES == 0:
            # Real time caught up with: every line stored and embedded (a pass waits for its
            # chat's lines still being written), then the rounds.
            await sends_ended(star)
            await embedded(star)
            await rounds_until_idle(host)
    play_s = time.monotonic() - started

    # Every line embedded, then the rounds until one finds nothing due.
    await plugin_sends_ended(star)
    await embedded(star)
    drain_started = time.monotonic()
    await rounds_until_idle(host)
    drain_s = time.monotonic() - drain_started

    status_code, status = await request("GET", "/v1/status", None, timeout=60)
    if status_code != 200 or not isinstance(status, dict):
        raise RuntimeError(f"/v1/status answered {status_code}")
    metrics_code, metrics = await star.client.request_raw("GET", "/metrics", None, timeout=60)
    report = {
        "played": played,
        "addressed": addressed,
        "classes": {
            umo: ("private" if ":FriendMessage:" in umo else umo.rsplit("-", 1)[-1])
            for umo in played
        },
        "stored": stored,
        "chat_turns": len(llm.requests),
        "passes": llm.passes,
        "taken": taken,
        "plugin": {"answered": host.answered, "failed": host.failed},
        "consolidation_status": status.get("consolidation"),
        "metrics": _metric_lines(metrics if metrics_code == 200 else b""),
        "play_s": play_s,
        "drain_s": drain_s,
    }
    await stop_astrbot(lifecycle, core_task)
    await llm.stop()
    return report


async def sends_ended(star: Any) -> None:
    """Until the plugin's background sends to scopemem (`wm_tasks`) have their answers."""
    while star.wm_tasks:
        await asyncio.wait_for(
            asyncio.gather(*list(star.wm_tasks), return_exceptions=True), LINE_TIMEOUT_S
        )


async def rounds_until_idle(host: Any) -> None:
    """The plugin's rounds (`HostConsolidation.run_due`: take a due pass from scopemem, ask
    AstrBot's model, hand the answer back; up to 8 a round) until one finds nothing due."""
    while await host.run_due():
        pass


async def embedded(star: Any) -> None:
    """Until scopemem has embedded every line (`working_memory.waiting` 0), for as long as the
    queue shrinks."""
    fewest, since = None, time.monotonic()
    while True:
        code, status = await star.client.request("GET", "/v1/status", None, timeout=60)
        waiting = (status or {}).get("working_memory", {}).get("waiting") if code == 200 else None
        if waiting == 0:
            return
        if waiting is not None and (fewest is None or waiting < fewest):
            fewest, since = waiting, time.monotonic()
        if time.monotonic() - since > EMBED_STALL_S:
            raise RuntimeError(f"scopemem never embedded the lines ({waiting} waiting)")
        await asyncio.sleep(0.2)


def _metric_lines(raw: Any) -> dict[str, float]:
    """The consolidation's lines of /metrics, by name."""
    text = raw.decode("utf-8", "replace") if isinstance(raw, (bytes, bytearray)) else str(raw)
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("scopemem_consolidation_"):
            name, _, value = line.partition(" ")
            try:
                out[name] = float(value)
            except ValueError:
                pass
    return out


def more_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--chat-set", required=True, help="benches/group_chat/chat.json")
    parser.add_argument("--limit", type=int, default=0, help="play only the first N lines")


if __name__ == "__main__":
    scenario_main(run, more_args)
