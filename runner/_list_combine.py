"""A filter's or flat_map's output, combined from its elements' results (issue 14).

The coordinator (`_lists`) of a filter or flat_map reacts to the list's shape
only: it keeps a child per element and writes the *elements document*, one
pair `[child result, element]` per element (a link to the child's result, and
the element as a link: the list's own link, or a link to its position for an
inline element). The combiner is a second node per identity: it reads that
document and every child's result, and writes the output:

- filter: the element links whose result is truthy, dense (a link, not a copy:
  an edit inside a kept element changes no output and runs nothing here);
- flat_map: the results flattened one level (a scalar counts as one item; an
  element whose result is absent contributes nothing yet).

One element's result changed: the combiner asks the scheduler which documents
changed since its last run (`Scheduler.take_changes`), maps each to the
positions whose result reads it (`Kept.owners`), re-reads only those results,
splices their parts of the output (a part as long as before: only its changed
items are written, each at its place) and keeps its read set
(`Scheduler.keep_reads`). O(changed elements · log N), plus the C-level copy
of the output list each write makes. Anything else — the elements
document changed, a change nobody owns, a result whose reads moved, a result
with links inside it (whose reads cannot be told apart per element), an output
that is not what the last run wrote — combines the whole list again (O(N)).

Cold resume: while a child's result document is still loading, the output is
not republished (the previous one stays); the combiner runs again when it has
loaded.

Invariants (checked by `_check`)
- one node per identity, writing exactly that identity's output documents;
- a kept combination's parts, lengths and owners describe the same positions,
  and its written output is its parts concatenated.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cells import (
    MISSING,
    CommitResult,
    DocKey,
    Identity,
    Link,
    Outcome,
    Path,
    Transaction,
    entity_id,
    first_link,
    read_value,
    resolve,
    thaw,
    value_equal,
)
from scheduler import Node

from . import _docs as docs
from ._list_keys import narrower, rescoped
from ._list_output import output_keys, publish

if TYPE_CHECKING:
    from ._core import Launcher

MAX_FAILED_COMBINES = 5
"""Runs again after combines whose commit failed for good, before waiting for new input."""
MAX_HOPS = 32
"""Links followed to reach one result before it counts as not simple (a cycle raises then)."""

ReadEntry = tuple[DocKey, Path, bool]


def elements_link(container: Link) -> Link:
    """The elements document of a filter's or flat_map's output `container` (at the same
    scope; like the container, a narrower re-addressing keeps its id)."""
    cause = {"elements": [container.id, container.scope]}
    return Link(container.space, entity_id(cause), container.scope)


class Kept:
    """What the last combine wrote for one identity, per position of the elements list."""

    __slots__ = ("lengths", "out", "owners", "pairs", "parts", "reads", "sums", "written")

    def __init__(self, pairs: list[Any], out: Link) -> None:
        self.pairs = pairs
        """The elements document's list that was combined (the stored object)."""
        self.out = out
        """Where the output was written (narrowed to the children's scopes)."""
        self.parts: list[list[Any]] = []
        self.lengths: list[int] = []
        self.reads: list[tuple[ReadEntry, ...]] = []
        """Per position: what reading its result read (each hop, then the value)."""
        self.owners: dict[DocKey, list[int]] = {}
        """Per document read for a result: the positions whose result reads it."""
        self.written: Any = MISSING
        self.sums: list[int] = []
        """A Fenwick tree over `lengths` (made by `index`): where a part starts, O(log N)."""

    def index(self) -> None:
        """Make `sums` from `lengths`. O(N)."""
        sums = [0, *self.lengths]
        n = len(sums)
        for i in range(1, n):
            j = i + (i & -i)
            if j < n:
                sums[j] += sums[i]
        self.sums = sums

    def start(self, position: int) -> int:
        """Where `position`'s part starts in the output: the lengths before it."""
        sums, total, i = self.sums, 0, position
        while i > 0:
            total += sums[i]
            i -= i & -i
        return total

    def resize(self, position: int, length: int) -> None:
        """`position`'s part is `length` items long now."""
        delta = length - self.lengths[position]
        self.lengths[position] = length
        sums, i = self.sums, position + 1
        while i < len(sums):
            sums[i] += delta
            i += i & -i

    def add(self, part: list[Any], reads: tuple[ReadEntry, ...]) -> None:
        position = len(self.parts)
        self.parts.append(part)
        self.lengths.append(len(part))
        self.reads.append(reads)
        for key in dict.fromkeys(entry[0] for entry in reads):
            self.owners.setdefault(key, []).append(position)


def _has_link(value: Any) -> bool:
    t = type(value)
    if t is Link:
        return True
    if t is list:
        return any(_has_link(v) for v in value if type(v) in (list, dict, Link))
    if t is dict:
        return any(_has_link(v) for v in value.values() if type(v) in (list, dict, Link))
    return False


def read_result(tx: Transaction, child: Link) -> tuple[Any, tuple[ReadEntry, ...] | None]:
    """The value of an element's result and exactly what reading it logs (each link
    followed on the way, shallowly, then the value deeply), independent of what `tx`
    read before. `None` for the reads when the value has links inside it (read as
    `read_value` reads it: its reads are not told apart) or the way is too long."""
    identity = tx.identity
    reads: list[ReadEntry] = []
    current = child
    for _ in range(MAX_HOPS):
        key = current.key(identity)
        doc = tx.peek(key)
        found = first_link(doc.get(docs.VALUE) if type(doc) is dict else None, current.path, doc)
        if found is None:
            path = (docs.VALUE, *current.path)
            value = tx.read(key, path)
            reads.append((key, path, False))
            if _has_link(value):
                return read_value(tx, child), None
            return value, tuple(reads)
        at, target = found
        place = (docs.VALUE, *current.path[:at])
        tx.read(key, place, shallow=True)
        reads.append((key, place, True))
        current = Link(target.space, target.id, target.scope, target.path + current.path[at:])
    return read_value(tx, child), None


def part_of(kind: str, value: Any, element: Any) -> list[Any]:
    """One element's part of the output, from its result."""
    if kind == "filter":
        return [element] if value is not MISSING and value else []
    if value is MISSING or value is None:
        return []  # flat_map: not computed yet
    if type(value) is list:
        return thaw(value)  # type: ignore[no-any-return]
    return [thaw(value)]


class Combiner:
    """The output nodes of one filter or flat_map coordinator: one per identity."""

    def __init__(
        self, runner: Launcher, kind: str, elements: Link, container: Link, label: str
    ) -> None:
        self.runner = runner
        self.kind = kind
        self.elements = elements
        """The elements document at the run's scope (a link to a narrower one, if any)."""
        self.container = container
        """The output at the run's scope (a link to a narrower one, if any)."""
        self.label = f"{label} combine"
        self.nodes: dict[Identity, Node] = {}
        self.kept: dict[Identity, Kept] = {}
        self.syncing: set[DocKey] = set()
        self.failures: dict[Identity, int] = {}
        self.combines = 0
        """Runs that combined the whole list."""
        self.updates = 0
        """Runs that updated only the changed elements' parts."""

    def add(self, identity: Identity) -> Node:
        scheduler = self.runner.scheduler
        node = scheduler.register(
            self.combine,
            identity=identity,
            outputs=[(key, (docs.VALUE,)) for key in output_keys(self.container, identity)],
            label=self.label,
            reads=[(self.elements.key(identity), (docs.VALUE,), False)],
        )
        scheduler.track_changes(node)
        self.nodes[identity] = node
        return node

    def drop(self, identity: Identity) -> None:
        node = self.nodes.pop(identity, None)
        self.kept.pop(identity, None)
        self.failures.pop(identity, None)
        if node is not None:
            self.runner.scheduler.remove(node)

    # ------------------------------------------------------------------ runs
    def combine(self, tx: Transaction) -> None:
        identity = tx.identity
        node = self.nodes.get(identity)
        if node is None:
            return  # that identity's instance was dropped while this run was queued
        changed = self.runner.scheduler.take_changes(node)
        kept = self.kept.pop(identity, None)
        if kept is not None and changed and self._update(tx, node, kept, changed):
            self.kept[identity] = kept
            self.updates += 1
            return
        self._combine_all(tx, identity)

    def _update(self, tx: Transaction, node: Node, kept: Kept, changed: frozenset[DocKey]) -> bool:
        """Update only the parts of the positions whose result read a changed document;
        False (nothing written) when that cannot be done."""
        positions: set[int] = set()
        owners = kept.owners
        for key in changed:
            found = owners.get(key)
            if found is None:
                return False  # the elements document, or a read nobody owns
            positions.update(found)
        identity = tx.identity
        out_key = kept.out.key(identity)
        now = tx.peek(out_key, (docs.VALUE,))
        if now is not kept.written:
            # A commit confirmed under a later one re-applies the later one: the same
            # value, another object (one C-level comparison, then kept again).
            if now != kept.written:
                return False  # the output is not what the last combine wrote
            kept.written = now
        pairs = kept.pairs
        parts: list[tuple[int, list[Any]]] = []
        for i in sorted(positions):
            child, element = pairs[i]
            value, reads = read_result(tx, child)
            if reads != kept.reads[i]:
                return False  # its result reads elsewhere now (or has links inside)
            part = part_of(self.kind, value, element)
            if not value_equal(part, kept.parts[i]):
                parts.append((i, part))
        lengths = kept.lengths
        # From the last position back: a splice moves only what follows it.
        for i, part in reversed(parts):
            start = kept.start(i)
            if len(part) == lengths[i]:
                # As long as before: write the items that changed, each at its place (a
                # spliced list of the same length would be compared whole at commit).
                for j, (item, was) in enumerate(zip(part, kept.parts[i], strict=True)):
                    if not value_equal(item, was):
                        tx.write(out_key, (docs.VALUE, start + j), item)
            else:
                tx.splice(out_key, (docs.VALUE,), start, lengths[i], part)
            kept.parts[i] = part
            kept.resize(i, len(part))
        if parts:
            kept.written = tx.peek(out_key, (docs.VALUE,))
        self._watch(tx, identity, kept)
        # Every read this run made is one the last combine made, for the same position.
        self.runner.scheduler.keep_reads(node)
        return True

    def _combine_all(self, tx: Transaction, identity: Identity) -> None:
        """Read every result and write the whole output. O(N)."""
        self.combines += 1
        place = resolve(tx, self.elements)
        pairs = tx.read(place.key(identity), (docs.VALUE, *place.path))
        if type(pairs) is not list:
            return  # the coordinator has not written it yet (its list is loading)
        replica = self.runner.replica
        base = rescoped(self.container, place.scope)
        loading = []
        for child, _element in pairs:
            key = child.key(identity)
            if not replica.is_loaded(key):
                tx.peek(key)  # a document nobody asked for yet starts loading now
                if not replica.is_loaded(key):
                    loading.append(key)
        if loading:
            # Cold resume: never republish a partial output while results load; run
            # again when they have (nothing else would: their values were not read).
            for key in loading:
                self._await_load(identity, key)
            if tx.peek(base.key(identity), (docs.VALUE,)) is not MISSING or (
                tx.peek(self.container.key(identity), (docs.VALUE,)) is not MISSING
            ):
                return
        out = base
        kept: Kept | None = Kept(pairs, out)
        aggregate: list[Any] = []
        for child, element in pairs:
            out = rescoped(out, narrower(out.scope, child.scope))
            value, reads = read_result(tx, child)
            part = part_of(self.kind, value, element)
            aggregate += part
            if kept is not None:
                if reads is None:
                    kept = None  # a result with links inside: combine it all each time
                else:
                    kept.add(part, reads)
        publish(tx, self.container, out, aggregate)
        if kept is not None and not loading:
            kept.index()
            kept.out = out
            kept.written = tx.peek(out.key(identity), (docs.VALUE,))
            self.kept[identity] = kept
        else:
            kept = None
        self._watch(tx, identity, kept)

    def _watch(self, tx: Transaction, identity: Identity, kept: Kept | None) -> None:
        """If this run's commit does not land, forget what it kept (the next run combines
        the whole list) and run again: the scheduler re-runs a stale basis; any other
        failure runs it again here, at most `MAX_FAILED_COMBINES` times in a row (a
        failed output write is owed, as a failed reconcile's is)."""

        def settled(_tx: Transaction, res: CommitResult) -> None:
            if res.ok:
                self.failures.pop(identity, None)
                return
            if kept is not None and self.kept.get(identity) is kept:
                del self.kept[identity]
            if res.outcome is Outcome.STALE_BASIS:
                return
            failures = self.failures[identity] = self.failures.get(identity, 0) + 1
            node = self.nodes.get(identity)
            if failures <= MAX_FAILED_COMBINES and node is not None:
                self.runner.scheduler.invalidate(node)

        tx.add_settle_callback(settled)

    def _await_load(self, identity: Identity, key: DocKey) -> None:
        """Load `key`, then run this identity's combine again (one sync per document)."""
        if key in self.syncing:
            return
        self.syncing.add(key)
        runner = self.runner

        def done(pending: Any) -> None:
            self.syncing.discard(key)
            try:
                pending.result()
            except Exception as exc:
                runner.trace.record("load-failed", key, error=type(exc).__name__)
                return
            node = self.nodes.get(identity)
            if node is not None:
                runner.scheduler.invalidate(node)

        runner.replica.sync([key]).add_done_callback(done)

    def _check(self) -> None:
        for identity, node in self.nodes.items():
            assert node.registered and node.identity == identity, node
        for identity, kept in self.kept.items():
            assert identity in self.nodes, identity
            n = len(kept.parts)
            assert len(kept.lengths) == len(kept.reads) == n == len(kept.pairs), kept
            assert kept.lengths == [len(p) for p in kept.parts], kept
            assert all(kept.start(i) == sum(kept.lengths[:i]) for i in range(n + 1)), (
                "the part starts"
            )
            owned = {(key, i) for i, reads in enumerate(kept.reads) for key, _p, _s in reads}
            assert owned == {(k, i) for k, ps in kept.owners.items() for i in ps}, kept
