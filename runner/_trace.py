"""The lifecycle trace: a bounded window of the runner's recent decisions.

Every decision the runner makes about a result — start, claim, decline (with
its reason), stop, release, tombstone, rollback, debt, page open/close — is
recorded here for `rt.inspect()`. The trace keeps the newest `capacity`
entries and counts what it dropped, so a reader always knows whether the
window is the whole history. It observes; nothing reads it to decide.

Invariants (checked by `_check`)
- at most `capacity` entries; `recorded == dropped + len(entries)`.
"""

from __future__ import annotations

import collections
from typing import Any, Final

from cells import InvalidArgumentError

CAPACITY: Final = 256


class LifecycleTrace:
    __slots__ = ("_entries", "capacity", "dropped", "recorded")

    def __init__(self, capacity: int = CAPACITY) -> None:
        if capacity < 1:
            raise InvalidArgumentError(f"LifecycleTrace: capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self._entries: collections.deque[dict[str, Any]] = collections.deque(maxlen=capacity)
        self.recorded = 0
        self.dropped = 0

    def __len__(self) -> int:
        return len(self._entries)

    def record(self, event: str, key: object, **detail: Any) -> None:
        if len(self._entries) == self.capacity:
            self.dropped += 1
        self.recorded += 1
        entry: dict[str, Any] = {"seq": self.recorded, "event": event, "key": str(key)}
        entry.update(detail)
        self._entries.append(entry)

    def entries(self, event: str | None = None) -> list[dict[str, Any]]:
        return [dict(e) for e in self._entries if event is None or e["event"] == event]

    def snapshot(self) -> dict[str, Any]:
        return {
            "entries": self.entries(),
            "recorded": self.recorded,
            "dropped": self.dropped,
            "complete": self.dropped == 0,
        }

    def _check(self) -> None:
        assert len(self._entries) <= self.capacity
        assert self.recorded == self.dropped + len(self._entries), (self.recorded, self.dropped)
