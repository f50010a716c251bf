"""Clocks: where time comes from. Tests inject `ManualClock` and never sleep."""

from __future__ import annotations

import time
from typing import Protocol

from cells import InvalidArgumentError


class Clock(Protocol):
    def now(self) -> float:
        """Seconds, monotonic."""
        ...


class SystemClock:
    """The real monotonic clock."""

    def now(self) -> float:
        return time.monotonic()


class ManualClock:
    """A clock that moves only when told: `advance(seconds)`."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = start

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise InvalidArgumentError(f"ManualClock.advance: seconds must be >= 0, got {seconds}")
        self._now += seconds
