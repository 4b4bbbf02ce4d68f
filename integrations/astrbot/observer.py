"""Seeing every chat line without waking the bot for it.

AstrBot's pipeline runs a message through its waking stage, then the allowlist, the chat's
on/off switch and the per-chat rate limit (30 events a minute by default, then it *stalls* the
chat), and only then the plugins' handlers. A plugin handler that takes every message
(``event_message_type(ALL)``) passes its filter for each one, and a passing filter wakes the
event: every group line then counts toward the rate limit, and in a group chatting faster than
that, a member's question to the bot waits behind the stalled chatter.

So the plugin does not handle chat lines: it *observes* them in the waking stage, through a
filter that hands the event to the plugin and never passes. The event is then woken only by
what would wake it anyway. What the later stages would have refused is checked here instead:
the allowlist from the same config (synchronously), the chat's and this plugin's per-chat
switches before the line is sent (:func:`session_admits`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from astrbot.api import logger
from astrbot.api.event import AstrMessageEvent, filter
from astrbot.api.platform import MessageType


class ChatLines(filter.CustomFilter):
    """The filter of the plugin's observing handler: calls ``sink(event, cfg)``, never passes.

    AstrBot builds the filter when the plugin module is imported, before the plugin exists,
    so the running plugin sets the class's ``sink`` (and clears it when it stops)."""

    sink: Callable[[AstrMessageEvent, Any], None] | None = None

    def filter(self, event: AstrMessageEvent, cfg: Any) -> bool:
        sink = ChatLines.sink
        if sink is not None:
            try:
                sink(event, cfg)
            except Exception as e:  # an exception here would be sent to the chat by AstrBot
                logger.warning("[scopemem] working memory skipped a message: %s", e)
        return False


def allowlisted(event: AstrMessageEvent, cfg: Any) -> bool:
    """Whether AstrBot's allowlist stage would let this event through (its rules in 4.29:
    off or empty lets everything through, webchat is exempt, admins may be)."""
    settings = (cfg or {}).get("platform_settings", {}) or {}
    if not settings.get("enable_id_white_list", True):
        return True
    allowed = [str(i).strip() for i in settings.get("id_whitelist", []) or [] if str(i).strip()]
    if not allowed or event.get_platform_name() == "webchat":
        return True
    if event.role == "admin":
        kind = event.get_message_type()
        if kind == MessageType.GROUP_MESSAGE and settings.get("wl_ignore_admin_on_group", True):
            return True
        if kind == MessageType.FRIEND_MESSAGE and settings.get("wl_ignore_admin_on_friend", True):
            return True
    return (
        event.unified_msg_origin in allowed or str(event.get_group_id()).strip() in allowed
    )


async def session_admits(umo: str, plugin_name: str) -> bool:
    """Whether the chat is switched on, and this plugin on in it (AstrBot's per-chat settings,
    which its later stages apply to a woken event)."""
    try:
        from astrbot.core.star.session_llm_manager import SessionServiceManager
        from astrbot.core.star.session_plugin_manager import SessionPluginManager
    except ImportError:  # an AstrBot without per-chat switches
        return True
    if not await SessionServiceManager.is_session_enabled(umo):
        return False
    return bool(await SessionPluginManager.is_plugin_enabled_for_session(umo, plugin_name))
