"""Sending an event: bring what resolves its stream up to date, then queue it.

A send names a stream through a cell (`result.key("add")`, a list element's
handler inside a page). The handler bound there may not exist *yet*:

- the path to the stream runs through computed cells nobody has pulled (a
  map container inside an open page, before its first pass): the send
  demands the cell for one synchronous settle (`pull_now`), which computes
  the path and launches the children it reaches, binding their handlers;
- the result the stream belongs to is set up but not started here: the send
  starts it (`Runner.start`: it then holds a lifetime of its own, as
  `rt.start` gives) and queues the event once the start has installed its
  handlers, in the order such sends were made.

A send raises only when there is really no handler: nothing is bound at the
place the cell resolves to, no run on the way is set up and not running here,
and no handler was removed there. A send to a stream whose handler was removed
(the run stopped or was released) is dropped, as the events already queued
for it were (the scheduler remembers removed streams, see
`Scheduler.remove_handler`).

Invariants (checked by `_check`)
- every parked send waits on a start attempt of its key that has not settled.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cells import Cell, CellweaveError, Identity, Link, Pending, Replica, normalize, resolve
from scheduler import Scheduler

from . import _docs as docs
from ._builder import LIST_KINDS, Pattern, find_pattern
from ._checks import check_event, plain_event
from ._computed import node_label
from ._core import MAX_NESTING
from ._host import SchedulerHost
from ._registrations import Key
from ._remote_events import handler_at
from ._sent import bind_event, fail_parked, settle_hook
from .errors import PatternLoadError

if TYPE_CHECKING:
    from ._remote_events import Outbox
    from ._runner import Runner
    from ._sent import Sent


class Sends:
    """Sends parked behind the start of the result their stream belongs to."""

    def __init__(
        self, replica: Replica, scheduler: Scheduler, host: SchedulerHost, runner: Runner
    ) -> None:
        self.replica = replica
        self.scheduler = scheduler
        self.host = host
        self.runner = runner
        self.parked: dict[Key, list[tuple[Cell, Any, str | None, Identity, Sent]]] = {}
        self.starts = True
        """Whether a send may start the result its stream is in (False in a runtime
        made with `pages="served"`: it runs nothing, serving processes do)."""
        self.outbox: Outbox | None = None
        """Where a send goes that `starts` forbids: recorded for the page's owner."""

    def send(
        self, identity: Identity, stream: Cell, event: Any, event_id: str | None, sent: Sent
    ) -> None:
        """Queue (or park) the event; `sent` is the handle that hears how it ends."""
        event = plain_event(event)
        sch = self.scheduler
        for attempt in ("as it is", "computed"):
            if attempt == "computed":
                # Compute the path to the stream (a list nobody pulled yet launches its
                # elements, binding their handlers), then look again.
                sch.pull_now(stream)
            target = self._place(stream)
            if sch.has_handler(target) or sch.had_handler(target):
                event = check_event(self.runner, target, event)  # a bad event is never queued
                bind_event(
                    sent,
                    sch.send(
                        target,
                        event,
                        event_id=event_id,
                        actor=identity,
                        on_settle=settle_hook(sent),
                    ),
                )
                return
            run = self._unstarted_run(stream, identity)
            if run is not None and not self.starts:
                # pages="served": the process that holds the page's claim delivers it.
                assert self.outbox is not None
                self.outbox.send(
                    identity, target, (run, self._pattern_of(run, identity)), event, event_id, sent
                )
                return
            if run is not None and self._may_bind(run, target.link(), identity):
                self._park(run, identity, stream, event, event_id, sent)
                return
        # Nothing there, and nothing that would bind one: the scheduler's error names it.
        sch.send(target, event, event_id=event_id, actor=identity)

    def _place(self, stream: Cell) -> Cell:
        """The stream cell with every link followed (a stream is a handler's own cell)."""
        tx = self.replica.edit(stream.identity)
        try:
            link = resolve(tx, stream.link())
        finally:
            tx.abort("send probe")
        return Cell(self.replica, stream.identity, link, host=self.host)

    def _unstarted_run(self, stream: Cell, identity: Identity) -> Link | None:
        """The run `stream` is in (or leads to), if it is set up and not running here."""
        tx = self.replica.edit(identity)
        try:
            target, _slot = docs.run_target(tx, stream.link())
        finally:
            tx.abort("send probe")
        if target is None:
            return None
        reg = self.runner.registrations.get(target.key(identity))
        if reg is not None and identity in reg.identities:
            return None
        return target

    def remote_label(self, stream: Cell, target: Cell, identity: Identity) -> str | None:
        """In a served runtime: the label of the handler `stream` (resolved: `target`)
        would reach in the process that runs its page (found in the page's patterns),
        or None."""
        if self.starts:
            return None
        run = self._unstarted_run(stream, identity)
        name = None if run is None else self._pattern_of(run, identity)
        found = None if run is None or name is None else handler_at(name, run, target.link())
        return None if found is None else node_label(*found)

    def _pattern_of(self, run: Link, identity: Identity) -> str | None:
        tx = self.replica.edit(identity)
        try:
            name = tx.peek(run.key(identity), (docs.PATTERN,))
        finally:
            tx.abort("send probe")
        return name if isinstance(name, str) else None

    def _may_bind(self, run: Link, place: Link, identity: Identity) -> bool:
        """Whether starting `run` may bind a handler at `place`: a handler of its tree
        (nested children included) has its stream there, or the tree holds lists or
        lifts (their children are known only once they run), or its pattern does not
        load here (the start then reports why)."""
        tx = self.replica.edit(identity)
        try:
            name = tx.peek(run.key(identity), (docs.PATTERN,))
        finally:
            tx.abort("send probe")
        if not isinstance(name, str):
            return True
        try:
            return _tree_may_bind(find_pattern(name), run, place, 0)
        except PatternLoadError:
            return True

    def _park(
        self,
        run: Link,
        identity: Identity,
        stream: Cell,
        event: Any,
        event_id: str | None,
        sent: Sent,
    ) -> None:
        # Checked now, so a bad payload raises at the send, as it does for a running run.
        normalize(event, where=f"event for {stream!r}")
        key = run.key(identity)
        parked = self.parked.get(key)
        if parked is not None:
            parked.append((stream, event, event_id, identity, sent))  # behind that start
            return
        self.parked[key] = [(stream, event, event_id, identity, sent)]
        self.runner.trace.record("start-for-send", key)
        started: Pending[bool] = self.runner.start(run, identity, label="start for a send")
        started.add_done_callback(lambda p: self._deliver(key, p))

    def _deliver(self, key: Key, started: Pending[bool]) -> None:
        waiting = self.parked.pop(key, [])
        start_error: BaseException | None = None
        try:
            started.result()
        except Exception as exc:
            start_error = exc
        sch = self.scheduler
        for stream, event, event_id, identity, sent in waiting:
            error = start_error  # (one send finding no handler does not fail the next)
            if error is None:
                target = self._place(stream)
                if sch.has_handler(target) or sch.had_handler(target):
                    bind_event(
                        sent,
                        sch.send(
                            target,
                            event,
                            event_id=event_id,
                            actor=identity,
                            on_settle=settle_hook(sent),
                        ),
                    )
                    continue
                error = CellweaveError(
                    f"no handler is bound to stream {stream!r} after starting the result it"
                    f" is in ({key}); cannot send {event!r}"
                )
            # Its homes: the send's handle, and the runtime's record (and log).
            dropped = CellweaveError(f"an event sent to {stream!r} was dropped: {error}")
            dropped.__cause__ = error
            fail_parked(sent, dropped)
            sch.report_error(dropped, cell=str(stream.link()))

    def _check(self) -> None:
        for key, waiting in self.parked.items():
            assert waiting, key
            assert self.runner.attempts.in_flight(key), key


def _tree_may_bind(pattern: Pattern, result: Link, place: Link, depth: int) -> bool:
    for node in pattern.graph.nodes:
        if node.kind in LIST_KINDS or node.kind == "lift":
            return True
        out = docs.internal_link(result, node.index)
        if node.kind == "handler" and not place.path and out == place:
            return True
        if (
            node.kind == "pattern"
            and depth < MAX_NESTING
            and _tree_may_bind(find_pattern(node.target), out, place, depth + 1)
        ):
            return True
    return False
