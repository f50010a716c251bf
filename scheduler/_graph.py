"""Edges, heights and demand: who feeds whom, in what order, and what is live.

An edge `W -> R` exists when a path `R` read overlaps a path `W` declares as
output: either is a prefix of the other (for shallow reads too: an edge may
over-approximate, never miss). `R`'s reads here are its last run's read set
together with what it declared it may read (`Node.declared`): a declared
input's writers stay ordered before `R` and live while `R` is, so a run that
reads one only sometimes (a branch) finds it current instead of reading a
stale value and running again once its writer has caught up. Only the read
set invalidates (`ReaderIndex`): a change to a declared place `R` did not
read last time does not re-run `R`. Edges are maintained incrementally from
read-set deltas and registrations.

Instances: several nodes may write the same places (the same `outputs`), one
per identity: the instances of a space-scoped result that k principals started
(S69) all write its documents. Such writers form a *spot*. A reader depends on
its own identity's writers of a spot when the spot has any, and on all of them
only when it has none: the instances of a result k principals started form k
separate chains, so a pull by one principal grants and withdraws demand on its
own chain, O(1) in k, not on k^2 edges. Writers of different places (different
`outputs`) are never dropped. (All of a spot's writers write the same places;
whichever wrote last is what every reader reads, and the index still re-runs a
reader when any of them changes what it read.)

Liveness: a node is live iff it is registered and is a root (an effect, a
provisional child, or explicitly demanded) or some live node reads it
(`live_refs` counts live readers). Maintenance is incremental: a gain
propagates only across a dormant->live crossing; a loss recounts the
origin's upstream region from its live readers outside it (so rootless cycles
fall dormant). `recompute()` derives it from scratch: the test oracle.

Stale dormant nodes (for pulls): `suspect` files every dormant node that is not
clean, and every dormant node such a node feeds, transitively, each with the
filed writers it is fed by (its *sources*). A pull walks it up from the writers
of what it reads (`stale_region`), so it finds the few nodes that must run
(an edited element's node, the list's combiner) without visiting the N up to
date ones around them, and holds those alone (`pulled`): a pulled node runs
when it is not clean, though no live node reads it, and makes nothing upstream
live. Filing costs the nodes newly filed and their readers (`taint`); a node
leaves the table when it becomes live (a live node's staleness is the pass's
business), is removed, or a walk finds it clean with no filed source left.

Heights: `height(R) > height(W)` for every edge outside a cycle, so ordering
by (height, ordinal) is a topological order; raising a height propagates
downstream, capped at the node count (a cycle stops raising there).

Invariants (checked by `_check`)
- `dependents` and `writers` are mirror images and hold registered nodes only;
- `writers[R]` is exactly the registered writers feeding R's read set or R's
  declared reads, after the instance rule (`_edge_writers`); `spots` holds, for
  each document with several writers, its writers by `outputs` and identity;
  `declared_only` holds exactly the declared documents missing from each node's
  read set;
- every node's `live_refs` equals `recompute()`'s count;
- `suspect` holds registered dormant nodes only, every dormant node that is not
  clean among them, and with each node every reader of it, whose sources name it;
- height(R) > height(W) for every edge not on a cycle (not checked: cycles).
Complexity: a read delta costs O(writers of the touched documents); liveness
changes cost O(affected region), never O(graph) unless the region is the graph.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from typing import Final, TypeAlias, TypeVar

from cells import DocKey, Identity, Path

from ._direct import ValueFunction
from ._node import (
    VALUE_PATH,
    Node,
    OneRead,
    ReadEntry,
    ReadSet,
    TwoReads,
    held_key,
    lean_reads,
)
from ._readers import ReaderIndex, compact_reads

_K = TypeVar("_K", Node, DocKey)
_T = TypeVar("_T", Node, Identity)
Edges: TypeAlias = Node | set[Node]
"""A node's readers (or writers): the node itself when there is one, a set from two on."""


class Hold:
    """One pull's hold on stale dormant nodes (`Graph.hold`): the nodes it holds, in the
    order it took them (writers first, as `stale_region` gives them)."""

    __slots__ = ("nodes",)

    def __init__(self) -> None:
        self.nodes: dict[Node, None] = {}

    def __repr__(self) -> str:
        return f"<Hold of {len(self.nodes)} nodes>"


_HEIGHT: Final = operator.attrgetter("height")
_ORDINAL: Final = operator.attrgetter("ordinal")


def _each(edges: Edges | None) -> Iterable[Node]:
    """The nodes in `edges` (none for None)."""
    if edges is None:
        return ()
    if type(edges) is set:
        return edges
    return (edges,)  # type: ignore[return-value]


Outputs: TypeAlias = tuple[tuple[DocKey, Path], ...]
Spots: TypeAlias = dict[Outputs, dict[Identity, "Edges"]]
"""One document's writers by the places they write (`outputs`), then by identity (the
node itself while it is the only one of its identity there, as for `Edges`)."""


def overlaps(write: Path, read: Path) -> bool:
    """Either path is a prefix of the other.

    Shallow reads use the same rule here: a declared output deeper than one
    level below a shallow read can still change its key set (by creating the
    levels in between), and an edge must over-approximate, never miss.
    """
    n = min(len(write), len(read))
    return write[:n] == read[:n]


def _feeds_reader(writer: Node, reader: Node) -> bool:
    """`writer` feeds what `reader` read last time or declared it may read."""
    declared = reader.declared
    return _feeds(writer, reader.reads) or (declared is not None and _feeds(writer, declared))


def _feeds(writer: Node, reads: ReadSet) -> bool:
    return _outputs_feed(writer.outputs, reads)


def _outputs_feed(outputs: Outputs, reads: ReadSet) -> bool:
    for key, path in outputs:
        entry = reads.get(key)
        if entry is None:
            continue
        dpaths, spaths = entry
        if any(overlaps(path, p) for p in dpaths) or any(overlaps(path, p) for p in spaths):
            return True
    return False


def _same_key(key: DocKey) -> DocKey:
    return key


def _home(node: Node) -> DocKey:
    """The document under which `Graph.nodes` finds a node with outputs: its first
    output's (a node may write several; it is counted once)."""
    return node.outputs[0][0]


class Nodes(Collection[Node]):
    """`Graph.nodes`: the registered nodes, from the graph's `effects` and its writer
    table (`writers_by_doc`), in registration order. Iterating it sorts them:
    O(n log n), for diagnostics, checks and teardown, never the run path."""

    __slots__ = ("_graph",)

    def __init__(self, graph: Graph) -> None:
        self._graph = graph

    def __len__(self) -> int:
        return self._graph.count

    def __contains__(self, node: object) -> bool:
        if not isinstance(node, Node):
            return False
        graph = self._graph
        if not node.outputs:
            return node in graph.effects
        return node in _each(graph.writers_by_doc.get(_home(node)))

    def __iter__(self) -> Iterator[Node]:
        graph = self._graph
        found = list(graph.effects)
        for key, current in graph.writers_by_doc.items():
            for w in _each(current):
                if _home(w) == key:
                    found.append(w)
        found.sort(key=_ORDINAL)
        return iter(found)

    def __repr__(self) -> str:
        return f"<{len(self)} nodes>"


class Graph:
    """Registered nodes, the writer map, data edges, heights and liveness."""

    def __init__(
        self, index: ReaderIndex, replica_key: Callable[[DocKey], DocKey] | None = None
    ) -> None:
        self.index = index
        self.replica_key: Callable[[DocKey], DocKey] = replica_key or _same_key
        """The key object the replica holds for a document (`Replica.held_key`): what a
        read set keeps when no node holds one already, so the replica's records, the
        nodes and the reader index share one key object per document."""
        self.writers_by_doc: dict[DocKey, Node | set[Node]] = {}
        """Declared writers per document: the node itself while it is the only one
        (a set costs 216 bytes, and most documents have exactly one writer). With
        `effects` it is the table of registered nodes (`nodes`): a node with outputs
        is registered exactly while it is here under each of its output keys."""
        self.effects: dict[Node, None] = {}
        """The registered nodes with no declared output (effects: sinks, pulls, views;
        and a computation that declares none), in registration order. The others are
        found through `writers_by_doc`: a table of every node of its own cost each node
        about 37 bytes, for what the writer table already holds."""
        self.count = 0
        """How many nodes are registered (`len(nodes)`, without counting them)."""
        # Edges exist only while there are some, and one edge is the node itself, a set
        # only from two on: a set costs 216 bytes, most nodes have no readers (or no
        # writers) at all, and most of the others one. (`edges_into` reads them as a set.)
        self.dependents: dict[Node, Edges] = {}
        self.writers: dict[Node, Edges] = {}
        self.spots: dict[DocKey, Spots] = {}
        """Per document with several writers (only): its writers by spot and identity,
        for the instance rule (see the module docstring)."""
        self.declared_only: dict[DocKey, set[Node]] = {}
        """Per document: nodes that declared they may read it but did not read it
        last run (the reader index has them not): a writer registered later finds
        them here. Usually empty: most nodes read what they declared."""
        self.edge_visits = 0
        self.live_writes = 0
        self.added = 0
        """Nodes added so far: a pull that found its writers checks it did not change
        before trusting them (a writer added since feeds its reads too)."""
        self.on_live: Callable[[Node], None] | None = None
        """Called when a node crosses from dormant to live (the scheduler queues it)."""
        self.on_held: Callable[[list[Node]], None] | None = None
        """Called with the nodes a pull newly holds (the scheduler queues those not clean)."""
        self.suspect: dict[Node, Edges | None] = {}
        """Dormant nodes that may be out of date, each with its filed writers (None:
        none; see the module docstring). Usually a few: what changed since the last
        pull of what they feed."""
        self.raw_logs: dict[Node, list[tuple[DocKey, Path, bool]]] = {}
        """A node's last run's read log as logged, when it had more than one entry and
        is not two documents read once each: an identical log skips re-deriving its read
        set. A kept log always compacts to the node's `reads`: `set_reads`,
        `replace_reads` and `remove` drop it. (A one-entry log, or a two-entry one of
        two documents, is checked against `reads` directly, so most nodes have none
        here: a slot on every node cost it 8 bytes.)
        """
        self.pulled: dict[Node, Hold | list[Hold]] = {}
        """Dormant nodes pulls hold (`hold`), each with its hold (a list from two on):
        they run when not clean."""
        self.reached: list[Node] = []
        """Pulled nodes a `taint` reached since the scheduler last looked: the pull
        holding one must hold what newly feeds it (`stale_region`)."""

    # ---------------------------------------------------------------- structure
    @property
    def nodes(self) -> Nodes:
        """The registered nodes, in registration order (a view: see `Nodes`)."""
        return Nodes(self)

    def add(self, node: Node, parent: Node | None = None) -> None:
        """Register `node`; with `parent` (the node whose run registered it), ordered
        after it from the start."""
        self.count += 1
        self.added += 1
        if parent is not None and parent.registered:
            node.height = parent.height + 1
        if not node.outputs:
            self.effects[node] = None
        by_doc = self.writers_by_doc
        for key, _ in node.outputs:
            current = by_doc.get(key)
            if current is None:
                by_doc[key] = node
            elif isinstance(current, set):
                if node not in current:
                    current.add(node)
                    self._spot(key, node)
            elif current is not node:
                by_doc[key] = {current, node}
                self._spot(key, current)
                self._spot(key, node)
        # Readers registered before this writer: wire edges to them now.
        identity = node.identity
        for key in {k for k, _ in node.outputs}:
            readers = self.index.readers_of(key)
            declared_only = self.declared_only.get(key)
            if declared_only:
                readers.update(declared_only)
            spots = self.spots.get(key)
            group = spots[node.outputs] if spots is not None else None
            for reader in readers:
                if reader is node or not reader.registered:
                    continue
                if group is not None and len(group) > 1:
                    # The instance rule: a reader with writers of its own identity here
                    # depends on those only; the first of its identity replaces the rest.
                    mine = group.get(reader.identity)
                    if reader.identity != identity:
                        if mine is not None:
                            continue
                    elif mine is node and _feeds_reader(node, reader):
                        self._drop_edges(
                            reader,
                            [w for i, ws in group.items() if i != identity for w in _each(ws)],
                        )
                if _feeds_reader(node, reader):
                    self._link(node, reader)
                    self._raise(reader, node.height + 1)
        node.live_refs = sum(1 for r in _each(self.dependents.get(node)) if r.is_live)
        if node.is_live:
            self._became_live(node)

    def remove(self, node: Node) -> None:
        was_live = node.is_live
        self.raw_logs.pop(node, None)
        node.registered = False
        if self.suspect:
            self._unfile(node)  # (its readers' sources may still name it: ignored)
        by_doc = self.writers_by_doc
        # The readers of its identity left with no writer of it in a spot it shared: by
        # the instance rule they depend on the spot's other writers now (rewired below).
        orphaned = False
        for key, _ in node.outputs:
            current = by_doc.get(key)
            if current is node:
                del by_doc[key]
            elif isinstance(current, set) and node in current:
                current.discard(node)
                orphaned |= self._unspot(key, node)
                if len(current) == 1:
                    (by_doc[key],) = current
                    del self.spots[key]
        dependents = _each(self.dependents.pop(node, None))
        for reader in dependents:
            self._unlink_edge(self.writers, reader, node)
        upstream = _each(self.writers.pop(node, None))
        for w in upstream:
            self._unlink_edge(self.dependents, w, node)
        if was_live:
            # All decrements first: a withdraw recounts a whole upstream region from
            # the readers left, so one run between decrements would count this node's
            # removal twice for a writer that region shares.
            writers = [w for w in upstream if w.registered]
            for w in writers:
                w.live_refs -= 1
            # One recount of the union of their regions, not one per writer: k writers
            # sharing an upstream region (the instances of one result that k principals
            # started, all reading one shared document) would recount it k times.
            self._withdraw(writers)
        for key in node.declared or ():
            self._unlink_half(self.declared_only, key, node)
        self.index.remove(node)
        self.count -= 1
        self.effects.pop(node, None)
        node.live_refs = 0
        if orphaned:
            for reader in dependents:
                if reader.registered and reader.identity == node.identity:
                    self._apply_writers(reader, self._edge_writers(reader))

    def set_reads(self, node: Node, reads: ReadSet) -> None:
        """Apply a new read set (delta) and rewire `node`'s incoming edges."""
        if self.raw_logs:
            self.raw_logs.pop(node, None)  # (its last log is not its read set any more)
        reads = lean_reads(reads)
        t = type(reads)
        if t is OneRead or t is TwoReads:
            reads = self._held_keys(node, reads)
        elif t is dict:
            reads = self._held_dict(node, reads)  # type: ignore[arg-type]
        old_reads = node.reads
        touched = self.index.apply(node, reads)
        if not touched:
            return
        if node.declared is not None:
            self._declared_only(node, old_reads, reads)
        self._apply_writers(node, self._edge_writers(node))

    def replace_reads(self, node: Node, replace: Mapping[DocKey, ReadEntry | None]) -> None:
        """Change `node`'s read set for the documents in `replace` only (each one's entry
        now, None: not read any more), as a delta: the reader index and the incoming
        edges change for those documents and their writers only. O(len(replace) x their
        writers' outputs), plus a C-level copy of a read set another object holds."""
        old = node.reads
        if type(old) is not dict or len(old) <= 2:
            new = dict(old)
            for key, entry in replace.items():
                if entry is None:
                    new.pop(key, None)
                else:
                    new[key] = entry
            self.set_reads(node, new)  # (drops the kept log)
            return
        # Each document's entry before, then the read set changed in place: a read set of
        # three or more documents is a dict only this node holds (`compact_reads` made it;
        # `declared` may be the same object: copied then).
        before = {key: old.get(key) for key in replace}
        new = old if old is not node.declared else dict(old)
        fn = node.fn
        if new is old and isinstance(fn, ValueFunction) and fn.keeps_plan:
            fn.plan = None  # (checked against this read set object: it changes in place)
        for key, entry in replace.items():
            if entry is None:
                new.pop(key, None)
            else:
                new[key] = entry
        touched = self.index.apply(node, new, before)
        self.raw_logs.pop(node, None)  # its last log is not its read set any more
        if not touched:
            return
        declared = node.declared
        if declared is not None:
            table = self.declared_only
            for key in touched:
                if key in declared:
                    if before[key] is None and key in new:
                        self._unlink_half(table, key, node)
                    elif before[key] is not None and key not in new:
                        table.setdefault(key, set()).add(node)
        # Only writers of the touched documents can gain or lose their edge into `node`:
        # decide each of those on every document it writes (the instance rule included).
        affected: set[Node] = set()
        for key in touched:
            affected.update(self.writers_of(key))
        if not affected:
            return
        keys = set(touched)
        for w in affected:
            keys.update(k for k, _ in w.outputs)
        feeding = self._edge_writers(node, keys=keys)
        # Edge by edge (as `_apply_writers` does for a whole set): `node`'s other
        # writers, about one per element of a list it combines, are not copied.
        current = self.writers.get(node)
        live = node.is_live
        dropped: list[Node] = []
        for w in affected:
            has = w is current or (type(current) is set and w in current)
            if has == (w in feeding):
                continue
            if not has:
                self._link(w, node)
                self._raise(node, w.height + 1)
                if live:
                    was = w.is_live
                    w.live_refs += 1
                    self.live_writes += 1
                    if not was:
                        self._became_live(w)
                elif w in self.suspect:
                    self._note(w, node)
            else:
                self._unlink_edge(self.writers, node, w)
                self._unlink_edge(self.dependents, w, node)
                if live:
                    w.live_refs -= 1
                    self.live_writes += 1
                    dropped.append(w)
            current = self.writers.get(node)
        if dropped:
            self._withdraw(dropped)

    def _held_keys(self, node: Node, reads: ReadSet) -> ReadSet:
        """`reads` (a `OneRead` or `TwoReads`) holding, for each document, a key object
        already held (`_held_key`) rather than the one the run's read log made: each
        run resolves its links anew, and a key costs 56 bytes per reader that keeps
        it (every element of a mapped list reads the list: one key, not N)."""
        if type(reads) is OneRead:
            k = self._held_key(node, reads.key)
            return reads if k is reads.key else OneRead(k, reads.entry)
        assert isinstance(reads, TwoReads)
        k1, k2 = self._held_key(node, reads.key), self._held_key(node, reads.key2)
        if k1 is reads.key and k2 is reads.key2:
            return reads
        return TwoReads(k1, reads.entry, k2, reads.entry2)

    def _held_dict(self, node: Node, reads: dict[DocKey, ReadEntry]) -> dict[DocKey, ReadEntry]:
        """`_held_keys` for a read set of three or more documents (a dict `compact_reads`
        made for this node): the same entries, keyed by the key objects already held. A
        join's every update looks its documents up by these keys (the reader index, the
        replica's records, the store's heads): an equal copy costs a comparison of its
        five fields per lookup (`Struct_richcompare`), the held object none."""
        held = self._held_key
        same = True
        out: dict[DocKey, ReadEntry] = {}
        for key, entry in reads.items():
            k = held(node, key)
            if k is not key:
                same = False
            out[k] = entry
        return reads if same else out

    def _held_key(self, node: Node, key: DocKey) -> DocKey:
        """An object equal to `key` that `node`'s read sets (last and declared), another
        reader of the document or a writer of it already hold, else `key`. O(1): small
        read sets only, one writer's outputs."""
        for held in (node.reads, node.declared):
            k = held_key(held, key)
            if k is not None:
                return k
        other = self.index.a_reader(key)
        if other is not None:
            k = held_key(other.reads, key)
            if k is not None:
                return k
        # A writer's output key (a sink on a `derive` output reads what the node
        # writes, and nothing else reads it): one key per document, not two.
        writers = self.writers_by_doc.get(key)
        if writers is not None:
            writer = next(iter(writers)) if type(writers) is set else writers
            assert isinstance(writer, Node)
            for k, _ in writer.outputs:
                if k == key:
                    return k
        return self.replica_key(key)

    def _apply_writers(self, node: Node, new_writers: set[Node]) -> None:
        """Make `new_writers` `node`'s incoming edges (liveness and heights follow)."""
        old_writers = self.edges_into(node)
        if new_writers == old_writers:
            return
        added = new_writers - old_writers
        removed = old_writers - new_writers
        if len(new_writers) > 1:
            self.writers[node] = new_writers
        elif new_writers:
            (self.writers[node],) = new_writers
        else:
            self.writers.pop(node, None)
        for w in added:
            self._link_half(self.dependents, w, node)
            self._raise(node, w.height + 1)
            if node.is_live:
                was = w.is_live
                w.live_refs += 1
                self.live_writes += 1
                if not was:
                    self._became_live(w)
            elif w in self.suspect:
                self._note(w, node)
        for w in removed:
            self._unlink_edge(self.dependents, w, node)
            if node.is_live:
                w.live_refs -= 1
                self.live_writes += 1
                self.withdraw(w)

    def _edge_writers(
        self, node: Node, *, count: bool = True, keys: set[DocKey] | None = None
    ) -> set[Node]:
        """The registered writers feeding `node`'s read set or its declared reads (`keys`:
        through those documents only)."""
        out: set[Node] = set()
        declared = node.declared
        # Most nodes read exactly what they declared (often the very same object).
        for reads in (
            (node.reads,) if declared is None or declared is node.reads else (node.reads, declared)
        ):
            self._feeding(reads, node.identity, out, node, count, keys)
        return out

    def writers_feeding(self, reads: ReadSet, identity: Identity) -> set[Node]:
        """The registered writers a reader of `identity` reading `reads` would have edges
        from (after the instance rule): what a pull holds demand on. O(writers of the
        documents in `reads`)."""
        out: set[Node] = set()
        self._feeding(reads, identity, out, None, True)
        return out

    def writers_along(
        self, log: Sequence[tuple[DocKey, Path, bool]], identity: Identity
    ) -> set[Node]:
        """`writers_feeding(compact_reads(log), identity)` with no read set made, for the
        log of a read through links (a pull's walk: `_sinks._ahead`, `_Pull.read`), which
        reads each document at one place: a writer feeds the log when one of its outputs
        in that document overlaps that place. Compacting the log and testing every output
        of every writer against the read set was about a fifth of a pull's own work in a
        list element's edit and pull (issue 14). A log that reads a document twice, or a
        document with several writers (the instance rule, by spot), goes the general way.
        O(writers of the documents in `log`)."""
        spots = self.spots
        by_doc = self.writers_by_doc
        out: set[Node] = set()
        visits = 0
        keys: set[DocKey] = set()  # (a whole list's pull logs every element's document)
        for key, path, _shallow in log:
            if key in keys or (spots and key in spots):
                return self.writers_feeding(compact_reads(log), identity)
            keys.add(key)
            w = by_doc.get(key)
            if w is None:
                continue
            if isinstance(w, set):  # (not in `spots`: one writer, the node itself)
                return self.writers_feeding(compact_reads(log), identity)
            visits += 1
            outs = w._outs  # (`Node.outputs`, inlined: most nodes write one whole value)
            if type(outs) is DocKey:
                if VALUE_PATH[: len(path)] == path[:1]:  # (`overlaps` with ("value",))
                    out.add(w)
                continue
            for k, p in w.outputs:
                # (`overlaps`, inlined: either path a prefix of the other)
                if k == key and p[: len(path)] == path[: len(p)]:
                    out.add(w)
                    break
        self.edge_visits += visits
        return out

    def _feeding(
        self,
        reads: ReadSet,
        identity: Identity,
        out: set[Node],
        node: Node | None,
        count: bool,
        keys: set[DocKey] | None = None,
    ) -> None:
        for key in reads if keys is None else [k for k in keys if k in reads]:
            spots = self.spots.get(key)
            if spots is None:
                for w in self.writers_of(key):
                    self.edge_visits += count
                    if w is not node and _feeds(w, reads):
                        out.add(w)
                continue
            # Several writers: one feed test per spot (its writers write the same
            # places), then the reader's own identity's writers if the spot has any.
            for outputs, group in spots.items():
                self.edge_visits += count
                if not _outputs_feed(outputs, reads):
                    continue
                mine = group.get(identity)
                for ws in (mine,) if mine is not None else group.values():
                    for w in _each(ws):
                        if w is not node:
                            out.add(w)

    def _spot(self, key: DocKey, node: Node) -> None:
        """File `node` in `key`'s spots (a document with several writers)."""
        group = self.spots.setdefault(key, {}).setdefault(node.outputs, {})
        self._link_half(group, node.identity, node)

    def _unspot(self, key: DocKey, node: Node) -> bool:
        """Take `node` out of `key`'s spots; True if its spot still has writers, none of
        them of its identity (its readers of that identity fall back to the others)."""
        spots = self.spots[key]
        group = spots[node.outputs]
        self._unlink_edge(group, node.identity, node)
        if node.identity in group:
            return False
        if not group:
            del spots[node.outputs]
            return False
        return True

    def _drop_edges(self, reader: Node, writers: list[Node]) -> None:
        """Remove the edges `writers -> reader` (the instance rule replaced them)."""
        edges = self.edges_into(reader)
        dropped = [w for w in writers if w in edges]
        for w in dropped:
            self._unlink_edge(self.writers, reader, w)
            self._unlink_edge(self.dependents, w, reader)
        if reader.is_live and dropped:
            for w in dropped:
                w.live_refs -= 1
                self.live_writes += 1
            self._withdraw(dropped)

    def _declared_only(self, node: Node, old: ReadSet, new: ReadSet) -> None:
        """Move `node` in `declared_only` from the documents `old` lacks to those `new` lacks."""
        assert node.declared is not None
        if old is new:
            return
        table = self.declared_only
        for key in node.declared:
            was, now = key not in old, key not in new
            if was and not now:
                self._unlink_half(table, key, node)
            elif now and not was:
                table.setdefault(key, set()).add(node)

    def writers_of(self, key: DocKey) -> Iterable[Node]:
        """The nodes that declare `key` as an output."""
        current = self.writers_by_doc.get(key)
        if current is None:
            return ()
        if isinstance(current, set):
            return current
        return (current,)

    def _link(self, writer: Node, reader: Node) -> None:
        self._link_half(self.dependents, writer, reader)
        self._link_half(self.writers, reader, writer)

    def edges_into(self, node: Node) -> set[Node]:
        """The writers `node` has edges from (a fresh set)."""
        edges = self.writers.get(node)
        if edges is None:
            return set()
        return set(edges) if type(edges) is set else {edges}  # type: ignore[arg-type]

    @staticmethod
    def _link_half(table: dict[_T, Edges], owner: _T, other: Node) -> None:
        """Add `other` to `table[owner]` (the node itself while it is the only one)."""
        edges = table.get(owner)
        if edges is None:
            table[owner] = other
        elif type(edges) is set:
            edges.add(other)
        elif edges is not other:
            table[owner] = {edges, other}  # type: ignore[arg-type]

    @staticmethod
    def _unlink_edge(table: dict[_T, Edges], owner: _T, other: Node) -> None:
        """Drop `other` from `table[owner]`, and the entry once it is empty."""
        edges = table.get(owner)
        if edges is other:
            del table[owner]
        elif type(edges) is set:
            edges.discard(other)
            if len(edges) == 1:
                (table[owner],) = edges
            elif not edges:
                del table[owner]

    @staticmethod
    def _unlink_half(table: dict[_K, set[Node]], owner: _K, other: Node) -> None:
        """Drop `other` from `table[owner]`, and the entry once it is empty."""
        edges = table.get(owner)
        if edges is not None:
            edges.discard(other)
            if not edges:
                del table[owner]

    def _raise(self, node: Node, height: int) -> None:
        if node.height >= height:
            return
        cap = self.count + 1
        stack = [(node, min(height, cap))]
        while stack:
            n, h = stack.pop()
            if n.height >= h:
                continue
            n.height = h
            if h >= cap:
                continue  # on a cycle: stop raising
            for r in _each(self.dependents.get(n)):
                if r.height <= h:
                    stack.append((r, h + 1))

    # ---------------------------------------------------------------- liveness
    def _unfile(self, node: Node) -> None:
        """`node` leaves `suspect` (live, or removed). Once the table is empty it is
        replaced: a dict keeps the size it grew to, so a thousand nodes filed at
        registration and gone live would keep about 37 bytes each in an empty table."""
        suspect = self.suspect
        suspect.pop(node, None)
        if not suspect:
            self.suspect = {}

    def _became_live(self, node: Node) -> None:
        if self.suspect:
            self._unfile(node)  # (live: the pass keeps it current)
        if self.on_live is not None:
            self.on_live(node)
        self.grant([node])

    def grant(self, seeds: Iterable[Node]) -> None:
        """Seeds just became live: count them for their writers, transitively on crossings."""
        stack = list(seeds)
        while stack:
            r = stack.pop()
            for w in _each(self.writers.get(r)):
                if not w.registered:
                    continue
                self.edge_visits += 1
                was = w.is_live
                w.live_refs += 1
                self.live_writes += 1
                if not was:
                    stack.append(w)
                    if self.suspect:
                        self._unfile(w)  # (live: the pass keeps it current)
                    if self.on_live is not None:
                        self.on_live(w)

    def withdraw(self, origin: Node) -> None:
        """`origin` lost a reader or root status: recount its upstream region."""
        self._withdraw((origin,))

    def _withdraw(self, origins: Iterable[Node]) -> None:
        """`origins` lost a reader or root status: recount the union of their upstream
        regions once. (The union is closed upstream, as each region is, so the recount
        below is exact for it: O(union's edges), where one withdraw per origin costs the
        sum over the origins of their regions' edges.)"""
        region: dict[Node, None] = {o: None for o in origins if o.registered and not o.is_root}
        if not region:
            return
        stack = list(region)
        while stack:
            n = stack.pop()
            for w in _each(self.writers.get(n)):
                self.edge_visits += 1
                if w.registered and w not in region:
                    region[w] = None
                    stack.append(w)
        for n in region:
            n.live_refs = 0
        seeds: list[Node] = []
        stale: list[Node] | None = None
        for n in region:
            supported = n.is_root
            for r in _each(self.dependents.get(n)):
                self.edge_visits += 1
                if r not in region and r.is_live:
                    n.live_refs += 1
                    supported = True
            self.live_writes += 1
            if supported:
                seeds.append(n)
            elif n.status != "clean":
                if stale is None:
                    stale = []
                stale.append(n)
        self.grant(seeds)
        if stale is not None:
            # Gone dormant before it ran: a pull of what it feeds must find it.
            for n in stale:
                if not n.is_live:
                    self.taint(n)

    def root_changed(self, node: Node, was_live: bool) -> None:
        """Call after a change to `node`'s root status (effect, provisional, demand)."""
        if node.is_live and not was_live:
            self._became_live(node)
        elif not node.is_root:
            self.withdraw(node)

    # ---------------------------------------------------------------- stale dormant nodes
    def taint(self, node: Node) -> None:
        """`node` is dormant and not clean (registered so, invalidated, or gone dormant
        before it ran): file it and, downstream, what it feeds. O(1) when it is filed
        already; else O(the nodes newly filed and their readers)."""
        if node not in self.suspect:
            self.suspect[node] = None
            self._spread(node)

    def _note(self, writer: Node, reader: Node) -> None:
        """A new edge `writer -> reader`, `writer` filed, `reader` dormant: `reader` is fed
        by a stale node now (filed, and what it feeds)."""
        suspect = self.suspect
        if reader in suspect:
            self._add_source(reader, writer)
            if self.pulled and reader in self.pulled:
                self.reached.append(reader)
            return
        suspect[reader] = writer
        self._spread(reader)

    def _add_source(self, reader: Node, writer: Node) -> bool:
        """Name `writer` among filed `reader`'s sources; False if it was named already."""
        suspect = self.suspect
        sources = suspect[reader]
        if sources is None:
            suspect[reader] = writer
        elif sources is writer:
            return False
        elif type(sources) is set:
            if writer in sources:
                return False
            sources.add(writer)
        else:
            suspect[reader] = {sources, writer}  # type: ignore[arg-type]
        return True

    def _spread(self, origin: Node) -> None:
        """Name the filed `origin` among its readers' sources, filing them, and so on
        downstream until a reader names its writer already (filed before: its own readers
        name it). A dormant node's readers are dormant (a live one would make it live)."""
        suspect = self.suspect
        dependents = self.dependents
        pulled = self.pulled
        stack = [origin]
        while stack:
            w = stack.pop()
            for r in _each(dependents.get(w)):
                if pulled and r in pulled:
                    self.reached.append(r)
                if r not in suspect:
                    suspect[r] = w
                    stack.append(r)
                else:
                    self._add_source(r, w)

    def stale_region(self, seeds: Iterable[Node]) -> list[Node]:
        """The filed nodes feeding `seeds` (themselves included), writers first: the dormant
        nodes that may have to run before `seeds` are current. A source whose edge is gone
        is dropped (not followed: what it feeds does not read it any more); a node found
        clean with no filed source left is up to date: it leaves the table (and is not
        returned). O(the filed nodes found and their sources), not O(what feeds `seeds`)."""
        suspect = self.suspect
        if not suspect:
            return []
        found: list[Node] | None = None
        for n in seeds:
            if n in suspect:
                if found is None:
                    found = [n]
                else:
                    found.append(n)
        if found is None:
            return []
        if len(found) == 1 and suspect[found[0]] is None:
            # One node, fed by nothing filed (an edited element's node, the usual pull).
            n = found[0]
            if n.status == "clean":
                del suspect[n]
                return []
            return found
        seen = set(found)
        writers = self.writers
        for n in found:  # (grows while it is walked: every live source, once)
            sources = suspect[n]
            if sources is None:
                continue
            edges = writers.get(n)
            if type(sources) is not set:
                if sources in suspect and (
                    sources is edges or (type(edges) is set and sources in edges)
                ):
                    if sources not in seen:
                        seen.add(sources)
                        found.append(sources)
                else:
                    suspect[n] = None
                continue
            dead: list[Node] | None = None
            for w in sources:
                if w in suspect and (w is edges or (type(edges) is set and w in edges)):
                    if w not in seen:
                        seen.add(w)
                        found.append(w)
                elif dead is None:
                    dead = [w]
                else:
                    dead.append(w)
            if dead is not None:
                sources.difference_update(dead)
                if len(sources) < 2:
                    suspect[n] = next(iter(sources)) if sources else None
        found.sort(key=_HEIGHT)  # (writers before readers, but around a cycle)
        out: list[Node] = []
        for n in found:
            if n.status == "clean" and not self._fed_stale(n):
                del suspect[n]
                continue
            out.append(n)
        return out

    def _fed_stale(self, node: Node) -> bool:
        """Whether a source of filed `node` is filed (still stale, as far as is known)."""
        suspect = self.suspect
        sources = suspect[node]
        if sources is None:
            return False
        if type(sources) is not set:
            return sources in suspect
        for w in sources:  # noqa: SIM110 (a loop: no generator per call)
            if w in suspect:
                return True
        return False

    def hold(self, hold: Hold, nodes: Iterable[Node]) -> list[Node]:
        """Add `nodes` to `hold`: pulled, each runs when not clean, though dormant. Returns
        those `hold` did not hold yet."""
        pulled = self.pulled
        held = hold.nodes
        new: list[Node] = []
        for n in nodes:
            if n in held:
                continue
            held[n] = None
            new.append(n)
            holds = pulled.setdefault(n, hold)
            if holds is not hold:
                if type(holds) is list:
                    holds.append(hold)
                else:
                    pulled[n] = [holds, hold]  # type: ignore[list-item]
        return new

    def let_go(self, hold: Hold) -> None:
        """End `hold` (idempotent): its nodes are dormant again. Those it leaves clean with
        no filed source left (writers first: the order it took them) are up to date:
        they leave `suspect`, so the next pull does not walk them again."""
        pulled = self.pulled
        suspect = self.suspect
        for n in hold.nodes:
            holds = pulled.pop(n, None)
            if type(holds) is list:
                holds.remove(hold)
                pulled[n] = holds[0] if len(holds) == 1 else holds
            if (
                n.status == "clean"
                and n in suspect
                and (suspect[n] is None or not self._fed_stale(n))
            ):
                del suspect[n]
        hold.nodes = {}
        if not pulled:
            self.pulled = {}  # (a dict never shrinks)
            self.reached = []

    def recompute(self) -> dict[Node, int]:
        """Liveness from scratch (the oracle): live_refs each node should have."""
        live: set[Node] = set()
        nodes = list(self.nodes)
        stack = [n for n in nodes if n.is_root]
        live.update(stack)
        while stack:
            r = stack.pop()
            for w in _each(self.writers.get(r)):
                if w not in live:
                    live.add(w)
                    stack.append(w)
        return {n: sum(1 for r in _each(self.dependents.get(n)) if r in live) for n in nodes}

    def _check(self) -> None:
        nodes = list(self.nodes)
        registered = set(nodes)
        assert len(nodes) == self.count == len(set(nodes)), (len(nodes), self.count)
        assert all(n.registered for n in nodes)
        assert all(not n.outputs for n in self.effects), self.effects
        for w, readers in self.dependents.items():
            assert w in registered and (type(readers) is not set or len(readers) > 1), w
            for r in _each(readers):
                assert w in _each(self.writers.get(r)), (w, r)
                assert r.registered
        for r, ws in self.writers.items():
            assert r in registered and (type(ws) is not set or len(ws) > 1), r
            for w in _each(ws):
                assert r in _each(self.dependents.get(w)), (w, r)
        for key, current in self.writers_by_doc.items():
            assert not isinstance(current, set) or len(current) > 1, key
            for w in self.writers_of(key):
                assert w in registered and any(k == key for k, _ in w.outputs), (w, key)
        spots: dict[DocKey, dict[Outputs, dict[Identity, set[Node]]]] = {}
        for key, current in self.writers_by_doc.items():
            if isinstance(current, set):
                for w in current:
                    group = spots.setdefault(key, {}).setdefault(w.outputs, {})
                    group.setdefault(w.identity, set()).add(w)
        assert spots == {
            k: {o: {i: set(_each(ws)) for i, ws in g.items()} for o, g in s.items()}
            for k, s in self.spots.items()
        }, (spots, self.spots)
        for spot in self.spots.values():
            for held in spot.values():
                assert all(type(ws) is not set or len(ws) > 1 for ws in held.values()), held
        for n, log in self.raw_logs.items():
            # A kept log is a registered node's last one, and compacts to its read set.
            assert n in registered and n.registered, n
            assert dict(compact_reads(log)) == dict(n.reads), (n, log, n.reads)
        for n in nodes:
            for key, _ in n.outputs:
                assert n in self.writers_of(key), (n, key)
            assert self.edges_into(n) == self._edge_writers(n, count=False), n
        declared_only: dict[DocKey, set[Node]] = {}
        for n in nodes:
            for key in n.declared or ():
                if key not in n.reads:
                    declared_only.setdefault(key, set()).add(n)
        assert declared_only == self.declared_only, (declared_only, self.declared_only)
        suspect = self.suspect
        for n, sources in suspect.items():
            assert n in registered and not n.is_live, n
            assert type(sources) is not set or len(sources) > 1, n
            for r in _each(self.dependents.get(n)):
                assert r in suspect and n in _each(suspect[r]), (n, r)
        for n in nodes:
            if not n.is_live and n.status != "clean":
                assert n in suspect, n
        for n, holds in self.pulled.items():
            each: list[Hold] = holds if isinstance(holds, list) else [holds]
            assert all(n in h.nodes for h in each), n
        expected = self.recompute()
        actual = {n: n.live_refs for n in nodes}
        assert actual == expected, {
            n: (actual[n], expected[n]) for n in nodes if actual[n] != expected[n]
        }
        self.index._check(nodes)
