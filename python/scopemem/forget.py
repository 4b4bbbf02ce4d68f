"""The two-step erase behind a chat's `/scopemem forget`: the first command asks, and
`/scopemem forget confirm` from the same sender within a minute erases every memory written in
that chat (`POST /v1/forget`). Shared by the plugins so that both ask, time out and answer
alike; who may run the command (an admin in a group) and how the command is parsed stay the
framework's. A member's own "forget me" (`/scopemem forget me`, `scopemem.people`) is a
separate request with its own confirmation: neither confirms the other.
"""

import time
from typing import Any, Callable, Dict, Tuple

from .client import ScopememDown, error_code

# How long a confirmation is waited for.
WINDOW_S = 60.0

ASK = (
    "This erases every memory written in this chat, for good. "
    "Send /scopemem forget confirm within 60 s to go ahead."
)
NOTHING_TO_CONFIRM = "Nothing to confirm: send /scopemem forget first."
DOWN = "scopemem is down; nothing was erased. Try again when it is back."


class ForgetConfirmations:
    """Asked-for erases per conversation, each with its sender and deadline."""

    def __init__(self, window_s: float = WINDOW_S, clock: Callable[[], float] = time.monotonic):
        self._window_s = window_s
        self._clock = clock
        self._pending: Dict[str, Tuple[str, float]] = {}

    def ask(self, conversation: str, sender: str) -> str:
        """Record that `sender` asked to erase `conversation`; the text to answer with."""
        self._expire()
        self._pending[conversation] = (sender, self._clock() + self._window_s)
        return ASK

    async def confirm(self, client: Any, conversation: str, sender: str) -> str:
        """Erase `conversation` through `client` if `sender` asked within the window; the
        text to answer with. A confirmation is used once, whatever the outcome."""
        self._expire()
        pending = self._pending.get(conversation)
        if pending is None or pending[0] != sender:
            return NOTHING_TO_CONFIRM
        del self._pending[conversation]
        try:
            code, body = await client.request(
                "POST", "/v1/forget", {"conversation_id": conversation}
            )
        except ScopememDown:
            return DOWN
        if code != 200 or not isinstance(body, dict):
            return f"Forget failed: {error_code(body) or code}. Nothing was erased."
        n = body.get("deleted", 0)
        return f"Erased {n} {'memory' if n == 1 else 'memories'} written in this chat."

    def _expire(self) -> None:
        now = self._clock()
        for key in [k for k, (_, due) in self._pending.items() if due < now]:
            del self._pending[key]
