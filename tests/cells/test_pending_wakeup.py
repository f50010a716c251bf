"""Mailbox wake-ups: a drain that runs before the scheduling thread finishes is not lost."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cells._pending import Mailbox


class _EagerLoop:
    """A loop whose drain runs inside `call_soon_threadsafe`: the exact interleaving of
    a store thread preempted right after queueing the drain."""

    def call_soon_threadsafe(self, fn: Callable[[], Any]) -> None:
        fn()

    def is_closed(self) -> bool:
        return False


def test_a_drain_that_runs_before_the_flag_is_set_does_not_lose_later_posts() -> None:
    box = Mailbox()
    box.attach(_EagerLoop())  # type: ignore[arg-type]
    ran: list[int] = []
    box.post(lambda: ran.append(1))
    box.post(lambda: ran.append(2))  # lost before the fix: the flag claimed a queued drain
    assert [1, 2] == ran
    assert 0 == len(box)
