"""Observations: `observe()` as a reactivex Observable over one shared sink node.

Every subscription to the same cell (same identity and link) of one scheduler
shares one `Observation`, which holds one sink effect while it has
subscribers: the first subscription makes the node, the last disposal
removes it. A later subscriber gets the last value delivered at once, then
the same values as the others.

Terminal notifications (Rx: at most one, then nothing):
- `on_error`: the value reads the output of a failing computation when a
  settle ends (`Scheduler._report_failures` asks every observation). While
  the failure is only suspected (inside a pass) no absent value is delivered.
- `on_completed`: the run producing the cell ended (`end_of(doc)`, called by
  the runner when a registration ends) or the scheduler closed.
An exception raised by an observer's `on_error` / `on_completed` is contained
and recorded as a "callback" error; one raised by `on_next` fails the sink node
like any effect.

Invariants (checked by `_check`)
- an observation is in its scheduler's table iff it has subscribers and has not
  ended; it then holds exactly one sink node.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from reactivex import abc
from reactivex.disposable import Disposable

from cells import Cell, DocKey, Identity, Link

from .errors import CallbackError

if TYPE_CHECKING:
    from ._scheduler import Scheduler

ObservationKey = tuple[Identity, Link]


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


_UNSET: Final = _Unset()


class Observation:
    """One observed cell: its subscribers and the one sink node that feeds them."""

    __slots__ = ("_cancel", "_last", "_observers", "_scheduler", "cell", "ended", "key")

    def __init__(self, scheduler: Scheduler, cell: Cell, key: ObservationKey) -> None:
        self._scheduler = scheduler
        self.cell = cell
        self.key = key
        self._observers: list[abc.ObserverBase[Any]] = []
        self._cancel: Callable[[], None] | None = None
        self._last: Any = _UNSET
        self.ended = False

    def __repr__(self) -> str:
        return f"<Observation {self.cell!r} subscribers={len(self._observers)}>"

    @property
    def doc_key(self) -> DocKey:
        return self.cell.doc_key

    def subscribe(self, observer: abc.ObserverBase[Any]) -> Disposable:
        self._observers.append(observer)
        if self._cancel is None:
            # The sink delivers the current value (through `_deliver`) before it returns;
            # the settle inside it may already have ended this observation (on_error).
            cancel = self._scheduler.sink(self.cell, self._deliver)
            if self.ended:
                cancel()
            else:
                self._cancel = cancel
        elif self._last is not _UNSET:
            observer.on_next(copy.deepcopy(self._last))
        return Disposable(lambda: self._unsubscribe(observer))

    def _unsubscribe(self, observer: abc.ObserverBase[Any]) -> None:
        if observer in self._observers:
            self._observers.remove(observer)
        if not self._observers and not self.ended:
            self._end()

    def _deliver(self, value: Any) -> None:
        scheduler = self._scheduler
        if scheduler._failing and scheduler.failure(self.cell) is not None:
            # An absent value because a computation behind it failed: not a value.
            # Whether it is still failing when the settle ends decides `on_error`.
            scheduler._suspect_observations = True
            return
        self._last = value
        observers = list(self._observers)
        for i, observer in enumerate(observers):
            # One copy per extra subscriber: each may change what it got.
            observer.on_next(value if i == 0 else copy.deepcopy(value))

    def _end(self) -> None:
        self.ended = True
        table = self._scheduler._observations
        if table.get(self.key) is self:
            del table[self.key]
        cancel, self._cancel = self._cancel, None
        if cancel is not None:
            cancel()

    def error(self, error: BaseException) -> None:
        """Deliver `error` to every subscriber and end (Rx: nothing follows)."""
        if self.ended:
            return
        observers, self._observers = self._observers, []
        self._end()
        for observer in observers:
            self._call(observer.on_error, "on_error", error)

    def complete(self) -> None:
        """Deliver `on_completed` to every subscriber and end."""
        if self.ended:
            return
        observers, self._observers = self._observers, []
        self._end()
        for observer in observers:
            self._call(observer.on_completed, "on_completed")

    def _call(self, fn: Callable[..., None], name: str, *args: Any) -> None:
        try:
            fn(*args)
        except Exception as exc:
            err = CallbackError(
                f"an observer's {name} of {self.cell!r} raised {type(exc).__name__}: {exc}"
            )
            err.__cause__ = exc
            self._scheduler.errors_log.add("callback", f"observer {name}", repr(self.cell), err)

    def _check(self) -> None:
        assert not self.ended
        assert self._observers
        assert self._cancel is not None
