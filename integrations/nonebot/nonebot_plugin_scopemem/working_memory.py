"""Working memory: every message of every chat, and the bot's own, sent to scopemem in the
background (`POST /v1/events/message`).

scopemem keeps these messages for 72 hours and puts the recent ones that match a question into
the `<memory_context>` block `memory_context()` returns, so the bot can answer from what group
members told each other even though nobody addressed it. Two sources feed it:

- a matcher for every message (`on_message`, priority 1, `block=False`): it only schedules the
  send (`Runtime.spawn`) and returns, so no other matcher waits for scopemem and none is
  skipped; it never replies. A `/scopemem …` command is not sent: it is operator chatter, and
  its answer names the chat's scope.
- `Bot.on_called_api` for the bot's own sent messages (`is_bot`): OneBot v11's `send_msg`,
  `send_group_msg` and `send_private_msg` that succeeded, in the chat they went to. Other
  adapters' send APIs differ per adapter, so their replies are not recorded.

`scopemem_working_memory = False` turns both off. An incognito chat's messages are sent and
scopemem stores nothing (it answers `{"accepted": false, "reason": "incognito"}`). Nothing here
logs a message's text.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Optional

from nonebot import get_driver, logger, on_message
from nonebot.adapters import Bot, Event
from nonebot.consts import CMD_KEY, PREFIX_KEY
from nonebot.typing import T_State

from .commands import ANSWERING_COMMAND
from .conversation import conversation_id, sent_conversation_id
from .memory import _request
from .runtime import get_runtime

# Before every ordinary matcher (NoneBot's default priority is 1, a bot's LLM handler is
# usually later): a blocking matcher at a lower number than this could hide a message.
PRIORITY = 1
# scopemem's limits: longer text is cut here (scopemem would refuse it whole), ids and names
# too (a platform's are far shorter).
TEXT_CHARS = 4000
ID_CHARS = 128
NAME_CHARS = 64

# OneBot v11 APIs that put a message into a chat.
SEND_APIS = frozenset({"send_msg", "send_group_msg", "send_private_msg"})

# Refusals already logged as warnings, by (status, code): a scopemem without the route (404)
# or a malformed field must not log every chat line.
_refusals_logged: set[tuple[int, str]] = set()


def _enabled() -> bool:
    return bool(get_runtime().cfg.scopemem_working_memory)


def _rfc3339(moment: Any) -> Optional[str]:
    """RFC 3339 (UTC) of an event's time (a datetime, or seconds since the epoch: OneBot's
    `time`), or None to let scopemem use now."""
    if isinstance(moment, datetime):
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=timezone.utc)
        return moment.astimezone(timezone.utc).isoformat()
    if isinstance(moment, bool) or not isinstance(moment, (int, float)) or moment <= 0:
        return None
    if moment > 1e11:  # milliseconds
        moment = moment / 1000.0
    try:
        return datetime.fromtimestamp(moment, tz=timezone.utc).isoformat()
    except (OverflowError, OSError, ValueError):
        return None


def _sender_name(event: Event) -> str:
    """The sender's group card, else nickname, when the event carries a sender (OneBot's do)."""
    sender = getattr(event, "sender", None)
    for attr in ("card", "nickname"):
        value = getattr(sender, attr, None)
        if isinstance(value, str) and value.strip():
            return value.strip()[:NAME_CHARS]
    return ""


def _bot_name() -> str:
    """The bot's name as NoneBot knows it (the first of its `NICKNAME` setting), or ""."""
    try:
        names = sorted(str(n) for n in get_driver().config.nickname if str(n).strip())
    except Exception:
        return ""
    return names[0][:NAME_CHARS] if names else ""


def message_body(event: Event) -> Optional[dict[str, Any]]:
    """The `/v1/events/message` body for a received message, or None when there is nothing
    to send (no chat, no sender, no text: a picture or a sticker)."""
    try:
        conv = conversation_id(event)
        sender = str(event.get_user_id() or "").strip()
        text = event.get_plaintext().strip()
    except Exception:
        return None
    if not sender or not text:
        return None
    body: dict[str, Any] = {
        "conversation_id": conv,
        "sender_id": sender[:ID_CHARS],
        "sender_name": _sender_name(event),
        "text": text[:TEXT_CHARS],
    }
    message_id = getattr(event, "message_id", None)
    if message_id is not None and not isinstance(message_id, bool) and str(message_id).strip():
        body["message_id"] = str(message_id).strip()[:ID_CHARS]
    sent_at = _rfc3339(getattr(event, "time", None))
    if sent_at:
        body["sent_at"] = sent_at
    if _to_me(event):
        # The bot will likely recall for it: scopemem embeds its question ahead.
        body["to_bot"] = True
    return body


def _to_me(event: Event) -> bool:
    """Whether the message addresses the bot (an @, its nickname, a private chat)."""
    try:
        return bool(event.is_tome())
    except Exception:
        return False


def _sent_text(data: dict[str, Any]) -> str:
    """The plain text of a OneBot v11 send call's `message` (a string with CQ codes unless
    `auto_escape`, a Message, a segment, or a list of segments)."""
    from nonebot.adapters.onebot.v11 import Message, MessageSegment

    message = data.get("message")
    if isinstance(message, str):
        return message if data.get("auto_escape") else Message(message).extract_plain_text()
    if isinstance(message, (Message, MessageSegment)):
        return Message(message).extract_plain_text()
    if isinstance(message, list):
        segments = [
            MessageSegment(str(s.get("type")), dict(s.get("data") or {}))
            if isinstance(s, dict)
            else s
            for s in message
        ]
        return Message(segments).extract_plain_text()
    return ""


def sent_body(bot: Bot, api: str, data: dict[str, Any], result: Any) -> Optional[dict[str, Any]]:
    """The `/v1/events/message` body (`is_bot`) for a message the bot sent, or None when the
    call is not a OneBot v11 send into a chat, or holds no text."""
    conv = sent_conversation_id(bot, api, data)
    if conv is None:
        return None
    text = _sent_text(data).strip()
    if not text:
        return None
    body: dict[str, Any] = {
        "conversation_id": conv,
        "sender_id": str(bot.self_id)[:ID_CHARS],
        "sender_name": _bot_name(),
        "text": text[:TEXT_CHARS],
        "is_bot": True,
    }
    message_id = result.get("message_id") if isinstance(result, dict) else None
    if message_id is not None and str(message_id).strip():
        body["message_id"] = str(message_id).strip()[:ID_CHARS]
    return body


async def _post(body: dict[str, Any]) -> None:
    answer = await _request("working memory", "POST", "/v1/events/message", body)
    if answer is None:
        return  # down (logged once per outage) or failed (logged by type)
    status, payload = answer
    if status >= 400:
        code = ""
        if isinstance(payload, dict) and isinstance(payload.get("error"), dict):
            code = str(payload["error"].get("code", ""))
        key = (status, code)
        note = "; an older scopemem without POST /v1/events/message?" if status == 404 else ""
        message = f"[scopemem] working memory refused a message ({status} {code}){note}"
        if key in _refusals_logged:
            logger.debug(message)
        else:
            _refusals_logged.add(key)
            logger.warning(message)


def send(body: dict[str, Any]) -> None:
    """Send `body` in the background; the caller never waits for scopemem."""
    if not get_runtime().spawn(_post(body), "scopemem_working_memory"):
        logger.debug("[scopemem] working memory: too many sends pending, one dropped")


def _is_own_command(state: T_State) -> bool:
    """Whether NoneBot parsed this message as a `/scopemem …` command."""
    prefix = state.get(PREFIX_KEY) or {}
    command = prefix.get(CMD_KEY) if isinstance(prefix, dict) else None
    return bool(command) and command[0] == "scopemem"


record_messages = on_message(priority=PRIORITY, block=False)


@record_messages.handle()
async def _record_message(bot: Bot, event: Event, state: T_State) -> None:
    """Schedule this message's send and return at once: no reply, no block."""
    try:
        if not _enabled() or _is_own_command(state):
            return
        body = message_body(event)
        if body is None or body["sender_id"] == str(bot.self_id):
            return  # nothing to send, or the bot's own message (recorded when it sent it)
        send(body)
    except Exception as e:  # memory must never break a bot
        logger.warning(f"[scopemem] working memory skipped a message: {type(e).__name__}")


@Bot.on_called_api
async def _record_sent(
    bot: Bot, exception: Optional[Exception], api: str, data: dict[str, Any], result: Any
) -> None:
    """The bot's own message, once the platform took it. Runs inside the send call, so it
    only schedules. A `/scopemem` command's answer is left out, and so is a call that raised
    (`exception`; OneBot v11's ActionFailed when the platform refused it): nothing reached the
    chat. NoneBot2 itself never sends an error to a chat, so no other error text comes here."""
    if exception is not None or api not in SEND_APIS or ANSWERING_COMMAND.get():
        return
    try:
        if not _enabled():
            return
        body = sent_body(bot, api, data, result)
        if body is not None:
            send(body)
    except Exception as e:
        logger.warning(f"[scopemem] working memory skipped a sent message: {type(e).__name__}")
