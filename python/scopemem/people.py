"""What a chat keeps of one member, and "forget me" (issue 77): the `/scopemem me` and
`/scopemem forget me` chat commands both plugins run, so they list, ask, time out and answer
alike.

Why: a chat's forget erases everyone's words, and in a group only an admin may run it. A member
who regrets what they told the bot, or leaves the group, needs to see what is kept about them
and to erase it themselves, without an admin and without erasing the others. scopemem keys a
member by the platform and their sender id (its design rule 13), so:

- `me_text`: what this chat can recall that the member said or that is about them
  (`POST /v1/people/browse`), newest first, at most `LIST_CAP` lines, each with its id, whether
  it is a chat line or a long-term memory, and its text cut to `TEXT_CHARS`;
- `ForgetMeConfirmations`: the first `/scopemem forget me` says what would go (how many of
  those rows this chat sees, and that the member's words in every other chat of the platform
  go too) and waits; `/scopemem forget me confirm` from the same member in the same chat within
  the window erases them everywhere on the platform (`POST /v1/people/forget`). It is kept
  apart from the chat's forget (`scopemem.forget`): neither confirms the other, and one
  member's confirmation never runs another's request.

Any member may run both, for themselves only: the plugin passes the event's conversation id and
sender id, never an argument a user typed. Nothing here logs, and the answers hold only what
the member's own browse shows this chat.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Dict, Tuple

from .client import ScopememDown, error_code
from .forget import WINDOW_S

# Lines `/scopemem me` lists at most; characters of each row's text it shows.
LIST_CAP = 20
TEXT_CHARS = 60
# scopemem's bound on a sender id; the plugins cut a message's `sender_id` to it too, so the
# member asked about is the one their messages were stored as.
SENDER_CHARS = 128

NO_SENDER = "This message names no sender, so there is nobody to look up."
DOWN = "scopemem is down; try again when it is back."
DOWN_FORGET = "scopemem is down; nothing was erased. Try again when it is back."
NOTHING_KEPT = "This chat keeps nothing you said or that is about you."
NOTHING_TO_CONFIRM = "Nothing to confirm: send /scopemem forget me first."
ASK = (
    "This erases you from the bot's memory on this platform, for good: the {n} {items} this "
    "chat keeps that you said or that are about you (/scopemem me lists them), and everything "
    "you said in every other chat of this platform. Other members' messages stay. "
    "Send /scopemem forget me confirm within 60 s to go ahead."
)


def member_id(sender: Any) -> str:
    """A sender id as the plugins send it to scopemem: trimmed and cut to `SENDER_CHARS`
    ("" for none)."""
    return str(sender if sender is not None else "").strip()[:SENDER_CHARS]


def _items(n: int) -> str:
    return "item" if n == 1 else "items"


def _failed(what: str, code: int, body: Any) -> str:
    if code == 404 and not error_code(body):
        # axum's answer for a route it does not have.
        return f"{what} needs a newer scopemem (this one has no /v1/people)."
    return f"{what} failed: {error_code(body) or code}."


def _line(memory: Dict[str, Any]) -> str:
    """`id [chat line|long-term memory] text`, the text on one line and cut."""
    text = " ".join(str(memory.get("content") or "").split())
    if len(text) > TEXT_CHARS:
        text = text[: TEXT_CHARS - 1] + "…"
    kind = "chat line" if memory.get("memory_type") == "message" else "long-term memory"
    return f"{memory.get('id')} [{kind}] {text}"


async def _browse(client: Any, conversation: str, sender: str) -> Tuple[int, Any]:
    """`POST /v1/people/browse` for the member, the server's first page (newest first)."""
    return await client.request(
        "POST", "/v1/people/browse", {"conversation_id": conversation, "sender_id": sender}
    )


async def me_text(client: Any, conversation: str, sender: str) -> str:
    """The answer to `/scopemem me` from `sender` in `conversation`."""
    sender = member_id(sender)
    if not sender:
        return NO_SENDER
    try:
        code, body = await _browse(client, conversation, sender)
    except ScopememDown:
        return DOWN
    if code != 200 or not isinstance(body, dict):
        return _failed("/scopemem me", code, body)
    rows = [m for m in body.get("memories") or [] if isinstance(m, dict)][:LIST_CAP]
    total = max(int(body.get("total") or 0), len(rows))
    if total == 0:
        return NOTHING_KEPT
    lines = [
        f"This chat can recall {total} {_items(total)} you said or that are about you "
        "(newest first):",
        *(_line(m) for m in rows),
    ]
    if total > len(rows):
        lines.append(f"... and {total - len(rows)} more.")
    lines.append(
        "/scopemem forget me erases them, and what you said in every other chat of this "
        "platform."
    )
    return "\n".join(lines)


class ForgetMeConfirmations:
    """Asked-for "forget me"s per (conversation, member), each with its deadline."""

    def __init__(self, window_s: float = WINDOW_S, clock: Callable[[], float] = time.monotonic):
        self._window_s = window_s
        self._clock = clock
        self._pending: Dict[Tuple[str, str], float] = {}

    async def ask(self, client: Any, conversation: str, sender: str) -> str:
        """Count what `sender` would lose in `conversation`, record the request and say so;
        nothing is recorded when the count cannot be had."""
        sender = member_id(sender)
        if not sender:
            return NO_SENDER
        self._expire()
        try:
            code, body = await _browse(client, conversation, sender)
        except ScopememDown:
            return DOWN_FORGET
        if code != 200 or not isinstance(body, dict):
            return _failed("/scopemem forget me", code, body) + " Nothing was erased."
        n = int(body.get("total") or 0)
        self._pending[(conversation, sender)] = self._clock() + self._window_s
        return ASK.format(n=n, items=_items(n))

    async def confirm(self, client: Any, conversation: str, sender: str) -> str:
        """Forget `sender` everywhere on the platform if they asked in `conversation` within
        the window; the answer. A request is used once, whatever the outcome."""
        sender = member_id(sender)
        self._expire()
        if not sender or self._pending.pop((conversation, sender), None) is None:
            return NOTHING_TO_CONFIRM
        try:
            code, body = await client.request(
                "POST",
                "/v1/people/forget",
                {"conversation_id": conversation, "sender_id": sender},
            )
        except ScopememDown:
            return DOWN_FORGET
        if code != 200 or not isinstance(body, dict):
            return _failed("Forget", code, body) + " Nothing was erased."
        n = int(body.get("deleted") or 0)
        return (
            f"Forgot you: erased {n} {_items(n)} (what you said in every chat of this "
            "platform, and the memories you said, that were about you or made of your words)."
        )

    def _expire(self) -> None:
        now = self._clock()
        for key in [k for k, due in self._pending.items() if due < now]:
            del self._pending[key]
