"""Timers: the time gates of nodes (debounce, throttle, backoff) and the one wake timer.

A node's gates are folded into one time, `Node.eligible_at`: a pass skips a
node until the clock reaches it. A node that did not converge in a pass is
*deferred*: its backoff grows x2 from `BACKOFF_BASE` up to `BACKOFF_CAP`.
With a system clock and a running event loop, one timer wakes the scheduler
at the earliest time a deferred node or the queued event at the lane's head
may go; with a manual clock the test advances it and calls `settle()`.

The gated nodes are kept ordered by their gate (`sortedcontainers.SortedList`
of (eligible_at, ordinal, node)): the next deadline is found from the front
and `deferred()` bisects to the present, instead of scanning every
candidate. A SortedList rather than a heap: a gate moves (a debounce is
pushed out on every invalidation), so entries are removed, not only popped.

Invariants (checked by `_check`)
- a registered node is in the gated list iff its `eligible_at` > 0, under its
  current `eligible_at` (every gate change goes through `update`);
- at most one wake timer is armed, on the loop that armed it; it is never
  later than the earliest deadline known when it was armed.
Not here: what a pass runs (`_passes`), or event retry delays (`_events`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable
from typing import TYPE_CHECKING, Final, cast

import attrs
from sortedcontainers import SortedList

from cells import InvalidArgumentError, running_loop

from ._clock import SystemClock
from ._host import Host
from ._node import Node

if TYPE_CHECKING:
    import asyncio  # at run time only where a loop runs (it is loaded then): see running_loop

BACKOFF_BASE: Final = 0.25
"""The first backoff of a deferred node, in seconds; doubled per deferral in a row."""
BACKOFF_CAP: Final = 2.0
"""The longest backoff, in seconds."""


@attrs.define(slots=True, eq=False, weakref_slot=False)
class Timers:
    """The time gates and the wake timer of one scheduler."""

    _host: Host
    _gated: SortedList[tuple[float, int, Node]] = attrs.field(factory=SortedList, init=False)
    """(eligible_at, ordinal, node) of every registered node with a time gate."""
    _any_gated: bool = attrs.field(default=False, init=False)
    """Whether `_gated` holds a node (kept by its changes): asked on every settle,
    where a `SortedList`'s truth (its `__len__`) is a Python call."""
    _timer: asyncio.TimerHandle | None = attrs.field(default=None, init=False)
    _timer_at: float = attrs.field(default=0.0, init=False)
    _timer_loop: asyncio.AbstractEventLoop | None = attrs.field(default=None, init=False)

    def set_debounce(self, node: Node, seconds: float) -> None:
        """Run `node` only once its inputs have been quiet for `seconds` (0 turns it off)."""
        if seconds < 0:
            raise InvalidArgumentError(
                f"set_debounce({node!r}): seconds must be >= 0, got {seconds}"
            )
        node.debounce = float(seconds)
        if not seconds:
            node.debounce_ready_at = 0.0
        self.update(node)

    def set_throttle(self, node: Node, seconds: float) -> None:
        """Run `node` at most once per `seconds` (0 turns it off); changes in between coalesce."""
        if seconds < 0:
            raise InvalidArgumentError(
                f"set_throttle({node!r}): seconds must be >= 0, got {seconds}"
            )
        node.throttle = float(seconds)
        # The window counts from the last run, also one made before the throttle was
        # set: two runs 0.1 s apart under a 1 s throttle would otherwise both go.
        node.throttle_ready_at = node.last_run + seconds if seconds and node.runs else 0.0
        self.update(node)

    def defer(self, nodes: Iterable[Node]) -> None:
        """Put `nodes` behind their next backoff (x2 per deferral in a row, capped)."""
        host = self._host
        now = host.clock.now()
        for n in nodes:
            delay = min(BACKOFF_BASE * (2**n.backoff_streak), BACKOFF_CAP)
            n.backoff_streak += 1
            n.backoff_until = now + delay
            self.update(n)
            host.stats.deferrals += 1

    def update(self, node: Node) -> None:
        """Recompute `node.eligible_at` after one of its gate times changed, and keep
        its place in the gated list. O(log gated)."""
        old = node.eligible_at
        node.update_gate()
        new = node.eligible_at
        if new != old and node.registered:
            gated = self._gated
            if old:
                gated.remove((old, node.ordinal, node))
            if new:
                gated.add((new, node.ordinal, node))
            self._any_gated = bool(gated)

    def forget(self, node: Node) -> None:
        """`node` is being unregistered: drop it from the gated list. O(log gated)."""
        if node.eligible_at:
            gated = self._gated
            gated.discard((node.eligible_at, node.ordinal, node))
            self._any_gated = bool(gated)

    def _waiting(self, now: float) -> Iterable[Node]:
        """Live invalid nodes whose gate is later than `now`, earliest first."""
        gated = self._gated
        # (now, inf) sorts after every entry at `now` (ordinals are finite), before later.
        start = gated.bisect_right(cast("tuple[float, int, Node]", (now, math.inf)))
        for _at, _ordinal, n in gated.islice(start):
            if n.status != "clean" and n.is_live:
                yield n

    def deferred(self) -> list[Node]:
        """Live invalid nodes waiting on a time gate, earliest first. O(log gated +
        gated nodes later than now)."""
        return list(self._waiting(self._host.clock.now()))

    def arm(self) -> None:
        """Make sure the wake timer fires by the earliest deadline (system clock and a
        running loop only)."""
        host = self._host
        clock = host.clock
        if not isinstance(clock, SystemClock):
            return  # a manual clock: the test advances it and calls settle()
        if not self._any_gated and not host.events.waiting:
            return  # nothing waits on time (the usual settle): no clock read
        now = clock.now()
        # (The first waiting node is the earliest: the list is ordered by gate.)
        pending = [n.eligible_at for n in itertools.islice(self._waiting(now), 1)]
        head = host.events.head()
        if head is not None and head.not_before > now:
            pending.append(head.not_before)
        if not pending:
            return
        loop = running_loop()
        if loop is None:
            return
        at = min(pending)
        timer = self._timer
        # A handle armed on another (possibly closed) loop never fires here: replace it.
        same_loop = self._timer_loop is loop and not loop.is_closed()
        if timer is not None and not timer.cancelled() and same_loop and self._timer_at <= at:
            return
        if timer is not None:
            timer.cancel()
        self._timer_at = at
        self._timer_loop = loop
        self._timer = loop.call_later(max(0.0, at - clock.now()), self._wake)

    def _wake(self) -> None:
        self._timer = None
        self._host.settle()

    def cancel(self) -> None:
        """Disarm the wake timer (the scheduler closes)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _check(self, nodes: Iterable[Node]) -> None:
        gated = {n: at for n in nodes if (at := n.eligible_at)}
        assert len(gated) == len(self._gated), (gated, list(self._gated))
        assert self._any_gated == bool(self._gated)
        for at, ordinal, n in self._gated:
            assert gated.get(n) == at and n.ordinal == ordinal, (n, at)
