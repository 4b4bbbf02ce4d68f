"""The zero-set-up path: with no scopemem setting at all, the plugin finds scopemem and runs it.

The end-to-end case runs real NoneBot2 processes (`supervised_bot.py`, `nonebot.run()`) in an
empty working directory with no `SCOPEMEM_*` setting and a `PATH` without scopemem. The first
runs on a fresh venv's Python whose `bin/` holds `scopemem` where the wheel puts it (a symlink
to SCOPEMEM_BIN; NoneBot and the plugin come from the test venv through a `.pth` file, instead
of a pip install), so the plugin must find it beside its Python. The second runs on the test
venv's Python, which has no scopemem beside it, with that `bin/` on `PATH`, so the plugin must
find it there, and must reuse the file and port the first start created. The other cases check
the discovery order with real files, the creation of the config file, and a bot that finds no
binary at all, in-process.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from conftest import (
    alive,
    cmdline,
    free_port,
    group_event,
    live_children,
    scopemem_bin,
    wait_healthy,
)

BOT_SCRIPT = Path(__file__).with_name("supervised_bot.py")
SYSTEM_PATH = "/usr/bin:/bin"
# The debug binary's own model locations (a pip-installed scopemem finds its models beside it);
# no plugin setting.
BINARY_ENV = ("SCOPEMEM_MODEL_DIR", "SCOPEMEM_ASSETS", "SCOPEMEM_E5_DIR")
NO_BINARY = (
    "no scopemem binary found: install the scopemem wheel into the bot's environment "
    "(pip install scopemem-*.whl) or set SCOPEMEM_BINARY / SCOPEMEM_URL"
)


def own_server():
    return importlib.import_module("nonebot_plugin_scopemem.own_server")


def executable(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(0o755)
    return path


# ---- finding the binary ----------------------------------------------------------------------


def test_binary_discovery_order(tmp_path: Path) -> None:
    prefix = tmp_path / "venv"
    python = tmp_path / "python-home" / "bin" / "python3"  # sys.executable; need not exist
    path_dir = tmp_path / "on-path"
    in_prefix = executable(prefix / "bin" / "scopemem")
    beside_python = executable(python.parent / "scopemem")
    on_path = executable(path_dir / "scopemem")

    def find(configured: str = "") -> Any:
        return own_server().find_binary(
            configured, prefix=str(prefix), executable=str(python), path=str(path_dir)
        )

    # A configured binary wins, as it is (a wrong path is the supervisor's error to log).
    assert find("/opt/elsewhere/scopemem") == "/opt/elsewhere/scopemem"
    assert find() == str(in_prefix)
    in_prefix.chmod(0o644)  # not executable: skipped
    assert find() == str(beside_python)
    beside_python.unlink()
    beside_python.mkdir()  # a directory is no binary
    assert find() == str(on_path)
    on_path.unlink()
    assert find() is None


def test_on_windows_the_wheels_binary_is_found_in_scripts(tmp_path: Path) -> None:
    """pip puts a wheel's scripts in `<prefix>\\Scripts\\` on Windows, as `scopemem.exe`."""
    prefix = tmp_path / "venv"
    python = tmp_path / "venv" / "python.exe"  # sys.executable on Windows; need not exist
    in_scripts = executable(prefix / "Scripts" / "scopemem.exe")
    executable(prefix / "bin" / "scopemem")  # the POSIX name: not what Windows runs

    def find(platform: str) -> Any:
        return own_server().find_binary(
            "", prefix=str(prefix), executable=str(python), path="", platform=platform
        )

    assert find("win32") == str(in_scripts)
    assert find("linux") == str(prefix / "bin" / "scopemem")


async def test_on_windows_the_child_is_stopped_through_its_stdin_and_drains(
    tmp_path: Path,
) -> None:
    """Windows has no SIGTERM (`terminate()` is TerminateProcess, a hard kill): the supervisor
    closes the child's stdin instead, which a real `scopemem serve --exit-with-parent` reads as
    its parent leaving, and it stops as on SIGTERM: exit 0, before the hard-kill deadline."""
    import asyncio

    from scopemem.supervisor import Supervisor

    port = free_port()
    config = tmp_path / "scopemem.json"
    config.write_text(
        json.dumps(
            {
                "storage": {"db_dir": str(tmp_path / "lancedb")},
                "server": {"http_addr": f"127.0.0.1:{port}"},
            }
        ),
        encoding="utf-8",
    )
    logged: list[str] = []

    class Log:
        def info(self, message: str) -> None:
            logged.append(f"INFO {message}")

        def warning(self, message: str) -> None:
            logged.append(f"WARNING {message}")

        def error(self, message: str) -> None:
            logged.append(f"ERROR {message}")

    argv = [scopemem_bin(), "serve", "--exit-with-parent", "--config", str(config)]
    supervisor = Supervisor(argv, logger=Log(), platform="win32")
    supervisor.start()
    try:
        await asyncio.to_thread(wait_healthy, f"http://127.0.0.1:{port}", 120.0)
        proc = supervisor.proc
        assert proc is not None
        hard: list[str] = []
        # On Windows both are TerminateProcess: neither may be how it stops.
        proc.terminate = lambda: hard.append("terminate")  # type: ignore[method-assign]
        proc.kill = lambda: hard.append("kill")  # type: ignore[method-assign]
    finally:
        await supervisor.stop()
    assert hard == [] and proc.returncode == 0, (hard, logged)
    assert not [line for line in logged if line.startswith(("WARNING", "ERROR"))], logged


def test_a_port_another_program_holds_is_taken(tmp_path: Path) -> None:
    """The config's port is a fixed one: the plugin checks that nothing else listens there
    before it runs scopemem (`addr_taken`), so a taken port is one clear error, not a child
    that fails to listen at every restart."""
    import socket

    from scopemem.supervisor import addr_taken

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        addr = f"127.0.0.1:{held.getsockname()[1]}"
        assert addr_taken(addr) is True
    assert addr_taken(addr) is False
    assert addr_taken("not-a-host.invalid:8787") is False


# ---- the config file -------------------------------------------------------------------------


def test_the_config_file_is_created_once_and_never_rewritten(tmp_path: Path) -> None:
    data_dir = tmp_path / "data" / "scopemem"
    path = data_dir / "scopemem.json"
    assert own_server().ensure_config(path, data_dir) is True
    created = json.loads(path.read_text(encoding="utf-8"))
    host, port = created["server"]["http_addr"].rsplit(":", 1)
    assert host == "127.0.0.1" and 0 < int(port) < 65536, created
    assert created == {
        "storage": {"db_dir": str(data_dir / "lancedb")},
        "server": {"http_addr": f"127.0.0.1:{port}"},
    }
    assert sorted(p.name for p in data_dir.iterdir()) == ["scopemem.json"]  # no temp file left
    first = path.read_bytes()
    assert own_server().ensure_config(path, data_dir) is False
    assert path.read_bytes() == first

    # An operator's file is kept exactly, even without the keys a created one has.
    theirs = tmp_path / "operator.json"
    theirs.write_text('{"unmapped_scope": "private", "server": {"auth_token": "t"}}')
    assert own_server().ensure_config(theirs, data_dir) is False
    assert theirs.read_text() == '{"unmapped_scope": "private", "server": {"auth_token": "t"}}'


def test_which_server_the_settings_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from nonebot_plugin_scopemem import Config
    from nonebot_plugin_scopemem.runtime import Runtime

    monkeypatch.chdir(tmp_path)
    cwd = Path.cwd()  # the real path of tmp_path
    # Nothing set: the plugin runs scopemem, with its file under ./data/scopemem.
    rt = Runtime(Config())
    assert rt.owns_server
    assert rt.config_path == cwd / "data" / "scopemem" / "scopemem.json"
    assert rt.base_url == "http://127.0.0.1:8787"  # scopemem's default until the file says
    rt = Runtime(Config(scopemem_data_dir="bot-data", scopemem_config="elsewhere/s.json"))
    assert rt.owns_server and rt.config_path == cwd / "elsewhere" / "s.json"
    assert rt.data_dir == cwd / "bot-data"
    # A URL: the operator's server; nothing runs unless scopemem_binary is set too.
    rt = Runtime(Config(scopemem_url="http://10.0.0.5:8787"))
    assert not rt.owns_server and rt.config_path is None
    assert rt.base_url == "http://10.0.0.5:8787"


async def test_without_a_binary_the_bot_goes_on_without_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from nonebot import logger

    import nonebot_plugin_scopemem as plugin
    from nonebot_plugin_scopemem import Config, commands, runtime

    empty = tmp_path / "empty-path"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    assert own_server().find_binary("") is None, (
        f"this test needs a Python without scopemem beside it ({sys.prefix}/bin)"
    )
    data_dir = tmp_path / "data"
    rt = runtime.Runtime(Config(scopemem_data_dir=str(data_dir)))
    monkeypatch.setattr(runtime, "_runtime", rt)  # what the public API and commands use
    logged: list[str] = []
    sink = logger.add(
        lambda m: logged.append(str(m).rstrip("\n")), level="INFO", format="{level} {message}"
    )
    try:
        await rt.start()
        assert rt.supervisor is None
        assert not data_dir.exists()  # nothing runs, so nothing is created
        event = group_event(9009, "remember that the cellar key is blue")
        assert await plugin.memory_context(event, "cellar key") == ("", [])
        assert await plugin.tools() == []
        result = await plugin.call_tool(event, "core_memory_remember", {"content": "cellar"})
        assert result == "Memory is unavailable right now; continue without it."
        assert await plugin.after_reply(event, "hi", "ok", [], {"new_memories": ["x"]}) is None
        status = await commands.status_text(rt, "onebot11:group_9009", False)
        assert status.splitlines()[0] == "scopemem is DOWN: the bot goes on without memory"
        assert status.splitlines()[-1] == f"last error: {NO_BINARY}", status
    finally:
        logger.remove(sink)
        await rt.stop()
    errors = [line for line in logged if line.startswith("ERROR")]
    assert errors == [f"ERROR [scopemem] {NO_BINARY}; the bot goes on without memory"], logged


# ---- a real bot with nothing set up ----------------------------------------------------------


def fresh_venv(venv: Path) -> Path:
    """A fresh venv of this Python with scopemem in its bin/, where `pip install
    scopemem-*.whl` puts it (a symlink to SCOPEMEM_BIN); NoneBot, the adapter and the plugin
    come from the test venv through a `.pth` file."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    lib = venv / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    assert lib.is_dir(), lib
    nonebot_site = sysconfig.get_paths()["purelib"]  # NoneBot, the adapter, the plugin
    (lib / "_nonebot_test_venv.pth").write_text(f"import site; site.addsitedir({nonebot_site!r})\n")
    (venv / "bin" / "scopemem").symlink_to(scopemem_bin())
    assert shutil.which("scopemem", path=SYSTEM_PATH) is None
    return venv


def bot_env() -> dict[str, str]:
    """The environment of a bot with no scopemem setting (the binary's asset paths kept)."""
    env = {
        k: v for k, v in os.environ.items() if not k.startswith("SCOPEMEM_") or k in BINARY_ENV
    }
    env.pop("VIRTUAL_ENV", None)
    return env


class BotProcess:
    """One `supervised_bot.py` run with no scopemem setting, in `workdir`."""

    def __init__(self, python: str, workdir: Path, env: dict[str, str], out_path: Path) -> None:
        self.out_path = out_path
        self.base = f"http://127.0.0.1:{free_port()}"
        with open(out_path, "wb") as out:
            self.proc = subprocess.Popen(
                [python, str(BOT_SCRIPT), "--port", self.base.rsplit(":", 1)[1]],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=workdir,
            )

    def output(self) -> str:
        return self.out_path.read_text(errors="replace")

    def call(self, route: str, body: Any = None) -> Any:
        url = f"{self.base}/scopemem-test/{route}"
        if body is None:
            r = httpx.get(url, timeout=60.0, trust_env=False)
        else:
            r = httpx.post(url, json=body, timeout=60.0, trust_env=False)
        assert r.status_code == 200, (r.status_code, r.text, self.output())
        return r.json()

    def wait_up(self, timeout_s: float = 60.0) -> dict[str, Any]:
        """The plugin's runtime once the bot serves (uvicorn serves after NoneBot's startup)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                code = self.proc.returncode
                raise AssertionError(f"the bot exited with {code}:\n{self.output()}")
            try:
                return self.call("runtime")
            except httpx.HTTPError:
                time.sleep(0.1)
        raise AssertionError(f"the bot did not serve within {timeout_s} s:\n{self.output()}")

    def serve_child(self) -> int:
        kids = [k for k in live_children(self.proc.pid) if "serve" in cmdline(k)]
        assert len(kids) == 1, (kids, self.output())
        return kids[0]

    def stop(self) -> str:
        """SIGTERM (driver shutdown) and the bot's output; the bot left no child behind."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        text = self.output()
        assert self.proc.returncode == 0, text
        after = next((x for x in text.splitlines() if x.startswith("@@AFTER_RUN ")), None)
        assert after is not None, text
        assert json.loads(after[len("@@AFTER_RUN ") :]) == {"children": []}, text
        assert "serve stopped (code 0)" in text, text
        return text


def test_with_nothing_set_up_the_plugin_runs_the_wheels_scopemem(tmp_path: Path) -> None:
    venv = fresh_venv(tmp_path / "venv")
    wheel_binary = venv / "bin" / "scopemem"
    env = bot_env()
    bot_dir = tmp_path / "bot"
    bot_dir.mkdir()
    data_dir = bot_dir.resolve() / "data" / "scopemem"
    config = data_dir / "scopemem.json"
    group = 7007
    conv = f"onebot11:group_{group}"
    fact = "The lighthouse keeper feeds the harbour cats at dawn"
    query = "Who feeds the harbour cats?"

    # First start: the plugin finds scopemem beside its Python and creates its config.
    bot = BotProcess(str(venv / "bin" / "python"), bot_dir, {**env, "PATH": SYSTEM_PATH},
                     tmp_path / "first.out")
    try:
        rt = bot.wait_up()
        created = json.loads(config.read_text(encoding="utf-8"))
        host, port = created["server"]["http_addr"].rsplit(":", 1)
        assert host == "127.0.0.1", created
        assert created == {
            "storage": {"db_dir": str(data_dir / "lancedb")},
            "server": {"http_addr": f"127.0.0.1:{port}"},
        }
        base = f"http://127.0.0.1:{port}"
        assert rt == {"base_url": base, "config_path": str(config), "binary": str(wheel_binary)}
        wait_healthy(base, 90.0, bot.proc)
        assert f"memory at {base}" in bot.output(), bot.output()
        child = bot.serve_child()
        assert cmdline(child) == [
            str(wheel_binary), "serve", "--exit-with-parent", "--config", str(config)
        ]
        # The plugin's API, in the bot process, against the server it runs.
        got = json.loads(bot.call("remember", {"group_id": group, "content": fact})["result"])
        assert got["stored"] is True and got["memory"]["memory_scope"] == "public", got
        ctx = bot.call("context", {"group_id": group, "query": query})
        assert fact in ctx["injection"] and ctx["ids"], ctx
        # `/scopemem map` edits the created file, and the server applies it.
        reply = bot.call("map", {"group_id": group, "scope": "灯塔"})["reply"]
        assert reply == f"This chat ({conv}) now uses scope 灯塔.", reply
        mapped = json.loads(config.read_text(encoding="utf-8"))
        assert mapped == {**created, "conversation_scope_map": {conv: "灯塔"}}, mapped
    finally:
        bot.stop()
    assert not alive(child)
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"{base}/healthz", timeout=1.0, trust_env=False)
    assert (data_dir / "lancedb").is_dir()
    saved = config.read_bytes()

    # Second start, on a Python with no scopemem beside it: found on PATH; same file, same port.
    for beside in (Path(sys.prefix) / "bin" / "scopemem", Path(sys.executable).parent / "scopemem"):
        assert not beside.exists(), f"{beside} exists: the PATH case would not be tested"
    bot = BotProcess(sys.executable, bot_dir, {**env, "PATH": f"{venv / 'bin'}:{SYSTEM_PATH}"},
                     tmp_path / "second.out")
    try:
        rt = bot.wait_up()
        assert rt == {"base_url": base, "config_path": str(config), "binary": str(wheel_binary)}
        wait_healthy(base, 90.0, bot.proc)
        child = bot.serve_child()
        assert cmdline(child)[0] == str(wheel_binary)
        assert config.read_bytes() == saved
        assert f"created {config}" not in bot.output()
        # The first start's memory is there, and the map in the reused file is in force.
        ctx = bot.call("context", {"group_id": group, "query": query})
        assert fact in ctx["injection"], ctx
        lamp = "The lamp is lit at dusk"
        got = json.loads(bot.call("remember", {"group_id": group, "content": lamp})["result"])
        assert got["memory"]["memory_scope"] == "灯塔", got
    finally:
        bot.stop()
    assert not alive(child)
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"{base}/healthz", timeout=1.0, trust_env=False)
