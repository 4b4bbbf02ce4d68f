"""The one place a chat's scopemem conversation id comes from: the event, never an argument.

scopemem derives a memory's scope from this id and the operator's `conversation_scope_map`, so
whatever a user types or an LLM passes as a tool argument can never move a memory into
another chat's scope. OneBot v11 group and private chats get stable, readable ids
(`onebot11:group_<group_id>`, `onebot11:private_<user_id>`) that operators put in the map;
every other adapter and event uses `<adapter name>:<event.get_session_id()>`. The bot's own
sent messages (working memory) get the id of the chat the bot's send call targeted, in the
same form (`sent_conversation_id`).
"""

from __future__ import annotations

from nonebot.adapters import Event

from typing import Any, Optional

from nonebot.adapters import Bot

try:  # the OneBot adapter is optional
    from nonebot.adapters.onebot.v11 import Bot as _V11Bot
    from nonebot.adapters.onebot.v11 import GroupMessageEvent as _V11Group
    from nonebot.adapters.onebot.v11 import PrivateMessageEvent as _V11Private
except ImportError:  # pragma: no cover - depends on what the bot installed
    _V11Bot = None
    _V11Group = None
    _V11Private = None


def _onebot11_group(group_id: Any) -> str:
    return f"onebot11:group_{group_id}"


def _onebot11_private(user_id: Any) -> str:
    return f"onebot11:private_{user_id}"


def _adapter_name(event: Event) -> str:
    """The registered adapter whose package defines this event's class (longest match)."""
    module = type(event).__module__
    best_len, best = -1, ""
    try:
        import nonebot

        adapters = nonebot.get_adapters()
    except (ValueError, RuntimeError):  # NoneBot not initialised
        adapters = {}
    for name, adapter in adapters.items():
        package = type(adapter).__module__.rpartition(".")[0]
        if package and (module == package or module.startswith(package + ".")):
            if len(package) > best_len:
                best_len, best = len(package), name
    if best:
        return best
    # No registered adapter claims it: the event's own package names it.
    return module.rpartition(".")[0] or module


def conversation_id(event: Event) -> str:
    """scopemem's conversation id for the chat `event` happened in.

    Raises ValueError (or the adapter's own error) for an event that belongs to no chat.
    """
    if _V11Group is not None and isinstance(event, _V11Group):
        return _onebot11_group(event.group_id)
    if _V11Private is not None and isinstance(event, _V11Private):
        return _onebot11_private(event.user_id)
    session = event.get_session_id()
    if not session:
        raise ValueError("the event has no session id")
    return f"{_adapter_name(event)}:{session}"


def sent_conversation_id(bot: Bot, api: str, data: dict[str, Any]) -> Optional[str]:
    """The conversation id of the chat a OneBot v11 send call (`send_msg`, `send_group_msg`,
    `send_private_msg`) put the bot's message into: the same id `conversation_id` gives that
    chat's events. The target is the bot's own call, never a user's or an LLM's argument.
    None for any other call or adapter.
    """
    if _V11Bot is None or not isinstance(bot, _V11Bot):
        return None
    group_id, user_id = data.get("group_id"), data.get("user_id")
    kind = {"send_group_msg": "group", "send_private_msg": "private"}.get(api)
    if kind is None and api == "send_msg":
        kind = data.get("message_type") or (
            "group" if group_id is not None else "private" if user_id is not None else None
        )
    if kind == "group" and group_id is not None:
        return _onebot11_group(group_id)
    if kind == "private" and user_id is not None:
        return _onebot11_private(user_id)
    return None


def is_private_chat(event: Event) -> bool:
    """Whether `event` is a one-to-one chat with its sender (who may then erase its memories).

    OneBot v11 says so by type; for other adapters a session that is the sender alone is one.
    """
    if _V11Private is not None and isinstance(event, _V11Private):
        return True
    if _V11Group is not None and isinstance(event, _V11Group):
        return False
    try:
        return bool(event.get_user_id()) and event.get_session_id() == event.get_user_id()
    except Exception:
        return False
