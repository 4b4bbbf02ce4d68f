"""nonebot-plugin-scopemem end to end: real NoneBot2, the real OneBot v11 adapter, real scopemem.

Events are the OneBot v11 adapter's own classes, and commands go through NoneBot's real event
handling via nonebug (NoneBot's test framework), whose simulated bot records what the plugin
replies. Every memory operation goes over HTTP to the `scopemem serve` that conftest.py starts;
the assertions check both what the plugin returns and what the server holds afterwards.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Optional

import httpx
import nonebot
import pytest
from nonebot.adapters.onebot.v11 import Adapter, Bot
from nonebot.adapters.onebot.v11.event import FriendAddNoticeEvent, LifecycleMetaEvent
from nonebug import App

from conftest import (
    FAMILY,
    FAMILY_GROUP,
    SUPERUSER_ID,
    TOKEN,
    USER_ID,
    WORK,
    WORK_GROUP,
    Scopemem,
    alive,
    cmdline,
    free_port,
    group_event,
    live_children,
    private_event,
    scopemem_bin,
    wait_healthy,
)


def plugin():
    """The loaded plugin module (importable only once conftest has let NoneBot load it)."""
    return importlib.import_module("nonebot_plugin_scopemem")


async def command(app: App, event: Any, reply: str) -> None:
    """Send `event` (a `/scopemem …` message) through NoneBot; the plugin must answer `reply`."""
    async with app.test_matcher() as ctx:
        bot = ctx.create_bot(base=Bot, adapter=nonebot.get_adapter(Adapter))
        ctx.receive_event(bot, event)
        ctx.should_call_send(event, reply, result=None)
        ctx.should_finished()


async def remember(event: Any, content: str) -> dict[str, Any]:
    """core_memory_remember through the plugin; the parsed tool result."""
    result = await plugin().call_tool(event, "core_memory_remember", {"content": content})
    assert not result.startswith("error"), result
    return json.loads(result)


async def context_text(event: Any, query: str) -> str:
    injection, ids = await plugin().memory_context(event, query)
    assert isinstance(injection, str) and isinstance(ids, list)
    return injection


def scope_map_on_disk(server: Scopemem) -> dict[str, Any]:
    return json.loads(server.config_path.read_text(encoding="utf-8"))


# ---- the conversation id -------------------------------------------------------------------


async def test_conversation_id_comes_from_the_event_alone(app: App, scopemem: Scopemem) -> None:
    p = plugin()
    assert p.conversation_id(group_event(FAMILY_GROUP)) == FAMILY
    assert p.conversation_id(group_event(WORK_GROUP, user_id=SUPERUSER_ID)) == WORK
    assert p.conversation_id(private_event(4242)) == "onebot11:private_4242"
    # Any other event: `<adapter name>:<session id>`, the adapter found from the event's class.
    notice = FriendAddNoticeEvent(
        time=int(time.time()), self_id=1, post_type="notice", notice_type="friend_add",
        user_id=4343,
    )
    assert p.conversation_id(notice) == "OneBot V11:4343"
    # An event of no chat has no id: memory calls skip it instead of raising.
    meta = LifecycleMetaEvent(
        time=int(time.time()), self_id=1, post_type="meta_event",
        meta_event_type="lifecycle", sub_type="connect",
    )
    with pytest.raises(ValueError):
        p.conversation_id(meta)
    assert await p.memory_context(meta, "anything") == ("", [])
    assert (await p.call_tool(meta, "core_memory_recall", {"query": "x"})).startswith("error")


async def test_tools_are_openai_function_specs(app: App, scopemem: Scopemem) -> None:
    specs = await plugin().tools()
    names = sorted(s["function"]["name"] for s in specs)
    assert names == ["core_memory_recall", "core_memory_remember", "core_memory_update"], specs
    for spec in specs:
        assert spec["type"] == "function"
        fn = spec["function"]
        assert fn["description"]
        assert fn["parameters"]["type"] == "object"
        props = set(fn["parameters"]["properties"])
        assert not props & {"conversation_id", "memory_scope", "scope"}, props


# ---- scopes --------------------------------------------------------------------------------


async def test_a_groups_memories_stay_in_its_scope(app: App, scopemem: Scopemem) -> None:
    orchids = "Grandma Rosa grows purple orchids on her balcony"
    falcon = "The Falcon project budget review is on Thursday at ten"
    got = await remember(group_event(FAMILY_GROUP), orchids)
    assert got["stored"] is True and got["memory"]["memory_scope"] == "家人", got
    got = await remember(group_event(WORK_GROUP), falcon)
    assert got["stored"] is True and got["memory"]["memory_scope"] == "工作", got

    flowers = "Which flowers does grandma Rosa grow on her balcony?"
    budget = "When is the Falcon project budget review?"
    family_ctx = await context_text(group_event(FAMILY_GROUP), flowers)
    assert orchids in family_ctx and "<memory_context>" in family_ctx, family_ctx
    assert orchids not in await context_text(group_event(WORK_GROUP), flowers)
    assert falcon in await context_text(group_event(WORK_GROUP), budget)
    assert falcon not in await context_text(group_event(FAMILY_GROUP), budget)
    # An unmapped group is public: it sees neither.
    assert orchids not in await context_text(group_event(3131), flowers)
    assert falcon not in await context_text(group_event(3131), budget)
    # The same through the tool and, without any similarity cut, in what the server shows.
    recalled = await plugin().call_tool(
        group_event(WORK_GROUP), "core_memory_recall", {"query": flowers, "limit": 20}
    )
    recalled = json.loads(recalled)
    assert recalled["memory_scope"] == "工作", recalled
    assert orchids not in [m["content"] for m in recalled["memories"]], recalled
    assert orchids not in scopemem.visible_contents(WORK)
    assert falcon not in scopemem.visible_contents(FAMILY)

    # The ids memory_context returns are those of the injected memories.
    injection, ids = await plugin().memory_context(group_event(FAMILY_GROUP), flowers)
    family_ids = {m["id"] for m in scopemem.browse(FAMILY)["memories"] if m["content"] == orchids}
    assert family_ids and family_ids <= set(ids), (ids, family_ids)


async def test_public_memories_are_seen_in_both_groups(app: App, scopemem: Scopemem) -> None:
    teal = "The assistant is called Angel and its favourite colour is teal"
    got = await remember(private_event(7777), teal)
    assert got["memory"]["memory_scope"] == "public", got
    query = "What is the assistant called and what colour does it like?"
    assert teal in await context_text(group_event(FAMILY_GROUP), query)
    assert teal in await context_text(group_event(WORK_GROUP), query)


async def test_status_names_only_this_chats_scope(app: App, scopemem: Scopemem) -> None:
    base = scopemem.base
    total = scopemem.browse(WORK)["total"]
    expected = "\n".join(
        [
            "scopemem is UP",
            f"scopemem: {base}",
            f"this chat: {WORK}",
            "scope: 工作",
            "incognito: off",
            f"memories this chat can see: {total}",
        ]
    )
    # The whole reply, exactly: nothing in it names another chat's scope (家人).
    await command(app, group_event(WORK_GROUP, "/scopemem status"), expected)
    # The command group's own form works the same.
    await command(app, group_event(WORK_GROUP, "/scopemem.status"), expected)

    # A superuser also sees every scope and the map summary.
    code, st = scopemem.get("/v1/status")
    assert code == 200, st
    code, smap = scopemem.get("/v1/scope_map")
    assert code == 200, smap
    summary = smap["summary"]
    lines = [
        "scopemem is UP",
        f"scopemem: {base}",
        f"this chat: {FAMILY}",
        "scope: 家人",
        "incognito: off",
        f"memories this chat can see: {scopemem.browse(FAMILY)['total']}",
        f"all scopes (superusers only), {st['rows']} rows:",
        *[f"  {name}: {n}" for name, n in sorted(st["rows_by_scope"].items())],
        f"scope map: {summary['entries']} entries, {summary['ignored']} ignored, "
        f"{summary['failed_closed']} failed closed, {summary['incognito']} incognito",
    ]
    # (so the superuser's reply below does name the other scopes)
    assert any(line.startswith("  工作: ") for line in lines), lines
    assert any(line.startswith("  家人: ") for line in lines), lines
    await command(app, group_event(FAMILY_GROUP, "/scopemem status", SUPERUSER_ID), "\n".join(lines))


# ---- the reflection path -------------------------------------------------------------------


async def test_reflection_after_reply_lands_in_the_groups_scope(
    app: App, scopemem: Scopemem
) -> None:
    p = plugin()
    chess = "Uncle Bob plays chess in the park every Sunday morning"
    reply = (
        "Noted, I will keep that in mind!\n"
        '<memory_reflection>{"new_memories": [{"content": "' + chess + '", "tags": ["bob"], '
        '"memory_type": "knowledge", "ignored_field": 1}], "useful_memory_ids": []}'
        "</memory_reflection>"
    )
    visible, reflection = p.split_reflection(reply)
    assert visible == "Noted, I will keep that in mind!"
    assert reflection == {
        "new_memories": [{"content": chess, "tags": ["bob"], "memory_type": "knowledge"}],
        "useful_memory_ids": [],
    }
    assert p.split_reflection("no block here") == ("no block here", None)
    assert p.split_reflection("x <memory_reflection>not json</memory_reflection>") == ("x", None)

    event = group_event(FAMILY_GROUP, "Uncle Bob plays chess on Sundays, remember that")
    _, ids = await p.memory_context(event, event.get_plaintext())
    job = await p.after_reply(event, event.get_plaintext(), visible, ids, reflection)
    assert isinstance(job, str) and job, job

    # Feedback is applied asynchronously: poll recall from the family group.
    deadline = time.monotonic() + 30
    found: Optional[dict[str, Any]] = None
    while found is None and time.monotonic() < deadline:
        code, body = scopemem.post(
            "/v1/recall",
            {"conversation_id": FAMILY, "query": "Uncle Bob chess park Sunday", "limit": 20},
        )
        assert code == 200, body
        found = next((m for m in body["memories"] if m["content"] == chess), None)
        if found is None:
            await asyncio.sleep(0.2)
    assert found is not None, f"the reflection never arrived; job {job}: " + json.dumps(
        scopemem.get(f"/v1/feedback/{job}")[1]
    )
    assert found["memory_scope"] == "家人" and found["scope_source"] == "conversation", found
    assert chess not in scopemem.visible_contents(WORK)
    assert chess not in await context_text(group_event(WORK_GROUP), "Who plays chess on Sunday?")
    # A turn without a reflection is reported, and nothing is stored.
    assert await p.after_reply(event, "hi", "hello", ids, None) is None


# ---- tool arguments cannot choose the conversation or the scope -----------------------------


async def test_tool_arguments_cannot_choose_the_conversation(
    app: App, scopemem: Scopemem
) -> None:
    p = plugin()
    leak = "The work vault code hint is a blue umbrella"
    family = group_event(FAMILY_GROUP)
    attempts = [
        {"content": leak, "conversation_id": WORK},
        {"content": leak, "memory_scope": "工作"},
        json.dumps({"content": leak, "conversation_id": WORK}),  # as an OpenAI tool call has it
    ]
    for arguments in attempts:
        result = await p.call_tool(family, "core_memory_remember", arguments)
        assert result.startswith("error: invalid_arguments"), (arguments, result)
    recall = await p.call_tool(family, "core_memory_recall", {"query": "x", "conversation_id": WORK})
    assert recall.startswith("error: invalid_arguments"), recall
    assert (await p.call_tool(family, "no_such_tool", {})).startswith("error: unknown_tool")
    assert (await p.call_tool(family, "core_memory_remember", "{not json")).startswith("error")
    for conv in (FAMILY, WORK, "onebot11:group_3131"):
        assert leak not in scopemem.visible_contents(conv), conv


# ---- /scopemem map, unmap: superusers only ---------------------------------------------------


async def test_superuser_map_moves_an_unmapped_group_into_a_scope(
    app: App, scopemem: Scopemem
) -> None:
    koi = "Grandpa Li keeps seven koi fish in the garden pond"
    await remember(group_event(FAMILY_GROUP), koi)
    group = 3003
    conv = f"onebot11:group_{group}"
    query = "What fish does grandpa Li keep in the pond?"
    assert koi not in await context_text(group_event(group), query)
    before = scope_map_on_disk(scopemem)

    await command(
        app,
        group_event(group, "/scopemem map 家人", SUPERUSER_ID),
        f"This chat ({conv}) now uses scope 家人.",
    )
    after = scope_map_on_disk(scopemem)
    assert after["conversation_scope_map"] == {**before["conversation_scope_map"], conv: "家人"}
    assert {k: v for k, v in after.items() if k != "conversation_scope_map"} == {
        k: v for k, v in before.items() if k != "conversation_scope_map"
    }
    assert koi in await context_text(group_event(group), query)
    assert scopemem.browse(conv)["memory_scope"] == "家人"
    # Writes from the newly mapped group are family memories too.
    got = await remember(group_event(group), "The family picnic is at the lake in June")
    assert got["memory"]["memory_scope"] == "家人", got

    await command(
        app,
        group_event(group, "/scopemem unmap", SUPERUSER_ID),
        f"This chat ({conv}) is no longer mapped; its scope is now public.",
    )
    assert conv not in scope_map_on_disk(scopemem)["conversation_scope_map"]
    assert koi not in await context_text(group_event(group), query)


async def test_others_cannot_map_and_bad_names_are_refused(app: App, scopemem: Scopemem) -> None:
    group = 4004
    conv = f"onebot11:group_{group}"
    before = scopemem.config_path.read_bytes()
    refusal = "Only a superuser can change the scope map."
    await command(app, group_event(group, "/scopemem map 家人"), refusal)
    await command(app, group_event(group, "/scopemem.map 工作"), refusal)
    await command(app, group_event(FAMILY_GROUP, "/scopemem unmap"), refusal)
    await command(
        app, group_event(group, "/scopemem incognito on"), "Only a superuser can change incognito."
    )
    await command(app, private_event(USER_ID, "/scopemem map 家人"), refusal)
    bad = "Not a scope name: use 1-64 letters, digits, CJK characters, '_' or '-'. Nothing was changed."
    await command(app, group_event(group, "/scopemem map 家 人", SUPERUSER_ID), bad)
    await command(app, group_event(group, "/scopemem map ../etc", SUPERUSER_ID), bad)
    await command(app, group_event(group, "/scopemem map " + "a" * 65, SUPERUSER_ID), bad)
    await command(app, group_event(group, "/scopemem", SUPERUSER_ID), plugin().commands.USAGE)
    assert scopemem.config_path.read_bytes() == before
    code, smap = scopemem.get("/v1/scope_map")
    assert conv not in {e["key"] for e in smap["entries"]}, smap
    assert scopemem.browse(FAMILY)["memory_scope"] == "家人"


async def test_map_without_a_config_file_says_where_the_map_lives(
    app: App, scopemem: Scopemem, monkeypatch: pytest.MonkeyPatch
) -> None:
    rt = plugin().runtime.get_runtime()
    monkeypatch.setattr(rt, "config_path", None)
    conv = "onebot11:group_4114"
    await command(
        app,
        group_event(4114, "/scopemem map 家人", SUPERUSER_ID),
        "The scope map is managed in scopemem's own config (scopemem_config is not set): "
        f"put this chat's id, {conv}, in its conversation_scope_map or incognito list there.",
    )


# ---- /scopemem incognito --------------------------------------------------------------------


async def test_incognito_on_stops_storing(app: App, scopemem: Scopemem) -> None:
    p = plugin()
    group = 5005
    conv = f"onebot11:group_{group}"
    event = group_event(group, "hi", SUPERUSER_ID)
    await command(
        app,
        group_event(group, "/scopemem incognito on", SUPERUSER_ID),
        "Incognito is on: nothing said in this chat is stored (recall still works).",
    )
    assert conv in scope_map_on_disk(scopemem)["incognito"]
    secret = "The surprise party for Mia is next Friday"
    got = await remember(event, secret)
    assert got == {"stored": False, "memory": None, "deduplicated": False}, got
    reflection = {"new_memories": [{"content": secret}]}
    assert await p.after_reply(event, "psst", "ok", [], reflection) is None
    await asyncio.sleep(0.5)
    assert secret not in scopemem.visible_contents(conv)

    await command(
        app,
        group_event(group, "/scopemem incognito off", SUPERUSER_ID),
        "Incognito is off: this chat's memories are stored again.",
    )
    assert conv not in scope_map_on_disk(scopemem)["incognito"]
    got = await remember(event, "The book club meets on the first Monday")
    assert got["stored"] is True, got
    await command(
        app,
        group_event(group, "/scopemem incognito maybe", SUPERUSER_ID),
        "Usage: /scopemem incognito on|off",
    )


# ---- /scopemem forget -----------------------------------------------------------------------


async def test_forget_then_confirm_erases_the_chats_memories(
    app: App, scopemem: Scopemem
) -> None:
    group = 6006
    conv = f"onebot11:group_{group}"
    cactus = "The office cactus on desk six is named Spike"
    await remember(group_event(group), cactus)
    await remember(group_event(group), "Desk six keeps a spare umbrella in the drawer")
    assert cactus in await context_text(group_event(group), "What is the cactus on desk six called?")
    ask = (
        "This erases every memory written in this chat, for good. "
        "Send /scopemem forget confirm within 60 s to go ahead."
    )
    nothing = "Nothing to confirm: send /scopemem forget first."

    # An ordinary member of a group may not; a confirm without a request does nothing.
    await command(app, group_event(group, "/scopemem forget"), "In a group only a superuser can erase its memories.")
    await command(app, group_event(group, "/scopemem forget confirm", SUPERUSER_ID), nothing)
    await command(app, group_event(group, "/scopemem forget", SUPERUSER_ID), ask)
    await command(app, group_event(group, "/scopemem forget confirm", SUPERUSER_ID), "Erased 2 memories written in this chat.")
    await command(app, group_event(group, "/scopemem forget confirm", SUPERUSER_ID), nothing)
    assert cactus not in await context_text(group_event(group), "What is the cactus on desk six called?")
    assert cactus not in scopemem.visible_contents(conv)
    # Other chats' memories are untouched.
    assert any("orchids" in c for c in scopemem.visible_contents(FAMILY))

    # In a private chat the user may erase their own chat's memories.
    user = 8888
    diary = "My cat Mochi is afraid of the vacuum cleaner"
    await remember(private_event(user), diary)
    await command(app, private_event(user, "/scopemem forget"), ask)
    await command(app, private_event(user, "/scopemem forget confirm"), "Erased 1 memory written in this chat.")
    assert diary not in scopemem.visible_contents(f"onebot11:private_{user}")


async def test_a_forget_confirmed_after_its_minute_erases_nothing(
    app: App, scopemem: Scopemem, monkeypatch: pytest.MonkeyPatch
) -> None:
    from scopemem.forget import ASK, ForgetConfirmations

    # The plugin's confirmations, on a clock the test moves (`scopemem.forget`).
    now = [1000.0]
    rt = plugin().runtime.get_runtime()
    monkeypatch.setattr(rt, "forgets", ForgetConfirmations(clock=lambda: now[0]))
    group = 6007
    conv = f"onebot11:group_{group}"
    kettle = "The kettle on floor two descales every Friday"
    await remember(group_event(group), kettle)
    nothing = "Nothing to confirm: send /scopemem forget first."
    await command(app, group_event(group, "/scopemem forget", SUPERUSER_ID), ASK)
    now[0] += 61.0
    await command(app, group_event(group, "/scopemem forget confirm", SUPERUSER_ID), nothing)
    assert kettle in scopemem.visible_contents(conv)
    await command(app, group_event(group, "/scopemem forget", SUPERUSER_ID), ASK)
    now[0] += 59.0
    await command(app, group_event(group, "/scopemem forget confirm", SUPERUSER_ID), "Erased 1 memory written in this chat.")
    assert kettle not in scopemem.visible_contents(conv)


# ---- scopemem down --------------------------------------------------------------------------


async def test_scopemem_down_fails_soft(app: App, scopemem: Scopemem) -> None:
    from nonebot import logger

    p = plugin()
    logged: list[str] = []
    sink = logger.add(lambda m: logged.append(str(m)), level="DEBUG", format="{message}")
    secret = "Aunt Zoe hides the spare key under the blue flowerpot"
    event = group_event(FAMILY_GROUP, secret)
    scopemem.stop()
    try:
        assert await p.memory_context(event, secret) == ("", [])
        assert await p.memory_context(event, secret) == ("", [])
        assert await p.tools() == []
        result = await p.call_tool(event, "core_memory_remember", {"content": secret})
        assert result == "Memory is unavailable right now; continue without it."
        reflection = {"new_memories": [{"content": secret}]}
        assert await p.after_reply(event, secret, "ok", [], reflection) is None
        await command(
            app,
            group_event(WORK_GROUP, "/scopemem status"),
            "\n".join(
                [
                    "scopemem is DOWN: the bot goes on without memory",
                    f"scopemem: {scopemem.base}",
                    f"this chat: {WORK}",
                    "last error: ConnectError",
                ]
            ),
        )
        await command(
            app,
            group_event(FAMILY_GROUP, "/scopemem incognito on", SUPERUSER_ID),
            "Saved; scopemem is down and applies it when it is back.",
        )
        await command(
            app,
            group_event(FAMILY_GROUP, "/scopemem incognito off", SUPERUSER_ID),
            "Saved; scopemem is down and applies it when it is back.",
        )
    finally:
        scopemem.start()
    try:
        injection, _ = await p.memory_context(event, "Which flowers does grandma Rosa grow?")
        assert "orchids" in injection
    finally:
        logger.remove(sink)
    text = "\n".join(logged)
    assert sum("unreachable" in line for line in logged) == 1, text
    assert sum("reachable again" in line for line in logged) == 1, text
    assert "Aunt Zoe" not in text and "flowerpot" not in text, text


# ---- the supervisor -------------------------------------------------------------------------


def test_supervisor_runs_serve_with_the_driver_and_stops_it(tmp_path: Path) -> None:
    """A real NoneBot2 process (nonebot.run(), uvicorn) with scopemem_binary set."""
    binary = scopemem_bin()
    port = free_port()
    config = tmp_path / "scopemem.json"
    config.write_text(
        json.dumps(
            {
                "storage": {"db_dir": str(tmp_path / "db")},
                "server": {"http_addr": f"127.0.0.1:{port}"},
                "conversation_scope_map": {FAMILY: "家人"},
            }
        )
    )
    out_path = tmp_path / "bot.out"
    env = dict(os.environ)
    env.pop("SCOPEMEM_AUTH_TOKEN", None)
    with open(out_path, "wb") as out:
        bot = subprocess.Popen(
            [
                sys.executable,
                str(Path(__file__).with_name("supervised_bot.py")),
                "--port", str(free_port()),
                "--binary", binary,
                "--config", str(config),
                "--token", TOKEN,
            ],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=tmp_path,
        )

    def output() -> str:
        return out_path.read_text(errors="replace")

    base = f"http://127.0.0.1:{port}"
    try:
        # scopemem_url was not set: the plugin reaches the child at the config's http_addr,
        # and the child got the token (SCOPEMEM_AUTH_TOKEN).
        health = wait_healthy(base, 90.0, bot)
        assert health["auth"] == "token", health
        assert f"memory at {base}" in output(), output()
        kids = [k for k in live_children(bot.pid) if "serve" in cmdline(k)]
        assert len(kids) == 1, (kids, output())
        child = kids[0]
        assert cmdline(child) == [binary, "serve", "--exit-with-parent", "--config", str(config)]

        # A child that dies is restarted (after 1 s of backoff).
        os.kill(child, signal.SIGKILL)
        deadline = time.monotonic() + 60
        restarted: list[int] = []
        while time.monotonic() < deadline and not restarted:
            restarted = [k for k in live_children(bot.pid) if k != child and "serve" in cmdline(k)]
            time.sleep(0.1)
        assert len(restarted) == 1, output()
        child = restarted[0]
        wait_healthy(base, 90.0, bot)

        # Driver shutdown (uvicorn's SIGTERM handling runs NoneBot's shutdown hooks).
        bot.send_signal(signal.SIGTERM)
        bot.wait(timeout=60)
    finally:
        if bot.poll() is None:
            bot.kill()
            bot.wait()
    text = output()
    assert bot.returncode == 0, text
    after = next(
        (line for line in text.splitlines() if line.startswith("@@AFTER_RUN ")), None
    )
    assert after is not None, text
    # When nonebot.run() returned, the plugin had already stopped and reaped its child.
    assert json.loads(after[len("@@AFTER_RUN ") :]) == {"children": []}, text
    assert "serve stopped (code 0)" in text, text
    assert not alive(child), text
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"{base}/healthz", timeout=1.0, trust_env=False)
