"""The scheduler: one object made of parts, and the API programs use.

`Scheduler` is `Passes` (`_passes`: node lifecycle, invalidation, the pass
and its drain, a run and its commit, propagation on the loop) built with
its parts, one concept per module, each seeing the scheduler only through
the narrow `Host` interface (`_host`):

- `Timers` (`_timers`): debounce, throttle, backoff, the wake timer;
- `Failures` (`_failure_state`): failing nodes, `failure()`, where errors go;
- `Observations` (`_observe`): `observe()` over one shared sink per cell;
- sinks, derive and pull (`_sinks`);
- `Dispatch` (`_dispatch`): handlers, `send`, event dispatch;
- `AsyncRuns` (`_async_runs`, over `AsyncWork` in `_async`): async runs.

This module adds the public methods (each delegating to the part that owns
the concept), waiting (`busy`, `idle`), diagnostics and `close`.

Invariants (checked by `_check`): those of `Passes` and of every part.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from cells import (
    Authority,
    Cell,
    CellweaveError,
    DocKey,
    Identity,
    InvalidArgumentError,
    Path,
    Replica,
    Transaction,
    running_loop,
)

from ._async import AsyncWork
from ._async_runs import AsyncRuns
from ._clock import Clock, SystemClock
from ._dispatch import Dispatch
from ._events import EventLane, Handler, Lineage, QueuedEvent
from ._failure_state import Failures
from ._failures import ErrorLog, ErrorRecord
from ._graph import Graph
from ._host import Delivery, Statistics
from ._node import Node, ReadEntry
from ._observe import Observations
from ._passes import Passes
from ._readers import ReaderIndex, compact_reads
from ._sinks import PatchSink, Sink, add_sink, derive, pull, pull_now
from ._timers import Timers
from .errors import NodeError

if TYPE_CHECKING:
    # reactivex (about 14 ms to import) loads with the first `observe()`, asyncio
    # (about 20 ms) where a coroutine is awaited (it is loaded then); whether a loop
    # runs is `cells.running_loop()`, which imports nothing: `import runner` stays cheap.
    import asyncio

    import reactivex


class Scheduler(Passes):
    """Nodes and transactions over one replica. Knows nothing of patterns."""

    def __init__(
        self, replica: Replica, *, clock: Clock | None = None, authority: Authority | None = None
    ) -> None:
        self.replica = replica
        # Stages event receipts (internal documents) in handlers' transactions. Whoever
        # built the replica may pass the authority it claimed; otherwise it is ours.
        self._authority = authority if authority is not None else replica.claim_authority()
        self.clock: Clock = clock or SystemClock()
        self.index = ReaderIndex()
        self.graph = Graph(self.index, replica.held_key)
        self.stats = Statistics()
        self._ordinals = itertools.count()
        self._candidates: dict[Node, None] = {}
        self._tracked: dict[Node, set[DocKey] | None] = {}
        self._keeping: Node | None = None
        self._replacing: Mapping[DocKey, ReadEntry | None] | None = None
        self._heap: list[tuple[int, int, Node]] = []
        self._in_heap: set[Node] = set()
        self._sinks_due: list[Node] = []
        self._draining = False
        self._running: Node | None = None
        self._settling = False
        self.errors_log = ErrorLog()
        self._closed = False
        # The parts (one concept each), built before anything can call into them.
        self._timers = Timers(self)
        self._observations = Observations(self)
        self._failures = Failures(self, self._observations)
        self._dispatch = Dispatch(self)
        self._async_runs = AsyncRuns(self)
        self._unsubscribe = replica.subscribe(self._on_notification, on_commit=self._on_change)
        # Bound once: every run's commit registers one of them.
        self._settled = self._on_node_settled
        self._failed = self._on_node_failed
        self.graph.on_live = self._on_live
        self.graph.on_held = self._on_held
        self.events = EventLane()
        self.lineage = Lineage(self._dispatch.origin_failed)
        self._current_tx: Transaction | None = None
        self.work = AsyncWork(self._kick)
        """The coroutines of async nodes and handlers in flight (see `_async`)."""
        self._kicked = False
        self._drain_started = 0.0
        self._pass_loop: asyncio.AbstractEventLoop | None = None
        self._deliveries: dict[Delivery, None] = {}
        # Verdicts, loads and other sessions' commits arrive on the mailbox: after
        # each drain that delivered something, propagate on the running loop.
        replica.mailbox.after_drain = self._on_drained
        loop = running_loop()
        if loop is not None:
            replica.mailbox.attach(loop)

    def __repr__(self) -> str:
        return f"<Scheduler nodes={len(self.graph.nodes)} dirty={self._invalid_count()}>"

    # ------------------------------------------------------------------ time gates
    def set_debounce(self, node: Node, seconds: float) -> None:
        """Run `node` only once its inputs have been quiet for `seconds` (0 turns it off)."""
        self._timers.set_debounce(node, seconds)

    def set_throttle(self, node: Node, seconds: float) -> None:
        """Run `node` at most once per `seconds` (0 turns it off); changes in between coalesce."""
        self._timers.set_throttle(node, seconds)

    def deferred(self) -> list[Node]:
        """Live invalid nodes waiting on a time gate (backoff)."""
        return self._timers.deferred()

    # ------------------------------------------------------------------ what changed
    def track_changes(self, node: Node) -> None:
        """Keep, for `node`, which documents changed what it read (see `take_changes`).

        For a node that combines many inputs and can update its output from the changed
        ones alone (a list's filter or flat_map output): one set per tracked node, one
        set insertion per change that invalidates it."""
        if node.registered:
            self._tracked.setdefault(node, None)

    def take_changes(self, node: Node) -> frozenset[DocKey] | None:
        """The documents whose changes invalidated `node` (matched what it read) since
        its previous `take_changes`, and start counting again; None when that is not
        known: the first call, after `invalidate(node)`, or after a run of it whose
        commit did not land (what that run took is not in its output). A node calls it
        at the start of its run. Changes its own commits make are not counted (they
        never invalidate it). O(changed documents)."""
        if node not in self._tracked:
            raise InvalidArgumentError(f"take_changes: {node!r} does not track its changes")
        seen = self._tracked[node]
        self._tracked[node] = set()
        return None if seen is None else frozenset(seen)

    def keep_reads(
        self, node: Node, replace: Mapping[DocKey, Iterable[tuple[Path, bool]]] | None = None
    ) -> None:
        """Say, during `node`'s run, that this run depends on exactly what its previous
        run read: its read set stays as it is and this run's read log is not looked at
        (O(1) instead of O(reads) for a run that read only the few inputs that changed,
        and logged its other reads as it did before). Whatever the run reads must be in
        that read set; the caller guarantees it (a wrong promise loses triggers).

        `replace`: documents whose reads differ from the previous run's, each with every
        `(path, shallow)` read from it now (none: it is not read any more): a list's
        filter or flat_map output after a splice (the removed elements' results are not
        read, the inserted ones' are). The read set, the reader index and the edges
        change for those documents only: O(their reads and writers), not O(reads)."""
        if self._running is not node:
            raise InvalidArgumentError(f"keep_reads: {node!r} is not running")
        self._keeping = node
        if replace:
            entries: dict[DocKey, ReadEntry | None] = {}
            for key, paths in replace.items():
                entries[key] = compact_reads((key, p, shallow) for p, shallow in paths).get(key)
            self._replacing = entries

    # ------------------------------------------------------------------ failures
    def errors(self) -> list[ErrorRecord]:
        """The recent errors (at most `MAX_ERRORS`, oldest first): nodes still failing
        when a settle ended, handlers that raised or never converged, callbacks that
        raised. Each was logged once on the `cellweave.scheduler` logger."""
        return self.errors_log.records()

    def failing(self) -> list[Node]:
        """Registered nodes with declared outputs whose last run raised."""
        return self._failures.index.nodes()

    def failure(self, cell: Cell) -> NodeError | None:
        """The error of a failing computation whose output reading `cell` sees (links
        followed), naming the node and the cell; None if none. O(1) when nothing fails."""
        return self._failures.failure(cell)

    # ------------------------------------------------------------------ sinks, derive, pull
    def sink(self, cell: Cell, fn: Callable[[Any], None]) -> Callable[[], None]:
        """An effect: `fn(value)` with the settled value, then after every settled change.

        The first call comes from the pass this demand starts (run here, at once): a
        value that can be computed is computed first, never delivered as a
        placeholder. An absent value is delivered as `None`; `fn` receives plain
        data only (links followed as `get()` follows them; containers are fresh
        copies). A change back to the value last delivered is not delivered.
        Returns cancel.
        """
        return add_sink(self, cell, fn, Sink)

    def sink_patches(
        self, cell: Cell, fn: Callable[[list[dict[str, Any]]], None]
    ) -> Callable[[], None]:
        """An effect: `fn(ops)` with RFC 6902 JSON Patch operations; returns cancel.

        First one `replace` at `""` holding the whole settled value (`None` when
        absent), then, once per settled change, the operations turning the value
        last delivered into the new one (`cells.patch_ops`). Links are followed
        exactly as `get()` follows them. Applying every list in order to `None`
        gives `get()` (with `None` for absent) after each settle.
        """
        return add_sink(self, cell, fn, PatchSink)

    def derive(
        self,
        out: Cell,
        inputs: Sequence[Cell],
        fn: Callable[..., Any],
        *,
        label: str | None = None,
    ) -> Node:
        """A computation: `out` holds `fn(*values of inputs)`, recomputed when one changes.

        The shorthand for `register` with the usual shape: the node reads every input
        (links inside followed; a container is a copy the function may change; an
        absent input is None) and writes the result at `out`; its reads and its output
        are declared. Like any computation it runs only while something live reads
        `out` (a `sink`, a pull, another live node). Every input must belong to
        `out`'s identity. The node is its own node function (two slots on the node,
        not a closure of about 340 bytes: see the `memory per node` benchmark).
        """
        return derive(self, out, inputs, fn, label)

    def observe(self, cell: Cell) -> reactivex.Observable[Any]:
        """A reactivex Observable: the current value first, then once per settled change.

        Every subscription to the same cell shares one sink node. A failing
        computation behind the value ends it with `on_error` (a `NodeError`);
        `end_observations` of its document (the run producing it ended) or `close()`
        end it with `on_completed`.
        """
        return self._observations.observe(cell)

    def observe_patches(self, cell: Cell) -> reactivex.Observable[list[dict[str, Any]]]:
        """The `sink_patches` stream as a reactivex Observable, over `observe(cell)`.

        Each subscription gets its own stream (first a `replace` at `""` with the
        value, then `patch_ops` from the value it last got), built on the cell's
        shared observation: so it ends as `observe` does, with `on_error` (a failing
        computation behind the value) or `on_completed` (the producing run ended,
        the scheduler closed). The values it diffs are copies, so unchanged parts
        are compared by value: O(size) per change, where `sink_patches` skips
        shared subtrees by identity.
        """
        return self._observations.observe_patches(cell)

    def end_observations(self, doc: DocKey) -> int:
        """Complete every observation of a cell in document `doc` (the run that produces
        it ended); returns how many."""
        return self._observations.end_of(doc)

    def pull_now(self, cell: Cell) -> Any:
        """Demand `cell` until the graph feeding it settles (synchronously), then its value.

        Makes no node: it holds demand on the computations writing what it reads while
        it settles, reads the value itself, and gives the demand back (`_sinks._Pull`).
        Raises `NodeError` (the original error its cause) if the value reads the output
        of a computation that is failing; a read `cell`'s identity may not make raises
        its `OwnershipError`."""
        return pull_now(self, cell)

    async def pull(self, cell: Cell) -> Any:
        """Demand `cell` until the graph feeding it settles and verdicts are in, then its value.

        As `pull_now` (no node; the same errors), waiting as `idle` does."""
        return await pull(self, cell)

    # ------------------------------------------------------------------ events
    def add_handler(
        self,
        stream: Cell,
        fn: Callable[[Transaction, Any], Any],
        *,
        reads: Iterable[tuple[DocKey, Path, bool]] = (),
        label: str | None = None,
        on_result: Callable[[Transaction, QueuedEvent, Any], None] | None = None,
    ) -> Handler:
        """Bind `fn(tx, payload)` to `stream`: it runs once per event sent there.

        `reads` declares what the handler will read: the computations feeding
        those places are brought up to date before it runs. `on_result(tx,
        event, returned)` sees the handler's return value inside its transaction.
        """
        return self._dispatch.add_handler(stream, fn, reads=reads, label=label, on_result=on_result)

    def handler_label(self, stream: Cell) -> str | None:
        """The label of the handler bound to `stream` (the exact cell, links not
        followed), or None when no handler is bound there. O(1)."""
        return self._dispatch.handler_label(stream)

    def remove_handler(self, handler: Handler) -> None:
        """Unbind `handler`; its queued events are dropped, and so is every event sent to
        its stream later (until a handler is bound there again), as the reference does."""
        self._dispatch.remove_handler(handler)

    def report_error(
        self,
        error: CellweaveError,
        *,
        cause: BaseException | None = None,
        source: str = "send",
        cell: str | None = None,
    ) -> None:
        """Record a failure of event delivery that has no caller left to raise to (an
        event that waited for its handler to be bound) in `errors()` (kind "send"),
        logged once, as a handler's failure is."""
        self._dispatch.report_error(error, cause=cause, source=source, cell=cell)

    def has_handler(self, stream: Cell) -> bool:
        """Whether a handler is bound to `stream` now (links are not followed)."""
        return self._dispatch.has_handler(stream)

    def had_handler(self, stream: Cell) -> bool:
        """Whether `stream`'s handler was removed and none is bound since (a send there
        is dropped). Remembered for the last `MAX_RETIRED` removed handlers."""
        return self._dispatch.had_handler(stream)

    def send(
        self,
        stream: Cell,
        payload: Any,
        *,
        origin: Transaction | None = None,
        event_id: str | None = None,
        retry: bool = True,
        on_settle: Callable[[QueuedEvent], None] | None = None,
        actor: Identity | None = None,
    ) -> QueuedEvent:
        """Queue `payload` for the handler bound to `stream` (FIFO).

        `origin` defaults to the transaction of the node or handler running now:
        the event then waits for that transaction to commit, and is dropped if
        it fails. `event_id` makes delivery idempotent: the same id on the same
        stream is handled at most once, on any runtime sharing the store. `actor` is
        who fired it: the handling runs as that identity (its scoped reads and writes,
        and what it launches, land in that identity's instances); by default the actor
        of the handling that sent it, else the handler's own identity.
        """
        return self._dispatch.send(
            stream,
            payload,
            origin=origin,
            event_id=event_id,
            retry=retry,
            on_settle=on_settle,
            actor=actor,
        )

    # ------------------------------------------------------------------ waiting
    def busy(self) -> bool:
        """Something is runnable, a verdict or load is in flight, or a delivery is queued."""
        work = self.work
        return bool(
            self.replica.in_flight()
            or len(self.replica.mailbox)
            or (self._candidates and self.runnable())  # (no call when nothing is a candidate)
            or self.events.waiting
            or work.inflight  # (`bool(work)`, inlined: asked after every pull's settle)
            or work.busy
        )

    async def idle(self) -> None:
        """Wait until nothing is runnable, no verdict or load is in flight, nothing is queued."""
        import asyncio  # loaded: this coroutine runs on a loop

        loop = asyncio.get_running_loop()
        mailbox = self.replica.mailbox
        if mailbox.loop is not loop:
            # (Attached already: a post schedules its drain there. Attaching again took
            # the mailbox's lock on every pull; the settle below pumps what is queued.)
            mailbox.attach(loop)
        while True:
            self.settle()
            if not self.busy():
                return
            fut: asyncio.Future[None] = loop.create_future()

            def wake(fut: asyncio.Future[None] = fut) -> None:
                def set_done() -> None:
                    if not fut.done():
                        fut.set_result(None)

                if running_loop() is loop:
                    set_done()  # on the loop's thread: no self-pipe write to wake it
                else:
                    loop.call_soon_threadsafe(set_done)

            remove = self.replica.mailbox.add_post_listener(wake)
            try:
                if len(self.replica.mailbox) or self.runnable():
                    await asyncio.sleep(0)
                elif self.work.inflight:
                    # Async nodes or handlers: wait for one to end (or for the store).
                    await asyncio.wait({fut, *self.work.inflight}, return_when="FIRST_COMPLETED")
                elif self.replica.in_flight():
                    await fut
                else:
                    # Only time-gated work (an event waiting on retry backoff): wait for it.
                    head = self.events.head()
                    delay = head.not_before - self.clock.now() if head is not None else 0.0
                    await asyncio.wait({fut}, timeout=max(0.0, delay))
            finally:
                remove()

    # ------------------------------------------------------------------ diagnostics
    def statistics(self) -> dict[str, Any]:
        nodes = list(self.graph.nodes)
        return {
            **attrs.asdict(self.stats),
            "runs": self.stats.runs,
            "nodes": len(nodes),
            "live": sum(1 for n in nodes if n.is_live),
            "invalid": self._invalid_count(),
            "deferred": len(self.deferred()),
            "events_queued": len(self.events.queue),
            "comparisons": self.index.comparisons,
            "edge_visits": self.graph.edge_visits,
            "liveness_writes": self.graph.live_writes,
        }

    def _invalid_count(self) -> int:
        return sum(1 for n in self.graph.nodes if n.status != "clean")

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Stop reacting (idempotent): queued events are dropped (nothing will handle
        them: their `on_settle` hears it), and every observation completes."""
        if self._closed:
            return
        self._closed = True
        try:
            self.work.cancel_all()
            for ev in list(self.events.queue):
                self._dispatch.drop(ev, "dropped", CellweaveError(f"{ev!r}: the scheduler closed"))
            self._observations.complete_all()
        finally:
            self._unsubscribe()
            self._timers.cancel()
            if self.replica.mailbox.after_drain == self._on_drained:
                self.replica.mailbox.after_drain = None

    def _check(self) -> None:
        self.events._check()
        self.work._check()
        pulled = self.graph.pulled
        live_dirty = {
            n for n in self.graph.nodes if n.status != "clean" and (n.is_live or n in pulled)
        }
        assert live_dirty <= set(self._candidates), live_dirty - set(self._candidates)
        assert all(n.registered for n in self.graph.nodes)
        self.graph._check()
        self._failures._check()
        self._timers._check(self.graph.nodes)
        self.errors_log._check()
        assert all(n.registered for n in self._tracked), "a removed node is not tracked"
