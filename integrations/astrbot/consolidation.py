"""Consolidation through AstrBot's own LLM.

scopemem turns what a chat said into long-term memories in passes: every N messages, or after a
quiet spell, a conversation's recent messages and its nearest stored memories go to an LLM, which
answers ADD / UPDATE / NONE decisions as JSON. AstrBot already has a model configured (any
provider, streaming or not), so this plugin answers the passes with it: it takes the next due
pass (``POST /v1/consolidation/next``), asks the conversation's provider with the pass's system
prompt and data (``provider.text_chat``, one non-streamed call), and hands the text back
(``POST /v1/consolidation/answer``), with the tokens the provider reported spending, which
scopemem counts against ``consolidation.daily_tokens``. scopemem checks the answer against what it showed and
applies it as the conversation: nothing here chooses a scope, and a broken answer writes
nothing. Runs in the background, never in a chat's path.
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable

from astrbot.api import logger

# Look for due passes at least this often (a quiet spell ends with no message to kick it).
POLL_SECS = 30.0
# Rounds start at most this often however fast messages arrive (one request per round).
MIN_GAP_SECS = 5.0
# Passes answered per round at most; the rest wait for the next round.
PASSES_PER_ROUND = 8
# A model call gives up after this long (and never after scopemem stopped waiting).
LLM_TIMEOUT_SECS = 180.0


def reported_usage(response: Any) -> dict[str, int] | None:
    """The tokens the provider reported for the call (AstrBot's ``LLMResponse.usage``, a
    ``TokenUsage``: input, cached input and output), as scopemem's budget counts them
    (``consolidation.daily_tokens``); ``None`` when the provider reported none, and scopemem
    estimates from the prompt and the answer instead."""
    usage = getattr(response, "usage", None)
    if usage is None:
        return None
    try:
        prompt = int(getattr(usage, "input", 0) or 0)
        completion = int(getattr(usage, "output", 0) or 0)
    except (TypeError, ValueError):
        return None
    if prompt < 0 or completion < 0 or prompt + completion == 0:
        return None
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


class HostConsolidation:
    """Answers scopemem's due consolidation passes with AstrBot's configured chat model."""

    def __init__(self, client: Any, provider_for: Callable[[str], Any]) -> None:
        self.client = client
        # umo -> the chat provider that conversation uses (AstrBot's per-session preference).
        self.provider_for = provider_for
        self.kicked: asyncio.Event | None = None
        self.task: asyncio.Task | None = None
        self.answered = 0
        self.failed = 0
        # Said once until a provider is configured again: without one every due pass fails,
        # and scopemem backs each conversation off (consolidation.retry_secs, doubling).
        self.no_provider_logged = False

    def start(self) -> None:
        self.kicked = asyncio.Event()
        self.task = asyncio.create_task(self._run(), name="scopemem_consolidation")

    def kick(self) -> None:
        """A message was stored: a pass may be due (the round starts within MIN_GAP_SECS)."""
        if self.kicked is not None:
            self.kicked.set()

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)
            self.task = None

    async def _run(self) -> None:
        assert self.kicked is not None
        while True:
            try:
                await asyncio.wait_for(self.kicked.wait(), POLL_SECS)
            except asyncio.TimeoutError:
                pass
            self.kicked.clear()
            try:
                await self.run_due()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # scopemem down (logged by the client) or a bad answer
                logger.debug("[scopemem] consolidation round skipped: %s", type(e).__name__)
            await asyncio.sleep(MIN_GAP_SECS)

    async def run_due(self) -> int:
        """Answer the due passes (at most PASSES_PER_ROUND); returns how many."""
        done = 0
        for _ in range(PASSES_PER_ROUND):
            status, payload = await self.client.request(
                "POST", "/v1/consolidation/next", {}, timeout=60
            )
            due = payload.get("pass") if status == 200 and isinstance(payload, dict) else None
            if not isinstance(due, dict):
                if status == 404:
                    logger.debug("[scopemem] this scopemem has no /v1/consolidation (older)")
                break
            await self._answer(due)
            done += 1
        return done

    async def _answer(self, due: dict[str, Any]) -> None:
        body: dict[str, Any] = {"pass_id": due.get("pass_id", "")}
        try:
            provider = self.provider_for(str(due.get("conversation_id", "")))
            if provider is None:
                raise LookupError("no chat provider configured")
            self.no_provider_logged = False
            within = float(due.get("answer_within_secs") or LLM_TIMEOUT_SECS)
            response = await asyncio.wait_for(
                provider.text_chat(
                    prompt=str(due.get("prompt", "")), system_prompt=str(due.get("system", ""))
                ),
                timeout=max(1.0, min(LLM_TIMEOUT_SECS, within - 30)),
            )
            body["answer"] = str(getattr(response, "completion_text", "") or "")
            usage = reported_usage(response)
            if usage is not None:
                body["usage"] = usage
        except asyncio.CancelledError:
            raise
        except Exception as e:  # the model failed: scopemem gives the pass up and counts it
            body["error"] = type(e).__name__
        status, outcome = await self.client.request(
            "POST", "/v1/consolidation/answer", body, timeout=60
        )
        applied = isinstance(outcome, dict) and outcome.get("applied") is True
        if applied:
            self.answered += 1
        elif body.get("error") == "LookupError":
            self.failed += 1
            if not self.no_provider_logged:
                self.no_provider_logged = True
                logger.warning(
                    "[scopemem] no chat provider is configured: consolidation passes wait "
                    "until one is (said once)"
                )
        else:
            self.failed += 1
            reason = outcome.get("reason") if isinstance(outcome, dict) else None
            # Never the answer's text: the log must not hold what was said.
            logger.warning(
                "[scopemem] a consolidation pass was not applied (%s %s)",
                status,
                reason or body.get("error") or "refused",
            )
