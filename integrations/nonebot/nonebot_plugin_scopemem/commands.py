"""The `/scopemem …` chat commands: status for everyone, scope-map edits for superusers, and
each member's own `me` and `forget me`.

`/scopemem status | map <scope> | unmap | incognito on|off | forget [confirm] | me |
forget me [confirm]`, registered through the command group "scopemem" (so `/scopemem.status`
works too, and `/scopemem status` with a space whatever COMMAND_SEP is). They act on the chat
the command is sent in, whose id comes from the event alone, and `me` and `forget me` on the
member who sends them (the event's user id, never an argument: `scopemem.people`); no reply
names another chat's scope, and only superusers see the other scopes' names. Edits change
scopemem's own config file (`scopemem_config`, or the one the plugin created when it runs
scopemem itself), which the server hot-reloads; the reply comes once the server applies the
change (or says it did not).
"""

from __future__ import annotations

import asyncio
import time
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Callable, Optional

from nonebot import CommandGroup, logger
from nonebot.adapters import Bot, Event, Message
from nonebot.matcher import Matcher
from nonebot.params import Command, CommandArg
from nonebot.permission import SUPERUSER

from scopemem.client import ScopememDown, error_code
from scopemem.config_file import valid_scope_name
from scopemem.people import me_text, member_id

from . import config_file
from .conversation import conversation_id, is_private_chat
from .runtime import Runtime, get_runtime

SUBCOMMANDS = ("status", "map", "unmap", "incognito", "forget", "me")

USAGE = (
    "Usage: /scopemem status | map <scope> | unmap | incognito on|off | forget | me | "
    "forget me (map, unmap, incognito: superusers; forget: superusers, or you in a private "
    "chat; me, forget me: anyone, for themselves)"
)
FORGET_USAGE = (
    "Usage: /scopemem forget, then /scopemem forget confirm (this chat's memories), "
    "or /scopemem forget me, then /scopemem forget me confirm (everything you said)"
)
APPLY_WAIT_S = 5.0

# True while a `/scopemem` command is answered (the reply's send runs in this context): the
# working memory leaves the answer out, as it leaves out the command.
ANSWERING_COMMAND: ContextVar[bool] = ContextVar("scopemem_answering_command", default=False)

group = CommandGroup("scopemem", priority=5, block=True)
# `/scopemem <sub> …` (the sub-command is the first word of the argument) ...
scopemem_command = group.command((), force_whitespace=True)
# ... and `/scopemem.<sub> …` (or `/scopemem <sub>` when COMMAND_SEP has a space).
subcommand_matchers = [group.command(sub, force_whitespace=True) for sub in SUBCOMMANDS]


async def _handle(
    bot: Bot,
    event: Event,
    matcher: Matcher,
    cmd: tuple[str, ...] = Command(),
    arg: Message = CommandArg(),
) -> None:
    words = list(cmd[1:])
    text = arg.extract_plain_text().strip()
    if not words:
        first, _, text = text.partition(" ")
        words = [first] if first else []
        text = text.strip()
    sub = words[0].lower() if words else ""
    try:
        reply = await _dispatch(bot, event, sub, text)
    except Exception as e:  # a command must never break the bot
        logger.error(f"[scopemem] /scopemem {sub} failed: {type(e).__name__}: {e}")
        reply = f"scopemem: /scopemem {sub} failed ({type(e).__name__}); see the bot's log."
    ANSWERING_COMMAND.set(True)
    await matcher.finish(reply)


for _m in [scopemem_command, *subcommand_matchers]:
    _m.handle()(_handle)


async def _dispatch(bot: Bot, event: Event, sub: str, rest: str) -> str:
    if sub not in SUBCOMMANDS:
        return USAGE
    try:
        conv = conversation_id(event)
    except Exception:
        return "This event belongs to no chat scopemem can name."
    superuser = await SUPERUSER(bot, event)
    rt = get_runtime()
    if sub == "status":
        return await status_text(rt, conv, superuser)
    if sub == "me":
        return await me_text(rt.client, conv, _sender(event))
    if sub == "map":
        if not superuser:
            return "Only a superuser can change the scope map."
        if not rest:
            return "Usage: /scopemem map <scope>"
        return await edit_map(rt, conv, rest)
    if sub == "unmap":
        if not superuser:
            return "Only a superuser can change the scope map."
        return await edit_map(rt, conv, None)
    if sub == "incognito":
        if not superuser:
            return "Only a superuser can change incognito."
        state = rest.lower()
        if state not in ("on", "off"):
            return "Usage: /scopemem incognito on|off"
        return await edit_incognito(rt, conv, state == "on")
    words = rest.lower().split()
    if words[:1] == ["me"]:
        return await forget_me(rt, event, conv, words[1:])
    return await forget(rt, event, conv, superuser, " ".join(words))


def _not_managed(conv: str) -> str:
    return (
        "The scope map is managed in scopemem's own config (scopemem_config is not set): "
        f"put this chat's id, {conv}, in its conversation_scope_map or incognito list there."
    )


async def _wait_applied(rt: Runtime, applied: Callable[[dict[str, Any]], bool]) -> str:
    """"" once /v1/scope_map shows the change; otherwise what the reply should say."""
    deadline = time.monotonic() + APPLY_WAIT_S
    while True:
        try:
            code, body = await rt.client.request("GET", "/v1/scope_map")
        except ScopememDown:
            return "Saved; scopemem is down and applies it when it is back."
        if code == 200 and isinstance(body, dict) and applied(body):
            return ""
        if time.monotonic() >= deadline:
            return (
                "Saved, but scopemem has not applied it within 5 s: is it running with "
                "this scopemem_config? (see its log)"
            )
        await asyncio.sleep(0.2)


async def _edit_and_wait(
    rt: Runtime, change: Callable[[Path], None], applied: Callable[[dict[str, Any]], bool]
) -> str:
    """Apply `change` to the config file, then wait for scopemem to apply it: "" when it has,
    otherwise the reply. A failed edit is logged with its cause; the reply names neither the
    file's path nor the error, which can hold one."""
    assert rt.config_path is not None
    async with rt.edit_lock:
        try:
            change(rt.config_path)
        except (OSError, ValueError) as e:
            logger.error(f"[scopemem] editing {rt.config_path} failed: {e}")
            return "Could not change scopemem's config (see the bot's log); nothing was changed."
    return await _wait_applied(rt, applied)


async def edit_map(rt: Runtime, conv: str, scope: Optional[str]) -> str:
    """Set (or with None remove) this chat's entry in conversation_scope_map."""
    if rt.config_path is None:
        return _not_managed(conv)
    if scope is not None and not valid_scope_name(scope):
        return (
            "Not a scope name: use 1-64 letters, digits, CJK characters, '_' or '-'. "
            "Nothing was changed."
        )
    def applied(body: dict[str, Any]) -> bool:
        entries = {e.get("key"): e.get("scope") for e in body.get("entries") or []}
        return entries.get(conv) == scope if scope is not None else conv not in entries

    problem = await _edit_and_wait(
        rt, lambda path: config_file.set_scope(path, conv, scope), applied
    )
    if problem:
        return problem
    if scope is not None:
        return f"This chat ({conv}) now uses scope {scope}."
    now = await _scope_of(rt, conv)
    return f"This chat ({conv}) is no longer mapped; its scope is now {now}."


async def edit_incognito(rt: Runtime, conv: str, on: bool) -> str:
    """Add this chat to (or remove it from) scopemem's incognito list."""
    if rt.config_path is None:
        return _not_managed(conv)
    def applied(body: dict[str, Any]) -> bool:
        return (conv in set(body.get("incognito") or [])) == on

    problem = await _edit_and_wait(
        rt, lambda path: config_file.set_incognito(path, conv, on), applied
    )
    if problem:
        return problem
    if on:
        return "Incognito is on: nothing said in this chat is stored (recall still works)."
    return "Incognito is off: this chat's memories are stored again."


def _sender(event: Event) -> str:
    """The member who sent `event`, as their messages are sent to scopemem ("" for none)."""
    try:
        return member_id(event.get_user_id())
    except Exception:
        return ""


async def forget(rt: Runtime, event: Event, conv: str, superuser: bool, confirm: str) -> str:
    """Erase the memories written in this chat, after a confirmation within 60 s."""
    if confirm not in ("", "confirm"):
        return FORGET_USAGE
    if not (superuser or is_private_chat(event)):
        return "In a group only a superuser can erase its memories."
    try:
        sender = str(event.get_user_id())
    except Exception:
        sender = ""
    if confirm == "":
        return rt.forgets.ask(conv, sender)
    return await rt.forgets.confirm(rt.client, conv, sender)


async def forget_me(rt: Runtime, event: Event, conv: str, rest: list[str]) -> str:
    """Any member: forget everything they said on this platform, after a confirmation from
    them in this chat within 60 s. Its own request, never the chat's forget's."""
    if rest == []:
        return await rt.forget_mes.ask(rt.client, conv, _sender(event))
    if rest == ["confirm"]:
        return await rt.forget_mes.confirm(rt.client, conv, _sender(event))
    return FORGET_USAGE


async def _scope_of(rt: Runtime, conv: str) -> str:
    try:
        code, body = await rt.client.request(
            "POST", "/v1/memories/browse", {"conversation_id": conv, "limit": 1}
        )
    except ScopememDown:
        return "unknown (scopemem is down)"
    if code == 200 and isinstance(body, dict):
        return str(body.get("memory_scope"))
    return f"unknown ({error_code(body) or code})"


async def status_text(rt: Runtime, conv: str, superuser: bool) -> str:
    """Whether scopemem is up, this chat's id, scope, incognito state and visible memories.

    Only a superuser sees other scopes (names and row counts) and the map summary: scope names
    such as 家人 are themselves private to their chats.
    """
    head = [f"scopemem: {rt.base_url}", f"this chat: {conv}"]
    try:
        code, seen = await rt.client.request(
            "POST", "/v1/memories/browse", {"conversation_id": conv, "limit": 1}
        )
        if code != 200 or not isinstance(seen, dict):
            return "\n".join([f"scopemem is UP but answered {error_code(seen) or code}", *head])
        code, smap = await rt.client.request("GET", "/v1/scope_map")
        smap = smap if code == 200 and isinstance(smap, dict) else {}
        st: dict[str, Any] = {}
        if superuser:
            code, got = await rt.client.request("GET", "/v1/status")
            st = got if code == 200 and isinstance(got, dict) else {}
    except ScopememDown as e:
        return "\n".join(
            [
                "scopemem is DOWN: the bot goes on without memory",
                *head,
                f"last error: {e}",
            ]
        )
    incognito = conv in set(smap.get("incognito") or [])
    lines = [
        "scopemem is UP",
        *head,
        f"scope: {seen.get('memory_scope')}",
        f"incognito: {'on' if incognito else 'off'}",
        f"memories this chat can see: {seen.get('total')}",
    ]
    if superuser:
        by_scope = st.get("rows_by_scope")
        if isinstance(by_scope, dict):
            lines.append(f"all scopes (superusers only), {st.get('rows')} rows:")
            for name, n in sorted(by_scope.items()):
                lines.append(f"  {name}: {n}")
        summary = smap.get("summary")
        if isinstance(summary, dict):
            lines.append(
                "scope map: {} entries, {} ignored, {} failed closed, {} incognito".format(
                    summary.get("entries"),
                    summary.get("ignored"),
                    summary.get("failed_closed"),
                    summary.get("incognito"),
                )
            )
    return "\n".join(lines)
