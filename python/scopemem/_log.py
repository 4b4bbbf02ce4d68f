"""The logger a shared piece writes to: the framework's, or `logging`'s "scopemem"."""

from __future__ import annotations

import logging
from typing import Any, Optional


def logger_or_default(logger: Optional[Any]) -> Any:
    """`logger`, or `logging.getLogger("scopemem")` without one. Callers pass one finished
    string per call (no %-arguments), which both `logging` and loguru take as it is."""
    return logger if logger is not None else logging.getLogger("scopemem")
