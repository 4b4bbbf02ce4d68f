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
switches before the line is sent (:func:`session_admits`). Those switches are read from
AstrBot's database (a switch left unset misses its cache every time) once per event
(:func:`event_admits`): a question's line, its injection, its tools and the bot's reply follow
the one verdict, and the bot's wait for its memory block holds no database read of its own.

Two readings of an event live here too, since both are the host's: which chat a line belongs to
(:func:`chat_of`: the group, also when AstrBot's ``unique_session`` gives each member a session
of their own) and whether it is a command rather than chat (:func:`is_command`).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Iterable
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


# The event's verdict of :func:`session_admits`, read once (a future, shared while it runs).
EXTRA_ADMITTED = "_scopemem_admitted"


async def event_admits(event: AstrMessageEvent, plugin_name: str) -> bool:
    """:func:`session_admits` for the event's chat, read once per event. The line is sent when
    the event arrives, and the injection, the tools and the reply come later in the same
    event: they follow that verdict (or wait for the read still under way) instead of reading
    the database again while the bot waits."""
    pending = event.get_extra(EXTRA_ADMITTED)
    if not isinstance(pending, asyncio.Future):
        pending = asyncio.ensure_future(session_admits(event.unified_msg_origin, plugin_name))
        event.set_extra(EXTRA_ADMITTED, pending)
    # Shielded: a caller cancelled while waiting leaves the read to the others.
    return await asyncio.shield(pending)


def chat_of(event: AstrMessageEvent) -> str:
    """scopemem's conversation for the chat `event` happened in: its UMO, except in a group
    whose sessions AstrBot isolates per member (``platform_settings.unique_session``, 会话隔离).

    There AstrBot's waking stage rewrites the session id to the member's own
    (``<sender>_<group>`` on QQ) before any plugin sees the event, and marks it
    (``_session_isolated``). What a group says is the group's, whoever says it: its lines, the
    bot's answers, the scope map and ``/scopemem`` commands all name the group, as
    ``<platform id>:GroupMessage:<group id>``, the group's UMO without isolation. AstrBot's own
    conversation history stays per member."""
    if event.get_extra("_session_isolated"):
        group = str(event.get_group_id() or "").strip()
        if group:
            return f"{event.get_platform_id()}:{MessageType.GROUP_MESSAGE.value}:{group}"
    return event.unified_msg_origin


def _command_names(cfg: Any, plugins: list[str] | None) -> list[str]:
    """Every command AstrBot would run, with its group path and aliases ("reset",
    "scopemem status"), from the command and command-group filters of every plugin it runs
    (`plugins`: AstrBot's `plugin_set`, None for all)."""
    from astrbot.core.star.filter.command import CommandFilter
    from astrbot.core.star.filter.command_group import CommandGroupFilter
    from astrbot.core.star.star_handler import EventType, star_handlers_registry

    skip_builtin = bool((cfg or {}).get("disable_builtin_commands", False))
    names: list[str] = []
    for handler in star_handlers_registry.get_handlers_by_event_type(
        EventType.AdapterMessageEvent, plugins_name=plugins
    ):
        if skip_builtin and handler.handler_module_path == (
            "astrbot.builtin_stars.builtin_commands.main"
        ):
            continue
        for f in handler.event_filters:
            if isinstance(f, (CommandFilter, CommandGroupFilter)):
                names.extend(f.get_complete_command_names())
    return names


def is_command(event: AstrMessageEvent, cfg: Any, prefixes: Iterable[str]) -> bool:
    """Whether this message is a command, to a plugin of this AstrBot or to another bot, rather
    than chat: neither it nor its answer is kept.

    - AstrBot's own: a message that wakes the bot (a wake prefix such as "/", an @, a private
      chat) and starts with a command some plugin registered, as AstrBot's command filter
      matches it ("/reset", "/help", "/weather 北京", "@bot reset"). A wake whose text is no
      command ("/明天几点集合", "@bot 明天几点集合") is a question to the bot, which AstrBot hands
      to the model: chat.
    - another bot's: the raw text starts with one of `prefixes` that is not one of AstrBot's
      wake prefixes ("#签到" with "#" listed). The plugin's `command_prefixes` setting lists
      them; AstrBot's wake prefixes are always commands' prefixes too."""
    wake = [str(p) for p in (cfg or {}).get("wake_prefix") or [] if str(p)]
    if event.is_at_or_wake_command:
        text = re.sub(r"\s+", " ", (event.get_message_str() or "").strip())
        names = _command_names(cfg, event.plugins_name) if text else []
        if any(text == name or text.startswith(f"{name} ") for name in names):
            return True
    raw = str(getattr(event.message_obj, "message_str", "") or "").strip()
    return any(p and p not in wake and raw.startswith(p) for p in (str(x) for x in prefixes))
