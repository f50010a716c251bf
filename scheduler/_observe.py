"""Observations: `observe()` as a reactivex Observable over one shared sink node.

Every subscription to the same cell (same identity and link) of one scheduler
shares one `Observation`, which holds one sink effect while it has
subscribers: the first subscription makes the node, the last disposal
removes it. A later subscriber gets the last value delivered at once, then
the same values as the others.

Terminal notifications (Rx: at most one, then nothing):
- `on_error`: the value reads the output of a failing computation when a
  settle ends (`Failures.report` asks every observation, `Observations.report`). While
  the failure is only suspected (inside a pass) no absent value is delivered.
- `on_completed`: the run producing the cell ended (`end_of(doc)`, called by
  the runner when a registration ends) or the scheduler closed.
An exception raised by an observer's `on_error` / `on_completed` is contained
and recorded as a "callback" error; one raised by `on_next` fails the sink node
like any effect.

Invariants (checked by `_check`)
- an observation is in its scheduler's table (`Observations`) iff it has
  subscribers and has not ended; it then holds exactly one sink node.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

import attrs

from cells import Cell, DocKey, Identity, Link, patch_ops, thaw

from ._host import Host
from .errors import CallbackError

if TYPE_CHECKING:
    # reactivex (about 14 ms to import) is loaded by the first `observe()`: most
    # programs never call it, and `import runner` must stay cheap.
    import reactivex
    from reactivex import abc
    from reactivex.disposable import Disposable

ObservationKey = tuple[Identity, Link]


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


_UNSET: Final = _Unset()


@attrs.define(slots=True, eq=False, weakref_slot=False)
class Observations:
    """The observations of one scheduler, by observed cell (identity and link)."""

    _host: Host
    table: dict[ObservationKey, Observation] = attrs.field(factory=dict, init=False)
    suspect: bool = attrs.field(default=False, init=False)
    """A delivery inside a pass found a failing computation behind its value: the
    settle's end decides whether that observation ends with `on_error`."""

    def observe(self, cell: Cell) -> reactivex.Observable[Any]:
        """See `Scheduler.observe`."""
        import reactivex
        from reactivex.disposable import Disposable

        key = (cell.identity, cell.link())
        host = self._host

        def subscribe(observer: Any, scheduler: Any = None) -> Disposable:
            if host._closed:
                observer.on_completed()
                return Disposable()
            observation = self.table.get(key)
            if observation is None:
                observation = self.table[key] = Observation(self, host, cell, key)
            return observation.subscribe(observer)

        return reactivex.create(subscribe)

    def observe_patches(self, cell: Cell) -> reactivex.Observable[list[dict[str, Any]]]:
        """See `Scheduler.observe_patches`."""
        import reactivex

        def subscribe(observer: Any, scheduler: Any = None) -> abc.DisposableBase:
            last: list[Any] = [_UNSET]

            def on_next(value: Any) -> None:
                previous, last[0] = last[0], value
                if previous is _UNSET:
                    observer.on_next([{"op": "replace", "path": "", "value": thaw(value)}])
                    return
                ops = patch_ops(previous, value)
                if ops:
                    observer.on_next(ops)

            return self.observe(cell).subscribe(on_next, observer.on_error, observer.on_completed)

        return reactivex.create(subscribe)

    def end_of(self, doc: DocKey) -> int:
        """Complete every observation of a cell in document `doc`; returns how many."""
        ending = [o for o in self.table.values() if o.doc_key == doc]
        for observation in ending:
            observation.complete()
        return len(ending)

    def report(self) -> None:
        """End with `on_error` every observation whose value a failing computation feeds
        (the settle ended)."""
        self.suspect = False
        for observation in list(self.table.values()):
            failure = self._host.failure(observation.cell)
            if failure is not None:
                observation.error(failure)

    def complete_all(self) -> None:
        """Complete every observation (the scheduler closes)."""
        for observation in list(self.table.values()):
            observation.complete()

    def _check(self) -> None:
        for key, observation in self.table.items():
            assert observation.key == key, (key, observation)
            observation._check()


@attrs.define(slots=True, eq=False, weakref_slot=False)
class Observation:
    """One observed cell: its subscribers and the one sink node that feeds them."""

    _table: Observations
    _scheduler: Host
    cell: Cell
    key: ObservationKey
    _observers: list[abc.ObserverBase[Any]] = attrs.field(factory=list, init=False)
    _cancel: Callable[[], None] | None = attrs.field(default=None, init=False)
    _last: Any = attrs.field(default=_UNSET, init=False)
    ended: bool = attrs.field(default=False, init=False)

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
        from reactivex.disposable import Disposable  # loaded by `observe()` already

        return Disposable(lambda: self._unsubscribe(observer))

    def _unsubscribe(self, observer: abc.ObserverBase[Any]) -> None:
        if observer in self._observers:
            self._observers.remove(observer)
        if not self._observers and not self.ended:
            self._end()

    def _deliver(self, value: Any) -> None:
        if self._scheduler.failure(self.cell) is not None:  # (O(1) when nothing fails)
            # An absent value because a computation behind it failed: not a value.
            # Whether it is still failing when the settle ends decides `on_error`.
            self._table.suspect = True
            return
        self._last = value
        observers = list(self._observers)
        for i, observer in enumerate(observers):
            # One copy per extra subscriber: each may change what it got.
            observer.on_next(value if i == 0 else copy.deepcopy(value))

    def _end(self) -> None:
        self.ended = True
        table = self._table.table
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
