"""The scheduler: runs exactly the work someone observes, in transactions.

One change channel: the scheduler subscribes to its replica's notifications
and nothing else. A notification marks invalid the readers whose read value
actually changed (`ReaderIndex.match`); a run's own commit never invalidates
the node that made it. A node runs only when it is invalid (or never ran)
*and* live (transitively read by an effect, a pull, or provisionally demanded
as a child created by a live run).

A pass drains a heap ordered by (height, ordinal): heights keep every writer
below its readers, so a node runs only after every invalid node upstream of
it has run in this wave, and a node invalidated mid-pass joins the same
drain. Effects therefore never see a half-propagated wave, nothing clean
runs, and a deep chain settles in one drain without recursion. Each pass is
bounded (`MAX_ITERS` drains, `PASS_RUN_BUDGET` runs per node); a node that
does not converge is deferred behind escalating backoff (x2 up to
`BACKOFF_CAP`) while the rest of the graph keeps settling. All time gates go
through `eligible_at` and one wake timer, on an injectable clock.

Who runs a pass: `settle()` (and `sink`, `pull_now`, `idle`), or, with a
running event loop, the loop itself: every change that can make work
runnable (a notification, a mailbox delivery, a node becoming live, a queued
event) schedules one coalesced pass with `call_soon` (`_request_pass`). Sinks
deliver after the pass that read their value (`_deliver`), so an observer
sees settled values only, never one a later run of the same pass replaced.

Invariants (checked by `_check`)
- every live registered node whose status is not "clean" is in `_candidates`
  (which may also hold stale entries, dropped lazily): dormant invalid nodes
  cost nothing per settle. (No table of all invalid nodes is kept: a dormant
  never-ran computation, the usual state of most, would pay a dict entry.)
- the graph's invariants hold (edges mirror, liveness equals the oracle).
"""

from __future__ import annotations

import asyncio
import functools
import heapq
import inspect
import itertools
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final

import attrs
import reactivex
from reactivex.abc import DisposableBase
from reactivex.disposable import Disposable

from cells import (
    MISSING,
    Authority,
    Cell,
    CellweaveError,
    CommitResult,
    DocKey,
    Identity,
    InvalidArgumentError,
    Link,
    Materializer,
    Notification,
    Outcome,
    Path,
    Pending,
    Replica,
    Transaction,
    TransactionError,
    entity_id,
    normalize,
    patch_ops,
    read_value,
    same_value,
    thaw,
)

from ._async import AsyncWork, handling_tx
from ._clock import Clock, SystemClock
from ._events import (
    RETRY_WINDOW,
    CommitConvergenceError,
    EventLane,
    Handler,
    HandlerError,
    Lineage,
    OriginFailedError,
    QueuedEvent,
    retry_delay,
)
from ._failures import ErrorLog, ErrorRecord, FailingIndex
from ._graph import Graph
from ._node import Node, NodeKind, OneRead, lean_reads
from ._observe import Observation, ObservationKey
from ._readers import ReaderIndex, compact_reads
from .errors import NodeError

MAX_ITERS: Final = 10
"""Drains per pass before remaining work is deferred."""
PASS_RUN_BUDGET: Final = 10
"""Runs of one node per pass before it is deferred."""
MAX_REACTIVE_RETRIES: Final = 10
"""Retries of a node whose commit failed for a reason other than a stale basis."""
BACKOFF_BASE: Final = 0.25
BACKOFF_CAP: Final = 2.0
MAX_PASSES_PER_SETTLE: Final = 10_000


@attrs.define
class Statistics:
    """Counted work. Observes, never decides."""

    passes: int = 0
    drains: int = 0
    runs_computation: int = 0
    runs_effect: int = 0
    invalidations: int = 0
    deferrals: int = 0
    heap_pushes: int = 0
    max_work_set: int = 0
    last_work_set: int = 0
    commits: int = 0
    stale_reruns: int = 0

    @property
    def runs(self) -> int:
        return self.runs_computation + self.runs_effect


class Scheduler:
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
        self.graph = Graph(self.index)
        self.stats = Statistics()
        self._ordinals = itertools.count()
        self._candidates: dict[Node, None] = {}
        """Invalid nodes that were live when last seen; `runnable()` scans only these."""
        self._heap: list[tuple[int, int, Node]] = []
        self._in_heap: set[Node] = set()
        self._draining = False
        self._running: Node | None = None
        self._settling = False
        self._errors: dict[Node, NodeError] = {}
        """Nodes that raised in this settle; reported when it ends if still failing."""
        self.errors_log = ErrorLog()
        self._failing = FailingIndex()
        self._observations: dict[ObservationKey, Observation] = {}
        self._suspect_observations = False
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0
        self._timer_loop: asyncio.AbstractEventLoop | None = None
        self._closed = False
        self._unsubscribe = replica.subscribe(self._on_notification)
        # Bound once: every run's commit registers one of them.
        self._settled = self._on_node_settled
        self._failed = self._on_node_failed
        self.graph.on_live = self._on_live
        self.events = EventLane()
        self.lineage = Lineage(self._origin_failed)
        self._current_tx: Transaction | None = None
        self.work = AsyncWork(self._kick)
        """The coroutines of async nodes and handlers in flight (see `_async`)."""
        self._kicked = False
        self._drain_started = 0.0
        """The clock when the current drain started: each run's `Node.last_run`."""
        self._pass_loop: asyncio.AbstractEventLoop | None = None
        """The loop a propagation pass is scheduled on (None: none is scheduled)."""
        self._deliveries: dict[_Sink, None] = {}
        """Sinks whose run read a new value this pass: called once it ends."""
        # Verdicts, loads and other sessions' commits arrive on the mailbox: after
        # each drain that delivered something, propagate on the running loop.
        replica.mailbox.after_drain = self._on_drained
        loop = asyncio._get_running_loop()
        if loop is not None:
            replica.mailbox.attach(loop)

    def __repr__(self) -> str:
        return f"<Scheduler nodes={len(self.graph.nodes)} dirty={self._invalid_count()}>"

    # ------------------------------------------------------------------ nodes
    def register(
        self,
        fn: Callable[[Transaction], object],
        *,
        identity: Identity,
        kind: NodeKind = "computation",
        outputs: Iterable[tuple[DocKey, Path]] = (),
        label: str | None = None,
        parent: Node | None = None,
        reads: Iterable[tuple[DocKey, Path, bool]] = (),
    ) -> Node:
        """Add a node. A computation does nothing until demand reaches it; an effect is live now.

        A computation registered while a live node runs gets provisional demand
        (and that node as parent unless given), so it runs in the same pass.
        `reads` declares what the node may read (document, full path, shallow):
        its read set until its first run replaces it, so demand and order reach
        a never-ran node's inputs before it runs. It stays a promise after that:
        the writers of declared places are kept live and run before the node
        even when its last run did not read them, so a conditional read sees a
        current value the first time (no wasted run). A change to a declared
        place the last run did not read does not re-run the node.
        """
        if kind not in ("computation", "effect"):
            raise InvalidArgumentError(
                f"register: kind must be 'computation' or 'effect', got {kind!r}"
            )
        running = self._running
        if parent is None and running is not None:
            parent = running
        node = Node(
            fn,
            kind,
            next(self._ordinals),
            identity,
            tuple(outputs),
            label or str(getattr(fn, "__qualname__", "node")),
            parent,
        )
        if kind == "computation" and running is not None and running.is_live:
            node.provisional = True
        if parent is not None:
            parent.children[node] = None
        self.graph.add(node)
        declared = tuple(reads)
        if declared:
            reads_now = lean_reads(compact_reads(declared))
            self.graph.set_reads(node, reads_now)  # (lean already: set_reads keeps it)
            # Set after: while the read set is the declared one, `declared` adds no edge
            # and no `declared_only` entry, so the graph need not look at it now. The
            # object `set_reads` kept (equal, maybe another reader's: shared), so the node
            # holds one read set and key, not two, and `declared is reads` holds.
            node.declared = node.reads
        if node.is_live:
            self._candidates[node] = None
            if self._draining:
                self._push(node)
            elif not self._settling:
                self._request_pass()
        return node

    def remove(self, node: Node) -> None:
        """Unregister `node` (idempotent). Its reads and edges go; it never runs again."""
        if not node.registered:
            return
        if self.work.by_owner:
            self.work.cancel(node)  # its coroutine's result could land nowhere
        self.graph.remove(node)
        self._candidates.pop(node, None)
        if node.error is not None:
            self._failing.discard(node)
        siblings = node.parent._children if node.parent is not None else None
        if siblings is not None:
            siblings.pop(node, None)

    def set_debounce(self, node: Node, seconds: float) -> None:
        """Run `node` only once its inputs have been quiet for `seconds` (0 turns it off)."""
        if seconds < 0:
            raise InvalidArgumentError(
                f"set_debounce({node!r}): seconds must be >= 0, got {seconds}"
            )
        node.debounce = float(seconds)
        if not seconds:
            node.debounce_ready_at = 0.0
        node.update_gate()

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
        node.update_gate()

    def demand(self, node: Node) -> Callable[[], None]:
        """Hold explicit demand on `node` (it becomes a root); returns the release function."""
        was = node.is_live
        node.demand += 1
        self.graph.root_changed(node, was)
        released = False

        def release() -> None:
            nonlocal released
            if released or not node.registered:
                return
            released = True
            was_live = node.is_live
            node.demand -= 1
            self.graph.root_changed(node, was_live)

        return release

    # ------------------------------------------------------------------ invalidation
    def _on_notification(self, nf: Notification) -> None:
        source = nf.source
        suppress = (
            source.source if source is not None and nf.kind in ("commit", "integrate") else None
        )
        match = self.index.match
        invalidate = self._invalidate
        for change in nf.changes:
            for node in match(change):
                if node is not suppress:
                    invalidate(node)
        if not self._settling and self._candidates:
            # (Inside a settle, that settle propagates it; with no candidate, nothing
            # live read what changed.)
            self._request_pass()

    def invalidate(self, node: Node) -> None:
        """Mark `node` invalid: it runs again once live (say, the writes of its last
        commit were lost and are owed). Unregistered nodes are ignored."""
        self._invalidate(node)
        self._request_pass()

    def _invalidate(self, node: Node) -> None:
        if not node.registered:
            return
        self.stats.invalidations += 1
        if node.status == "clean":
            node.status = "invalid"
        gates = node._gates
        if gates is not None and gates.debounce:
            # Debounce: each invalidation pushes the earliest run out again.
            gates.debounce_ready_at = self.clock.now() + gates.debounce
            node.update_gate()
        # `is_live` and `_push`, inlined: every change a node reads comes through here.
        if node.live_refs > 0 or node.kind == "effect" or node.provisional or node.demand > 0:
            self._candidates[node] = None
            if self._draining:
                in_heap = self._in_heap
                if node not in in_heap:
                    in_heap.add(node)
                    heapq.heappush(self._heap, (node.height, node.ordinal, node))
                    self.stats.heap_pushes += 1

    def _on_live(self, node: Node) -> None:
        if node.registered and node.status != "clean":
            self._candidates[node] = None
            if self._draining:
                self._push(node)
            elif not self._settling:
                self._request_pass()

    def _push(self, node: Node) -> None:
        if node not in self._in_heap:
            self._in_heap.add(node)
            heapq.heappush(self._heap, (node.height, node.ordinal, node))
            self.stats.heap_pushes += 1

    def runnable(self) -> list[Node]:
        """Nodes that would run if `settle()` were called now."""
        now = self.clock.now()
        out: list[Node] = []
        stale: list[Node] = []
        for n in self._candidates:
            # Runnable: registered, not clean, live (`is_live`, inlined: a wave's every
            # node passes here), past its time gate and under its pass budget.
            if n.status == "clean" or not (
                n.registered
                and (n.live_refs > 0 or n.kind == "effect" or n.provisional or n.demand > 0)
            ):
                stale.append(n)  # ran, or went dormant: it comes back via _on_live
            elif n.eligible_at <= now and n.pass_runs < PASS_RUN_BUDGET:
                out.append(n)
        for n in stale:
            del self._candidates[n]
        if stale and not self._candidates:
            self._candidates = {}  # a dict never shrinks: drop a burst's table
        return out

    def deferred(self) -> list[Node]:
        """Live invalid nodes waiting on a time gate (backoff)."""
        now = self.clock.now()
        return [
            n for n in self._candidates if n.status != "clean" and n.is_live and n.eligible_at > now
        ]

    # ------------------------------------------------------------------ passes
    def settle(self) -> None:
        """Run everything runnable now, synchronously, until nothing is.

        Delivers what the store has answered first. Raises no error of a node or
        handler: a node whose last run in this settle raised is failing (its outputs
        absent, its pulls raise, its observers get `on_error`) and is recorded once in
        `errors()` and the `cellweave.scheduler` log when the settle ends; the rest
        of the graph still settled. Re-entrant calls (from inside a node) return at
        once.
        """
        if self._settling or self._closed:
            return
        self._settling = True
        try:
            pumped = False
            for _ in range(MAX_PASSES_PER_SETTLE):
                if not pumped:
                    self.replica.pump()
                seeds = self.runnable()
                if seeds:
                    self._pass(seeds)
                    pumped = True  # a pass ends with a pump
                else:
                    pumped = False
                    if not self._dispatch_next():
                        break
        finally:
            self._settling = False
        self._arm_timer()
        if self._errors or self._suspect_observations:
            self._report_failures()

    def _report_failures(self) -> None:
        # Only nodes still failing at the end: a node that raised on a transient
        # input (a first-run cascade reading a not-yet-computed value) and then
        # succeeded in the same settle is not an error.
        errors, self._errors = self._errors, {}
        for node, err in errors.items():
            if node.error is not None and node.registered:
                self.errors_log.add(
                    "effect" if node.kind == "effect" else "computation",
                    node.label,
                    _output_name(node),
                    err,
                )
        self._suspect_observations = False
        if errors or self._observations:
            for observation in list(self._observations.values()):
                failure = self.failure(observation.cell)
                if failure is not None:
                    observation.error(failure)

    def errors(self) -> list[ErrorRecord]:
        """The recent errors (at most `MAX_ERRORS`, oldest first): nodes still failing
        when a settle ended, handlers that raised or never converged, callbacks that
        raised. Each was logged once on the `cellweave.scheduler` logger."""
        return self.errors_log.records()

    def failing(self) -> list[Node]:
        """Registered nodes with declared outputs whose last run raised."""
        return self._failing.nodes()

    def failure(self, cell: Cell) -> NodeError | None:
        """The error of a failing computation whose output reading `cell` sees (links
        followed), naming the node and the cell; None if none. O(1) when nothing fails."""
        if not self._failing:
            return None
        probe = Transaction(self.replica, cell.identity)
        try:
            read_value(probe, cell.link())
            node = self._failing.seen_by(probe.reads)
        finally:
            probe.abort("failure probe")
        if node is None:
            return None
        cause = node.error
        err = NodeError(
            f"{cell!r} is absent: the computation {node.label!r} feeding it failed with"
            f" {type(cause).__name__}: {cause}",
            node=node,
        )
        err.__cause__ = cause
        return err

    def _pass(self, seeds: list[Node]) -> None:
        self.stats.passes += 1
        ran: dict[Node, None] = {}
        for _ in range(MAX_ITERS):
            self._drain(seeds, ran)
            self.replica.pump()
            seeds = self.runnable()
            if not seeds:
                break
        else:
            self._defer(seeds)
        if self._deliveries:
            self._deliver()
        now = self.clock.now()
        over = [
            n
            for n in ran
            if n.registered and n.status != "clean" and n.pass_runs >= PASS_RUN_BUDGET
        ]
        self._defer(over)
        for n in ran:
            n.pass_runs = 0
            gates = n._gates
            if gates is not None and n.status == "clean" and n.eligible_at <= now:
                gates.backoff_streak = 0
            if n.provisional and n.runs > 0:
                was = n.is_live
                n.provisional = False
                self.graph.root_changed(n, was)

    def _defer(self, nodes: Iterable[Node]) -> None:
        now = self.clock.now()
        for n in nodes:
            delay = min(BACKOFF_BASE * (2**n.backoff_streak), BACKOFF_CAP)
            n.backoff_streak += 1
            n.backoff_until = now + delay
            n.update_gate()
            self.stats.deferrals += 1

    def _drain(self, seeds: list[Node], ran: dict[Node, None]) -> None:
        self.stats.drains += 1
        heap = self._heap
        in_heap = self._in_heap
        pushed = len(heap)
        for n in seeds:  # `_push`, inlined (one heapify instead of a push per seed)
            if n not in in_heap:
                in_heap.add(n)
                heap.append((n.height, n.ordinal, n))
        heapq.heapify(heap)
        self.stats.heap_pushes += len(heap) - pushed
        size = len(heap)
        self._draining = True
        # The drain's commits go to the store as one batch when it ends: one
        # hand-over and one verdict delivery instead of one per run. Verdicts are
        # delivered by the pump after the drain either way.
        replica = self.replica
        replica.begin_batch()
        try:
            now = self._drain_started = self.clock.now()
            heappop = heapq.heappop
            run = self._run
            while heap:
                height, _, node = heappop(heap)
                if node.height != height and node.registered:
                    heapq.heappush(heap, (node.height, node.ordinal, node))
                    continue
                in_heap.discard(node)
                if not (
                    node.registered
                    and node.status != "clean"
                    and (
                        node.live_refs > 0
                        or node.kind == "effect"
                        or node.provisional
                        or node.demand > 0
                    )
                    and node.eligible_at <= now
                    and node.pass_runs < PASS_RUN_BUDGET
                ):  # runnable (as in `runnable()`), inlined: this loop runs once per node update
                    continue
                run(node)
                ran[node] = None
                size += 1
        finally:
            self._draining = False
            self._heap.clear()
            self._in_heap.clear()
            replica.end_batch()
        self.stats.last_work_set = size
        self.stats.max_work_set = max(self.stats.max_work_set, size)

    def _run(self, node: Node) -> None:
        node.status = "clean"  # before the run: foreign changes during it re-invalidate
        node.pass_runs += 1
        node.runs += 1
        node.last_run = self._drain_started  # (no clock call per run)
        gates = node._gates
        if gates is not None and gates.throttle:
            gates.throttle_ready_at = self.clock.now() + gates.throttle
            node.update_gate()
        stats = self.stats
        if node.kind == "effect":
            stats.runs_effect += 1
        else:
            stats.runs_computation += 1
        replica = self.replica
        if replica.closed:
            raise TransactionError(f"replica {replica.session_id} is closed")  # as `edit` says
        tx = Transaction(replica, node.identity, source=node)  # `replica.edit`, without the call
        previous, self._running = self._running, node
        previous_tx, self._current_tx = self._current_tx, tx
        later = False
        try:
            returned = node.fn(tx)
            if returned is not None and inspect.isawaitable(returned):
                later = True  # an async run: it commits when its coroutine ends
                self._later(node, tx, returned)
            else:
                if self.work.by_owner:
                    self.work.cancel(node)  # a sync run supersedes an async one in flight
                if gates is not None and gates.error is not None:
                    gates.error = None
                    self._failing.discard(node)  # recovered: its outputs are its own again
        except Exception as exc:
            if tx.is_open:
                tx.abort(f"{node.label} raised")
            self._fail(node, exc)
        finally:
            self._running = previous
            self._current_tx = previous_tx
        if node.registered:
            # Keep the read set even after an error: the node re-runs when its inputs change.
            log = tx._log  # `tx.reads`, without the property call
            if len(log) == 1:
                # One read: compare with the read set itself, and keep no log.
                key, path, shallow = log[0]
                reads = node.reads
                node.raw_reads = None
                entry = reads.entry if type(reads) is OneRead and reads.key == key else None
                if entry is None:
                    moved = True
                else:
                    # Unchanged iff the read set is exactly this path, deep or shallow
                    # as read now: (((path,), ()) or ((), (path,)), what compact_reads
                    # would make of this log.
                    other_kind, this_kind = entry if shallow else (entry[1], entry[0])
                    moved = bool(other_kind) or len(this_kind) != 1 or this_kind[0] != path
                if moved:
                    self.graph.set_reads(node, compact_reads(log))
            elif log != node.raw_reads:  # most runs read exactly what they read last time
                node.raw_reads = log
                self.graph.set_reads(node, compact_reads(log))
        if later:
            return  # an async run: its transaction stays open until its coroutine ends
        if tx.status == "open":
            self._commit_run(node, tx)

    def _commit_run(self, node: Node, tx: Transaction) -> None:
        stats = self.stats
        stats.commits += 1
        try:
            if node._gates is None:
                # Nothing to do on OK: be called only on a failure (no call per commit).
                # (A commit made before an earlier one of this node failed does not
                # reset `retries` on OK; the re-run that failure causes commits with
                # the gate record present, and its OK resets it.)
                tx.commit_detached(on_failure=self._failed)
            else:  # an OK commit resets the node's retry count: hear about it too
                tx.commit_detached(self._settled)
        finally:
            # A commit that changed nothing (elided) or failed its local basis check
            # settled inside `commit_detached` without calling `_settled`: handle it
            # here (most effect runs commit nothing).
            result = tx.result
            if result is not None and (result.outcome is not Outcome.OK or node._gates is not None):
                self._on_commit(node, result)

    def _later(self, node: Node, tx: Transaction, awaitable: Any) -> None:
        """Run an async node's awaitable in a task (superseding its previous one) and
        commit `tx` when it completes: its basis is what the run read before the first
        await, so a result computed from inputs that changed meanwhile fails the commit
        as STALE_BASIS and the node runs again. Without a running event loop the run
        fails (nothing could ever await it)."""
        task = self.work.start(
            node,
            self._finish_node(node, tx, awaitable),
            node.label,
            awaitable,
            hint=" (await rt.idle(), pull() or send's handle instead of settle())",
        )

        def ended(_task: asyncio.Task[None]) -> None:
            # (also for a task cancelled before its first step, which ran none of its body)
            if tx.is_open:
                tx.abort(f"{node.label}: its coroutine was cancelled")

        task.add_done_callback(ended)

    async def _finish_node(self, node: Node, tx: Transaction, awaitable: Any) -> None:
        task = asyncio.current_task()
        try:
            await awaitable
        except Exception as exc:
            if tx.is_open:
                tx.abort(f"{node.label} raised")
            if self.work.current(node, task) and node.registered:
                self.work.release(node, task)
                self._fail(node, exc)
                self._report_failures()
                self._kick()
            return
        if not (self.work.current(node, task) and node.registered and tx.is_open):
            if tx.is_open:
                tx.abort(f"{node.label}: superseded")
            return
        self.work.release(node, task)
        gates = node._gates
        if gates is not None and gates.error is not None:
            gates.error = None
            self._failing.discard(node)  # recovered: its outputs are its own again
        self._commit_run(node, tx)
        self._kick()

    def _kick(self) -> None:
        """Settle soon on the running loop (async work ended: its results propagate, a
        stale one runs again, a stream's next event goes)."""
        if self._kicked or self._closed:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._kicked = True

        def kicked() -> None:
            self._kicked = False
            if not self._closed and not self.replica.closed:
                self.settle()

        loop.call_soon(kicked)

    def _fail(self, node: Node, exc: Exception) -> None:
        """`node` raised: it is failing until it runs again (an input changes). Its
        declared outputs are made absent, so nothing reads a value computed from inputs
        that no longer hold; reading them finds this failure (`failure`)."""
        node.error = exc
        err = NodeError(f"{node!r} raised {type(exc).__name__}: {exc}", node=node)
        err.__cause__ = exc
        self._errors[node] = err
        if not node.outputs or not node.registered:
            return
        self._failing.add(node)
        # Its own commit: never invalidates the node itself (source), only readers.
        away = Transaction(self.replica, node.identity, source=node)
        try:
            for key, path in node.outputs:
                away.write(key, path, MISSING)
        except CellweaveError:
            away.abort(f"{node.label}: its outputs could not be cleared")
            return
        self.stats.commits += 1
        away.commit_detached(on_failure=self._failed)

    def _on_node_failed(self, tx: Transaction, result: CommitResult) -> None:
        node = tx.source
        assert isinstance(node, Node)
        self._on_commit(node, result)

    def _on_node_settled(self, tx: Transaction, result: CommitResult) -> None:
        node = tx.source
        assert isinstance(node, Node)
        if result.outcome is Outcome.OK:  # the common case, without a second call
            gates = node._gates
            if gates is not None:
                gates.retries = 0
            return
        self._on_commit(node, result)

    def _on_commit(self, node: Node, result: CommitResult) -> None:
        if result.outcome is Outcome.OK:
            gates = node._gates
            if gates is not None:  # (the `retries` setter would make the record)
                gates.retries = 0
            return
        if result.outcome is Outcome.STALE_BASIS:
            # Everything staged is gone; re-run against fresher state (off budget).
            self.stats.stale_reruns += 1
            self._invalidate(node)
            return
        if result.outcome in (Outcome.PERMANENT, Outcome.TERMINAL, Outcome.ABORTED):
            node.retries = 0
            return
        node.retries += 1
        if node.retries < MAX_REACTIVE_RETRIES:
            self._invalidate(node)

    # ------------------------------------------------------------------ time
    def _arm_timer(self) -> None:
        if not isinstance(self.clock, SystemClock):
            return  # a manual clock: the test advances it and calls settle()
        pending = [n.eligible_at for n in self.deferred()]
        head = self.events.head()
        if head is not None and head.not_before > self.clock.now():
            pending.append(head.not_before)
        if not pending:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
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
        self._timer = loop.call_later(max(0.0, at - self.clock.now()), self._wake)

    def _wake(self) -> None:
        self._timer = None
        self.settle()

    # ------------------------------------------------------------------ propagation on the loop
    def _request_pass(self) -> None:
        """With a running event loop, make sure one pass runs on it after the current callback.

        Called for every change that may make work runnable: a local commit's or an
        integrated change's notification, a mailbox drain (verdicts, loads, other
        sessions' commits), a node becoming live, a queued event. Coalesced: at most
        one pass is scheduled per loop turn however many changes arrive before it
        runs, so writes made in one callback (one notebook cell) settle together and
        observers see only the settled state. Without a running loop it does nothing:
        `settle()` is then the pump. O(1).
        """
        if self._settling or self._closed:
            return  # a settle in progress propagates it itself
        mailbox = self.replica.mailbox
        # Nothing could run (a write nobody live reads, a verdict nobody waits on): no
        # pass to pay for. Checked first: this runs on every commit. (`_may_have_work`,
        # inlined, the cheapest test first.)
        if not (self._candidates or len(mailbox) or self.events.queue):
            return
        loop = asyncio._get_running_loop()
        if loop is None or self._pass_loop is loop:
            return
        # The mailbox drains on this loop from now on, so verdicts and other sessions'
        # commits wake it with no await from the user.
        if mailbox.loop is not loop:
            mailbox.attach(loop)
        # (A pass scheduled on another loop, closed or not running now, never runs
        # here: this one replaces it.)
        self._pass_loop = loop
        loop.call_soon(self._auto_pass)

    def _on_drained(self, from_loop: bool) -> None:
        """The mailbox delivered verdicts, loads or other sessions' commits.

        When the loop itself ran the drain (its own callback, nothing of the user's
        around it), propagate now: what arrived reaches observers in the loop turn
        it was integrated. A drain inside user code (a pump, awaiting a result)
        schedules the pass after the current callback instead.
        """
        if from_loop and not self._settling and not self._closed:
            if self._may_have_work():
                self.settle()
        else:
            self._request_pass()

    def _may_have_work(self) -> bool:
        """Could a settle do anything now? (A candidate, a queued event, a delivery.)
        False means certainly not: a verdict nobody waits on costs no pass. O(1)."""
        return bool(self._candidates or self.events.queue or len(self.replica.mailbox))

    def _auto_pass(self) -> None:
        """The pass `_request_pass` scheduled: a `settle()` (which raises no node or
        handler error: failures go to `errors()` and observers, as in any settle)."""
        self._pass_loop = None
        if self._closed or self._settling:
            return
        self.settle()

    def _deliver(self) -> None:
        """Call the sinks whose run read a new value in the pass that just ended.

        A sink delivers once per pass, with the value its last run read: a run that
        read a value still being computed (a link found only by following it, whose
        writer ran after the sink in the same pass) is superseded by the re-run.
        """
        deliveries = self._deliveries
        while deliveries:
            self._deliveries = {}  # (a sink's function may write: its re-runs land here)
            for sink in deliveries:
                node = sink.node
                if node is not None and node.registered:
                    try:
                        sink.deliver()
                    except Exception as exc:
                        self._fail(node, exc)  # the sink's function raised: its node fails
            deliveries = self._deliveries

    # ------------------------------------------------------------------ waiting
    def busy(self) -> bool:
        """Something is runnable, a verdict or load is in flight, or a delivery is queued."""
        return bool(
            self.replica.in_flight()
            or len(self.replica.mailbox)
            or self.runnable()
            or self.events.queue
            or self.work
        )

    async def idle(self) -> None:
        """Wait until nothing is runnable, no verdict or load is in flight, nothing is queued."""
        loop = asyncio.get_running_loop()
        self.replica.mailbox.attach(loop)
        while True:
            self.settle()
            if not self.busy():
                return
            fut: asyncio.Future[None] = loop.create_future()

            def wake(fut: asyncio.Future[None] = fut) -> None:
                def set_done() -> None:
                    if not fut.done():
                        fut.set_result(None)

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

    # ------------------------------------------------------------------ effects
    def sink(self, cell: Cell, fn: Callable[[Any], None]) -> Callable[[], None]:
        """An effect: `fn(value)` with the settled value, then after every settled change.

        The first call comes from the pass this demand starts (run here, at once): a
        value that can be computed is computed first, never delivered as a
        placeholder. An absent value is delivered as `None`; `fn` receives plain
        data only (links followed as `get()` follows them; containers are fresh
        copies). A change back to the value last delivered is not delivered.
        Returns cancel.
        """
        return self._add_sink(cell, _Sink(self, cell.link(), fn), "sink")

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
        return self._add_sink(cell, _PatchSink(self, cell.link(), fn), "patches")

    def _add_sink(self, cell: Cell, sink: _Sink, what: str) -> Callable[[], None]:
        if not callable(sink.fn):
            raise CellweaveError(f"{what}({cell!r}): fn must be callable, got {sink.fn!r}")
        node = self.register(
            sink,
            identity=cell.identity,
            kind="effect",
            label=f"{what} {sink.link}",
            reads=_declared(cell),
        )
        sink.node = node
        self.settle()

        def cancel() -> None:
            self.remove(node)
            sink.materializer.close()

        return cancel

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
        `out`'s identity. The node function is one small object, not a closure (about
        64 bytes instead of 340 per node: see the `memory per node` benchmark).
        """
        if not isinstance(out, Cell):
            raise CellweaveError(f"derive: out must be a Cell, got {out!r}")
        if isinstance(inputs, Cell | str) or not isinstance(inputs, Sequence):
            raise CellweaveError(
                f"derive({out!r}): inputs must be a sequence of Cells, got {inputs!r}"
            )
        if not callable(fn):
            raise CellweaveError(f"derive({out!r}): fn must be callable, got {fn!r}")
        for i, cell in enumerate(inputs):
            if not isinstance(cell, Cell):
                raise CellweaveError(f"derive({out!r}): inputs[{i}] is not a Cell: {cell!r}")
            if cell.identity != out.identity:
                raise CellweaveError(
                    f"derive({out!r}): inputs[{i}] {cell!r} belongs to identity"
                    f" {cell.identity!r}, the output to {out.identity!r}"
                )
        key = out.doc_key
        path = ("value", *out.path) if out.path else _VALUE_PATH
        links = tuple(c.link() for c in inputs)
        run = _Derive(fn, links[0] if len(links) == 1 else links, key, path)
        return self.register(
            run,
            identity=out.identity,
            outputs=((key, path),),
            reads=[_declared(c)[0] for c in inputs],
            # One shared default label (a formatted one cost 74 bytes per node): the
            # node's repr names the document it writes.
            label=label or "derive",
        )

    def observe(self, cell: Cell) -> reactivex.Observable[Any]:
        """A reactivex Observable: the current value first, then once per settled change.

        Every subscription to the same cell shares one sink node. A failing
        computation behind the value ends it with `on_error` (a `NodeError`);
        `end_observations` of its document (the run producing it ended) or `close()`
        end it with `on_completed`.
        """
        key = (cell.identity, cell.link())

        def subscribe(observer: Any, scheduler: Any = None) -> Disposable:
            if self._closed:
                observer.on_completed()
                return Disposable()
            observation = self._observations.get(key)
            if observation is None:
                observation = self._observations[key] = Observation(self, cell, key)
            return observation.subscribe(observer)

        return reactivex.create(subscribe)

    def end_observations(self, doc: DocKey) -> int:
        """Complete every observation of a cell in document `doc` (the run that produces
        it ended); returns how many."""
        ending = [o for o in self._observations.values() if o.doc_key == doc]
        for observation in ending:
            observation.complete()
        return len(ending)

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

        def subscribe(observer: Any, scheduler: Any = None) -> DisposableBase:
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

    def pull_now(self, cell: Cell) -> Any:
        """Demand `cell` until the graph feeding it settles (synchronously), then its value.

        Raises `NodeError` (the original error its cause) if the value reads the output
        of a computation that is failing."""
        box: list[Any] = [MISSING]
        link = cell.link()

        def run(tx: Transaction) -> None:
            box[0] = read_value(tx, link)

        node = self.register(
            run, identity=cell.identity, kind="effect", label=f"pull {link}", reads=_declared(cell)
        )
        try:
            self.settle()
        finally:
            self.remove(node)
        failure = self.failure(cell)
        if failure is not None:
            raise failure
        return thaw(box[0])

    async def pull(self, cell: Cell) -> Any:
        """Demand `cell` until the graph feeding it settles and verdicts are in, then its value.

        Raises `NodeError` (the original error its cause) if the value reads the output
        of a computation that is failing."""
        link = cell.link()
        box: list[Any] = [MISSING]

        def run(tx: Transaction) -> None:
            box[0] = read_value(tx, link)

        node = self.register(
            run, identity=cell.identity, kind="effect", label=f"pull {link}", reads=_declared(cell)
        )
        try:
            await self.idle()
        finally:
            self.remove(node)
        failure = self.failure(cell)  # the pull of a failing value raises its error
        if failure is not None:
            raise failure
        return thaw(box[0])

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
        key = (stream.doc_key, ("value", *stream.path))
        existing = self.events.handlers.get(key)
        if existing is not None:
            raise CellweaveError(
                f"stream {stream!r} already has a handler ({existing.label!r}); one per stream"
            )
        handler = Handler(
            key,
            fn,
            stream.identity,
            tuple(reads),
            label or str(getattr(fn, "__qualname__", "handler")),
            on_result,
        )
        self.events.handlers[key] = handler
        self.events.retired.pop(key, None)
        return handler

    def handler_label(self, stream: Cell) -> str | None:
        """The label of the handler bound to `stream` (the exact cell, links not
        followed), or None when no handler is bound there. O(1)."""
        handler = self.events.handlers.get((stream.doc_key, ("value", *stream.path)))
        return None if handler is None else handler.label

    def remove_handler(self, handler: Handler) -> None:
        """Unbind `handler`; its queued events are dropped, and so is every event sent to
        its stream later (until a handler is bound there again), as the reference does."""
        if self.events.handlers.get(handler.stream) is handler:
            del self.events.handlers[handler.stream]
            self.events.retire(handler)
        handler.registered = False
        self.work.cancel(handler)  # its handling in flight is dropped
        for ev in [e for e in self.events.queue if e.handler is handler]:
            self._drop(ev, "dropped", CellweaveError(f"{handler!r} was removed"))

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
        if cause is not None and error.__cause__ is None:
            error.__cause__ = cause
        self.errors_log.add("send", source, cell, error)

    def has_handler(self, stream: Cell) -> bool:
        """Whether a handler is bound to `stream` now (links are not followed)."""
        return (stream.doc_key, ("value", *stream.path)) in self.events.handlers

    def had_handler(self, stream: Cell) -> bool:
        """Whether `stream`'s handler was removed and none is bound since (a send there
        is dropped). Remembered for the last `MAX_RETIRED` removed handlers."""
        return (stream.doc_key, ("value", *stream.path)) in self.events.retired

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
        key = (stream.doc_key, ("value", *stream.path))
        handler = self.events.handlers.get(key)
        if handler is None:
            handler = self.events.retired.get(key)
            if handler is None:
                raise CellweaveError(
                    f"no handler is bound to stream {stream!r}; cannot send {payload!r}"
                )
        value = normalize(payload, where=f"event for {stream!r}")
        if origin is None:
            origin = self._current_tx or handling_tx.get()
        if actor is None and origin is not None and origin.meta.get("event") is not None:
            actor = origin.identity  # a handler's follow-up keeps its actor (multi-hop)
        if event_id is None:
            ev_id = self.events.mint_id()
        else:
            # Scoped to the sending principal, each coordinate its own list element: one
            # principal's id never drops another's event, and no two identities' names run
            # together (("alice:x", "y") is not ("alice", "x:y")). Per principal, not per
            # session: a redelivery from the same principal's other session or runtime is
            # still the same invocation.
            who = actor or handler.identity
            doc = key[0]
            cause = {
                "ingress": event_id,
                "stream": [doc.space, doc.id, doc.scope, doc.principal, doc.session],
                "by": who.principal,
            }
            ev_id = "ev:" + entity_id(cause)
        ev = QueuedEvent(
            ev_id,
            self.events.next_seq(),
            handler,
            value,
            origin,
            retry,
            on_settle=on_settle,
            actor=actor,
        )
        if not handler.registered:
            # Its handler was removed: dropped now, as the events queued for it were.
            self._drop(ev, "dropped", CellweaveError(f"{handler!r} was removed"))
            return ev
        self.events.queue.add(ev)
        if origin is not None:
            self.lineage.record_event(origin, ev)
        self._request_pass()
        return ev

    def _drop(self, ev: QueuedEvent, status: Any, error: BaseException | None) -> None:
        if ev.status == "queued":
            self.events.queue.discard(ev)
        ev.status = status
        ev.error = error
        if ev.on_settle is not None:
            ev.on_settle(ev)

    def _origin_failed(self, origin: Transaction, events: list[QueuedEvent]) -> None:
        for ev in events:
            if ev.status == "queued":
                self._drop(
                    ev, "dropped", OriginFailedError(f"the transaction that sent {ev!r} failed")
                )

    def _dispatch_next(self) -> bool:
        """Dispatch the lane head if it may go now; True if something was done."""
        now = self.clock.now()
        queue = self.events.queue
        busy = self.work.busy
        i = 0
        while i < len(queue):
            ev = queue[i]
            if busy and ev.handler in busy:
                i += 1  # its stream is handling an earlier event: other streams go on
                continue
            if not ev.handler.registered:
                self._drop(ev, "dropped", CellweaveError(f"{ev.handler!r} was removed"))
                continue
            if ev.origin is not None:
                status = self.lineage.status(ev.origin)
                if status == "failed":
                    self._drop(ev, "dropped", OriginFailedError(f"the origin of {ev!r} failed"))
                    continue
                if status == "pending":
                    return False  # FIFO: later events wait behind it
            if ev.not_before > now:
                return False
            self._preflight(ev.handler)
            self._dispatch(ev)
            return True
        return False

    def _preflight(self, handler: Handler) -> None:
        if not handler.reads:
            return
        reads = handler.reads

        def read_all(tx: Transaction) -> None:
            for key, path, shallow in reads:
                tx.read(key, path, shallow=shallow)

        node = self.register(
            read_all, identity=handler.identity, kind="effect", label="preflight", reads=reads
        )
        try:
            for _ in range(MAX_PASSES_PER_SETTLE):
                self.replica.pump()
                seeds = self.runnable()
                if not seeds:
                    break
                self._pass(seeds)
        finally:
            self.remove(node)

    def _dispatch(self, ev: QueuedEvent) -> None:
        self.events.queue.discard(ev)
        ev.status = "dispatched"
        handler = ev.handler
        tx = self.replica.edit(ev.actor or handler.identity, source=handler)
        tx.meta["event"] = ev
        receipt = ev.receipt_key()
        tx.create_only(receipt, authority=self._authority)
        previous_tx, self._current_tx = self._current_tx, tx
        try:
            handler.runs += 1
            returned = handler.fn(tx, thaw(ev.payload))
            if returned is not None and inspect.isawaitable(returned):
                self._handle_later(ev, tx, returned)
                return
            if tx.is_open:
                tx.write_internal(self._authority, receipt, ("value",), {"event": ev.id})
                if handler.on_result is not None:
                    handler.on_result(tx, ev, returned)
        except Exception as exc:
            if tx.is_open:
                tx.abort(f"{handler.label} raised {type(exc).__name__}")
            err = HandlerError(f"{handler!r} raised {type(exc).__name__}: {exc} (event {ev!r})")
            err.__cause__ = exc
            self.errors_log.add("handler", handler.label, _stream_name(handler), err)
            self._drop_dispatched(ev, "failed", err)
            return
        finally:
            self._current_tx = previous_tx
        if not tx.is_open:  # the handler aborted its own transaction
            self._drop_dispatched(ev, "dropped", tx.result.error if tx.result else None)
            return
        tx.commit().add_done_callback(functools.partial(self._on_event_commit, ev))

    def _handle_later(self, ev: QueuedEvent, tx: Transaction, awaitable: Any) -> None:
        """An async handler: its stream is busy (its next events wait) until the
        handling's coroutine has ended and its commit's verdict is in; other streams go
        on. Without a running event loop the handling fails."""
        handler = ev.handler
        task = self.work.start(
            handler, self._finish_event(ev, tx, awaitable), handler.label, awaitable
        )
        self.work.busy[handler] = None

        def ended(task: asyncio.Task[None]) -> None:
            # A cancelled handling (also one cancelled before its first step, which ran
            # none of its body) is dropped, and its stream is free again.
            if not task.cancelled():
                return
            if tx.is_open:
                tx.abort(f"{handler.label}: its coroutine was cancelled")
            self.work.busy.pop(handler, None)
            if ev.status == "dispatched":
                self._drop_dispatched(ev, "dropped", CellweaveError(f"{handler!r} was removed"))

        task.add_done_callback(ended)

    async def _finish_event(self, ev: QueuedEvent, tx: Transaction, awaitable: Any) -> None:
        handler = ev.handler
        task = asyncio.current_task()
        handling_tx.set(tx)  # (this task's own context) the origin of what it sends
        try:
            returned = await awaitable
            if tx.is_open:
                tx.write_internal(self._authority, ev.receipt_key(), ("value",), {"event": ev.id})
                if handler.on_result is not None:
                    handler.on_result(tx, ev, returned)
        except Exception as exc:
            self.work.release(handler, task)
            self.work.busy.pop(handler, None)
            if tx.is_open:
                tx.abort(f"{handler.label} raised {type(exc).__name__}")
            err = HandlerError(f"{handler!r} raised {type(exc).__name__}: {exc} (event {ev!r})")
            err.__cause__ = exc
            self.errors_log.add("handler", handler.label, _stream_name(handler), err)
            self._drop_dispatched(ev, "failed", err)
            self._kick()
            return
        self.work.release(handler, task)
        if not tx.is_open:  # the handler aborted its own transaction
            self.work.busy.pop(handler, None)
            self._drop_dispatched(ev, "dropped", tx.result.error if tx.result else None)
            self._kick()
            return

        def verdict(pending: Pending[CommitResult]) -> None:
            self.work.busy.pop(handler, None)  # before a stale retry is queued again
            self._on_event_commit(ev, pending)
            self._kick()

        tx.commit().add_done_callback(verdict)
        self._kick()

    def _drop_dispatched(self, ev: QueuedEvent, status: Any, error: BaseException | None) -> None:
        ev.status = status
        ev.error = error
        if ev.on_settle is not None:
            ev.on_settle(ev)

    def _on_event_commit(self, ev: QueuedEvent, pending: Pending[CommitResult]) -> None:
        result = pending.result()
        ev.result = result
        if result.ok:
            self._drop_dispatched(ev, "done", None)
            return
        if result.outcome is Outcome.STALE_BASIS and ev.retry and ev.handler.registered:
            now = self.clock.now()
            if ev.first_failure is None:
                ev.first_failure = now
            if now - ev.first_failure < RETRY_WINDOW:
                ev.attempts += 1
                ev.not_before = now + retry_delay(ev.attempts)
                ev.status = "queued"
                self.events.queue.add(ev)  # keeps its first-enqueue place
                return
            err = CommitConvergenceError(
                f"{ev!r} kept failing on a stale basis for {RETRY_WINDOW} s ({ev.attempts} retries)"
            )
            err.__cause__ = result.error
            self.errors_log.add("handler", ev.handler.label, _stream_name(ev.handler), err)
            self._drop_dispatched(ev, "failed", err)
            return
        # PERMANENT: a duplicate delivery lost the receipt race; never retried.
        self._drop_dispatched(ev, "dropped", result.error)

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
                self._drop(ev, "dropped", CellweaveError(f"{ev!r}: the scheduler closed"))
            for observation in list(self._observations.values()):
                observation.complete()
        finally:
            self._unsubscribe()
            if self._timer is not None:
                self._timer.cancel()
            if self.replica.mailbox.after_drain == self._on_drained:
                self.replica.mailbox.after_drain = None

    def _check(self) -> None:
        self.events._check()
        self.work._check()
        live_dirty = {n for n in self.graph.nodes if n.status != "clean" and n.is_live}
        assert live_dirty <= set(self._candidates), live_dirty - set(self._candidates)
        assert all(n.registered for n in self.graph.nodes)
        self.graph._check()
        self._failing._check()
        self.errors_log._check()
        for observation in self._observations.values():
            observation._check()


def _declared(cell: Cell) -> tuple[tuple[DocKey, Path, bool]]:
    return ((cell.doc_key, ("value", *cell.path), False),)


_VALUE_PATH: Final = ("value",)


def _output_name(node: Node) -> str | None:
    """The cell a node writes, for error records (its first declared output)."""
    if not node.outputs:
        return None
    key, path = node.outputs[0]
    return f"{key}{list(path[1:])}" if len(path) > 1 else str(key)


def _stream_name(handler: Handler) -> str:
    key, path = handler.stream
    return f"{key}{list(path[1:])}" if len(path) > 1 else str(key)


def _plain(value: Any) -> Any:
    """A read value as a function receives it: None for absent, containers copied."""
    t = type(value)
    if t is dict or t is list:
        return thaw(value)
    return None if value is MISSING else value


class _Derive:
    """The node function of `Scheduler.derive`: writes `fn(*input values)` at `path`.

    A slotted callable rather than a closure: one object per node (the closure,
    its tuple and three cells cost about 340 bytes). `inputs` is the one input's
    `Link` itself when there is one (no tuple), else a tuple of links.
    """

    __slots__ = ("fn", "inputs", "key", "path")

    def __init__(
        self, fn: Callable[..., Any], inputs: Link | tuple[Link, ...], key: DocKey, path: Path
    ) -> None:
        self.fn = fn
        self.inputs = inputs
        self.key = key
        self.path = path

    def __call__(self, tx: Transaction) -> None:
        inputs = self.inputs
        if isinstance(inputs, tuple):
            value = self.fn(*[_plain(read_value(tx, link)) for link in inputs])
        else:
            value = self.fn(_plain(read_value(tx, inputs)))
        tx.write(self.key, self.path, value)


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


_UNSET: Final = _Unset()


class _Sink:
    """The node function of `Scheduler.sink`: reads the value, delivers it after the pass.

    `shown` is the value last delivered (stored form, never handed out), `pending`
    the one a run read this pass. Absent reads as None, so absent and None are one
    delivered value.
    """

    __slots__ = ("fn", "link", "materializer", "node", "pending", "scheduler", "shown")

    def __init__(self, scheduler: Scheduler, link: Link, fn: Callable[[Any], None]) -> None:
        self.scheduler = scheduler
        self.link = link
        # Keeps the materialized value between runs: after a one-element edit of a long
        # mapped list, only that element's links are read again, and the unchanged
        # elements stay the same objects (the patch diff skips them by identity).
        self.materializer = Materializer(scheduler.replica)
        self.fn: Any = fn
        self.node: Node | None = None
        self.shown: Any = _UNSET
        self.pending: Any = _UNSET

    def __call__(self, tx: Transaction) -> None:
        value = self.materializer.read(tx, self.link)
        if value is MISSING:
            value = None
        shown = self.shown
        if value is shown or (shown is not _UNSET and same_value(value, shown)):
            self.pending = _UNSET  # back to what was delivered: nothing to say
            return
        self.pending = value
        self.scheduler._deliveries[self] = None

    def deliver(self) -> None:
        value = self.pending
        if value is _UNSET:
            return
        self.pending = _UNSET
        self.shown = value
        t = type(value)
        # (`thaw` copies containers only; a kept list of flat records in C.)
        self.fn(self.materializer.thaw(value) if t is dict or t is list else value)


class _PatchSink(_Sink):
    """`Scheduler.sink_patches`: delivers JSON Patch operations instead of the value.

    The run does not compare values (the diff after the pass does, once): an equal
    value yields no operation and no call.
    """

    __slots__ = ()

    def __call__(self, tx: Transaction) -> None:
        value = self.materializer.read(tx, self.link)
        if value is MISSING:
            value = None
        if value is self.shown:
            self.pending = _UNSET
            return
        self.pending = value
        self.scheduler._deliveries[self] = None

    def deliver(self) -> None:
        value = self.pending
        if value is _UNSET:
            return
        self.pending = _UNSET
        shown, self.shown = self.shown, value
        if shown is _UNSET:
            ops = [{"op": "replace", "path": "", "value": self.materializer.thaw(value)}]
        else:
            ops = patch_ops(shown, value)
            if not ops:
                return
        self.fn(ops)
