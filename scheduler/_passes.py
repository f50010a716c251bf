"""Passes: runs exactly the work someone observes, in transactions.

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
through `eligible_at` and one wake timer, on an injectable clock (`_timers`).

Who runs a pass: `settle()` (and `sink`, `pull_now`, `idle`), or, with a
running event loop, the loop itself: every change that can make work
runnable (a notification, a mailbox delivery, a node becoming live, a queued
event) schedules one coalesced pass with `call_soon` (`_request_pass`). Sinks
deliver after the pass that read their value (`_sinks.deliver_all`), so an observer
sees settled values only, never one a later run of the same pass replaced.

`Passes` holds the node lifecycle (register, remove, demand), invalidation,
the pass and its drain, a run and its commit, and propagation on the loop;
the `Scheduler` (`_scheduler`) builds it with its parts and adds the API.

Invariants (checked by `Scheduler._check`)
- every live registered node whose status is not "clean" is in `_candidates`
  (which may also hold stale entries, dropped lazily): dormant invalid nodes
  cost nothing per settle. (No table of all invalid nodes is kept: a dormant
  never-ran computation, the usual state of most, would pay a dict entry.)
- the graph's invariants hold (edges mirror, liveness equals the oracle).
"""

from __future__ import annotations

import gc
import heapq
import inspect
import itertools
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Final

from cells import (
    RUN_DONE,
    Change,
    CommitResult,
    DocKey,
    Identity,
    InvalidArgumentError,
    Notification,
    Outcome,
    Path,
    Replica,
    RunComputed,
    Transaction,
    TransactionError,
    running_loop,
)

from ._async import AsyncWork
from ._async_runs import AsyncRuns
from ._clock import Clock
from ._direct import VALUE_FUNCTION_TYPES, given, run_direct
from ._dispatch import Dispatch
from ._events import EventLane
from ._failure_state import Failures
from ._graph import Graph
from ._host import MAX_PASSES_PER_SETTLE, Delivery, Statistics
from ._node import (
    FunctionNode,
    Node,
    NodeKind,
    OneRead,
    ReadEntry,
    SelfLabelled,
    TwoReads,
    lean_reads,
    one_output,
    two_reads_match,
)
from ._readers import ReaderIndex, compact_reads
from ._sinks import PatchSink, Sink, deliver_all
from ._timers import Timers

if TYPE_CHECKING:
    import asyncio  # at run time only where a loop runs (it is loaded then): see running_loop

MAX_ITERS: Final = 10
"""Drains per pass before remaining work is deferred."""
PASS_RUN_BUDGET: Final = 10
"""Runs of one node per pass before it is deferred."""
_DIRECT_SINKS: Final = frozenset((Sink, PatchSink))
"""Node types `_run` may run without a transaction (`Sink.run_direct`)."""
_KEPT_TABLE: Final = 64
"""The largest drain (nodes taken off its heap) after which `_drain` keeps its membership
set's table for the next one: 64 keep at most a 256-slot table (4 KB)."""
MAX_REACTIVE_RETRIES: Final = 10
"""Retries of a node whose commit failed for a reason other than a stale basis."""

PAUSE_COLLECTOR: Final = True
"""Whether `settle` pauses Python's cyclic garbage collector while it runs (not when the
program disabled it itself). A settle that sets up N nodes allocates O(N) objects that
stay alive, and every collection it triggers walks what is still young, so a 50,000
-element setup ran about 6,800 collections (1,400 paused). Paused, allocations still
count, and the collector runs after the settle ends; reference counting frees everything
acyclic meanwhile. See docs/performance.md, "Restart"."""


def _same_two(reads: TwoReads, log: list[tuple[DocKey, Path, bool]]) -> bool:
    """`two_reads_match` for the usual log, in one call: two deep reads, each of one
    document's whole value as its read set holds it (a cellx layer's node, a join of
    two cells), else `two_reads_match` itself. Per node update of two inputs."""
    (k1, p1, s1), (k2, p2, s2) = log
    if s1 or s2:
        return two_reads_match(reads, log)
    # (Its read set's documents come in either order: `compact_reads` groups in a set.)
    if k1 == reads.key:
        if k2 != reads.key2:
            return False
        e1, e2 = reads.entry, reads.entry2
    elif k1 == reads.key2 and k2 == reads.key:
        e1, e2 = reads.entry2, reads.entry
    else:
        return False
    # (`_is_only` of each, deep: exactly this path, nothing shallow; compared in C.)
    return e1 == ((p1,), ()) and e2 == ((p2,), ())


class Passes:
    """The node lifecycle, invalidation and passes of a `Scheduler` (its base class).

    Holds no `__init__`: the `Scheduler` sets every attribute below, with its parts.
    """

    replica: Replica
    clock: Clock
    index: ReaderIndex
    graph: Graph
    stats: Statistics
    events: EventLane
    work: AsyncWork
    _ordinals: itertools.count[int]
    _candidates: dict[Node, None]
    """Invalid nodes that were live when last seen; `runnable()` scans only these."""
    _heap: list[tuple[int, int, Node]]
    _in_heap: set[Node]
    _draining: bool
    _running: Node | None
    _settling: bool
    _closed: bool
    _current_tx: Transaction | None
    _kicked: bool
    _drain_started: float
    """The clock when the current drain started: each run's `Node.last_run`."""
    _pass_loop: asyncio.AbstractEventLoop | None
    """The loop a propagation pass is scheduled on (None: none is scheduled)."""
    _deliveries: dict[Delivery, None]
    """Sinks whose run read a new value this pass: called once it ends."""
    _settled: Callable[[Transaction, CommitResult], None]
    _failed: Callable[[Transaction, CommitResult], None]
    _timers: Timers
    _failures: Failures
    _dispatch: Dispatch
    _async_runs: AsyncRuns
    _tracked: dict[Node, set[DocKey] | None]
    """Nodes that asked which documents changed (`track_changes`): the documents whose
    changes matched their reads since their last `take_changes`, None if unknown."""
    _sinks_due: list[Node]
    """Direct sinks invalidated in the current drain, run when its heap is empty
    (`_read_sinks`); each is in `_in_heap` meanwhile (queued once)."""
    _keeping: Node | None
    """The running node that said it read exactly what its last run read (`keep_reads`)."""
    _replacing: Mapping[DocKey, ReadEntry | None] | None
    """The documents whose reads that node's run changed (`keep_reads`), if any."""

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
        make: Callable[..., Node] = FunctionNode,
    ) -> Node:
        """Add a node. A computation does nothing until demand reaches it; an effect is live now.

        A computation registered while a live node runs gets provisional demand
        (and is ordered after that node, its parent, unless `parent` names another),
        so it runs in the same pass.
        `reads` declares what the node may read (document, full path, shallow):
        its read set until its first run replaces it, so demand and order reach
        a never-ran node's inputs before it runs. It stays a promise after that:
        the writers of declared places are kept live and run before the node
        even when its last run did not read them, so a conditional read sees a
        current value the first time (no wasted run). A change to a declared
        place the last run did not read does not re-run the node. `make` builds the
        node from `Node`'s fields, positional, and `label=` (None: the node's class
        or function names it), as `FunctionNode` takes them (a subclass's
        constructor: `derive`'s `DeriveNode`, whose class says its label).
        """
        if kind not in ("computation", "effect"):
            raise InvalidArgumentError(
                f"register: kind must be 'computation' or 'effect', got {kind!r}"
            )
        running = self._running
        if parent is None and running is not None:
            parent = running
        held = self.replica.held_key
        node = make(  # (`make`: a `Node` subclass's constructor, see `derive`)
            fn,
            kind,
            next(self._ordinals),
            identity,
            # The replica's key object where it has the document (one key per document,
            # not one more per writer: `Replica.held_key`).
            one_output(tuple([(held(key), path) for key, path in outputs])),
            label=label
            or (None if isinstance(fn, SelfLabelled) else str(getattr(fn, "__qualname__", "node"))),
        )
        if (
            kind == "computation"
            and running is not None
            and (running.is_live or running in self.graph.pulled)
        ):
            node.provisional = True
        self.graph.add(node, parent)  # (kept by no slot: it only orders the node now)
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
        else:
            self._stale(node)  # never ran: a pull of what it feeds must find it
        return node

    def remove(self, node: Node) -> None:
        """Unregister `node` (idempotent). Its reads and edges go; it never runs again."""
        if not node.registered:
            return
        if self.work.by_owner:
            self.work.cancel(node)  # its coroutine's result could land nowhere
        self.graph.remove(node)
        self._candidates.pop(node, None)
        if node.eligible_at:
            self._timers.forget(node)
        if node.error is not None:
            self._failures.index.discard(node)
        if self._tracked:
            self._tracked.pop(node, None)

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
        on_change = self._on_change
        for change in nf.changes:
            on_change(change, suppress)

    def _on_change(self, change: Change, suppress: object, moved: bool = False) -> None:
        """Invalidate the readers of one document `change` whose read value changed (but
        `suppress`, the node whose own commit it is). The replica's `on_commit` for a local
        commit's change (no `Notification` made: a node's commit in a drain, a
        `Cell.set`), and each change of every other notification. `moved`: the commit
        moved the value at the change's one path (`Replica.subscribe`), so its readers
        there are found with no comparison (`ReaderIndex.match_moved`)."""
        hits = self.index.match_moved(change) if moved else self.index.match(change)
        if hits:
            tracked = self._tracked
            if tracked:
                key = change.key
                for node in hits:
                    if node is not suppress and node in tracked:
                        seen = tracked[node]
                        if seen is not None:
                            seen.add(key)
            draining = self._draining
            stats = self.stats
            candidates = self._candidates
            in_heap = self._in_heap
            for node in hits:
                if node is suppress:
                    continue
                if node._gates is not None or not node.registered:
                    self._invalidate(node)
                    continue
                # `_invalidate` for a gate-free node (a wave's every update, an edit's
                # readers), inlined: no debounce to push out.
                stats.invalidations += 1
                if node.status == "clean":
                    node.status = "invalid"
                if node.live_refs > 0 or node.provisional or node.demand > 0:
                    pass  # live (`is_live`, inlined, the usual computation first)
                elif node.kind != "effect":
                    self._stale(node)  # dormant: filed for pulls; it comes back via `_on_live`
                    continue
                elif draining and type(node) in _DIRECT_SINKS and node.direct:  # type: ignore[attr-defined]
                    # A sink that reads its cell's value directly: run once the drain's
                    # heap is empty (`_read_sinks`), with no heap entry, no turn of the
                    # drain loop and no `_run`.
                    candidates[node] = None
                    if node not in in_heap:
                        in_heap.add(node)
                        self._sinks_due.append(node)
                    continue
                candidates[node] = None
                if draining and node not in in_heap:
                    in_heap.add(node)
                    heapq.heappush(self._heap, (node.height, node.ordinal, node))
                    stats.heap_pushes += 1
        if not self._settling and self._candidates:
            # (Inside a settle, that settle propagates it; with no candidate, nothing
            # live read what changed.)
            self._request_pass()

    def invalidate(self, node: Node) -> None:
        """Mark `node` invalid: it runs again once live (say, the writes of its last
        commit were lost and are owed). Unregistered nodes are ignored. For a node that
        tracks its changes, what changed is unknown from here on (`take_changes`)."""
        if self._tracked and node in self._tracked:
            self._tracked[node] = None
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
            self._timers.update(node)
        # `is_live` and `_push`, inlined: every change a node reads comes through here.
        if node.live_refs > 0 or node.kind == "effect" or node.provisional or node.demand > 0:
            self._candidates[node] = None
            if self._draining:
                in_heap = self._in_heap
                if node not in in_heap:
                    in_heap.add(node)
                    heapq.heappush(self._heap, (node.height, node.ordinal, node))
                    self.stats.heap_pushes += 1
        else:
            self._stale(node)

    def _stale(self, node: Node) -> None:
        """`node` is dormant and not clean: a pull holding it runs it; either way it is
        filed for pulls (`Graph.taint`), and a pull whose held nodes it now feeds holds
        it too, so it runs before them in this pass (`_adopt`)."""
        graph = self.graph
        if graph.pulled and node in graph.pulled:
            self._candidates[node] = None  # (`_on_live`, inlined: it is not clean)
            if self._draining:
                self._push(node)
            elif not self._settling:
                self._request_pass()
        suspect = graph.suspect
        if node not in suspect:  # (`Graph.taint`, inlined: each edit of a dormant input)
            suspect[node] = None
            graph._spread(node)
            if graph.reached:
                self._adopt()

    def _adopt(self) -> None:
        """Pulled nodes that stale nodes now feed (`Graph.reached`): the pulls holding them
        hold those stale nodes too, queued to run first (by height) in this pass. Without
        it, a pulled node would run on a value about to change, and again after it."""
        graph = self.graph
        reached, graph.reached = graph.reached, []
        for r in reached:
            holds = graph.pulled.get(r)
            if not holds:
                continue
            region = graph.stale_region((r,))
            for hold in list(holds) if isinstance(holds, list) else [holds]:
                self._on_held(graph.hold(hold, region))

    def _on_held(self, nodes: list[Node]) -> None:
        """A pull newly holds `nodes`: those not clean run in this settle (or the next).

        No pass is requested on the loop (`_request_pass`): the pull holding them settles
        at once (`_sinks.pull` / `pull_now`), and a pass queued on the loop would find
        nothing left (it cost an asyncio handle per pull)."""
        candidates = self._candidates
        draining = self._draining
        for n in nodes:
            if n.status != "clean" and n.registered:
                candidates[n] = None
                if draining:
                    self._push(n)

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
        if not self._candidates:
            return []  # (asked after every drain and pass: no clock read for nothing)
        now = self.clock.now()
        out: list[Node] = []
        stale: list[Node] = []
        pulled = self.graph.pulled
        for n in self._candidates:
            # Runnable: registered, not clean, live (`is_live`, inlined: a wave's every
            # node passes here) or held by a pull (asked second: a pull's every held
            # node passes here), past its time gate and under its pass budget.
            if n.status == "clean" or not (
                n.registered
                and (
                    n.live_refs > 0
                    or n in pulled
                    or n.kind == "effect"
                    or n.provisional
                    or n.demand > 0
                )
            ):
                stale.append(n)  # ran, or went dormant: it comes back via _on_live
            elif n.eligible_at <= now and n.pass_runs < PASS_RUN_BUDGET:
                out.append(n)
        for n in stale:
            del self._candidates[n]
        if stale and not self._candidates:
            self._candidates = {}  # a dict never shrinks: drop a burst's table
        return out

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
        # The cyclic collector waits for the settle to end (`PAUSE_COLLECTOR`).
        collecting = PAUSE_COLLECTOR and gc.isenabled()
        if collecting:
            gc.disable()
        # What the store answers while it runs is pumped here (a pass ends with a pump):
        # no drain queued on the loop for it (`Mailbox.quiet`), unless some is left.
        mailbox = self.replica.mailbox
        mailbox.quiet = True
        try:
            pumped = False
            # (A counted `while`, not `for _ in range(...)`: no range object per settle, and
            # one C path fewer in a small update's path, see docs/performance.md.)
            passes = 0
            while passes < MAX_PASSES_PER_SETTLE:
                passes += 1
                if not pumped:
                    self.replica.pump()
                # (`runnable`'s first test, inlined: no call when nothing is a candidate.)
                seeds = self.runnable() if self._candidates else []
                if seeds:
                    self._pass(seeds)
                    pumped = True  # a pass ends with a pump
                else:
                    pumped = False
                    # (No queued event: nothing to dispatch, and no clock read for it.)
                    if not self.events.waiting or not self._dispatch.dispatch_next():
                        break
        finally:
            self._settling = False
            if collecting:
                gc.enable()
            mailbox.wake()
        self._timers.arm()
        failures = self._failures
        if failures.raised or failures.observations.suspect:  # (`pending_report`, inlined)
            failures.report()

    def _report_failures(self) -> None:
        self._failures.report()

    def _fail(self, node: Node, exc: Exception) -> None:
        self._failures.fail(node, exc)

    def _recovered(self, node: Node) -> None:
        self._failures.recovered(node)

    def _pass(self, seeds: list[Node]) -> None:
        self.stats.passes += 1
        # Every run of the pass, in order, a node once per run (the loop below is
        # idempotent per node): a list, not a dict, so a small pass makes no table.
        ran: list[Node] = []
        drains = 0
        while True:
            self._drain(seeds, ran)
            self.replica.pump()
            seeds = self.runnable() if self._candidates else []  # (no call for none)
            if not seeds:
                break
            drains += 1
            if drains == MAX_ITERS:
                self._timers.defer(seeds)
                break
        if self._deliveries:
            deliver_all(self._deliveries, self._fail)
        now: float | None = None  # (read for a gated node only: most passes have none)
        over: list[Node] | None = None
        for n in ran:
            # (One loop over the pass's runs, not two: it costs per node update.)
            if n.pass_runs >= PASS_RUN_BUDGET and n.registered and n.status != "clean":
                if over is None:
                    over = []
                over.append(n)  # deferred below: `defer` reads none of what this resets
            n.pass_runs = 0
            gates = n._gates
            if gates is not None and n.status == "clean":
                if now is None:
                    now = self.clock.now()
                if n.eligible_at <= now:
                    gates.backoff_streak = 0
            if n.provisional and n.runs > 0:
                was = n.is_live
                n.provisional = False
                self.graph.root_changed(n, was)
        if over is not None:
            self._timers.defer(over)
        if not self._candidates:
            self._candidates = {}  # a dict never shrinks: drop the pass's table

    def _drain(self, seeds: list[Node], ran: list[Node]) -> None:
        self.stats.drains += 1
        heap = self._heap
        in_heap = self._in_heap
        pushed = len(heap)
        if pushed or in_heap:
            for n in seeds:  # `_push`, inlined (one heapify instead of a push per seed)
                if n not in in_heap:
                    in_heap.add(n)
                    heap.append((n.height, n.ordinal, n))
        else:
            # The usual start (a drain ends with both emptied, and none nests): the seeds
            # (`runnable()`'s, each once) are the heap, with no membership test each.
            in_heap.update(seeds)
            append = heap.append
            for n in seeds:
                append((n.height, n.ordinal, n))
        heapq.heapify(heap)
        self.stats.heap_pushes += len(heap) - pushed
        size = len(heap)
        self._draining = True
        # The drain's commits go to the store as one batch when it ends: one
        # hand-over and one verdict delivery instead of one per run. Verdicts are
        # delivered by the pump after the drain either way.
        replica = self.replica
        sinks = self._sinks_due
        # A direct run's counts (`stats.runs_computation`, `commits`, `direct_commits`),
        # kept here and added when the drain ends: an attribute's `+= 1` past 256 makes
        # an int object (three per direct run), a local's stays a cached small int.
        computed = committed = 0
        stats = self.stats
        replica.begin_batch()
        try:
            now = self._drain_started = self.clock.now()
            heappop = heapq.heappop
            run = self._run
            ran_append = ran.append
            candidates = self._candidates
            work = self.work
            failed = self._failed
            value_functions = VALUE_FUNCTION_TYPES
            while True:
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
                            or node in self.graph.pulled  # (held by a pull: `_sinks._Pull`)
                        )
                        and node.eligible_at <= now
                        and node.pass_runs < PASS_RUN_BUDGET
                    ):  # runnable (as in `runnable()`), inlined: runs once per node update
                        continue
                    fn = node.fn
                    if (
                        type(fn) in value_functions  # (`isinstance(fn, ValueFunction)`)
                        and node._gates is None
                        and node.kind != "effect"
                        and not work.by_owner
                    ):
                        # `_run` of a value function (a derive, a lift) whose last run read
                        # its inputs' plain values, inlined (a small drain's every run, and
                        # a frame per node update of a long one): read, compute and commit
                        # with no transaction (`_direct.run_direct`, `Replica.run_field`).
                        node.status = "clean"  # (before the run, as `_run` says)
                        node.pass_runs += 1
                        node.runs += 1
                        node.last_run = now
                        computed += 1
                        try:
                            # (`fn` is a ValueFunction: its type is one, tested above.)
                            done = run_direct(node, fn, replica, failed)  # type: ignore[arg-type]
                        except Exception as exc:
                            self._fail(node, exc)
                        else:
                            if done is RUN_DONE:
                                committed += 1
                            else:
                                run(node, done)  # declined: the transaction's (or stale)
                    else:
                        run(node)
                    ran_append(node)
                    size += 1
                    status: str = node.status  # (what the run left: not what was checked)
                    if status == "clean":
                        # Its candidate entry is spent: drop it now rather than have
                        # `runnable()` find it stale among every node the pass ran.
                        candidates.pop(node, None)
                if not sinks:
                    break
                size += self._read_sinks(sinks)  # (a sink it cannot read goes on the heap)
        finally:
            self._draining = False
            if computed:
                stats.runs_computation += computed
                stats.commits += committed
                stats.direct_commits += committed
            # (Emptied already when the drain ended as usual. The membership set keeps its
            # table then, for the next drain to fill with no resize, unless a large drain
            # grew it: a set never shrinks but by `clear`.)
            if heap:
                heap.clear()
            if in_heap or size > _KEPT_TABLE:
                in_heap.clear()
            if sinks:
                sinks.clear()
            replica.end_batch()
        stats.last_work_set = size
        if size > stats.max_work_set:
            stats.max_work_set = size

    def _read_sinks(self, sinks: list[Node]) -> int:
        """Run the sinks `_on_notification` set aside in this drain (direct sinks: their
        last run read their cell's whole value, with no link), now that the drain's heap
        is empty; returns how many ran. Each runs as `_run` runs it (`Sink.run_direct`);
        one that cannot run directly now (a link appeared, a gate was set, async work
        started) goes on the heap, to run in a transaction as any effect does.

        Why after the heap and not at its height: a sink writes nothing, so no run of
        this drain depends on it, and every run the heap held (every writer below it)
        is done, so it reads what it would have read at its height; it delivers after
        the pass either way (`deliver_all`). A sink per node (cellx, broad) paid a heap
        entry, a turn of the drain loop and the start of `_run` per update for this.
        Its run does not count towards `PASS_RUN_BUDGET`: it runs at most once per
        drain, and a pass has at most `MAX_ITERS` (= the budget) drains."""
        replica = self.replica
        in_heap = self._in_heap
        candidates = self._candidates
        stats = self.stats
        started = self._drain_started
        # (What `_run` asks before it reads a sink directly.)
        blocked = replica.closed or bool(self.work.by_owner)
        ran = 0
        for node in sinks:
            in_heap.discard(node)
            if not node.registered or node.status == "clean":
                continue  # removed, or ran meanwhile (a seed of this drain)
            if blocked or node._gates is not None or not node.direct:  # type: ignore[attr-defined]
                self._push(node)  # a transaction run decides (`_run`)
                continue
            failed: Exception | None = None
            try:
                if not node.run_direct(replica):  # type: ignore[attr-defined]
                    self._push(node)  # (nothing done: the transaction run counts itself)
                    continue
            except Exception as exc:
                failed = exc
            # (`_run`'s bookkeeping of a run.)
            node.status = "clean"
            node.runs += 1
            node.last_run = started
            stats.runs_effect += 1
            candidates.pop(node, None)
            ran += 1
            if failed is not None:
                self._fail(node, failed)  # as `_run` does: the run ended, and raised
        sinks.clear()
        return ran

    def _run(self, node: Node, declined: int | CommitResult | RunComputed | None = None) -> None:
        """Run `node` (taken off the drain's heap, runnable). `declined`: `_drain` ran it
        as a value function already (`run_direct`, its bookkeeping made) and got this
        instead of `RUN_DONE`: a stale result, or its run in a transaction."""
        stats = self.stats
        replica = self.replica
        fn = node.fn  # (a direct derive whose write needs a transaction replaces it)
        gates = node._gates
        if declined is not None:
            if type(declined) is CommitResult:
                stats.commits += 1
                self._on_commit(node, declined)  # stale: re-run, as a transaction's
                return
            if type(declined) is RunComputed:
                # Its write, in a transaction (`fn` is the ValueFunction `_drain` ran).
                fn = given(fn, declined.value)  # type: ignore[arg-type]
            # (Else `RUN_NONE`: not this shape now, the transaction run decides.)
        else:
            node.status = "clean"  # before the run: foreign changes during it re-invalidate
            node.pass_runs += 1
            node.runs += 1
            node.last_run = self._drain_started  # (no clock call per run)
            if gates is not None and gates.throttle:
                gates.throttle_ready_at = self.clock.now() + gates.throttle
                self._timers.update(node)
            if node.kind == "effect":
                stats.runs_effect += 1
                if (
                    type(node) in _DIRECT_SINKS
                    and node.direct  # type: ignore[attr-defined]
                    and gates is None
                    and not replica.closed
                    and not self.work.by_owner
                ):
                    # A sink whose last run read its cell's whole value, with no link at
                    # or in it: read it from the replica, with no transaction (see
                    # `Sink.run_direct`). A sink per
                    # node (cellx, broad) paid a transaction, a read log and an elided
                    # commit per update for this.
                    try:
                        if node.run_direct(replica):  # type: ignore[attr-defined]
                            return
                    except Exception as exc:
                        self._fail(node, exc)
                        return
            else:
                # (A value function whose run may be direct never comes here: `_drain`
                # runs it, and passes what the replica declined as `declined`.)
                stats.runs_computation += 1
        if replica.closed:
            raise TransactionError(f"replica {replica.session_id} is closed")  # as `edit` says
        tx = Transaction(replica, node.identity, source=node)  # `replica.edit`, without the call
        previous, self._running = self._running, node
        previous_tx, self._current_tx = self._current_tx, tx
        later = False
        try:
            returned = fn(tx)
            if returned is not None and inspect.isawaitable(returned):
                later = True  # an async run: it commits when its coroutine ends
                self._async_runs.start(node, tx, returned)
            else:
                if self.work.by_owner:
                    self.work.cancel(node)  # a sync run supersedes an async one in flight
                if gates is not None and gates.error is not None:
                    self._failures.recovered(node)  # its outputs are its own again
        except Exception as exc:
            if tx.is_open:
                tx.abort(f"{node.label} raised")
            self._fail(node, exc)
        finally:
            self._running = previous
            self._current_tx = previous_tx
        if self._keeping is node:
            self._keeping = None  # it read what it read last time: its read set stays
            replace, self._replacing = self._replacing, None
            if replace is not None and node.registered:
                self.graph.replace_reads(node, replace)  # (but for these documents)
        elif node.registered:
            # Keep the read set even after an error: the node re-runs when its inputs change.
            log = tx.reads
            if len(log) == 1:
                # One read: compare with the read set itself, and keep no log.
                key, path, shallow = log[0]
                reads = node.reads
                if (
                    type(reads) is not OneRead
                    or reads.key != key
                    # Unchanged iff the read set is exactly this path, deep or shallow as
                    # read now: what compact_reads would make of this log. (One tuple
                    # comparison, in C: the entry is usually a shared one, `_ENTRIES`.)
                    or reads.entry != (((), (path,)) if shallow else ((path,), ()))
                ):
                    self.graph.set_reads(node, compact_reads(log))
            elif (
                # Most runs read exactly what they read last time.
                log != self.graph.raw_logs.get(node)
                if len(log) != 2 or type(node.reads) is not TwoReads
                else not _same_two(node.reads, log)  # (the same, with no log kept)
            ):
                graph = self.graph
                graph.set_reads(node, compact_reads(log))  # (drops the log kept before)
                # (A kept log always compacts to `reads`; two documents read once each
                # are checked against `reads` next time instead.)
                if len(log) != 2 or type(node.reads) is not TwoReads:
                    graph.raw_logs[node] = log
        if later:
            return  # an async run: its transaction stays open until its coroutine ends
        if tx.status == "open":
            # `_commit_run`, inlined: one call less on every committing update.
            stats.commits += 1
            try:
                if node._gates is None:
                    tx.commit_detached(on_failure=self._failed)
                else:
                    tx.commit_detached(self._settled)
            finally:
                result = tx.result
                if result is not None and (
                    result.outcome is not Outcome.OK or node._gates is not None
                ):
                    self._on_commit(node, result)

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

    def _kick(self) -> None:
        """Settle soon on the running loop (async work ended: its results propagate, a
        stale one runs again, a stream's next event goes)."""
        if self._kicked or self._closed:
            return
        loop = running_loop()
        if loop is None:
            return
        self._kicked = True

        def kicked() -> None:
            self._kicked = False
            if not self._closed and not self.replica.closed:
                self.settle()

        loop.call_soon(kicked)

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
        if self._tracked and node in self._tracked:
            self._tracked[node] = None  # what its run took was not written: unknown now
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
        if not (self._candidates or len(mailbox) or self.events.waiting):
            return
        loop = running_loop()
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
        elif not self._settling:  # (`_request_pass` does nothing in a settle: no call)
            self._request_pass()

    def _may_have_work(self) -> bool:
        """Could a settle do anything now? (A candidate, a queued event, a delivery.)
        False means certainly not: a verdict nobody waits on costs no pass. O(1)."""
        return bool(self._candidates or self.events.waiting or len(self.replica.mailbox))

    def _auto_pass(self) -> None:
        """The pass `_request_pass` scheduled: a `settle()` (which raises no node or
        handler error: failures go to `errors()` and observers, as in any settle)."""
        self._pass_loop = None
        if self._closed or self._settling:
            return
        self.settle()
