"""Each member owns their words (issue 77), through real NoneBot2 (nonebug), a real OneBot v11
`Bot` and the real `scopemem serve` of conftest.py.

- `memory_context` sends the asking member's id (`sender_id`, the event's user id) with the
  injection event; a scopemem older than the field refuses it (as its request types deny an
  unknown field), and the plugin asks again without it, then leaves it out for a while. An
  HTTP relay in front of the real serve records what the plugin posts and, for the older
  server, answers as that server does.
- In a group where two members each said a first-person allergy, "我对什么过敏来着？" asked by
  nobody in particular finds the other member's line first, and asked by one of them brings
  her own line first; `/scopemem me` lists what the group keeps of her, with ids;
  `/scopemem forget me` asks, another member cannot confirm it, and her confirmation forgets
  her in every group she spoke in while the other member's lines stay. The chat's `forget` and
  `forget me` never confirm each other, and no command or answer reaches the working memory.

The bot here is a real OneBot v11 `Bot` on an adapter whose API calls (what the platform would
receive) are recorded and answered as a platform does, so a command's answer goes out through
the real `Bot.send`, `call_api` and the plugin's `on_called_api` hook. Arrival is polled with a
generous cap, never slept for.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Awaitable, Callable, Optional

import httpx
import nonebot
import pytest
from nonebot import on_message
from nonebot.adapters.onebot.v11 import Adapter, Bot, GroupMessageEvent, Message
from nonebot.adapters.onebot.v11.event import Sender
from nonebot.rule import to_me
from nonebug import App

from conftest import (
    NEIGHBOURS,
    NEIGHBOURS_GROUP,
    SUPERUSER_ID,
    TEAM,
    TEAM_GROUP,
    Scopemem,
    group_event,
)
from plugin_io import WAIT_S, exported, plugin, sends_ended

FANG = (20031, "小芳")
GANG = (20032, "小刚")
# Asked by nobody in particular, the question finds gang's line first.
FANG_LINE = "我对海鲜过敏，虾蟹都不行"
GANG_LINE = "我对芒果过敏来着，吃了嘴会肿"
FANG_TEAM_LINE = "我周六上午去踢球，下午有空"
GANG_TEAM_LINE = "周六的球赛改到九点开始"
QUESTION = "我对什么过敏来着？"
LAST_LINE = "明天的菜我来买"
BOT_ID = "9911"
BOT_REPLY = "好的，我看看。"
LLM_REQUEST = "/v1/events/llm_request"
# What a scopemem older than `sender_id` answers a body that has it (its LlmRequestEvent
# denies unknown fields; serde's message).
OLDER_REFUSAL = {
    "error": {
        "code": "invalid_input",
        "message": "unknown field `sender_id`, expected one of `conversation_id`, `persona`, "
        "`query`, `entities`, `timezone`, `history`, `preview`",
    }
}


def member_event(
    group: int, member: tuple[int, str], text: str, to_me: bool = False
) -> GroupMessageEvent:
    user_id, card = member
    event = group_event(group, text, user_id)
    event.sender = Sender(user_id=user_id, nickname=f"user{user_id}", card=card)
    event.to_me = to_me
    return event


class Platform:
    """The OneBot v11 implementation's side of the bot: every API call the real adapter would
    send it is recorded and answered as it answers a send (a new message id). Only the
    network hop is left out: `Bot.send`, `call_api` and its hooks are NoneBot's own."""

    def __init__(self) -> None:
        calls: list[tuple[str, dict[str, Any]]] = []
        self.calls = calls
        ids = iter(range(70000, 80000))

        class RecordingAdapter(Adapter):
            async def _call_api(self, bot: Bot, api: str, **data: Any) -> Any:  # type: ignore[override]
                calls.append((api, data))
                return {"message_id": next(ids)}

        self.adapter = RecordingAdapter(nonebot.get_driver())
        self.bot = Bot(self.adapter, BOT_ID)


_PLATFORM: Optional[Platform] = None


def platform() -> Platform:
    """One recording platform per session (an adapter registers its routes when made)."""
    global _PLATFORM
    if _PLATFORM is None:
        _PLATFORM = Platform()
    return _PLATFORM


async def receive(app: App, event: GroupMessageEvent) -> str:
    """`event` through NoneBot and every matcher; what the bot sent the chat for it."""
    p = platform()
    before = len(p.calls)
    async with app.test_matcher() as ctx:
        ctx.receive_event(p.bot, event)
    return "\n".join(
        Message(d["message"]).extract_plain_text() for a, d in p.calls[before:] if a == "send_msg"
    )


async def until(what: str, found: Callable[[], Awaitable[Any]]) -> Any:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        got = await found()
        if got:
            return got
        await asyncio.sleep(0.2)
    raise AssertionError(f"{what} never happened")


async def person(server: Scopemem, conv: str, member: tuple[int, str]) -> dict[str, Any]:
    code, body = await asyncio.to_thread(
        server.post,
        "/v1/people/browse",
        {"conversation_id": conv, "sender_id": str(member[0]), "limit": 20},
    )
    assert code == 200, body
    return body


def first_recent_message(injection: str) -> tuple[str, str]:
    """(speaker_id, text) of the first message of the block's recent messages."""
    recent = injection.split("<recent_messages>", 1)
    assert len(recent) == 2, injection
    found = re.search(r'<message [^>]*speaker_id="([^"]*)"[^>]*>(.*?)</message>', recent[1])
    assert found is not None, injection
    return found.group(1), found.group(2)


# ---- sender_id -------------------------------------------------------------------------------


class Relay:
    """An HTTP relay on loopback in front of the real serve: it records every JSON body the
    plugin posts and passes the request on; while `older`, it answers an injection event that
    carries `sender_id` as a scopemem older than the field does (400 `invalid_input`)."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.older = False
        self.posted: list[tuple[str, dict[str, Any]]] = []
        relay = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _answer(self, status: int, body: bytes, kind: str) -> None:
                self.send_response(status)
                self.send_header("content-type", kind)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _forward(self, method: str, body: Optional[bytes]) -> None:
                headers = {k: v for k, v in self.headers.items() if k.lower() in (
                    "authorization", "content-type")}
                with httpx.Client(trust_env=False, timeout=60) as http:
                    r = http.request(method, relay.target + self.path, headers=headers,
                                     content=body)
                self._answer(r.status_code, r.content,
                             r.headers.get("content-type", "application/json"))

            def do_GET(self) -> None:  # noqa: N802
                self._forward("GET", None)

            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                parsed = json.loads(body) if body else {}
                relay.posted.append((self.path, parsed))
                if relay.older and self.path == LLM_REQUEST and "sender_id" in parsed:
                    refusal = json.dumps(OLDER_REFUSAL).encode()
                    self._answer(400, refusal, "application/json")
                    return
                self._forward("POST", body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> "Relay":
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()

    def injection_events(self) -> list[dict[str, Any]]:
        """The injection events posted since the last call."""
        got = [b for path, b in self.posted if path == LLM_REQUEST]
        self.posted.clear()
        return got


async def test_memory_context_sends_the_asker_and_asks_an_older_scopemem_without_it(
    app: App, scopemem: Scopemem, monkeypatch: pytest.MonkeyPatch
) -> None:
    from nonebot import logger

    p = plugin()
    member = (20041, "阿美")
    garden = "The community garden by the river opens at seven on Saturdays"
    question = "When does the community garden open? I forgot"
    result = await p.call_tool(group_event(NEIGHBOURS_GROUP), "core_memory_remember",
                               {"content": garden})
    assert not result.startswith("error"), result
    event = member_event(NEIGHBOURS_GROUP, member, question, to_me=True)
    client = p.runtime.get_runtime().client
    now = [1000.0]
    logged: list[str] = []
    sink = logger.add(lambda m: logged.append(str(m)), level="DEBUG", format="{message}")
    try:
        with Relay(scopemem.base) as relay:
            monkeypatch.setattr(client, "base_url", relay.base)
            # A clean slate and a clock the test moves (`ScopememClient.request_optional`).
            monkeypatch.setattr(client, "_unknown", {}, raising=False)
            monkeypatch.setattr(client, "_unknown_logged", set(), raising=False)
            monkeypatch.setattr(client, "_clock", lambda: now[0], raising=False)

            # The asking member's id, as their messages are sent to scopemem.
            injection, ids = await p.memory_context(event, question)
            assert garden in injection, injection
            sent = relay.injection_events()
            assert [b.get("sender_id") for b in sent] == ["20041"], sent
            assert sent[0]["conversation_id"] == NEIGHBOURS and sent[0]["query"] == question

            # An older scopemem refuses the field: asked again at once without it, and the
            # bot still gets its memories.
            relay.older = True
            injection, ids = await p.memory_context(event, question)
            assert garden in injection and ids, injection
            sent = relay.injection_events()
            assert [b.get("sender_id") for b in sent] == ["20041", None], sent
            assert {k: v for k, v in sent[0].items() if k != "sender_id"} == sent[1], sent
            # ... and left out for a while, so the chat path pays the refusal once.
            from scopemem.client import UNKNOWN_FIELD_RETRY_S

            now[0] += UNKNOWN_FIELD_RETRY_S - 1
            assert garden in (await p.memory_context(event, question))[0]
            assert [b.get("sender_id") for b in relay.injection_events()] == [None]
            # Then tried again: the server may have been upgraded meanwhile.
            relay.older = False
            now[0] += 2
            assert garden in (await p.memory_context(event, question))[0]
            assert [b.get("sender_id") for b in relay.injection_events()] == ["20041"]
    finally:
        logger.remove(sink)
    notes = [line for line in logged if "does not know `sender_id`" in line]
    assert len(notes) == 1, logged
    assert "garden" not in "\n".join(logged), logged


# ---- /scopemem me, /scopemem forget me --------------------------------------------------------


async def test_members_list_and_forget_their_own_words(app: App, scopemem: Scopemem) -> None:
    p = plugin()
    injections: list[str] = []
    # The bot's own LLM handler, as a real bot has one: the block for the question, a reply.
    llm = on_message(rule=to_me(), priority=90, block=True)

    @llm.handle()
    async def _llm(bot: Bot, event: GroupMessageEvent) -> None:
        injection, _ = await p.memory_context(event, event.get_plaintext())
        injections.append(injection)
        await bot.send(event, BOT_REPLY)

    lines = [
        (NEIGHBOURS_GROUP, FANG, FANG_LINE),
        (NEIGHBOURS_GROUP, GANG, GANG_LINE),
        (TEAM_GROUP, FANG, FANG_TEAM_LINE),
        (TEAM_GROUP, GANG, GANG_TEAM_LINE),
    ]
    try:
        for group, member, text in lines:
            assert await receive(app, member_event(group, member, text)) == ""
        for group, _, text in lines:
            conv = NEIGHBOURS if group == NEIGHBOURS_GROUP else TEAM

            async def stored(conv: str = conv, text: str = text) -> bool:
                return any(r["content"] == text for r in await exported(scopemem, conv))

            await until(repr(text), stored)
        # Asked by nobody in particular (a preview: no prompt follows), gang's line comes first.
        code, anonymous = await asyncio.to_thread(
            scopemem.post,
            LLM_REQUEST,
            {"conversation_id": NEIGHBOURS, "query": QUESTION, "preview": True},
        )
        assert code == 200, anonymous
        assert first_recent_message(anonymous["injection"]) == (str(GANG[0]), GANG_LINE)
        # fang asks the bot about herself, twice (a line recalled twice becomes a long-term
        # memory, scopemem's threshold rule): her own line comes first each time.
        for _ in range(2):
            reply = await receive(app, member_event(NEIGHBOURS_GROUP, FANG, QUESTION, to_me=True))
            assert reply == BOT_REPLY
            await sends_ended()
    finally:
        llm.destroy()
    assert len(injections) == 2, injections
    for injection in injections:
        assert first_recent_message(injection) == (str(FANG[0]), FANG_LINE), injection
        # gang's allergy answers nothing fang asks about herself (design 5.13): left out.
        assert GANG_LINE not in injection, injection

    async def fangs_memory() -> Optional[dict[str, Any]]:
        rows = (await person(scopemem, NEIGHBOURS, FANG))["memories"]
        return next(
            (m for m in rows if m["memory_type"] != "message" and "海鲜" in m["content"]), None
        )

    memory = await until("a long-term memory of fang's line", fangs_memory)

    # /scopemem me: what the group keeps of fang, newest first, with ids, nothing of gang's.
    # Her two questions are rows once the worker embeds them: wait for both, so that the list
    # below and the command's answer are read from the same rows.
    async def all_of_fangs_rows() -> Optional[dict[str, Any]]:
        kept = await person(scopemem, NEIGHBOURS, FANG)
        asked = [m for m in kept["memories"] if m["content"] == QUESTION]
        return kept if len(asked) == 2 else None

    kept = await until("fang's two questions as rows", all_of_fangs_rows)
    rows = kept["memories"]
    line_id = next(m["id"] for m in rows if m["content"] == FANG_LINE)
    me = await receive(app, member_event(NEIGHBOURS_GROUP, FANG, "/scopemem me"))
    listed = me.splitlines()
    assert listed[0] == (
        f"This chat can recall {kept['total']} items you said or that are about you "
        "(newest first):"
    ), me
    kinds = ["chat line" if m["memory_type"] == "message" else "long-term memory" for m in rows]
    assert listed[1 : 1 + len(rows)] == [
        f"{m['id']} [{kind}] {m['content'][:59] + '…' if len(m['content']) > 60 else m['content']}"
        for m, kind in zip(rows, kinds)
    ], me
    assert f"{line_id} [chat line] {FANG_LINE}" in listed, me
    assert any(l.startswith(f"{memory['id']} [long-term memory] ") for l in listed), me
    assert GANG_LINE not in me and FANG_TEAM_LINE not in me, me
    me_gang = await receive(app, member_event(NEIGHBOURS_GROUP, GANG, "/scopemem me"))
    assert f"[chat line] {GANG_LINE}" in me_gang, me_gang
    assert FANG_LINE not in me_gang and "海鲜" not in me_gang, me_gang

    # The chat's forget and forget me never confirm each other (a superuser tries both ways);
    # the chat's forget is no ordinary member's.
    boss = (SUPERUSER_ID, "管理员")

    async def command(member: tuple[int, str], text: str) -> str:
        return await receive(app, member_event(NEIGHBOURS_GROUP, member, text))

    nothing_chat = "Nothing to confirm: send /scopemem forget first."
    nothing_me = "Nothing to confirm: send /scopemem forget me first."
    assert (await command(boss, "/scopemem forget me")).startswith(
        "This erases you from the bot's memory on this platform, for good: the 0 items"
    )
    assert await command(boss, "/scopemem forget confirm") == nothing_chat
    assert (await command(boss, "/scopemem forget me confirm")).startswith(
        "Forgot you: erased 0 items"
    )
    assert (await command(boss, "/scopemem forget")).startswith(
        "This erases every memory written in this chat, for good."
    )
    assert await command(boss, "/scopemem forget me confirm") == nothing_me
    assert await command(boss, "/scopemem.forget me now") == p.commands.FORGET_USAGE
    assert await command(FANG, "/scopemem forget") == (
        "In a group only a superuser can erase its memories."
    )

    # fang's forget me: what goes, gang cannot confirm it, hers does.
    team_kept = await person(scopemem, TEAM, FANG)
    ask = await command(FANG, "/scopemem forget me")
    assert ask == (
        "This erases you from the bot's memory on this platform, for good: the "
        f"{kept['total']} items this chat keeps that you said or that are about you "
        "(/scopemem me lists them), and everything you said in every other chat of this "
        "platform. Other members' messages stay. Send /scopemem forget me confirm within 60 s "
        "to go ahead."
    ), ask
    assert await command(GANG, "/scopemem forget me confirm") == nothing_me
    assert (await person(scopemem, NEIGHBOURS, FANG))["total"] == kept["total"]
    done = await command(FANG, "/scopemem forget me confirm")
    erased = kept["total"] + team_kept["total"]
    assert done == (
        f"Forgot you: erased {erased} items (what you said in every chat of this platform, "
        "and the memories you said, that were about you or made of your words)."
    ), done
    assert await command(FANG, "/scopemem forget me confirm") == nothing_me

    # A last line: once it is stored, whatever the plugin sent before it is.
    assert await receive(app, member_event(NEIGHBOURS_GROUP, GANG, LAST_LINE)) == ""

    async def last_stored() -> bool:
        return any(r["content"] == LAST_LINE for r in await exported(scopemem, NEIGHBOURS))

    await until("the last line", last_stored)
    await sends_ended()
    rows = await exported(scopemem, NEIGHBOURS) + await exported(scopemem, TEAM)
    for row in rows:
        assert row.get("speaker_id") != str(FANG[0]), row
        for gone in (FANG_LINE, FANG_TEAM_LINE, "海鲜"):
            assert gone not in row["content"], row
        for never in ("scopemem", "This chat can recall", "This erases", "Forgot you",
                      "Nothing to confirm", "In a group only", "Usage:"):
            assert never not in row["content"], f"a command or its answer was kept: {row}"
    for text in (GANG_LINE, GANG_TEAM_LINE, LAST_LINE):
        assert any(r["content"] == text and r.get("speaker_id") == str(GANG[0]) for r in rows), (
            text, rows)
    # The bot's replies were recorded as the bot's (so the answers' absence is not for want
    # of recording what the bot sends).
    assert any(r.get("speaker_id") == BOT_ID and r["content"] == BOT_REPLY for r in rows), rows
    for conv in (NEIGHBOURS, TEAM):
        assert (await person(scopemem, conv, FANG))["total"] == 0
