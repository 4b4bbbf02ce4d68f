"""Working memory through real NoneBot2 (nonebug), the real OneBot v11 adapter and the real
`scopemem serve` of conftest.py: group members' messages to each other, which address no bot,
reach scopemem through the plugin's non-blocking matcher while a bot's own handler further
down still runs; the bot's own sent message arrives through `Bot.on_called_api` as the bot's;
a `/scopemem` command and a message sent with `scopemem_working_memory` off are not stored;
neither is an error (a matcher that raises, a send the platform refused) as the bot's words.
Arrival is polled (`/v1/recall`'s `recent_messages`, `/v1/export`) with a generous cap, never
a fixed sleep: scopemem accepts a message with 202 and stores it in the background.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Callable

import nonebot
import pytest
from nonebot import on_message
from nonebot.adapters import Event
from nonebot.adapters.onebot.v11 import ActionFailed, Adapter, Bot, GroupMessageEvent, Message
from nonebot.adapters.onebot.v11.event import Sender
from nonebot.rule import to_me
from nonebug import App

from conftest import FAMILY, FAMILY_GROUP, WORK, Scopemem, group_event
from plugin_io import WAIT_S, exported, plugin, sends_ended

QUESTION = "妈妈有什么不能吃的"
LINES = [
    (20001, "小红", "妈妈对花生过敏，别点沙爹"),
    (20002, "小明", "好的，那我们点海南鸡饭吧"),
]
BOT_ID = "8888"
REPLY = "妈妈对花生过敏，点菜时避开沙爹和花生酱。"


def member_event(user_id: int, card: str, text: str, to_me: bool = False) -> GroupMessageEvent:
    """A family-group message from `user_id`, whose group card is `card`."""
    event = group_event(FAMILY_GROUP, text, user_id)
    event.sender = Sender(user_id=user_id, nickname=f"user{user_id}", card=card)
    event.to_me = to_me
    return event


async def recent(server: Scopemem, conv: str, query: str) -> list[dict[str, Any]]:
    """The recent messages (working memory) a recall from `conv` returns for `query`."""
    code, body = await asyncio.to_thread(
        server.post, "/v1/recall", {"conversation_id": conv, "query": query}
    )
    assert code == 200, body
    return list(body.get("recent_messages") or [])


async def wait_recent(
    server: Scopemem, conv: str, query: str, want: Callable[[dict[str, Any]], bool], what: str
) -> dict[str, Any]:
    deadline = time.monotonic() + WAIT_S
    got: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        got = await recent(server, conv, query)
        hit = next((m for m in got if want(m)), None)
        if hit is not None:
            return hit
        await asyncio.sleep(0.2)
    raise AssertionError(f"{what} never reached the working memory of {conv}: {got}")


async def stored_rows(server: Scopemem, conv: str) -> list[dict[str, Any]]:
    """The message rows `conv` may see, as `GET /v1/export` has them."""
    return [r for r in await exported(server, conv) if r.get("memory_type") == "message"]


async def stored_messages(server: Scopemem, conv: str) -> list[str]:
    """The texts of the message rows `conv` may see."""
    return [r["content"] for r in await stored_rows(server, conv)]


async def wait_stored(server: Scopemem, conv: str, texts: list[str]) -> list[str]:
    """Poll the export until every one of `texts` is a stored message; all stored texts."""
    deadline = time.monotonic() + WAIT_S
    stored: list[str] = []
    while time.monotonic() < deadline:
        stored = await stored_messages(server, conv)
        if all(t in stored for t in texts):
            return stored
        await asyncio.sleep(0.2)
    raise AssertionError(f"{texts} were never all stored for {conv}: {stored}")


async def test_group_chatter_reaches_working_memory_without_blocking(
    app: App, scopemem: Scopemem
) -> None:
    # A bot's own chat handler, later and blocking: it must still see every message.
    seen: list[str] = []
    later = on_message(priority=90, block=True)

    @later.handle()
    async def _later(event: Event) -> None:
        seen.append(event.get_plaintext())

    try:
        async with app.test_matcher() as ctx:
            bot = ctx.create_bot(base=Bot, adapter=nonebot.get_adapter(Adapter))
            for user_id, card, text in LINES:
                ctx.receive_event(bot, member_event(user_id, card, text))
    finally:
        later.destroy()
    assert seen == [text for _, _, text in LINES]

    # Nobody addressed the bot, yet the question finds the allergy in scopemem's working
    # memory, and both lines are there with their speakers, in the family group's scope.
    first = await wait_recent(
        scopemem, FAMILY, QUESTION, lambda m: m.get("content") == LINES[0][2], "the first line"
    )
    assert first["speaker_id"] == str(LINES[0][0]) and first["speaker_name"] == LINES[0][1], first
    for user_id, card, text in LINES:
        hit = await wait_recent(
            scopemem, FAMILY, text, lambda m, t=text: m.get("content") == t, text
        )
        assert hit["speaker_id"] == str(user_id), hit
        assert hit["speaker_name"] == card, hit
        assert hit["memory_scope"] == "家人", hit
    # The work group's recall never shows them.
    assert all("花生" not in m["content"] for m in await recent(scopemem, WORK, QUESTION))


async def test_the_bots_own_message_is_recorded_as_the_bots(
    app: App, scopemem: Scopemem, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A bot's answer to a member, sent through the OneBot v11 API as a real handler does.
    answer = on_message(rule=to_me(), priority=90, block=True)

    @answer.handle()
    async def _answer(bot: Bot, event: GroupMessageEvent) -> None:
        await bot.send_group_msg(group_id=event.group_id, message=Message(REPLY))

    try:
        async with app.test_matcher() as ctx:
            adapter = nonebot.get_adapter(Adapter)
            ctx.patch_adapter(monkeypatch, adapter)  # its API calls answer from the test
            bot = ctx.create_bot(base=Bot, adapter=adapter, self_id=BOT_ID)
            ctx.receive_event(bot, member_event(20001, "小红", QUESTION, to_me=True))
            ctx.should_call_api(
                "send_group_msg",
                {"group_id": FAMILY_GROUP, "message": Message(REPLY)},
                result={"message_id": 4242},
            )
    finally:
        answer.destroy()
    # (Asked with the reply's own words: a recall returns only the few best recent messages.)
    hit = await wait_recent(
        scopemem, FAMILY, REPLY, lambda m: m.get("content") == REPLY, "the bot's reply"
    )
    assert hit["speaker_id"] == BOT_ID, hit
    assert hit["memory_scope"] == "家人", hit
    # The question was to the bot (`to_bot`): scopemem embedded it ahead of a recall.
    assert prefetched(scopemem) >= 1


async def test_errors_are_not_recorded_as_the_bots_words(
    app: App, scopemem: Scopemem, monkeypatch: pytest.MonkeyPatch
) -> None:
    """NoneBot2 sends no error text of its own: a matcher that raises is logged and handed to
    the run_postprocessor hooks (nonebot/message.py, `_run_matcher`), never sent to the chat,
    and a send the platform refused raises (OneBot v11: ActionFailed), which `Bot.call_api`
    hands to the on_called_api hooks as the call's exception. Neither the exception nor the
    message that was not delivered is recorded as the bot's; the bot's answer after them is."""
    bot_id = "8899"  # this test's bot: its rows are told apart from the other tests' bots
    failed_reply = "这条回复平台没有收下"
    answer_text = "明天早上八点在楼下集合。"
    handler_error = "the handler failed on purpose"
    refusal = "the platform refused to send this message"
    broken = on_message(rule=to_me(), priority=80, block=False)
    answer = on_message(rule=to_me(), priority=90, block=True)

    def first(event: GroupMessageEvent) -> bool:
        return "天气" in event.get_plaintext()

    @broken.handle()
    async def _broken(event: GroupMessageEvent) -> None:
        if first(event):
            raise RuntimeError(handler_error)

    @answer.handle()
    async def _answer(bot: Bot, event: GroupMessageEvent) -> None:
        text = failed_reply if first(event) else answer_text
        await bot.send_group_msg(group_id=event.group_id, message=Message(text))

    async def ask(text: str, reply: str, **outcome: Any) -> None:
        async with app.test_matcher() as ctx:
            adapter = nonebot.get_adapter(Adapter)
            ctx.patch_adapter(monkeypatch, adapter)  # its API calls answer from the test
            bot = ctx.create_bot(base=Bot, adapter=adapter, self_id=bot_id)
            ctx.receive_event(bot, member_event(20001, "小红", text, to_me=True))
            ctx.should_call_api(
                "send_group_msg",
                {"group_id": FAMILY_GROUP, "message": Message(reply)},
                **outcome,
            )
        await sends_ended()

    try:
        # nonebug reports the two matchers' exceptions once NoneBot has handled the event
        # (NoneBot itself logged them and went on): both failed as meant to.
        with pytest.raises(pytest.fail.Exception) as failed:
            await ask(
                "明天天气怎么样",
                failed_reply,
                exception=ActionFailed(retcode=1200, msg=refusal, wording=refusal),
            )
        assert handler_error in str(failed.value) and refusal in str(failed.value), failed.value
        await sends_ended()
        await ask("明天几点集合", answer_text, result={"message_id": 4343})
    finally:
        broken.destroy()
        answer.destroy()
    # Whatever the plugin sent for the first question, scopemem accepted before the answer:
    # once the answer is stored, that would be too.
    await wait_stored(scopemem, FAMILY, [answer_text])
    rows = await stored_rows(scopemem, FAMILY)
    assert [r["content"] for r in rows if r.get("speaker_id") == bot_id] == [answer_text], rows
    for row in rows:
        for text in (failed_reply, handler_error, refusal, "ActionFailed"):
            assert text not in row["content"], row


def prefetched(server: Scopemem) -> float:
    """`scopemem_questions_prefetched_total` from /metrics, once the background embedding ran."""
    deadline = time.monotonic() + 60
    while True:
        text = server._http.get("/metrics").text
        value = next(
            (float(l.split()[-1]) for l in text.splitlines()
             if l.startswith("scopemem_questions_prefetched_total ")),
            0.0,
        )
        if value >= 1 or time.monotonic() > deadline:
            return value
        time.sleep(0.05)


async def test_commands_and_messages_with_working_memory_off_are_not_stored(
    app: App, scopemem: Scopemem, monkeypatch: pytest.MonkeyPatch
) -> None:
    wm = plugin().working_memory
    cfg = plugin().runtime.get_runtime().cfg
    off_line = "working memory is off for this line about the garden"
    last_line = "the last line of the family group today"

    async def receive(event: GroupMessageEvent) -> None:
        # Only the working-memory matcher: NoneBot still parses the command (its Trie runs
        # for every event), so the matcher sees it is `/scopemem status`.
        async with app.test_matcher(wm.record_messages) as ctx:
            bot = ctx.create_bot(base=Bot, adapter=nonebot.get_adapter(Adapter))
            ctx.receive_event(bot, event)

    assert cfg.scopemem_working_memory is True
    await receive(member_event(20001, "小红", "/scopemem status"))
    monkeypatch.setattr(cfg, "scopemem_working_memory", False)
    await receive(member_event(20002, "小明", off_line))
    monkeypatch.setattr(cfg, "scopemem_working_memory", True)
    await receive(member_event(20002, "小明", last_line))
    # Neither the command nor the line said while off was sent at all, so once the last line
    # is stored, their absence is final.
    stored = await wait_stored(scopemem, FAMILY, [last_line])
    assert off_line not in stored, stored
    assert all("scopemem" not in t for t in stored), stored
