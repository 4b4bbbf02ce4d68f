"""The web API behind the plugin's memory page in AstrBot's dashboard (views/memories/).

AstrBot serves `views/memories/index.html` in a sandboxed iframe and relays the page's calls,
through its bridge, to `/api/v1/plugins/extensions/astrbot_plugin_scopemem/<route>`, which only
a logged-in dashboard user reaches (AstrBot's own JWT check; no second port, no second token).
Each handler here turns one page action into one call to scopemem's HTTP API with the token the
plugin already has. Reads always name a conversation (and, optionally, a persona) and never a
scope: scopemem applies its own recall rule, so the page cannot see a scope that the chosen
conversation cannot, and nothing here filters rows itself. Only the scope map is edited here,
through the plugin config (the source of truth while the plugin runs scopemem), as
`/scopemem map` does. Logs name actions and conversations, never memory text or tokens.
"""

from __future__ import annotations

import json
from typing import Any

from astrbot.api import logger
from astrbot.api.web import error_response, request
from fastapi.responses import Response

from scopemem.client import ScopememDown

# The page's routes, under AstrBot's /api/v1/plugins/extensions/.
PREFIX = "/astrbot_plugin_scopemem/memories"

# Dashboard calls may take longer than a chat hook may (an export, a re-embedding table).
READ_TIMEOUT_S = 30.0
EXPORT_TIMEOUT_S = 300.0

# /v1/status fields the page shows. `location` and `disk_bytes` stay out: a local table's
# location is a filesystem path.
STATUS_FIELDS = (
    "rows",
    "rows_by_scope",
    "null_scope_rows",
    "embedding_model",
    "embedding_calibration",
    "reembed",
    "scope_filter",
    "scope_map",
)

# consolidation.budget fields of /v1/status the page shows: the day's LLM tokens against
# consolidation.daily_tokens, and the chats the passes served.
BUDGET_FIELDS = ("daily_tokens", "tokens_today", "passes_today", "chats_today", "spent")


class BadInput(Exception):
    """A page request that is refused before scopemem is asked."""


def _ok(data: Any) -> dict[str, Any]:
    return {"status": "ok", "message": "", "data": data}


def _conversation(body: dict[str, Any], key: str = "conversation_id") -> str:
    """scopemem's own rule (ConversationId::parse): non-empty after trimming, at most 512
    bytes, no control characters. Checked here too so a mistyped field says why at once."""
    raw = body.get(key)
    if not isinstance(raw, str) or not raw.strip():
        raise BadInput(f"{key} is required")
    value = raw.strip()
    if len(value.encode("utf-8")) > 512 or any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise BadInput(f"{key} is not a valid conversation id")
    return value


def _who(body: dict[str, Any]) -> dict[str, Any]:
    """The caller as scopemem takes it: a conversation id and, when given, a persona."""
    out: dict[str, Any] = {"conversation_id": _conversation(body)}
    persona = body.get("persona")
    if isinstance(persona, str) and persona.strip():
        out["persona"] = persona.strip()
    return out


def _asking(body: dict[str, Any]) -> dict[str, Any]:
    """The caller and its question, which must say something."""
    call = _who(body)
    query = body.get("query")
    if not isinstance(query, str) or not query.strip():
        raise BadInput("query is required")
    call["query"] = query
    return call


def _sender(body: dict[str, Any]) -> str:
    """A member's sender id as the platform gives it: scopemem's own rule (non-blank, at most
    128 characters), checked here too so a mistyped field says why at once."""
    raw = body.get("sender_id")
    if isinstance(raw, int) and not isinstance(raw, bool):
        raw = str(raw)
    if not isinstance(raw, str) or not raw.strip():
        raise BadInput("sender_id is required")
    value = raw.strip()
    if len(value) > 128:
        raise BadInput("sender_id must be at most 128 characters")
    return value


def _limit(body: dict[str, Any], default: int) -> int:
    raw = body.get("limit", default)
    try:
        return max(1, min(int(raw), 100))
    except (TypeError, ValueError):
        return default


def _error_of(payload: Any) -> tuple[str, str]:
    if isinstance(payload, dict) and isinstance(payload.get("error"), dict):
        err = payload["error"]
        return str(err.get("code", "")), str(err.get("message", ""))
    return "", ""


class DashboardApi:
    """Registers the page's routes on AstrBot's context and answers them."""

    def __init__(self, plugin: Any) -> None:
        # `plugin` is main.ScopememPlugin (its client, terminated flag and scope map), not
        # imported here: main imports this module.
        self.plugin = plugin

    def register(self, context: Any) -> None:
        routes = [
            ("status", self.status, ["GET"], "scopemem status for the memory page"),
            ("scope_map", self.scope_map, ["GET"], "the scope map scopemem applies"),
            ("scope_map/set", self.map_set, ["POST"], "map a conversation to a scope"),
            ("scope_map/remove", self.map_remove, ["POST"], "remove a scope-map entry"),
            ("browse", self.browse, ["POST"], "memories a conversation can see"),
            ("search", self.search, ["POST"], "recall as a conversation"),
            ("try", self.try_question, ["POST"], "what would be injected for a question"),
            ("update", self.update, ["POST"], "edit a memory a conversation may recall"),
            ("delete", self.delete, ["POST"], "erase memories by id as a conversation"),
            ("forget", self.forget, ["POST"], "erase what a conversation wrote"),
            ("export", self.export, ["GET"], "export what a conversation can see"),
            ("people", self.people, ["POST"], "the members a conversation's scope holds"),
            ("people/browse", self.person_browse, ["POST"], "what is kept of one member"),
            ("people/forget", self.person_forget, ["POST"], "erase a member everywhere"),
        ]
        for name, handler, methods, desc in routes:
            context.register_web_api(f"{PREFIX}/{name}", self._guarded(handler), methods, desc)

    def _guarded(self, handler: Any) -> Any:
        """One error shape for the page: AstrBot's `{"status": "error", "message"}`."""

        async def run() -> Any:
            if getattr(self.plugin, "terminated", False):
                return error_response("the scopemem plugin is not running", status_code=503)
            try:
                return await handler()
            except BadInput as e:
                return error_response(str(e), status_code=400)
            except ScopememDownError:
                return error_response(
                    "scopemem is not reachable right now (see AstrBot's log)", status_code=502
                )
            except Exception as e:  # never a traceback (or a path) to the browser
                logger.warning("[scopemem] dashboard %s failed: %s", handler.__name__, type(e).__name__)
                return error_response("the request failed (see AstrBot's log)", status_code=500)

        run.__name__ = f"scopemem_{handler.__name__}"
        return run

    async def _body(self) -> dict[str, Any]:
        # A cross-site form cannot send application/json without a CORS preflight, so a page
        # elsewhere cannot ride on the dashboard's login cookie.
        if not (request.content_type or "").lower().startswith("application/json"):
            raise BadInput("the body must be application/json")
        body = await request.json(default=None)
        if not isinstance(body, dict):
            raise BadInput("the body must be a JSON object")
        return body

    async def _call(
        self, method: str, path: str, body: Any = None, timeout: float = READ_TIMEOUT_S
    ) -> Any:
        """Call scopemem; a 4xx becomes the page's error with scopemem's code and message."""

        try:
            status, payload = await self.plugin.client.request(method, path, body, timeout=timeout)
        except ScopememDown as e:
            raise ScopememDownError() from e
        if status >= 400:
            code, message = _error_of(payload)
            if status == 404 and not code:
                # axum's answer for a route it does not have: an older scopemem.
                return _Refusal(
                    f"this scopemem has no {path} (upgrade scopemem)", 501, "unsupported"
                )
            return _Refusal(f"{code or status}: {message}".rstrip(": "), status, code)
        return payload

    @staticmethod
    def _answer(result: Any, shape: Any = None) -> Any:
        if isinstance(result, _Refusal):
            return error_response(result.message, status_code=result.status, data={"code": result.code})
        return _ok(shape(result) if shape else result)

    # ---- status and the scope map ----------------------------------------------------------

    async def status(self) -> Any:
        result = await self._call("GET", "/v1/status")
        if isinstance(result, _Refusal):
            return self._answer(result)
        shown = {k: result.get(k) for k in STATUS_FIELDS if isinstance(result, dict)}
        migration = result.get("migration") if isinstance(result, dict) else None
        if isinstance(migration, dict):
            shown["migration"] = {
                k: migration.get(k) for k in ("state", "migration_mode", "active", "remaining")
            }
        consolidation = result.get("consolidation") if isinstance(result, dict) else None
        budget = consolidation.get("budget") if isinstance(consolidation, dict) else None
        if isinstance(budget, dict):
            # What the LLM passes spent today and for how many chats (issue 78).
            shown["consolidation_budget"] = {k: budget.get(k) for k in BUDGET_FIELDS}
        shown["map_editable"] = self.plugin._refusal() is None
        return _ok(shown)

    async def scope_map(self) -> Any:
        result = await self._call("GET", "/v1/scope_map")
        if isinstance(result, _Refusal):
            return self._answer(result)
        data = {
            k: result.get(k)
            for k in ("entries", "ignored", "unmapped_scope", "scope_filter", "summary")
        }
        refused = self.plugin._refusal()
        data["map_editable"] = refused is None
        data["not_editable_because"] = refused or ""
        return _ok(data)

    async def map_set(self) -> Any:
        body = await self._body()
        key = _conversation(body, "key")
        scope = body.get("scope")
        if not isinstance(scope, str) or not scope.strip():
            raise BadInput("scope is required")
        ok, message = await self.plugin.set_map_entry(key, scope.strip())
        logger.info("[scopemem] dashboard: map %s -> %s (%s)", key, scope.strip(), request.username)
        if not ok:
            return error_response(message, status_code=400)
        return _ok({"message": message})

    async def map_remove(self) -> Any:
        body = await self._body()
        key = _conversation(body, "key")
        ok, message = await self.plugin.set_map_entry(key, None)
        logger.info("[scopemem] dashboard: unmap %s (%s)", key, request.username)
        if not ok:
            return error_response(message, status_code=400)
        return _ok({"message": message})

    # ---- memories, always as a conversation --------------------------------------------------

    async def browse(self) -> Any:
        body = await self._body()
        call = _who(body)
        call["limit"] = _limit(body, 20)
        try:
            call["offset"] = max(0, int(body.get("offset", 0)))
        except (TypeError, ValueError):
            call["offset"] = 0
        return self._answer(await self._call("POST", "/v1/memories/browse", call))

    async def search(self) -> Any:
        body = await self._body()
        call = _asking(body)
        call["limit"] = _limit(body, 20)
        return self._answer(await self._call("POST", "/v1/recall", call))

    async def try_question(self) -> Any:
        """What `on_llm_request` would inject for this question in this conversation."""
        call = _asking(await self._body())
        # A preview: the same block, not counted toward "recalled twice" (no prompt follows).
        call["preview"] = True
        return self._answer(await self._call("POST", "/v1/events/llm_request", call))

    async def update(self) -> Any:
        body = await self._body()
        call = _who(body)
        memory_id = body.get("memory_id")
        if not isinstance(memory_id, str) or not memory_id.strip():
            raise BadInput("memory_id is required")
        call["memory_id"] = memory_id.strip()
        if isinstance(body.get("content"), str):
            call["content"] = body["content"]
        if isinstance(body.get("tags"), list):
            call["tags"] = [str(t) for t in body["tags"] if str(t).strip()]
        if isinstance(body.get("expires_at"), str) and body["expires_at"].strip():
            call["expires_at"] = body["expires_at"].strip()
        if len(call) == 2 + ("persona" in call):
            raise BadInput("nothing to change: give content, tags or expires_at")
        result = await self._call("POST", "/v1/memories/update", call)
        logger.info(
            "[scopemem] dashboard: update a memory as %s (%s): %s",
            call["conversation_id"],
            request.username,
            "refused" if isinstance(result, _Refusal) else "done",
        )
        return self._answer(result)

    async def delete(self) -> Any:
        body = await self._body()
        call = _who(body)
        ids = body.get("memory_ids")
        if not isinstance(ids, list) or not ids or not all(isinstance(i, str) for i in ids):
            raise BadInput("memory_ids must be a non-empty list of ids")
        call["memory_ids"] = ids
        result = await self._call("POST", "/v1/forget", call)
        logger.info(
            "[scopemem] dashboard: delete %d id(s) as %s (%s)",
            len(ids),
            call["conversation_id"],
            request.username,
        )
        return self._answer(result)

    async def forget(self) -> Any:
        """Erase every memory written from one conversation (forget without ids)."""
        body = await self._body()
        if body.get("confirm") is not True:
            raise BadInput("forgetting a conversation needs confirm: true")
        call = {"conversation_id": _conversation(body)}
        result = await self._call("POST", "/v1/forget", call)
        logger.info(
            "[scopemem] dashboard: forget conversation %s (%s)",
            call["conversation_id"],
            request.username,
        )
        return self._answer(result)

    # ---- people: a member's words, on the conversation's platform ----------------------------

    async def people(self) -> Any:
        """The members the conversation may read, with how many rows each said and how many
        are about them (`POST /v1/people`)."""
        call = {"conversation_id": _conversation(await self._body())}
        return self._answer(await self._call("POST", "/v1/people", call))

    async def person_browse(self) -> Any:
        """What the conversation may read that one member said or that is about them."""
        body = await self._body()
        call = {"conversation_id": _conversation(body), "sender_id": _sender(body)}
        call["limit"] = _limit(body, 20)
        try:
            call["offset"] = max(0, int(body.get("offset", 0)))
        except (TypeError, ValueError):
            call["offset"] = 0
        return self._answer(await self._call("POST", "/v1/people/browse", call))

    async def person_forget(self) -> Any:
        """Erase one member everywhere on the conversation's platform (what they said in every
        chat, what is about them, what was made of their words only): the operator's "forget
        me" for a member who asked, as `scopemem forget --person` does."""
        body = await self._body()
        if body.get("confirm") is not True:
            raise BadInput("forgetting a member needs confirm: true")
        call = {"conversation_id": _conversation(body), "sender_id": _sender(body)}
        result = await self._call("POST", "/v1/people/forget", call, timeout=EXPORT_TIMEOUT_S)
        logger.info(
            "[scopemem] dashboard: forget a member on the platform of %s (%s): %s",
            call["conversation_id"],
            request.username,
            "refused" if isinstance(result, _Refusal) else "done",
        )
        return self._answer(result)

    async def export(self) -> Any:
        from urllib.parse import urlencode

        query = {"conversation_id": _conversation(dict(request.query.items()))}
        persona = request.query.get("persona")
        if isinstance(persona, str) and persona.strip():
            query["persona"] = persona.strip()

        try:
            status, raw = await self.plugin.client.request_raw(
                "GET", "/v1/export?" + urlencode(query), timeout=EXPORT_TIMEOUT_S
            )
        except ScopememDown as e:
            raise ScopememDownError() from e
        if status != 200:
            try:
                code, message = _error_of(json.loads(raw))
            except ValueError:
                code, message = "", ""
            return error_response(f"{code or status}: {message}", status_code=status)
        logger.info(
            "[scopemem] dashboard: export as %s (%s)", query["conversation_id"], request.username
        )
        return Response(
            content=raw,
            media_type="application/x-ndjson; charset=utf-8",
            headers={
                "Content-Disposition": 'attachment; filename="scopemem-export.ndjson"',
                "Cache-Control": "no-store",
            },
        )


class ScopememDownError(Exception):
    """scopemem did not answer (already logged once per outage by the client)."""


class _Refusal:
    """scopemem (or the plugin) said no: shown to the page as AstrBot's error envelope."""

    def __init__(self, message: str, status: int, code: str) -> None:
        self.message = message
        self.status = status
        self.code = code
