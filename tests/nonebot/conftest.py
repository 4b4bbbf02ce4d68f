"""Set-up for the NoneBot2 plugin tests: a real `scopemem serve` and a real NoneBot2 around it.

The server is the binary named by SCOPEMEM_BIN, on a free loopback port with a bearer token, a
temp directory for its table and a config mapping `onebot11:group_1001` to 家人,
`onebot11:group_2002` to 工作 and test_people.py's two groups to 邻居 and 球队 (the file
`/scopemem map` edits). NoneBot2 is initialised by nonebug with the FastAPI driver, the real
OneBot v11 adapter and the plugin, whose import must resolve to integrations/nonebot in this
repo (the editable install of scripts/setup-nonebot.sh).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

import httpx
import pytest
from nonebug import NONEBOT_INIT_KWARGS

REPO = Path(__file__).resolve().parents[2]
# The `scopemem` Python package the plugin imports (python/; the wheel ships it), from this
# checkout, for this process and the bots it starts.
CHECKOUT_PACKAGE = str(REPO / "python")
sys.path.insert(0, CHECKOUT_PACKAGE)
os.environ["PYTHONPATH"] = os.pathsep.join(
    [CHECKOUT_PACKAGE] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])
)

from helpers import USER_ID, alive, group_event, live_children, private_event  # noqa: E402,F401

TOKEN = "nonebot-test-token"
SUPERUSER_ID = 10000
FAMILY_GROUP = 1001
WORK_GROUP = 2002
# The two groups of test_people.py, where members list and forget their own words.
NEIGHBOURS_GROUP = 7101
TEAM_GROUP = 7102
SCOPE_MAP = {
    f"onebot11:group_{FAMILY_GROUP}": "家人",
    f"onebot11:group_{WORK_GROUP}": "工作",
    f"onebot11:group_{NEIGHBOURS_GROUP}": "邻居",
    f"onebot11:group_{TEAM_GROUP}": "球队",
}
FAMILY = f"onebot11:group_{FAMILY_GROUP}"
WORK = f"onebot11:group_{WORK_GROUP}"
NEIGHBOURS = f"onebot11:group_{NEIGHBOURS_GROUP}"
TEAM = f"onebot11:group_{TEAM_GROUP}"


def cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")[:-1]
    except OSError:
        return []


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scopemem_bin() -> str:
    binary = os.environ.get("SCOPEMEM_BIN", "")
    if not binary or not os.access(binary, os.X_OK):
        raise pytest.UsageError(
            "SCOPEMEM_BIN must name a built scopemem binary "
            f"(got {binary!r}); e.g. SCOPEMEM_BIN=$CARGO_TARGET_DIR/debug/scopemem"
        )
    return binary


def wait_healthy(base: str, timeout_s: float, proc: Optional[subprocess.Popen] = None) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"the process exited with {proc.returncode} before {base} answered")
        try:
            r = httpx.get(f"{base}/healthz", timeout=1.0, trust_env=False)
            if r.status_code == 200:
                return r.json()
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{base}/healthz did not answer within {timeout_s} s")


class Scopemem:
    """One real `scopemem serve` with its config, table and log in `workdir`."""

    def __init__(self, binary: str, workdir: Path) -> None:
        self.binary = binary
        self.workdir = workdir
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.config_path = workdir / "scopemem.json"
        self.log_path = workdir / "serve.log"
        self.proc: Optional[subprocess.Popen] = None
        config = {
            "storage": {"db_dir": str(workdir / "db")},
            "server": {"http_addr": f"127.0.0.1:{self.port}", "auth_token": TOKEN},
            "conversation_scope_map": SCOPE_MAP,
        }
        self.config_path.write_text(json.dumps(config, ensure_ascii=False, indent=2))
        self._http = httpx.Client(
            base_url=self.base,
            timeout=60.0,
            trust_env=False,
            headers={"authorization": f"Bearer {TOKEN}"},
        )

    def start(self) -> None:
        env = dict(os.environ)
        env.pop("SCOPEMEM_AUTH_TOKEN", None)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [self.binary, "serve", "--config", str(self.config_path)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
            )
        try:
            wait_healthy(self.base, 90.0, self.proc)
        except RuntimeError as e:
            raise RuntimeError(f"{e}\n--- serve log ---\n{self.log_tail()}") from None

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def log_tail(self, n: int = 40) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(lines[-n:])

    def post(self, path: str, body: dict[str, Any]) -> tuple[int, Any]:
        r = self._http.post(path, json=body)
        return r.status_code, r.json()

    def get(self, path: str) -> tuple[int, Any]:
        r = self._http.get(path)
        return r.status_code, r.json()

    def browse(self, conversation_id: str) -> dict[str, Any]:
        """Everything `conversation_id` may see, newest first (no query, no threshold)."""
        code, body = self.post(
            "/v1/memories/browse", {"conversation_id": conversation_id, "limit": 100}
        )
        assert code == 200, body
        return body

    def visible_contents(self, conversation_id: str) -> list[str]:
        return [m["content"] for m in self.browse(conversation_id)["memories"]]


_SERVER = pytest.StashKey[Scopemem]()
_WORKDIR = pytest.StashKey[Path]()


def pytest_configure(config: pytest.Config) -> None:
    binary = scopemem_bin()
    workdir = Path(tempfile.mkdtemp(prefix="scopemem-nonebot-"))
    server = Scopemem(binary, workdir)
    config.stash[_WORKDIR] = workdir
    config.stash[_SERVER] = server
    config.stash[NONEBOT_INIT_KWARGS] = {
        "driver": "~fastapi",
        "superusers": {str(SUPERUSER_ID)},
        "command_start": {"/"},
        "command_sep": {"."},
        "log_level": "INFO",
        "scopemem_url": server.base,
        "scopemem_token": TOKEN,
        # The test machine is shared with builds: generous, so a slow embed is not an outage.
        "scopemem_timeout": 30.0,
        "scopemem_config": str(server.config_path),
    }


def pytest_unconfigure(config: pytest.Config) -> None:
    server = config.stash.get(_SERVER, None)
    if server is not None:
        server.stop()
    workdir = config.stash.get(_WORKDIR, None)
    if workdir is not None:
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(scope="session", autouse=True)
async def after_nonebot_init(after_nonebot_init: None) -> None:
    import nonebot
    from nonebot.adapters.onebot.v11 import Adapter as OneBotV11Adapter

    nonebot.get_driver().register_adapter(OneBotV11Adapter)
    plugin = nonebot.load_plugin("nonebot_plugin_scopemem")
    assert plugin is not None, "NoneBot could not load nonebot_plugin_scopemem"
    origin = Path(plugin.module.__file__).resolve()
    want = REPO / "integrations" / "nonebot" / "nonebot_plugin_scopemem"
    assert origin.parent == want, (
        f"the plugin was imported from {origin}, not from {want}: "
        "run scripts/setup-nonebot.sh (it installs integrations/nonebot editable)"
    )


@pytest.fixture(scope="session")
def scopemem(request: pytest.FixtureRequest):
    """The running server (started on first use, stopped when the session ends)."""
    server = request.config.stash[_SERVER]
    server.start()
    yield server
    server.stop()
