"""Counting helpers shared by the bench modules: count what ran, where it ran.

A row's counts must come from the work itself (a counter bumped inside the
function a library calls, or the library's own statistics), never from a
formula of what should have run: a count is there to show that two rows
compared by time did the same work.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cells import Replica


class Tally:
    """A counter bumped by the functions `wrap` returns."""

    __slots__ = ("n",)

    def __init__(self) -> None:
        self.n = 0

    def wrap(self, f: Callable[[], Any]) -> Callable[[], Any]:
        """`f`, counting each call here (for a peer library's formulas)."""

        def counted() -> Any:
            self.n += 1
            return f()

        return counted

    def take(self) -> int:
        """The calls counted since the last `take`, and reset to 0."""
        n, self.n = self.n, 0
        return n


class Commits:
    """The commits a replica made since this was created: sent to the store, and
    elided (a transaction that changed nothing settles at once and sends nothing).

    A scheduler run that commits counts one transaction whatever it wrote; an
    effect's run usually writes nothing and is elided (a sink reading a value with
    no link opens no transaction, so counts neither). Reporting the two apart
    keeps "per commit" figures from dividing by runs that committed nothing.
    """

    __slots__ = ("_elided", "_replica", "_sent")

    def __init__(self, replica: Replica) -> None:
        self._replica = replica
        self._sent = replica.stats.commits_sent
        self._elided = replica.stats.commits_elided

    def counts(self) -> dict[str, int]:
        stats = self._replica.stats
        return {
            "sent": stats.commits_sent - self._sent,
            "elided": stats.commits_elided - self._elided,
        }
