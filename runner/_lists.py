"""List coordinators: `items.map(Op)`, `items.filter(Pred)`, `items.flat_map(Op)`.

A coordinator is one scheduler computation per list node. Each run (a
*reconcile*) reads the list's structure, keeps one child run of the op
pattern per element (or one computation per element for a function op,
`_list_functions`), and writes what follows from the structure: a map's
output (the *container*, `_list_output`: links to the children), or a filter's
or flat_map's *elements document* (a pair `[child, element]` per element),
from which a second node per identity, the *combiner* (`_list_combine`),
writes the output. Which child an element gets is its element key
(`_list_keys`); the bookkeeping of each identity's children is a `State`
(`_list_state`).

Incremental: the coordinator reads the list's structure only — one deep read
when it holds links only (an edit made through a link lands in another
document), else its length and the kinds of its elements (one read:
`Transaction.read_kinds`; an inline container's position is not read) — so
editing inside an element re-runs only that element's child (which reads its
element through a link), and, when that element's result changes, the
combiner's update of that element's part (a filter's
output holds links to its elements, so an edit inside a kept element changes
no part). A structural change re-runs the coordinator once and sets up only
new elements, or moved ones whose op reads `index`. Over a list of links, or
of inline elements keyed by element id, the diff is O(changed)
(`_reconcile_middle`, `_reconcile_ids`: the common prefix and suffix found by
C-level slice comparisons, O(1) after a splice, only the middle matched, a
map's container or a filter's or flat_map's elements document spliced);
otherwise it walks the whole list (`_reconcile_all`, O(N)).

Ownership (the spec's "Releasing a child"): the coordinator *releases*
(never stops) a child when the list no longer holds its element, when the
list becomes undefined, and on teardown; one failing release does not keep
its siblings alive. A child opened as a page survives all of these (the
release declines on its lifetime).

Setup debt (`_list_state`): when a reconcile's transaction fails (a stale
basis too), every entry it still stamps owes its setup again. On a non-stale
failure the reconcile also undoes its own bookkeeping — entries it created
(releasing their children) and indices it moved — each only if still its
own; then the coordinator runs again.

Identities (S69): a coordinator has one reconcile node per identity its
registration runs for (each identity that demands the run adds one,
`add_identity`), and each node runs as its identity: its element children are
launched for that identity, so a per-user element's derivations run once per
demanding principal, as that principal. A child two identities derive alike
(a space-scoped child) is released by the last identity's bookkeeping that
lets go of it.

Scopes (S70): the base container, each child's exposed scope and the output's
scope are decided at every reconcile from the run's result scope and the
scope of the document the list lives in (`_list_keys`, `_list_output`). A
list that moves to another scope changes every child's identity: the old
children are released, even where the element keys remain, and new ones are
set up.

Cold resume: a list document that has not loaded yet is never read as
"empty" (the container and the children are kept until it loads; a failed
load is raised to the runtime, never taken for `[]`), a filter or flat_map
aggregate is not republished while an element's result document is still
loading, and an element whose result document is loading keeps its setup
owed (new elements are still set up). Each awaited document gets one sync,
shared by every reconcile meanwhile; when it ends the coordinator runs again.

Dormant children (`_list_dormant`): a new element whose child is already in
the store as its setup would leave it, every output vouched for by its inputs
record, is counted as set up without installing anything; a watch node per
identity wakes it (an owed setup, issued by the next reconcile) when what it
read changes, and `wake_all` wakes every one (inspection).

Invariants (checked by `_check`)
- one state per reconcile node, each for that node's identity, and a watch
  only for an identity with a reconcile node;
- each state passes its own check (`State._check`).
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Set as AbstractSet
from itertools import islice
from typing import TYPE_CHECKING, Any

from cells import (
    ELEMENT_IDS,
    CommitResult,
    DocKey,
    Identity,
    Link,
    Outcome,
    Transaction,
    element_ids,
    element_types,
    ids_key,
    resolve,
)
from cells.errors import LivenessError
from scheduler import Node, common_ends

from . import _docs as docs
from ._builder import NodeSpec, Pattern, find_pattern
from ._cancel import CancelGroup
from ._list_combine import Combiner, elements_link
from ._list_dormant import Sleeper, Watch, asleep, sleepable
from ._list_functions import ElementFunctions
from ._list_keys import (
    ElementKey,
    base_container,
    child_link,
    diff_middle,
    element_keys,
    id_key,
    keys_and_counts,
    keys_at,
    rescoped,
)
from ._list_loads import await_load, loaded
from ._list_output import output_keys, output_link, publish
from ._list_state import Entry, Issuance, State
from ._registrations import Registration

if TYPE_CHECKING:
    from ._core import Launcher

__all__ = [
    "Coordinator",
    "base_container",
    "child_link",
    "common_ends",
    "element_keys",
    "presynced_child",
]

MAX_FAILED_RECONCILES = 5
"""Re-runs after reconciles that fail for good, before the coordinator waits for new input."""

MAX_PRESYNCED = 1 << 16
"""How many pre-synced children a runtime keeps waiting for their first reconcile
(`presynced_child`); past it the oldest quarter is dropped (and derived again if asked
for)."""


def presynced_child(
    held: dict[tuple[str, Link, ElementKey], Link], kind: str, container: Link, key: ElementKey
) -> Link:
    """`child_link(kind, container, key)`, kept in `held` (the runner's `presynced`) for
    the coordinator's first `_place` of it: the start cascade's element pre-sync derives
    every child a resumed list holds, and deriving a child's id is a SHA-256 of canonical
    bytes (deriving each twice was about a tenth of a restart)."""
    child = child_link(kind, container, key)
    if len(held) >= MAX_PRESYNCED:
        # The oldest quarter at once: one `del held[next(iter(held))]` per child stepped
        # over every slot deleted before it, O(MAX_PRESYNCED) per child once full.
        for old in list(islice(held, MAX_PRESYNCED // 4)):
            del held[old]
    held[kind, container, key] = child
    return child


class Coordinator:
    """One list node's coordinator: one reconcile node per identity, and that identity's
    bookkeeping (`State`). See the module docstring for the rules it applies."""

    def __init__(
        self,
        runner: Launcher,
        reg: Registration,
        pattern: Pattern,
        spec: NodeSpec,
        result: Link,
    ) -> None:
        self.runner = runner
        self.reg = reg
        self.kind = spec.kind
        self.index = spec.index
        # The op: a pattern (a child run per element) or a plain function (one
        # computation per element, `_list_functions`).
        self.functions: ElementFunctions | None = None
        if spec.inputs.get("function") is True:
            fn = pattern.function(spec.target)
            op_name = getattr(fn, "__qualname__", spec.target)
        else:
            self.op = find_pattern(spec.target)
            self.uses_index = "index" in self.op.params
            op_name = self.op.__qualname__
        bound = docs.bind(spec.inputs, result)["list"]
        assert type(bound) is Link
        self.list_link: Link = bound
        self.container = docs.internal_link(result, spec.index)
        self.label = f"{pattern.__qualname__}.n{spec.index} {spec.kind}({op_name})"
        # map writes its output itself (links to the children); a filter or flat_map writes
        # its elements document, and its combiner the output (`_list_combine`).
        self.written = self.container
        self.combiner: Combiner | None = None
        if self.kind != "map":
            self.written = elements_link(self.container)
            self.combiner = Combiner(runner, self.kind, self.written, self.container, self.label)
        if spec.inputs.get("function") is True:
            self.functions = ElementFunctions(runner, fn, self.label)
            self.uses_index = self.functions.uses_index
        self.chain = (*reg.chain, reg.key)
        self.lifts = sleepable(self.op) if self.kind == "map" and self.functions is None else None
        """What a dormant child's check needs (`_list_dormant`); None: never dormant."""
        self.fold = (
            self.kind == "map"
            and self.functions is None
            and not self.uses_index
            and docs.folds_argument(self.op)
        )
        """Its children keep their argument in their result documents, with an inline
        element reached through `list_link` (`docs.folds_argument`)."""
        self.watches: dict[Identity, Watch] = {}
        """Per identity, the dormant children and the node watching what they read."""
        self._asleep: list[Sleeper] = []
        """The children the running reconcile left dormant."""
        self.states: dict[Identity, State] = {}
        self.nodes: dict[Identity, Node] = {}
        """One reconcile node per identity the registration runs for, running as it."""
        self.reconciles = 0
        self.active = True
        reg.group.add(self.teardown)
        runner.coordinators.add(self)
        runner.list_coordinators[reg, spec.index] = self

    def __repr__(self) -> str:
        return f"<Coordinator {self.label}>"

    @property
    def node(self) -> Node:
        """The first identity's reconcile node (the only one, unless serving several)."""
        return next(iter(self.nodes.values()))

    def add_identity(self, identity: Identity, group: CancelGroup) -> None:
        """Reconcile for `identity` too: a node running as it, with bookkeeping of its own,
        removed (its children let go) when `group` (that instance's) is cancelled."""
        if identity in self.nodes or not self.active:
            return
        self.states[identity] = State(identity)
        self.nodes[identity] = self.runner.scheduler.register(
            self.reconcile,
            identity=identity,
            outputs=[(key, (docs.VALUE,)) for key in output_keys(self.written, identity)],
            label=self.label,
            reads=[(self.list_link.key(identity), (docs.VALUE, *self.list_link.path), True)],
        )
        if self.combiner is not None:
            self.combiner.add(identity)
        group.add(lambda: self.drop_identity(identity))

    def drop_identity(self, identity: Identity) -> None:
        """Stop reconciling for `identity` and let go of its children."""
        node = self.nodes.pop(identity, None)
        if node is None:
            return
        self.runner.scheduler.remove(node)
        watch = self.watches.pop(identity, None)
        if watch is not None:
            watch.close()
        if self.combiner is not None:
            self.combiner.drop(identity)
        state = self.states.pop(identity)
        self._raise_failed(self._release(state, list(state.entries)))

    def _publish(self, tx: Transaction, out: Link, aggregate: Any) -> None:
        """Write what the reconcile writes at `out` (a re-addressing of `self.written`):
        map's output, or a filter's or flat_map's elements document."""
        publish(tx, self.written, rescoped(self.written, out.scope), aggregate)

    # ------------------------------------------------------------------ reconcile
    def reconcile(self, tx: Transaction) -> None:
        """One run of the coordinator for `tx.identity`: read the list's structure, keep a
        child per element, write the aggregate. O(changed) over a list of links that was
        clean last time (`_reconcile_middle`), else O(N) (`_reconcile_all`). The
        children it leaves dormant are watched from then on (`_list_dormant`)."""
        self._asleep = []
        try:
            self._reconcile(tx)
        finally:
            asleep, self._asleep = self._asleep, []
            state = self.states.get(tx.identity)
            if asleep and state is not None and self.active:
                self._watch(state, asleep)

    def _reconcile(self, tx: Transaction) -> None:
        if not self.active:
            return
        identity = tx.identity
        state = self.states.get(identity)
        if state is None:
            return  # that identity's instance was dropped while this run was queued
        previous, state.items = state.items, None  # set again only by a clean finish
        previous_ids, state.ids = state.ids, None  # likewise (inline elements)
        place = resolve(tx, self.list_link)
        list_key = place.key(identity)
        base = (docs.VALUE, *place.path)
        if not self.runner.replica.is_loaded(list_key):
            self._list_loading(tx, state, list_key, base)
            return
        container = base_container(self.container, place.scope)
        if state.base != container:
            # The list moved to another scope: every child derives from the old container,
            # so each is released (even where its element key remains) and set up anew.
            self._raise_failed(self._release(state, list(state.entries)))
            state.base = container
            previous = previous_ids = None
        items = tx.read(list_key, base, shallow=True)
        if type(items) is not list:
            # Undefined (or not a list): release every child, the output is empty.
            errors = self._release(state, list(state.entries))
            self._publish(tx, container, [])
            # If this write does not land, the container shows the old aggregate again:
            # the coordinator must run again (the scheduler re-runs a stale basis only).
            tx.add_settle_callback(lambda _tx, res: self._settled(state, None, [], [], res))
            self._raise_failed(errors)
            return
        if state.waking and self._wake(tx, state, container):
            previous = previous_ids = None  # a woken child waits for a load: walk all
        if (
            previous is not None
            and state.place == place
            and (not self.uses_index or len(items) == len(previous))
        ):
            middle = diff_middle(state.counts, previous, items)
            if middle is not None:
                # The list held links only and still does: one deep read, as below.
                tx.read(list_key, base)
                self._reconcile_middle(tx, state, previous, items, middle, container)
                return
        kinds = element_types(items)  # O(1) after a splice of a list of one type
        self._read_structure(tx, list_key, base, items, kinds)
        ids: list[str] | None = None
        if not kinds <= {Link}:
            # Inline elements are keyed by their element ids, which follow a splice
            # (read: a splice changes them and runs the coordinator again).
            doc = tx.peek(list_key)
            tx.read(list_key, (ELEMENT_IDS, ids_key(base, doc)))
            ids = element_ids(doc, base, items)
            if (
                previous_ids is not None
                and state.place == place
                and not self.uses_index
                and Link not in kinds
            ):
                self._reconcile_ids(tx, state, previous_ids, ids, container, place)
                return
        self._repoint(state, place)
        self._reconcile_all(tx, state, place, items, container, ids)

    def _list_loading(
        self, tx: Transaction, state: State, list_key: DocKey, base: tuple[Any, ...]
    ) -> None:
        """Cold resume: an input still loading is not an empty list. Keep the container and
        the children; the load's end runs the reconcile again."""
        tx.read(list_key, base, shallow=True)
        error = state.load_errors.pop(list_key, None)
        # Load it (again); a failure is reported once, then only traced until a later
        # reconcile tries again.
        self._await_load(state, list_key, report=error is None)
        if error is not None:
            # Not read as empty either: the failure reaches the runtime (a node error).
            raise LivenessError(
                f"{self.label}: its list {list_key} could not be loaded: {error}"
            ) from error

    def _read_structure(
        self,
        tx: Transaction,
        list_key: DocKey,
        base: tuple[Any, ...],
        items: list[Any],
        kinds: AbstractSet[type],
    ) -> None:
        """Read what decides the children and the aggregate, and nothing inside an element
        that only its child reads (`kinds`: the types of the elements)."""
        if kinds <= {Link}:
            # Links only: one deep read sees exactly what matters (a link re-pointed, the
            # length), while an edit made *through* a link changes another document and
            # re-runs only that element's child. (A filter's output holds links to its
            # elements, so an edit inside a kept inline element needs no run either.)
            tx.read(list_key, base)
            return
        # Inline values: an edit inside one must not re-run the coordinator, so inline
        # containers are not read, and every other position is read shallowly (a link,
        # or a scalar's kind: a new value of an inline scalar re-runs only its child), all
        # of them at once: one read of the element kinds, which a splice moves not.
        if kinds <= {dict, list}:
            return  # containers only: nothing to read per position
        tx.read_kinds(list_key, base)

    @staticmethod
    def _repoint(state: State, place: Link) -> None:
        """Note where the list lives now. Re-pointed at another list document: an inline
        element's argument is its position in the old one, so a kept position owes its
        setup (its child would go on reading the old list)."""
        if state.place == place:
            return
        if state.place is not None:
            for kept in state.entries.values():
                if len(kept.key) == 1:
                    kept.owed = True
        state.place = place

    def _reconcile_ids(
        self,
        tx: Transaction,
        state: State,
        old: list[str],
        ids: list[str],
        container: Link,
        place: Link,
    ) -> None:
        """A list of inline elements, when the last reconcile over it finished
        cleanly (`old`: the element ids it saw): only the middle of the ids
        (`common_ends`, C-level) is diffed, and map's container (a filter's or
        flat_map's elements document) spliced. After a splice of the list that is
        O(changed) bookkeeping, no child of a kept element owes its setup (its
        argument names its element id), no kept pair changes (it names its element by
        id too), and the reader index matches no kept element's readers (they read by
        id). O(N) C-level comparisons (O(1) after a splice: `splice_ends`)."""
        prefix, suffix = common_ends(old, ids)
        end_old = len(old) - suffix
        end_new = len(ids) - suffix
        old_mid = [id_key(x) for x in old[prefix:end_old]]
        new_mid = [id_key(x) for x in ids[prefix:end_new]]
        identity = tx.identity
        issuance, created, moved, deferred, errors = self._place_middle(
            tx, state, container, prefix, old_mid, new_mid, lambda i, _key: place.child(ids[i])
        )
        entries = state.entries
        written = rescoped(self.written, container.scope)
        out_key = written.key(identity)
        previous = state.aggregate
        if previous is not None and tx.peek(out_key, (docs.VALUE,)) is previous:
            if old_mid or new_mid:
                # The container still holds exactly what the last reconcile wrote.
                new: list[Any] = [entries[k].child for k in new_mid]
                if self.kind != "map":
                    named = zip(new, ids[prefix:end_new], strict=True)
                    new = [[c, place.child(x)] for c, x in named]
                tx.splice(out_key, (docs.VALUE,), prefix, end_old - prefix, new)
                if written != self.written:
                    tx.write(self.written.key(identity), (docs.VALUE,), written)
        else:
            all_entries = [entries[k] for k in map(id_key, ids)]
            self._publish(tx, container, self._aggregate(all_entries, ids, place, ids))
        tx.add_settle_callback(lambda _tx, res: self._settled(state, issuance, created, moved, res))
        self._raise_failed(errors)
        if not deferred:
            state.ids = ids
            state.aggregate = tx.peek(out_key, (docs.VALUE,))
        else:
            state.ids = None

    def _reconcile_all(
        self,
        tx: Transaction,
        state: State,
        place: Link,
        items: list[Any],
        container: Link,
        ids: list[str] | None = None,
    ) -> None:
        """Walk the whole list: release the children of elements that left, place every
        new, moved or owed element, write the whole aggregate. O(N)."""
        identity = tx.identity
        state.ids = None
        keys, counts = keys_and_counts(items, ids)
        wanted = set(keys)
        deferred = False
        self.reconciles += 1
        issuance = Issuance(self.reconciles)
        created: list[Entry] = []
        moved: list[tuple[Entry, int, int]] = []
        errors = self._release(state, [k for k in state.entries if k not in wanted])
        held = state.entries
        for i, (key, item) in enumerate(zip(keys, items, strict=True)):
            entry = held.get(key)
            if entry is None or entry.index != i or entry.owed:
                element = item if type(item) is Link else place.child(i if ids is None else ids[i])
                placed = (tx, state, issuance, container, created, moved)
                deferred |= self._place(*placed, entry, key, i, element)
        entries = [state.entries[k] for k in keys]
        out = output_link("map", container, entries)
        self._publish(tx, out, self._aggregate(entries, items, place, ids))
        tx.add_settle_callback(lambda _tx, res: self._settled(state, issuance, created, moved, res))
        self._raise_failed(errors)
        out_key = rescoped(self.written, out.scope).key(identity)
        if not deferred and sum(counts.values()) == len(items):
            # Links only, every setup issued: the next reconcile may diff only the middle.
            state.items, state.counts = items, counts
            state.aggregate = tx.peek(out_key, (docs.VALUE,))
        elif not deferred and ids is not None and not counts:
            # Inline elements, every setup issued: the next reconcile may diff the ids.
            state.ids = ids
            state.aggregate = tx.peek(out_key, (docs.VALUE,))

    def _raise_failed(self, errors: list[Exception]) -> None:
        """Raise the releases that failed (after every sibling's release was tried)."""
        if errors:
            raise ExceptionGroup(f"{self.label}: {len(errors)} releases failed", errors)

    def _place(
        self,
        tx: Transaction,
        state: State,
        issuance: Issuance,
        container: Link,
        created: list[Entry],
        moved: list[tuple[Entry, int, int]],
        entry: Entry | None,
        key: ElementKey,
        i: int,
        element: Link,
    ) -> bool:
        """Put the element `key` at position `i`: create its entry (noted in `created`)
        or move it (noted in `moved`; it owes its setup if the op reads `index`), then
        issue its setup if owed. True if that setup waits for its result document to
        load. Called only for an entry that is new, moved or owed."""
        if entry is None:
            child = self.runner.presynced.pop((self.kind, container, key), None)
            if child is None:
                child = child_link(self.kind, container, key)
            entry = Entry(key, child, i)
            entry.created_by = issuance
            state.entries[key] = entry
            created.append(entry)
        elif entry.index != i:
            moved.append((entry, entry.index, i))
            entry.index = i
            if self.uses_index:
                entry.owed = True  # its argument's index changed
        if not entry.owed:
            return False
        child_key = self.runner.replica.held_key(entry.child.key(tx.identity))
        if not loaded(self.runner.replica, tx, child_key):
            # Its result document is still loading: keep the debt, and pay it when the
            # load ends (a child started on a document it has not seen, or a setup
            # staged under it, would act on a state nobody has read).
            self._await_load(state, child_key)
            return True
        if entry.created_by is issuance and self.lifts is not None and self.runner.reuse:
            # New here, and maybe already in the store as this setup would leave it with
            # every output vouched for: leave it dormant (`_list_dormant`).
            argument = self._argument(entry, element)
            sleeper = asleep(tx, self.op, self.lifts, entry, argument, child_key, self.fold)
            if sleeper is not None:
                entry.sleeper = sleeper
                entry.owed = False
                entry.issuer = issuance
                self._asleep.append(sleeper)
                return False
            self._issue(tx, entry, element, issuance, argument)
            return False
        self._issue(tx, entry, element, issuance)
        return False

    def _place_middle(
        self,
        tx: Transaction,
        state: State,
        container: Link,
        prefix: int,
        old_mid: list[ElementKey],
        new_mid: list[ElementKey],
        element_at: Any,
    ) -> tuple[Issuance, list[Entry], list[tuple[Entry, int, int]], bool, list[Exception]]:
        """The bookkeeping of a reconcile that touches only a middle (from `prefix` on,
        `old_mid` replaced by `new_mid`): release the elements that left it, place the
        new, moved or owed ones (`element_at(i, key)`: the element's argument). Returns
        the issuance, the entries created and moved, whether a setup waits for a load,
        and the releases that failed. O(changed)."""
        self.reconciles += 1
        issuance = Issuance(self.reconciles)
        created: list[Entry] = []
        moved: list[tuple[Entry, int, int]] = []
        deferred = False
        keep = set(new_mid)
        errors = self._release(state, [k for k in old_mid if k not in keep])
        entries = state.entries
        for i, key in enumerate(new_mid, prefix):
            entry = entries.get(key)
            if entry is None or entry.index != i or entry.owed:
                placed = (tx, state, issuance, container, created, moved)
                deferred |= self._place(*placed, entry, key, i, element_at(i, key))
        return issuance, created, moved, deferred, errors

    def _reconcile_middle(
        self,
        tx: Transaction,
        state: State,
        old: list[Any],
        items: list[Any],
        middle: tuple[int, int, list[ElementKey], list[ElementKey]],
        container: Link,
    ) -> None:
        """A reconcile that touches only the middle `diff_middle` found: O(changed)
        bookkeeping, plus a C-level copy of the map aggregate (a splice of it)."""
        prefix, suffix, old_mid, new_mid = middle
        identity = tx.identity
        end_old = len(old) - suffix
        issuance, created, moved, deferred, errors = self._place_middle(
            tx, state, container, prefix, old_mid, new_mid, lambda _i, key: key[0]
        )
        entries = state.entries
        counts = state.counts
        for link, _n in old_mid:
            left = counts[link] - 1
            if left:
                counts[link] = left
            else:
                del counts[link]
        for link, _n in new_mid:
            counts[link] = counts.get(link, 0) + 1
        previous = state.aggregate
        written = rescoped(self.written, container.scope)
        out_key = written.key(identity)
        if previous is not None:
            # map: the children; filter, flat_map: their pairs (`_aggregate`).
            new = self._aggregate([entries[k] for k in new_mid], [k[0] for k in new_mid], None)
            if tx.peek(out_key, (docs.VALUE,)) is previous:
                # The container still holds exactly what the last reconcile wrote:
                # write only the change.
                tx.splice(out_key, (docs.VALUE,), prefix, end_old - prefix, new)
                if written != self.written:
                    tx.write(self.written.key(identity), (docs.VALUE,), written)
            else:
                aggregate = previous[:prefix]
                aggregate += new
                aggregate += previous[end_old:]
                self._publish(tx, container, aggregate)
        else:
            all_entries = [entries[k] for k in keys_at(items, counts, 0, len(items))]
            self._publish(tx, container, self._aggregate(all_entries, items, None))
        tx.add_settle_callback(lambda _tx, res: self._settled(state, issuance, created, moved, res))
        self._raise_failed(errors)
        if not deferred:
            state.items = items
            state.aggregate = tx.peek(out_key, (docs.VALUE,))

    def _argument(self, entry: Entry, element: Link) -> dict[str, Any]:
        if self.fold:
            if len(entry.key) == 1:
                # An inline element, `place.child(id)`: reached through the list input's
                # own link instead, a function of the child's identity that a re-pointed
                # list input leaves right (`docs`, "Folded arguments").
                element = self.list_link.child(element.path[-1])
            return {"element": element}
        argument: dict[str, Any] = {"element": element}
        if self.uses_index:
            argument["index"] = entry.index
        return argument

    def _issue(
        self,
        tx: Transaction,
        entry: Entry,
        element: Link,
        issuance: Issuance,
        argument: dict[str, Any] | None = None,
    ) -> None:
        """Stage the setup of `entry`'s child and launch it (`argument`: its argument,
        when the caller built it already)."""
        entry.sleeper = None
        if self.functions is not None:
            self.functions.issue(tx, entry.child, element, entry.index)
            entry.owed = False
            entry.issuer = issuance
            return
        if argument is None:
            argument = self._argument(entry, element)
        self.runner.stage_setup(tx, self.op, argument, entry.child, self.label, fold=self.fold)
        self.runner.launch(
            tx,
            self.op,
            entry.child,
            launch=f"element of {self.label}",
            chain=self.chain,
            gated=False,
            rollback=False,
        )
        entry.owed = False
        entry.issuer = issuance

    # ------------------------------------------------------------------ dormant children
    def _watch(self, state: State, sleepers: list[Sleeper]) -> None:
        """Watch `sleepers`, left dormant by the reconcile running now."""
        watch = self.watches.get(state.identity)
        if watch is None:
            self.watches[state.identity] = Watch(
                self.runner.scheduler,
                state,
                state.identity,
                self.label,
                self._wake_sleepers,
                sleepers,
            )
        else:
            watch.add(sleepers)

    def _wake_sleepers(self, state: State, sleepers: list[Sleeper]) -> None:
        """`sleepers` (dormant children of `state`) are needed: each owes its setup, which
        the next reconcile issues (`_wake`)."""
        for sleeper in sleepers:
            entry = sleeper.entry
            if entry.sleeper is sleeper and state.entries.get(entry.key) is entry:
                entry.sleeper = None
                entry.owed = True
                state.waking.append((entry, sleeper.element))
                self.runner.trace.record("wake", entry.child.key(state.identity))
        node = self.nodes.get(state.identity)
        if state.waking and node is not None and self.active:
            self.runner.scheduler.invalidate(node)

    def _wake(self, tx: Transaction, state: State, container: Link) -> bool:
        """Set up the woken entries that still owe it, in `tx`; True if one waits for a
        load (then the whole list is walked: it is placed when the load ends)."""
        waking, state.waking = state.waking, []
        self.reconciles += 1
        issuance = Issuance(self.reconciles)
        deferred = False
        created: list[Entry] = []
        moved: list[tuple[Entry, int, int]] = []
        for entry, element in waking:
            if state.entries.get(entry.key) is entry and entry.owed:
                placed = (tx, state, issuance, container, created, moved)
                deferred |= self._place(*placed, entry, entry.key, entry.index, element)
        tx.add_settle_callback(lambda _tx, res: self._settled(state, issuance, [], [], res))
        return deferred

    def wake_all(self) -> None:
        """Set up every dormant child now, in a transaction of its own per identity (what
        inspection asks first, so it shows every run)."""
        for identity, watch in list(self.watches.items()):
            state = self.states.get(identity)
            if state is None or not self.active:
                continue
            self._wake_sleepers(state, watch.sleepers())
            if not state.waking or state.base is None:
                continue
            tx = self.runner.replica.edit(identity)
            try:
                if self._wake(tx, state, state.base):
                    state.items = state.ids = None
            except BaseException:
                tx.abort("waking dormant children failed")
                raise
            tx.add_settle_callback(self._woken(state))
            tx.commit_detached()

    def _woken(self, state: State) -> Callable[[Transaction, CommitResult], None]:
        def settled(_tx: Transaction, res: CommitResult) -> None:
            # `_settled` leaves a stale basis to the scheduler's re-run, but no node ran
            # this transaction: run the reconcile again (it sets up what is owed).
            node = self.nodes.get(state.identity)
            if res.outcome is Outcome.STALE_BASIS and node is not None and self.active:
                self.runner.scheduler.invalidate(node)

        return settled

    def _await_load(self, state: State, key: DocKey, *, report: bool = False) -> None:
        runner = self.runner
        await_load(runner.replica, runner.trace, state, key, self._rerun, report=report)

    def _rerun(self, state: State) -> None:
        """Run the state's reconcile again (its instance may have gone meanwhile)."""
        node = self.nodes.get(state.identity)
        if self.active and node is not None:
            self.runner.scheduler.invalidate(node)

    def _aggregate(
        self,
        entries: list[Entry],
        items: list[Any],
        place: Link | None,
        ids: list[str] | None = None,
    ) -> Any:
        """map: the links to the children. filter, flat_map: the elements document, a pair
        `[child, element]` per element (`_list_combine`), an inline element as a link into
        the list at `place` (None: the list holds links only) by its element id (`ids`:
        one per item), so that a splice of the list changes no kept pair."""
        if self.kind == "map":
            return [e.child for e in entries]
        if ids is None or place is None:
            return [
                [e.child, item if type(item) is Link or place is None else place.child(i)]
                for i, (e, item) in enumerate(zip(entries, items, strict=True))
            ]
        return [
            [e.child, item if type(item) is Link else place.child(x)]
            for e, item, x in zip(entries, items, ids, strict=True)
        ]

    def _settled(
        self,
        state: State,
        issuance: Issuance | None,
        created: list[Entry],
        moved: list[tuple[Entry, int, int]],
        res: CommitResult,
    ) -> None:
        if res.ok:
            state.failures = 0
            return
        state.items = None  # what it recorded did not land: walk the whole list next time
        state.ids = None
        # Everything this reconcile staged is gone: what it issued is owed again, but
        # only where it is still the latest issuer (a later reconcile decides the rest).
        for entry in state.entries.values():
            if issuance is not None and entry.issuer is issuance:
                entry.owed = True
                self.runner.trace.record("debt", entry.child.key(state.identity))
        if res.outcome is Outcome.STALE_BASIS:
            return  # the scheduler re-runs the reconcile against fresher state
        others = [s for s in self.states.values() if s is not state]
        for entry in created:
            if state.entries.get(entry.key) is entry and entry.created_by is issuance:
                # Created by a reconcile that never landed: release (never stop) its child,
                # unless another identity's bookkeeping holds it (that one releases it).
                del state.entries[entry.key]
                child = entry.child.key(state.identity)
                self.runner.trace.record("rollback", child)
                if self.functions is not None:
                    self.functions.release(state.identity, child)
                elif not (others and self._held_elsewhere(others, entry, state.identity)):
                    self.runner.release(child, None, why="rollback")
        for entry, before, after in moved:
            if state.entries.get(entry.key) is entry and entry.index == after:
                entry.index = before
        state.failures += 1
        node = self.nodes.get(state.identity)
        if state.failures <= MAX_FAILED_RECONCILES and node is not None:
            self.runner.scheduler.invalidate(node)

    # ------------------------------------------------------------------ release
    def _release(self, state: State, keys: list[ElementKey]) -> list[Exception]:
        """Release the children of `keys`; an entry goes only once its release succeeded.
        A child another identity's bookkeeping still holds (the same key) is only forgotten
        here: that identity releases it when it lets go."""
        errors: list[Exception] = []
        identity = state.identity
        others = [s for s in self.states.values() if s is not state]
        for key in keys:
            entry = state.entries[key]
            if self.functions is not None:  # each identity has its own computations
                self.functions.release(identity, entry.child.key(identity))
                del state.entries[key]
                continue
            if others and self._held_elsewhere(others, entry, identity):
                del state.entries[key]
                continue
            try:
                self.runner.release(
                    entry.child.key(identity), None, why=f"element left {self.label}"
                )
            except Exception as exc:  # one bad child must not keep its siblings alive
                errors.append(exc)
                continue
            del state.entries[key]
        return errors

    @staticmethod
    def _held_elsewhere(others: list[State], entry: Entry, identity: Identity) -> bool:
        child = entry.child.key(identity)
        for other in others:
            theirs = other.entries.get(entry.key)
            if theirs is not None and theirs.child.key(other.identity) == child:
                return True
        return False

    def teardown(self) -> None:
        self.active = False
        self.runner.coordinators.discard(self)
        if self.runner.list_coordinators.get((self.reg, self.index)) is self:
            del self.runner.list_coordinators[self.reg, self.index]
        errors: list[Exception] = []
        for identity in list(self.nodes):
            try:
                self.drop_identity(identity)
            except Exception as exc:  # one identity's failures must not keep the rest
                errors.append(exc)
        self._raise_failed(errors)

    def _check(self) -> None:
        assert self.states.keys() == self.nodes.keys(), (self.states, self.nodes)
        assert self.watches.keys() <= self.nodes.keys(), (self.watches, self.nodes)
        for identity, state in self.states.items():
            assert state.identity == identity, state
            assert self.nodes[identity].identity == identity, state
            state._check(self.kind)
        if self.combiner is not None:
            assert self.combiner.nodes.keys() == self.nodes.keys(), self
            self.combiner._check()
