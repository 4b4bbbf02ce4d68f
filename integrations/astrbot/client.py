"""scopemem's HTTP API as the AstrBot plugin calls it: a small JSON client that logs an outage
once and its end once, and the error a failed call raises. Its own module so that the plugin
(main.py), its dashboard routes (dashboard_api.py) and the consolidation relay
(consolidation.py) all import it without importing each other.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp

from astrbot.api import logger


class ScopememDown(Exception):
    """scopemem could not be reached (or answered 5xx)."""


class ScopememClient:
    """A small JSON client that logs an outage once and its end once."""

    def __init__(self, base_url: str, token: str, timeout_s: float) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.timeout = aiohttp.ClientTimeout(total=timeout_s)
        self.down = False
        self.last_error = ""
        self._session: aiohttp.ClientSession | None = None

    def _headers(self) -> dict[str, str]:
        headers = {"content-type": "application/json"}
        if self.token:
            headers["authorization"] = f"Bearer {self.token}"
        return headers

    async def _get_session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(timeout=self.timeout)
        return self._session

    async def close(self) -> None:
        if self._session is not None and not self._session.closed:
            await self._session.close()

    def _mark_down(self, error: str) -> None:
        self.last_error = error
        if not self.down:
            self.down = True
            logger.warning(
                "[scopemem] %s unreachable (%s): chatting continues without memory "
                "until it is back (logged once per outage)",
                self.base_url,
                error,
            )

    def _mark_up(self) -> None:
        if self.down:
            self.down = False
            logger.info("[scopemem] %s is reachable again: memory is back", self.base_url)

    async def request_raw(
        self, method: str, path: str, body: Any = None, timeout: float | None = None
    ) -> tuple[int, bytes]:
        """Returns (status, body bytes). Raises ScopememDown on transport errors; a
        `timeout` (seconds) replaces the chat path's short one for this call."""
        # No `timeout` argument at all keeps the session's (aiohttp reads None as "no limit").
        extra = {} if timeout is None else {"timeout": aiohttp.ClientTimeout(total=timeout)}
        try:
            session = await self._get_session()
            async with session.request(
                method,
                self.base_url + path,
                headers=self._headers(),
                data=None if body is None else json.dumps(body),
                **extra,
            ) as resp:
                raw = await resp.read()
                status = resp.status
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as e:
            self._mark_down(type(e).__name__ if not str(e) else f"{type(e).__name__}: {e}")
            raise ScopememDown(str(e) or type(e).__name__) from e
        if status < 500:
            self._mark_up()
        return status, raw

    async def request(
        self, method: str, path: str, body: Any = None, timeout: float | None = None
    ) -> tuple[int, Any]:
        """Returns (status, json). Raises ScopememDown on transport errors and 5xx."""
        status, raw = await self.request_raw(method, path, body, timeout)
        text = raw.decode("utf-8", errors="replace")
        try:
            payload = json.loads(text) if text else None
        except ValueError:
            payload = None
        if status >= 500:
            code = error_code(payload) or f"HTTP {status}"
            self._mark_down(code)
            raise ScopememDown(code)
        self._mark_up()
        return status, payload


def error_code(payload: Any) -> str:
    if isinstance(payload, dict) and isinstance(payload.get("error"), dict):
        return str(payload["error"].get("code", ""))
    return ""
