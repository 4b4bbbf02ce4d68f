"""The plugin's one piece of state: settings, the scopemem client, the supervisor, pending forgets.

Built once when NoneBot loads the plugin, from `get_plugin_config(Config)`; the public API
(`memory.py`) and the chat commands (`commands.py`) share it, and the driver's startup and
shutdown hooks start and stop the supervised server through it.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Optional

from nonebot import logger

from . import config_file
from .client import ScopememClient
from .config import Config
from .supervisor import Supervisor


def _fields_set(cfg: Config) -> set[str]:
    got = getattr(cfg, "model_fields_set", None)  # pydantic 2
    if got is None:
        got = getattr(cfg, "__fields_set__", set())  # pydantic 1
    return set(got)


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
        path = cfg.scopemem_config.strip()
        self.config_path: Optional[Path] = Path(path).expanduser() if path else None
        self.binary = cfg.scopemem_binary.strip()
        base_url = cfg.scopemem_url.strip() or "http://127.0.0.1:8787"
        if self.binary and self.config_path and "scopemem_url" not in _fields_set(cfg):
            # The supervised server answers where its own config says.
            addr = config_file.http_addr(self.config_path)
            if addr:
                base_url = _url_of_addr(addr)
        self.client = ScopememClient(base_url, cfg.scopemem_token, cfg.scopemem_timeout)
        self.supervisor: Optional[Supervisor] = None
        # `/scopemem forget` waits for `/scopemem forget confirm`: chat -> (sender, deadline).
        self.pending_forget: dict[str, tuple[str, float]] = {}
        self._edit_lock: Optional[asyncio.Lock] = None

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
        if not self.binary:
            return
        if self.config_path is None:
            logger.error(
                "[scopemem] scopemem_binary is set but scopemem_config is not: the server "
                "needs its config file; not starting it"
            )
            return
        self.supervisor = Supervisor(self.binary, str(self.config_path), self.cfg.scopemem_token)
        self.supervisor.start()
        logger.info(f"[scopemem] supervising {self.binary}; memory at {self.base_url}")

    async def stop(self) -> None:
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
