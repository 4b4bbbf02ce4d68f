"""The public API a bot's own LLM handler calls: NoneBot has no standard LLM hook, so this is it.

Before calling the model: `memory_context(event, query)` returns the `<memory_context>` block to
put at the end of the user's message (not in the system prompt, which the provider's prompt
cache then keeps serving) and the ids it recalled. After the reply: `split_reflection(reply)`
removes the model's `<memory_reflection>` block, and `after_reply(...)` hands it to scopemem.
For function calling: `tools()` lists scopemem's LLM tools as OpenAI function specs and
`call_tool(event, name, arguments)` runs one. The conversation is always the event's chat
(`conversation_id(event)`), never anything in the arguments. Every call fails soft: with
scopemem down or slow the bot gets empty context or an error string, never an exception, and
the log says what failed without quoting memory content.
"""

from __future__ import annotations

import json
import os
from typing import Any, Optional, Sequence, Union

from nonebot import logger
from nonebot.adapters import Event

from scopemem.client import ScopememDown, error_code, error_text
from scopemem.people import member_id
from scopemem.reflection import clean_reflection

from .conversation import conversation_id
from .runtime import get_runtime

UNAVAILABLE = "Memory is unavailable right now; continue without it."


def _conversation(event: Event, what: str) -> Optional[str]:
    try:
        return conversation_id(event)
    except Exception as e:
        logger.warning(f"[scopemem] {what} skipped: the event has no chat ({type(e).__name__})")
        return None


def _whole(v: Any) -> Any:
    """JSON-schema integers often arrive as floats (50.0); scopemem wants integers."""
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return v


def local_timezone() -> Optional[str]:
    """This bot's IANA time zone: ``TZ`` when it names one, else the zone /etc/localtime links
    to; None when neither does (scopemem then uses its own ``recall.timezone``)."""
    candidates = [os.environ.get("TZ", "").lstrip(":")]
    try:
        target = os.path.realpath("/etc/localtime")
        if "/zoneinfo/" in target:
            candidates.append(target.split("/zoneinfo/", 1)[1])
    except OSError:
        pass
    for name in candidates:
        if not name or "/" not in name and name != "UTC":
            continue
        try:
            from zoneinfo import ZoneInfo

            ZoneInfo(name)
        except Exception:  # noqa: BLE001 - unknown or malformed zone
            continue
        return name
    return None


# Earlier turns sent with each recall (scopemem searches with the 6 most recent, each cut to
# its last 300 characters).
HISTORY_TURNS = 8
HISTORY_CHARS = 600


def _history(history: Optional[Sequence[Any]]) -> list[dict[str, str]]:
    """The most recent user and assistant turns of ``history`` (OpenAI-style messages,
    ``{"role", "content"}`` with a string or a list of text parts), oldest first."""
    turns: list[dict[str, str]] = []
    for message in reversed(list(history or [])):
        if len(turns) == HISTORY_TURNS:
            break
        if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
            continue
        content = message.get("content")
        if isinstance(content, list):
            content = "".join(
                str(p.get("text") or "") for p in content if isinstance(p, dict)
            )
        text = content.strip() if isinstance(content, str) else ""
        if text:
            turns.append({"role": message["role"], "content": text[-HISTORY_CHARS:]})
    turns.reverse()
    return turns


async def memory_context(
    event: Event,
    query: str,
    *,
    persona: Optional[str] = None,
    history: Optional[Sequence[Any]] = None,
) -> tuple[str, list[str]]:
    """(injection text, recalled memory ids) for this chat and query. The text goes at the end
    of this turn's user message, sent for this request only: a system prompt that stays the same
    from turn to turn, and a history kept without the block, keep the provider's prompt cache
    (the README's "The hook in your LLM handler" shows it).

    ``history``: the chat's earlier messages as the bot keeps them for its LLM (OpenAI-style
    ``{"role": "user"|"assistant", "content": ...}``, oldest first). scopemem searches with
    the most recent of them beside ``query``, so a follow-up ("她后来呢") finds the memory the
    conversation is about.

    The member who sent `event` (`event.get_user_id()`, the id their messages are stored
    under) goes with it as `sender_id`: a question in the first person ("我对什么过敏来着？")
    then brings what that member said, and what is about them, first. An older scopemem,
    which refuses the field, is asked without it.

    ("", []) when nothing is relevant, the query is empty, or scopemem is unavailable.
    """
    conv = _conversation(event, "memory_context")
    if conv is None or not isinstance(query, str) or not query.strip():
        return "", []
    body: dict[str, Any] = {"conversation_id": conv, "query": query}
    if persona:
        body["persona"] = persona
    turns = _history(history)
    if turns:
        body["history"] = turns
    zone = local_timezone()
    if zone:
        # "昨天" and "上周" in the query are this bot's days, not the server's.
        body["timezone"] = zone
    sender = _asker(event)
    if sender:
        body["sender_id"] = sender
    answer = await _request(
        "memory_context", "POST", "/v1/events/llm_request", body, optional=("sender_id",)
    )
    if answer is None:
        return "", []
    status, payload = answer
    if status != 200 or not isinstance(payload, dict):
        logger.warning(f"[scopemem] llm_request refused ({status} {error_code(payload)})")
        return "", []
    ids = [str(i) for i in payload.get("memory_ids") or []]
    return str(payload.get("injection") or ""), ids


def _asker(event: Event) -> str:
    """Who sent `event`, as their messages are sent to scopemem ("" when it names nobody)."""
    try:
        return member_id(event.get_user_id())
    except Exception:  # an event without a user (a meta event) asks for nobody
        return ""


async def after_reply(
    event: Event,
    user_message: str,
    bot_reply: str,
    memory_ids: Optional[Sequence[str]] = None,
    reflection: Optional[dict[str, Any]] = None,
    *,
    persona: Optional[str] = None,
) -> Optional[str]:
    """Report a finished turn (POST /v1/events/after_message_sent) with its reflection.

    Returns the feedback job id when scopemem accepted a reflection to store, else None (no
    reflection, an incognito chat, a refusal, or scopemem unavailable). The user message and
    the reply themselves are not stored by scopemem.
    """
    conv = _conversation(event, "after_reply")
    if conv is None:
        return None
    body: dict[str, Any] = {
        "conversation_id": conv,
        "user_message": user_message or "",
        "bot_reply": bot_reply or "",
        "recalled_memory_ids": [str(i) for i in (memory_ids or [])],
    }
    cleaned = clean_reflection(reflection) if reflection else None
    if cleaned:
        body["reflection"] = cleaned
    if persona:
        body["persona"] = persona
    answer = await _request("after_reply", "POST", "/v1/events/after_message_sent", body)
    if answer is None:
        return None
    status, payload = answer
    if status >= 400 or not isinstance(payload, dict):
        logger.warning(f"[scopemem] after_message_sent refused ({status} {error_code(payload)})")
        return None
    job = payload.get("job_id")
    return str(job) if job else None


async def tools() -> list[dict[str, Any]]:
    """scopemem's LLM tools as OpenAI function specs ([] when scopemem is unavailable):
    `[{"type": "function", "function": {"name", "description", "parameters"}}]`."""
    answer = await _request("tools", "GET", "/v1/tools")
    if answer is None:
        return []
    status, payload = answer
    if status != 200 or not isinstance(payload, dict):
        logger.warning(f"[scopemem] tools refused ({status} {error_code(payload)})")
        return []
    specs = []
    for tool in payload.get("tools") or []:
        if not isinstance(tool, dict) or not tool.get("name"):
            continue
        specs.append(
            {
                "type": "function",
                "function": {
                    "name": str(tool["name"]),
                    "description": str(tool.get("description") or ""),
                    "parameters": tool.get("input_schema") or {"type": "object"},
                },
            }
        )
    return specs


async def call_tool(
    event: Event,
    name: str,
    arguments: Union[dict[str, Any], str, None],
    *,
    persona: Optional[str] = None,
) -> str:
    """Run one of scopemem's tools for this chat; the result as text for the model.

    `arguments` is the model's object (or its JSON string, as OpenAI tool calls carry it).
    Every argument is passed on, so one that tries to name a conversation or scope is refused
    by scopemem ("error: invalid_arguments: …"); none of them chooses where a memory goes.
    """
    conv = _conversation(event, "call_tool")
    if conv is None:
        return "error: this event belongs to no chat"
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except ValueError:
            return "error: invalid_arguments: the arguments are not JSON"
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        return "error: invalid_arguments: the arguments must be a JSON object"
    if not isinstance(name, str) or not name or "/" in name or "?" in name or "#" in name:
        return "error: unknown_tool"
    body: dict[str, Any] = {
        "conversation_id": conv,
        "arguments": {k: _whole(v) for k, v in arguments.items() if v is not None},
    }
    if persona:
        body["persona"] = persona
    answer = await _request("call_tool", "POST", f"/v1/tools/{name}", body)
    if answer is None:
        return UNAVAILABLE
    status, payload = answer
    if status != 200:
        logger.warning(f"[scopemem] tool {name} refused ({status} {error_code(payload)})")
        return f"error: {error_text(payload) or status}"
    return json.dumps(payload, ensure_ascii=False)


async def _request(
    what: str, method: str, path: str, body: Any = None, optional: Sequence[str] = ()
) -> Optional[tuple[int, Any]]:
    """(status, JSON) from scopemem, or None when it is unavailable (logged once per outage by
    the client) or the call failed otherwise (logged by type only: never memory content).
    `optional`: fields of `body` an older scopemem does not know, left out when it refuses
    them (`ScopememClient.request_optional`)."""
    try:
        client = get_runtime().client
        if optional:
            return await client.request_optional(method, path, body, optional)
        return await client.request(method, path, body)
    except ScopememDown:
        return None
    except Exception as e:
        logger.warning(f"[scopemem] {what} skipped: {type(e).__name__}")
        return None
