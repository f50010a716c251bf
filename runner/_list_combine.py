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

The combiner asks the scheduler which documents changed since its last run
(`Scheduler.take_changes`) and updates only what they touch:

- one element's result changed: it maps the document to the slots whose result
  reads it (`Kept.owners`; a slot is one element's part, `_list_parts`),
  re-reads only those results, splices their parts of the output (a part as
  long as before: only its changed items are written, each at its place, in
  one `Transaction.write_items`: one new output list, not one per item) and
  keeps its read set (`Scheduler.keep_reads`);
- the elements document changed (the coordinator spliced it: an element
  inserted, removed or moved): it finds the spliced middle (`common_ends`,
  O(1) right after the coordinator's splice), reads only the inserted
  elements' results, splices the output where the removed parts were, and
  replaces in its read set only the removed and inserted results' reads
  (`keep_reads(node, replace)`).

O(changed elements), plus O(N / 64) C-level sums to find a part's start and
the C-level copy of the output list each splice or `write_items` makes (none
when the version two back is reused: `cells._values._reuse`). Anything else — a change
nobody owns, a result whose reads moved, a result with links inside it (whose
reads cannot be told apart per element), a splice that would move the output
to another scope or changes most of the list, an inserted result still
loading, an output that is not what the last run wrote — combines the whole
list again (O(N)).

Cold resume: while a child's result document is still loading, the output is
not republished (the previous one stays); the combiner runs again when it has
loaded.

Invariants (checked by `_check`)
- one node per identity, writing exactly that identity's output documents;
- a kept combination has one slot per pair of its elements list, in order;
  its owners and scope counts are exactly its slots' reads and children's
  scopes, and its written output is its slots' parts concatenated.
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
    Scope,
    Transaction,
    entity_id,
    first_link,
    read_value,
    resolve,
    thaw,
    value_equal,
)
from scheduler import Node, common_ends

from . import _docs as docs
from ._list_keys import narrower, rescoped
from ._list_output import output_keys, publish
from ._list_parts import Parts, ReadEntry, Slot

if TYPE_CHECKING:
    from ._core import Launcher

MAX_FAILED_COMBINES = 5
"""Runs again after combines whose commit failed for good, before waiting for new input."""
MAX_HOPS = 32
"""Links followed to reach one result before it counts as not simple (a cycle raises then)."""

SPLICE_MOST = 64
"""Elements a splice may remove and insert together before it counts as most of the list
(then, or past a quarter of the list, the combiner combines the whole list)."""


class Splice:
    """A splice of the elements document, read and checked, not yet written."""

    __slots__ = ("inserted", "pairs", "prefix", "removed")

    def __init__(
        self, pairs: list[Any], prefix: int, removed: list[Slot], inserted: list[Slot]
    ) -> None:
        self.pairs = pairs
        self.prefix = prefix
        self.removed = removed
        self.inserted = inserted


def elements_link(container: Link) -> Link:
    """The elements document of a filter's or flat_map's output `container` (at the same
    scope; like the container, a narrower re-addressing keeps its id)."""
    cause = {"elements": [container.id, container.scope]}
    return Link(container.space, entity_id(cause), container.scope)


class Kept:
    """What the last combine wrote for one identity: a slot per pair of the elements list
    (`_list_parts`), and who reads what."""

    __slots__ = ("fixed", "out", "owners", "pairs", "parts", "place", "scopes", "written")

    def __init__(self, pairs: list[Any], out: Link, place: Link, fixed: frozenset[DocKey]) -> None:
        self.pairs = pairs
        """The elements document's list that was combined (the stored object)."""
        self.out = out
        """Where the output was written (narrowed to the children's scopes)."""
        self.place = place
        """Where the elements document was read (`self.elements` resolved)."""
        self.fixed = fixed
        """The documents read to find and read the elements list (no slot's reads may
        replace them)."""
        self.parts = Parts([])
        self.owners: dict[DocKey, list[Slot]] = {}
        """Per document read for a result: the slots whose result reads it."""
        self.scopes: dict[Scope, int] = {}
        """How many children have each scope (the output's scope is the narrowest)."""
        self.written: Any = MISSING

    def own(self, slots: list[Slot]) -> set[DocKey]:
        """Note what `slots` (new) read; returns those documents."""
        owners, scopes = self.owners, self.scopes
        keys: set[DocKey] = set()
        for slot in slots:
            for key in dict.fromkeys(entry[0] for entry in slot.reads):
                owners.setdefault(key, []).append(slot)
                keys.add(key)
            scope = slot.pair[0].scope
            scopes[scope] = scopes.get(scope, 0) + 1
        return keys

    def disown(self, slots: list[Slot]) -> set[DocKey]:
        """Forget what `slots` (removed) read; returns those documents."""
        owners, scopes = self.owners, self.scopes
        keys: set[DocKey] = set()
        for slot in slots:
            for key in dict.fromkeys(entry[0] for entry in slot.reads):
                held = owners[key]
                held.remove(slot)
                if not held:
                    del owners[key]
                keys.add(key)
            scope = slot.pair[0].scope
            scopes[scope] -= 1
            if not scopes[scope]:
                del scopes[scope]
        return keys

    def reads_of(self, key: DocKey) -> list[tuple[Path, bool]]:
        """Every (path, shallow) the slots reading `key` read there (none: nobody)."""
        return [
            (path, shallow)
            for slot in self.owners.get(key, ())
            for k, path, shallow in slot.reads
            if k == key
        ]


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
        """Update only what changed: a splice of the elements document (`_splice`: the
        removed elements' parts go, the inserted ones' come, nothing else is read) and
        the parts of the slots whose result read a changed document; False (nothing
        written) when that cannot be done. All reading and checking comes before the
        first write, so a False leaves the transaction's writes as they were."""
        identity = tx.identity
        owners = kept.owners
        elements_key = kept.place.key(identity)
        structural = False
        for key in changed:
            if key == elements_key:
                structural = True
            elif key not in owners:
                return False  # a read nobody owns (a link on the way to the elements)
        out_key = kept.out.key(identity)
        now = tx.peek(out_key, (docs.VALUE,))
        if now is not kept.written:
            # A commit confirmed under a later one re-applies the later one: the same
            # value, another object (one C-level comparison, then kept again).
            if now != kept.written:
                return False  # the output is not what the last combine wrote
            kept.written = now
        splice: Splice | None = None
        if structural:
            splice = self._read_splice(tx, kept)
            if splice is None:
                return False
        gone = set(splice.removed) if splice is not None else set()
        slots: dict[Slot, None] = {}
        for key in changed:
            for slot in owners.get(key, ()):
                if slot not in gone:
                    slots[slot] = None
        edits: list[tuple[Slot, list[Any]]] = []
        for slot in slots:
            child, element = slot.pair
            value, reads = read_result(tx, child)
            if reads != slot.reads:
                return False  # its result reads elsewhere now (or has links inside)
            part = part_of(self.kind, value, element)
            if not value_equal(part, slot.part):
                edits.append((slot, part))
        # Everything is read and checked: write.
        replace: dict[DocKey, list[tuple[Path, bool]]] = {}
        if splice is not None:
            self._write_splice(tx, kept, out_key, splice, replace)
        parts = kept.parts
        for slot, part in edits:
            k, j = parts.where(slot)
            start = parts.start(k, j)
            if len(part) == len(slot.part):
                # As long as before: write the items that changed, each at its place (a
                # spliced list of the same length would be compared whole at commit), in
                # one write: the output list is copied once, not once per item.
                tx.write_items(
                    out_key,
                    (docs.VALUE,),
                    {
                        start + i: item
                        for i, (item, was) in enumerate(zip(part, slot.part, strict=True))
                        if not value_equal(item, was)
                    },
                )
            else:
                tx.splice(out_key, (docs.VALUE,), start, len(slot.part), part)
            slot.part = part
            parts.resize(slot, k, j)
        if edits or splice is not None:
            kept.written = tx.peek(out_key, (docs.VALUE,))
        self._watch(tx, identity, kept)
        # Every read this run made is one the last combine made, for the same element,
        # or one of an inserted element's result (`replace`, with the removed ones').
        self.runner.scheduler.keep_reads(node, replace)
        return True

    def _read_splice(self, tx: Transaction, kept: Kept) -> Splice | None:
        """Read the elements document as `_combine_all` does and what it inserted; None
        when a splice of the kept combination cannot follow it (the elements moved, a
        result is loading or has links inside, the output's scope would change, most of
        the list changed). O(changed), plus C-level work (`common_ends`: O(1) right after
        the coordinator's splice)."""
        identity = tx.identity
        place = resolve(tx, self.elements)
        if place != kept.place:
            return None
        pairs = tx.read(place.key(identity), (docs.VALUE, *place.path))
        if type(pairs) is not list:
            return None
        old = kept.pairs
        prefix, suffix = common_ends(old, pairs)
        end_old, end_new = len(old) - suffix, len(pairs) - suffix
        if (end_old - prefix) + (end_new - prefix) > max(SPLICE_MOST, len(pairs) // 4):
            return None  # most of the list: combining it whole costs about the same
        replica = self.runner.replica
        scopes = dict(kept.scopes)
        inserted: list[Slot] = []
        for pair in pairs[prefix:end_new]:
            child, element = pair
            if not replica.is_loaded(child.key(identity)):
                return None  # `_combine_all` waits for it (never a partial output)
            value, reads = read_result(tx, child)
            if reads is None:
                return None
            if kept.fixed.intersection(entry[0] for entry in reads):
                return None  # its reads and the elements document's would be one entry
            inserted.append(Slot(pair, part_of(self.kind, value, element), reads))
            scopes[child.scope] = scopes.get(child.scope, 0) + 1
        removed = kept.parts.slots(prefix, end_old - prefix)
        for slot in removed:
            scope = slot.pair[0].scope
            scopes[scope] -= 1
            if not scopes[scope]:
                del scopes[scope]
        out = rescoped(self.container, place.scope)
        for scope in scopes:
            out = rescoped(out, narrower(out.scope, scope))
        if out != kept.out:
            return None  # the output moves to another scope: combine it whole
        return Splice(pairs, prefix, removed, inserted)

    @staticmethod
    def _write_splice(
        tx: Transaction,
        kept: Kept,
        out_key: DocKey,
        splice: Splice,
        replace: dict[DocKey, list[tuple[Path, bool]]],
    ) -> None:
        """Splice the output and the kept combination as `splice` says; note in `replace`
        the reads of every document a removed or inserted slot read."""
        parts = kept.parts
        prefix, removed, inserted = splice.prefix, splice.removed, splice.inserted
        start = parts.start_at(prefix)
        stop = parts.start_at(prefix + len(removed))
        items = [item for slot in inserted for item in slot.part]
        if stop > start or items:
            tx.splice(out_key, (docs.VALUE,), start, stop - start, items)
        parts.splice(prefix, len(removed), inserted)
        keys = kept.disown(removed) | kept.own(inserted)
        for key in keys:
            replace[key] = kept.reads_of(key)
        kept.pairs = splice.pairs

    def _combine_all(self, tx: Transaction, identity: Identity) -> None:
        """Read every result and write the whole output. O(N)."""
        self.combines += 1
        first = len(tx.reads)
        place = resolve(tx, self.elements)
        pairs = tx.read(place.key(identity), (docs.VALUE, *place.path))
        if type(pairs) is not list:
            return  # the coordinator has not written it yet (its list is loading)
        fixed = frozenset(entry[0] for entry in tx.reads[first:])
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
        slots: list[Slot] | None = []
        aggregate: list[Any] = []
        for pair in pairs:
            child, element = pair
            out = rescoped(out, narrower(out.scope, child.scope))
            value, reads = read_result(tx, child)
            part = part_of(self.kind, value, element)
            aggregate += part
            if slots is not None:
                if reads is None or fixed.intersection(entry[0] for entry in reads):
                    slots = None  # a result with links inside: combine it all each time
                else:
                    slots.append(Slot(pair, part, reads))
        publish(tx, self.container, out, aggregate)
        kept: Kept | None = None
        if slots is not None and not loading:
            kept = Kept(pairs, out, place, fixed)
            kept.parts = Parts(slots)
            kept.own(slots)
            kept.written = tx.peek(out.key(identity), (docs.VALUE,))
            self.kept[identity] = kept
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
            parts = kept.parts
            parts._check()
            slots = list(parts)
            assert len(slots) == len(kept.pairs), kept
            assert [s.pair for s in slots] == kept.pairs, "each slot's pair, in order"
            if kept.written is not MISSING:
                assert value_equal([x for s in slots for x in s.part], kept.written), kept
            at = 0
            for slot in slots:
                assert parts.start(*parts.where(slot)) == at, (slot, at)
                at += len(slot.part)
            owned = {(key, id(s)) for s in slots for key, _p, _s in s.reads}
            assert owned == {(k, id(s)) for k, ss in kept.owners.items() for s in ss}, kept
            scopes: dict[Scope, int] = {}
            for s in slots:
                scopes[s.pair[0].scope] = scopes.get(s.pair[0].scope, 0) + 1
            assert scopes == kept.scopes, (scopes, kept.scopes)
