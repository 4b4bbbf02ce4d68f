"""A small JSON client for scopemem's HTTP API that fails soft and logs an outage only twice.

Every call of a plugin goes through here, so "scopemem is down" is decided in one place: a
transport error, a time-out or a 5xx raises `ScopememDown` (logged once when the outage starts
and once when it ends; a server the plugin has just started is not down while it comes up:
`expect_start`); any other answer is returned as (status, json) or (status, bytes).
Nothing here logs a request or response body, so memory content never reaches the bot's log.
A field newer than the server (an older scopemem refuses a body with a field it does not know)
is left out and the request asked again, in one place too (`request_optional`).
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any, Callable, Dict, Optional, Sequence, Set, Tuple
from urllib.parse import urlsplit

try:
    import httpx
except ImportError as e:  # the wheel leaves it to the framework, or to `scopemem[client]`
    raise ImportError(
        "scopemem.client needs httpx: pip install 'scopemem[client]' (or httpx)"
    ) from e

from ._log import logger_or_default


class ScopememDown(Exception):
    """scopemem could not be reached, timed out, or answered 5xx."""


def error_code(payload: Any) -> str:
    """The `error.code` of a scopemem error body, or ""."""
    if isinstance(payload, dict) and isinstance(payload.get("error"), dict):
        return str(payload["error"].get("code", ""))
    return ""


def error_text(payload: Any) -> str:
    """`code: message` of a scopemem error body (its messages never quote memory content)."""
    if isinstance(payload, dict) and isinstance(payload.get("error"), dict):
        err = payload["error"]
        code = str(err.get("code", ""))
        message = str(err.get("message", ""))
        return f"{code}: {message}" if message else code
    return ""


def unknown_field(payload: Any, field: str) -> bool:
    """Whether a scopemem error body refuses `field` as unknown: how a scopemem older than a
    field answers a body that has it (400 `invalid_input`, "unknown field `sender_id`, expected
    one of ..."; its request types deny unknown fields)."""
    if error_code(payload) != "invalid_input":
        return False
    message = str(payload["error"].get("message", ""))
    return f"unknown field `{field}`" in message


# How long a field an older scopemem refused is left out of that route's requests before it is
# tried again: the server may be upgraded while the bot runs.
UNKNOWN_FIELD_RETRY_S = 600.0

# How long a server the plugin has just started may take to answer before a refused call is an
# outage (`ScopememClient.expect_start`): it loads its embedding model and opens its table
# first, seconds on a small machine, longer on a first start or behind a slow disk.
START_GRACE_S = 120.0


def _is_loopback(url: str) -> bool:
    host = (urlsplit(url).hostname or "").lower()
    return host in ("127.0.0.1", "localhost", "::1") or host.startswith("127.")


class ScopememClient:
    """The client of one scopemem server: `base_url`, its bearer `token` ("" for none), and
    the time-out of a call on the chat path, `timeout_s`; `clock` (monotonic seconds) times
    how long a field an older server refused is left out."""

    def __init__(
        self,
        base_url: str,
        token: str,
        timeout_s: float,
        logger: Optional[Any] = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.timeout_s = timeout_s
        self.down = False
        self.last_error = ""
        self.log = logger_or_default(logger)
        self._client: Optional[httpx.AsyncClient] = None
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        # Set when there is no server to ask at all (the plugin was to run scopemem and could
        # not): every request fails soft at once, with this as the reason.
        self.unavailable = ""
        # (path, field) an older scopemem refused as unknown -> until when it is left out
        # (`request_optional`), read on `clock`.
        self._unknown: Dict[Tuple[str, str], float] = {}
        self._unknown_logged: Set[Tuple[str, str]] = set()
        self._clock = clock
        # Until when (on `clock`) a failed call is a server still starting, not an outage
        # (`expect_start`); 0 once it has answered.
        self._starting_until = 0.0

    def expect_start(self, grace_s: float = START_GRACE_S) -> None:
        """The plugin has just started this server: until it first answers (or `grace_s` has
        passed), a failed call fails soft without being logged as an outage, so a normal start
        logs no "unreachable" warning and no "reachable again"."""
        self._starting_until = self._clock() + grace_s

    def disable(self, reason: str) -> None:
        """Answer every request with ScopememDown(reason), without touching the network (the
        reason was logged once by whoever disabled the client)."""
        self.unavailable = reason
        self.down = True
        self.last_error = reason

    def _headers(self) -> dict[str, str]:
        headers = {"content-type": "application/json"}
        if self.token:
            headers["authorization"] = f"Bearer {self.token}"
        return headers

    def _http(self) -> httpx.AsyncClient:
        # An httpx client belongs to the loop it was made on.
        loop = asyncio.get_running_loop()
        if self._client is None or self._client.is_closed or self._loop is not loop:
            # A proxy from the environment (common for LLM APIs) must not capture a local
            # scopemem; a remote one may need it.
            self._client = httpx.AsyncClient(
                timeout=self.timeout_s, trust_env=not _is_loopback(self.base_url)
            )
            self._loop = loop
        return self._client

    async def close(self) -> None:
        if self._client is not None and not self._client.is_closed:
            try:
                await self._client.aclose()
            except RuntimeError:  # its loop is already closed
                pass
        self._client = None

    def _mark_down(self, error: str) -> None:
        self.last_error = error
        if self._clock() < self._starting_until:
            return  # still starting (`expect_start`)
        if not self.down:
            self.down = True
            self.log.warning(
                f"[scopemem] {self.base_url} unreachable ({error}): the bot goes on without "
                "memory until it is back (logged once per outage)"
            )

    def _mark_up(self) -> None:
        self._starting_until = 0.0
        if self.down:
            self.down = False
            self.log.info(f"[scopemem] {self.base_url} is reachable again: memory is back")

    async def request_raw(
        self, method: str, path: str, body: Any = None, timeout: Optional[float] = None
    ) -> tuple[int, bytes]:
        """(status, body bytes). Raises ScopememDown on transport errors and time-outs; a
        5xx is returned. `timeout` (seconds) replaces the chat path's for this call (an
        export or an import takes longer than a recall)."""
        if self.unavailable:
            raise ScopememDown(self.unavailable)
        content = None if body is None else json.dumps(body, ensure_ascii=False).encode()
        extra = {} if timeout is None else {"timeout": timeout}
        try:
            resp = await self._http().request(
                method,
                self.base_url + path,
                headers=self._headers(),
                content=content,
                **extra,
            )
            raw = resp.content
            status = resp.status_code
        except (httpx.HTTPError, OSError) as e:
            name = type(e).__name__
            self._mark_down(name)
            raise ScopememDown(name) from e
        if status < 500:
            self._mark_up()
        return status, raw

    async def request(
        self, method: str, path: str, body: Any = None, timeout: Optional[float] = None
    ) -> tuple[int, Any]:
        """(status, json or None). Raises ScopememDown on transport errors, time-outs and 5xx."""
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
        return status, payload

    async def request_optional(
        self,
        method: str,
        path: str,
        body: Dict[str, Any],
        optional: Sequence[str],
        timeout: Optional[float] = None,
    ) -> tuple[int, Any]:
        """`request` for a body with fields a server older than them does not know
        (`optional`, e.g. `sender_id` on `/v1/events/llm_request`). Such a server refuses the
        whole body (400, see `unknown_field`) and did nothing with it, so the request is asked
        again at once without the field, and that route is asked without it for the next
        `UNKNOWN_FIELD_RETRY_S` (then tried again: the server may have been upgraded). The
        first refusal of each field is logged once, at info, never with the body."""
        now = self._clock()
        sent = dict(body)
        for field in optional:
            if self._unknown.get((path, field), 0.0) > now:
                sent.pop(field, None)
        status, payload = await self.request(method, path, sent, timeout)
        if status != 400:
            return status, payload
        refused = [f for f in optional if f in sent and unknown_field(payload, f)]
        if not refused:
            return status, payload
        for field in refused:
            key = (path, field)
            self._unknown[key] = now + UNKNOWN_FIELD_RETRY_S
            sent.pop(field)
            if key not in self._unknown_logged:
                self._unknown_logged.add(key)
                self.log.info(
                    f"[scopemem] {self.base_url} does not know `{field}` on {path} (an "
                    "older scopemem): asking without it (logged once; tried again every "
                    f"{UNKNOWN_FIELD_RETRY_S / 60:.0f} minutes)"
                )
        return await self.request(method, path, sent, timeout)
