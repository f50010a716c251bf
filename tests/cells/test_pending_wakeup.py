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


class _CountingLoop(_EagerLoop):
    """`_EagerLoop` that queues instead: the drains scheduled, run when the test says."""

    def __init__(self) -> None:
        self.queued: list[Callable[[], Any]] = []

    def call_soon_threadsafe(self, fn: Callable[[], Any]) -> None:
        self.queued.append(fn)


def test_a_quiet_mailbox_queues_no_drain_until_it_is_woken() -> None:
    # While quiet (a settle that pumps before it returns), posts queue no drain on the
    # loop; `wake` queues one for what is left, posted from any thread meanwhile.
    import threading

    box = Mailbox()
    loop = _CountingLoop()
    box.attach(loop)  # type: ignore[arg-type]
    ran: list[str] = []
    box.quiet = True
    box.post(lambda: ran.append("here"))
    elsewhere = threading.Thread(target=box.post, args=(lambda: ran.append("there"),))
    elsewhere.start()
    elsewhere.join()
    assert [] == loop.queued
    box.wake()
    assert not box.quiet
    assert 1 == len(loop.queued)
    loop.queued.pop()()
    assert ["here", "there"] == ran
    # Pumped before the wake (what a settle does): nothing is left, no drain is queued.
    box.quiet = True
    box.post(lambda: ran.append("pumped"))
    assert 1 == box.drain()
    box.wake()
    assert [] == loop.queued
    # Not quiet: a post queues its drain at once, as before.
    box.post(lambda: ran.append("loud"))
    assert 1 == len(loop.queued)


def test_posts_after_a_drain_by_hand_share_the_drain_queued_on_the_loop() -> None:
    # A drain by hand (an await of a pending result, a pump) leaves the loop's queued
    # drain queued, so later posts queue no other: one per loop turn, not one per edit.
    box = Mailbox()
    loop = _CountingLoop()
    box.attach(loop)  # type: ignore[arg-type]
    ran: list[str] = []
    box.post(lambda: ran.append("a"))
    assert 1 == len(loop.queued)
    assert 1 == box.drain()  # by hand: "a" runs here
    box.post(lambda: ran.append("b"))
    assert 1 == len(loop.queued)  # (two before: the drain by hand had lowered the flag)
    loop.queued.pop()()  # the loop's turn: the queued drain runs what was posted since
    assert ["a", "b"] == ran
    box.post(lambda: ran.append("c"))  # that drain ran: a post queues the next one
    assert 1 == len(loop.queued)
    loop.queued.pop()()
    assert ["a", "b", "c"] == ran
    assert 0 == len(box)


def test_a_drain_queued_on_a_loop_left_behind_does_not_hold_back_the_next_loop() -> None:
    # A drain queued on one loop that never ran (the loop stopped first), then the
    # mailbox attached to another loop: a post there queues its drain there.
    box = Mailbox()
    old, new = _CountingLoop(), _CountingLoop()
    box.attach(old)  # type: ignore[arg-type]
    ran: list[str] = []
    box.post(lambda: ran.append("a"))
    box.drain()
    assert 1 == len(old.queued)
    box.attach(new)  # type: ignore[arg-type]
    box.post(lambda: ran.append("b"))
    assert 1 == len(new.queued)  # (lost without the attach's reset: the old flag held)
    new.queued.pop()()
    assert ["a", "b"] == ran
