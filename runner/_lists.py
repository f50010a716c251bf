"""List coordinators: `items.map(Op)`, `items.filter(Pred)`, `items.flat_map(Op)`.

A coordinator is one scheduler computation per list node. Each run (a
*reconcile*) reads the list's structure, keeps one child run of the op
pattern per element, and writes the aggregate into its output cell (the
*container*):

- map: a list of links to the element results (positions kept);
- filter: the original elements whose result is truthy, dense;
- flat_map: the element results flattened one level (a scalar counts as one
  item; an element whose result is still absent contributes nothing yet).

Element identity (`element_keys`): an element that is a link is keyed by its
target (space, id, scope, path) and occurrence, so its child moves with it
and repeated references get a child each; an inline value is keyed by its
position. The scope is part of the key, so a re-scoped element is a new
element. A child's result id derives from (container, element key), so every
runtime and every restart finds the same child.

Incremental: the coordinator reads the list's structure only — one deep read
when it holds links and scalars (an edit made through a link lands in
another document), else its length and the identity of each position that
is not an inline container — so editing inside an element re-runs only that
element's child (which reads its element through a link); a structural
change re-runs the coordinator once and sets up only new elements, or moved
ones whose op reads `index`. Over a list of links the diff is O(changed): the
reconcile compares the new list with the one it last matched (C-level slice
comparisons find the common prefix and suffix), matches only the middle, and
splices a map's container; otherwise it walks the whole list (O(N)).

Ownership (the spec's "Releasing a child"): the coordinator *releases*
(never stops) a child when the list no longer holds its element, when the
list becomes undefined, and on teardown; one failing release does not keep
its siblings alive. A child opened as a page survives all of these (the
release declines on its lifetime).

Setup debt: issuing an element's setup stamps the entry with the issuing
reconcile. When that reconcile's transaction fails (a stale basis too),
every entry it still stamps owes its setup again, and only the latest
issuer decides. On a non-stale failure the reconcile also undoes its own
bookkeeping — entries it created (releasing their children) and indices it
moved — each only if still its own; then the coordinator runs again.

Bookkeeping is kept per resolution identity `(principal, session)`: one
identity's completed setup never satisfies another's. A coordinator has one
reconcile node per identity its registration runs for (S69: each identity
that demands the run adds one, `add_identity`), and each node runs as its
identity: its element children are launched for that identity, so a
per-user element's derivations run once per demanding principal, as that
principal. A child two identities derive alike (a space-scoped child) is
released by the last identity's bookkeeping that lets go of it.

Scopes (S70). Narrower means more private: space < user < session. Three
scopes matter, decided at every reconcile from the run's result scope and the
scope of the document the list lives in:

- the *base container* is the coordinator's output re-addressed (same id) at
  the narrower of the run's scope and the list's scope. Element children are
  keyed from it, so a list that moves to another scope changes every child's
  identity: the old children are released, even where the element keys
  remain, and new ones are set up;
- an element's *exposed result* (its child) is at the narrower of the base
  container's scope and the element's own scope (a link's scope; an inline
  element lives in the list's document). A user-scoped element of a
  space-scoped list gets a user-scoped child: each principal computes and
  sees their own result. The child id derives from (base container, element
  key), and the element key holds the element's scope, so the exposed scope
  never forks an id on its own;
- the *output*: map writes its aggregate (links to the children) into the base
  container, so it stays at the list's scope whatever its elements' scopes
  (a link resolves to each reader's own instance). filter and flat_map
  aggregates are made of the children's values, so their cardinality is
  controlled by every child: the aggregate goes to the narrowest of the base
  container's and the children's scopes. A narrowed output is written at the
  same id, and the run's own output cell (at the run's scope) then holds a
  link to it, so the run's result resolves each reader's instance.

Cold resume: a list document that has not loaded yet is never read as
"empty" (the container and the children are kept until it loads; a failed
load is raised to the runtime, never taken for `[]`), a filter or flat_map
aggregate is not republished while an element's result document is still
loading, and an element whose result document is loading keeps its setup
owed (new elements are still set up). Each awaited document gets one sync,
shared by every reconcile meanwhile; when it ends the coordinator runs again.

Invariants (checked by `_check`)
- entry keys are unique and each entry's child id derives from its key;
- an entry's issuer, when set, is a reconcile that issued its setup;
- a document is awaited (syncing) or has a failed load to report, never both;
- every entry of a state derives from that state's base container;
- when a state records its last clean reconcile (`_State.items`), its link
  counts are those of that list, every element key has an entry, and the
  recorded map aggregate is those entries' children.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from cells import (
    MISSING,
    SCOPES,
    CommitResult,
    DocKey,
    Identity,
    Link,
    Outcome,
    Pending,
    Scope,
    Transaction,
    entity_id,
    read_value,
    resolve,
    thaw,
)
from cells.errors import LivenessError
from scheduler import Node

from . import _docs as docs
from ._builder import NodeSpec, Pattern, find_pattern
from ._cancel import CancelGroup
from ._list_functions import ElementFunctions
from ._registrations import Registration

if TYPE_CHECKING:
    from ._core import Launcher

ElementKey = tuple[Any, ...]

MAX_FAILED_RECONCILES = 5
"""Re-runs after reconciles that fail for good, before the coordinator waits for new input."""


def element_keys(items: Iterable[Any]) -> list[ElementKey]:
    """The identity key of each element: a link by its target and occurrence (the
    scope is part of the link, so a re-scoped element is a new one), an inline value
    by its position. O(N), one small tuple per element."""
    return _keys_and_counts(items)[0]


def _keys_and_counts(items: Iterable[Any]) -> tuple[list[ElementKey], dict[Link, int]]:
    """`element_keys`, and how often each link occurs."""
    seen: dict[Link, int] = {}
    keys: list[ElementKey] = []
    for i, item in enumerate(items):
        if type(item) is Link:
            n = seen.get(item, 0)
            seen[item] = n + 1
            keys.append((item, n))
        else:
            keys.append((i,))
    return keys, seen


def _keys_at(items: list[Any], counts: dict[Link, int], start: int, end: int) -> list[ElementKey]:
    """The element keys of `items[start:end]`, for a list of links whose occurrence
    counts are `counts`. A link that occurs once is `(link, 0)`; a repeated one
    counts its occurrences before `start` (C-level `list.count`). O(end - start),
    plus O(start) per distinct repeated link there."""
    keys: list[ElementKey] = []
    seen: dict[Link, int] = {}
    for i in range(start, end):
        item = items[i]
        if counts[item] == 1:
            keys.append((item, 0))
            continue
        n = seen.get(item)
        if n is None:
            n = items[:start].count(item) if start else 0
        seen[item] = n + 1
        keys.append((item, n))
    return keys


def _same_run(a: list[Any], b: list[Any], start_a: int, start_b: int, limit: int) -> int:
    """How many elements from `a[start_a]` and `b[start_b]` on are equal pairwise (at
    most `limit`). Compares growing slices (C-level `==`, identity first), so a run
    of length r costs O(r) C work and O(log r) Python steps."""
    done, step = 0, 8
    while done < limit:
        step = min(step, limit - done)
        i, j = start_a + done, start_b + done
        if a[i : i + step] == b[j : j + step]:
            done += step
            step *= 2
        elif step == 1:
            return done
        else:
            step //= 2
    return done


def common_ends(old: list[Any], new: list[Any]) -> tuple[int, int]:
    """(prefix, suffix): the lengths of the longest common prefix and, of what remains,
    the longest common suffix of two lists (by `==`). O(prefix + suffix) C work."""
    n = min(len(old), len(new))
    prefix = _same_run(old, new, 0, 0, n)
    rest = n - prefix
    # Backwards: compare the reversed tails (slices of reversed copies would cost O(N)).
    suffix = 0
    step = 8
    lo, ln = len(old), len(new)
    while suffix < rest:
        step = min(step, rest - suffix)
        if old[lo - suffix - step : lo - suffix] == new[ln - suffix - step : ln - suffix]:
            suffix += step
            step *= 2
        elif step == 1:
            break
        else:
            step //= 2
    return prefix, suffix


def _plain(key: ElementKey) -> Any:
    """The element key as JSON-like data (for deriving the child's id)."""
    if len(key) == 2:
        link, n = key
        return ["link", link.space, link.id, link.scope, list(link.path), n]
    return ["pos", key[0]]


def narrower(a: Scope, b: Scope) -> Scope:
    """The more private of two scopes (space < user < session)."""
    return a if SCOPES.index(a) >= SCOPES.index(b) else b


def rescoped(link: Link, scope: Scope) -> Link:
    """The same document id at another scope (a scope re-addresses, never forks, an id)."""
    return link if link.scope == scope else Link(link.space, link.id, scope)


def base_container(output: Link, list_scope: Scope) -> Link:
    """The container element children are keyed from: the coordinator's output at the
    narrower of the run's scope and the list's scope."""
    return rescoped(output, narrower(output.scope, list_scope))


def child_link(kind: str, container: Link, key: ElementKey) -> Link:
    """The element's child result: its id derives from (base container, element key), and
    it is exposed at the narrower of the container's scope and the element's scope (an
    element linked at a narrower scope gets a child per instance of it)."""
    cause = {kind: [container.id, container.scope], "element": _plain(key)}
    scope = container.scope
    if len(key) == 2:
        scope = narrower(scope, key[0].scope)
    return Link(container.space, entity_id(cause), scope)


class _Issuance:
    """One reconcile's transaction: the token that stamps the setups it issued."""

    __slots__ = ("number",)

    def __init__(self, number: int) -> None:
        self.number = number

    def __repr__(self) -> str:
        return f"<reconcile #{self.number}>"


class _Entry:
    """One element's child, and its position as of the last reconcile that matched it.

    A reconcile that diffs only the middle (`_reconcile_middle`) moves only the
    middle's entries; for an op that reads `index` it runs only when the length is
    unchanged, so nothing else moved. For the other ops a shifted prefix or suffix
    keeps its older `index`, which nothing reads (updating it would be O(N))."""

    __slots__ = ("child", "created_by", "index", "issuer", "key", "owed")

    def __init__(self, key: ElementKey, child: Link, index: int) -> None:
        self.key = key
        self.child = child
        self.index = index
        self.owed = True
        self.issuer: _Issuance | None = None
        self.created_by: _Issuance | None = None

    def __repr__(self) -> str:
        state = " owed" if self.owed else ""
        return f"<element {self.key!r} @{self.index}{state}>"


class _State:
    """A coordinator's bookkeeping for one resolution identity.

    `items`, `counts` and `aggregate` describe the last reconcile that finished
    cleanly over a list of links only (else `items` is None): the list it read (the
    stored object itself, not a copy), how often each link occurs in it, and the
    aggregate list object it wrote (map only). No key list is kept: a key is the
    link and its occurrence, which `_keys_at` derives for the part it needs (a new
    N-element list per change is what the collector's young-generation passes pay
    for at N = 10,000). Any failure (a raising release or setup, a transaction that
    does not land, a child still loading) clears `items`, so the next reconcile
    walks the whole list again.
    """

    __slots__ = (
        "aggregate",
        "base",
        "counts",
        "entries",
        "failures",
        "identity",
        "items",
        "load_errors",
        "place",
        "syncing",
    )

    def __init__(self, identity: Identity) -> None:
        self.identity = identity
        self.entries: dict[ElementKey, _Entry] = {}
        self.failures = 0
        self.place: Link | None = None
        """Where the list was read last (an inline element's argument points into it)."""
        self.syncing: set[DocKey] = set()
        """Documents this identity's reconciles wait for: one sync each, shared."""
        self.load_errors: dict[DocKey, BaseException] = {}
        """A list document whose load failed, for the next reconcile to report."""
        self.base: Link | None = None
        """The base container the entries' children derive from (None before the first
        reconcile that read a loaded list)."""
        self.items: list[Any] | None = None
        self.counts: dict[Link, int] = {}
        self.aggregate: list[Any] | None = None

    def __repr__(self) -> str:
        return f"<list state for {self.identity.principal}/{self.identity.session}>"


class Coordinator:
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
        if spec.inputs.get("function") is True:
            self.functions = ElementFunctions(runner, fn, self.label)
            self.uses_index = self.functions.uses_index
        self.chain = (*reg.chain, reg.key)
        self.states: dict[Identity, _State] = {}
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
        self.states[identity] = _State(identity)
        self.nodes[identity] = self.runner.scheduler.register(
            self.reconcile,
            identity=identity,
            outputs=[(key, (docs.VALUE,)) for key in self._output_keys(identity)],
            label=self.label,
            reads=[(self.list_link.key(identity), (docs.VALUE, *self.list_link.path), True)],
        )
        group.add(lambda: self.drop_identity(identity))

    def drop_identity(self, identity: Identity) -> None:
        """Stop reconciling for `identity` and let go of its children."""
        node = self.nodes.pop(identity, None)
        if node is None:
            return
        self.runner.scheduler.remove(node)
        state = self.states.pop(identity)
        errors = self._release(state, list(state.entries))
        if errors:
            raise ExceptionGroup(f"{self.label}: {len(errors)} releases failed", errors)

    def _output_keys(self, identity: Identity) -> list[DocKey]:
        """Every document a reconcile for `identity` may write its aggregate to: the output
        at the run's scope and its re-addressings at each narrower scope."""
        out = self.container
        narrow = SCOPES[SCOPES.index(out.scope) :]
        return list(dict.fromkeys(rescoped(out, s).key(identity) for s in narrow))

    def _publish(self, tx: Transaction, out: Link, aggregate: Any) -> None:
        """Write the aggregate at `out`; a narrowed output is linked from the run's own."""
        identity = tx.identity
        tx.write(out.key(identity), (docs.VALUE,), aggregate)
        if out != self.container:
            tx.write(self.container.key(identity), (docs.VALUE,), out)

    # ------------------------------------------------------------------ reconcile
    def reconcile(self, tx: Transaction) -> None:
        if not self.active:
            return
        identity = tx.identity
        state = self.states.get(identity)
        if state is None:
            return  # that identity's instance was dropped while this run was queued
        previous, state.items = state.items, None  # set again only by a clean finish
        place = resolve(tx, self.list_link)
        list_key = place.key(identity)
        base = (docs.VALUE, *place.path)
        if not self.runner.replica.is_loaded(list_key):
            # Cold resume: an input still loading is not an empty list. Keep the container
            # and the children; the load's end runs this again.
            tx.read(list_key, base, shallow=True)
            error = state.load_errors.pop(list_key, None)
            # Load it (again); a failure is reported once, then only traced until a
            # later reconcile tries again.
            self._await_load(state, list_key, report=error is None)
            if error is not None:
                # Not read as empty either: the failure reaches the runtime (a node error).
                raise LivenessError(
                    f"{self.label}: its list {list_key} could not be loaded: {error}"
                ) from error
            return
        container = base_container(self.container, place.scope)
        if state.base != container:
            # The list moved to another scope: every child derives from the old container,
            # so each is released (even where its element key remains) and set up anew.
            errors = self._release(state, list(state.entries))
            if errors:
                raise ExceptionGroup(f"{self.label}: {len(errors)} releases failed", errors)
            state.base = container
            previous = None
        items = tx.read(list_key, base, shallow=True)
        if type(items) is not list:
            # Undefined (or not a list): release every child, the output is empty.
            errors = self._release(state, list(state.entries))
            self._publish(tx, container, [])
            # If this write does not land, the container shows the old aggregate again:
            # the coordinator must run again (the scheduler re-runs a stale basis only).
            tx.add_settle_callback(lambda _tx, res: self._settled(state, None, [], [], res))
            if errors:
                raise ExceptionGroup(f"{self.label}: {len(errors)} releases failed", errors)
            return
        if (
            previous is not None
            and state.place == place
            and (not self.uses_index or len(items) == len(previous))
        ):
            middle = self._diff_middle(state, previous, items)
            if middle is not None:
                # The list held links only and still does: one deep read, as below.
                tx.read(list_key, base)
                self._reconcile_middle(tx, state, previous, items, middle, container)
                return
        kinds = set(map(type, items))
        if kinds <= {Link} or (self.kind == "filter" and not kinds & {dict, list}):
            # Links only (or a filter's links and scalars, whose values its output holds):
            # one deep read sees exactly what matters (a link re-pointed, a scalar
            # changed, the length), while an edit made *through* a link changes another
            # document and re-runs only that element's child.
            tx.read(list_key, base)
        else:
            # Inline values: an edit inside one must not re-run the coordinator, so skip
            # inline containers and read every other position shallowly (a link, or a
            # scalar's kind: a new value of an inline scalar re-runs only its child). A
            # filter's output holds its elements, so it reads a scalar deeply.
            deep = self.kind == "filter"
            for i, x in enumerate(items):
                t = type(x)
                if t is not dict and t is not list:
                    tx.read(list_key, (*base, i), shallow=not deep or t is Link)
        if state.place != place:
            if state.place is not None:
                # Re-pointed at another list document: an inline element's argument is
                # its position in the old one, so a kept position owes its setup (its
                # child would go on reading the old list).
                for kept in state.entries.values():
                    if len(kept.key) == 1:
                        kept.owed = True
            state.place = place
        keys, counts = _keys_and_counts(items)
        wanted = set(keys)
        deferred = False
        self.reconciles += 1
        issuance = _Issuance(self.reconciles)
        created: list[_Entry] = []
        moved: list[tuple[_Entry, int, int]] = []
        errors = self._release(state, [k for k in state.entries if k not in wanted])
        held = state.entries
        for i, (key, item) in enumerate(zip(keys, items, strict=True)):
            entry = held.get(key)
            if entry is None or entry.index != i or entry.owed:
                element = item if type(item) is Link else place.child(i)
                placed = (tx, state, issuance, container, created, moved)
                deferred |= self._place(*placed, entry, key, i, element)
        entries = [state.entries[k] for k in keys]
        out = container
        if self.kind != "map":
            # The children's values decide how long the aggregate is: it is as private
            # as the most private child (map's links resolve per reader instead).
            for e in entries:
                out = rescoped(out, narrower(out.scope, e.child.scope))
        self._publish(tx, out, self._aggregate(tx, state, entries, items, out.key(identity)))
        tx.add_settle_callback(lambda _tx, res: self._settled(state, issuance, created, moved, res))
        if errors:
            raise ExceptionGroup(f"{self.label}: {len(errors)} releases failed", errors)
        if not deferred and sum(counts.values()) == len(items):
            # Links only, every setup issued: the next reconcile may diff only the middle.
            state.items, state.counts = items, counts
            state.aggregate = (
                tx.peek(container.key(identity), (docs.VALUE,)) if self.kind == "map" else None
            )

    def _place(
        self,
        tx: Transaction,
        state: _State,
        issuance: _Issuance,
        container: Link,
        created: list[_Entry],
        moved: list[tuple[_Entry, int, int]],
        entry: _Entry | None,
        key: ElementKey,
        i: int,
        element: Link,
    ) -> bool:
        """Put the element `key` at position `i`: create its entry (noted in `created`)
        or move it (noted in `moved`; it owes its setup if the op reads `index`), then
        issue its setup if owed. True if that setup waits for its result document to
        load. Called only for an entry that is new, moved or owed."""
        if entry is None:
            entry = _Entry(key, child_link(self.kind, container, key), i)
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
        child_key = entry.child.key(tx.identity)
        if not self._loaded(tx, child_key):
            # Its result document is still loading: keep the debt, and pay it when the
            # load ends (a child started on a document it has not seen, or a setup
            # staged under it, would act on a state nobody has read).
            self._await_load(state, child_key)
            return True
        self._issue(tx, entry, element, issuance)
        return False

    def _diff_middle(
        self, state: _State, old: list[Any], new: list[Any]
    ) -> tuple[int, int, list[ElementKey], list[ElementKey]] | None:
        """(prefix, suffix, keys of the old middle, keys of the new middle) when only the
        middle needs a diff.

        `old` is the list of links the last clean reconcile read. Elements in the
        common prefix and suffix keep their keys, so only the middle is diffed —
        unless the middle holds an inline value, or changes how often a link that
        also occurs outside the middle appears (that would renumber the suffix's
        occurrences): then None, and the whole list is walked. O(prefix + suffix)
        C-level comparisons plus O(middle).
        """
        prefix, suffix = common_ends(old, new)
        old_mid = _keys_at(old, state.counts, prefix, len(old) - suffix)
        new_items = new[prefix : len(new) - suffix]
        # Per link in the middle: the occurrence numbers the old middle used, in order.
        numbers: dict[Link, list[int]] = {}
        for link, n in old_mid:
            numbers.setdefault(link, []).append(n)
        wanted: dict[Link, int] = {}
        for item in new_items:
            if type(item) is not Link:
                return None
            wanted[item] = wanted.get(item, 0) + 1
        counts = state.counts
        for link in numbers.keys() | wanted.keys():
            had = len(numbers.get(link, ()))
            want = wanted.get(link, 0)
            if had == want:
                continue
            if counts.get(link, 0) != had:
                return None  # it also occurs outside the middle: renumbering
            numbers[link] = list(range(want))
        new_mid: list[ElementKey] = []
        taken: dict[Link, int] = {}
        for item in new_items:
            k = taken.get(item, 0)
            taken[item] = k + 1
            new_mid.append((item, numbers[item][k]))
        return prefix, suffix, old_mid, new_mid

    def _reconcile_middle(
        self,
        tx: Transaction,
        state: _State,
        old: list[Any],
        items: list[Any],
        middle: tuple[int, int, list[ElementKey], list[ElementKey]],
        container: Link,
    ) -> None:
        """A reconcile that touches only the middle `_diff_middle` found: O(changed)
        bookkeeping, plus a C-level copy of the map aggregate (a splice of it)."""
        prefix, suffix, old_mid, new_mid = middle
        identity = tx.identity
        end_old = len(old) - suffix
        self.reconciles += 1
        issuance = _Issuance(self.reconciles)
        created: list[_Entry] = []
        moved: list[tuple[_Entry, int, int]] = []
        deferred = False
        keep = set(new_mid)
        errors = self._release(state, [k for k in old_mid if k not in keep])
        entries = state.entries
        for i, key in enumerate(new_mid, prefix):
            entry = entries.get(key)
            if entry is None or entry.index != i or entry.owed:
                placed = (tx, state, issuance, container, created, moved)
                deferred |= self._place(*placed, entry, key, i, key[0])
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
        out_key = container.key(identity)
        if self.kind == "map" and previous is not None:
            children = [entries[k].child for k in new_mid]
            if tx.peek(out_key, (docs.VALUE,)) is previous:
                # The container still holds exactly what the last reconcile wrote:
                # write only the change.
                tx.splice(out_key, (docs.VALUE,), prefix, end_old - prefix, children)
                if container != self.container:
                    tx.write(self.container.key(identity), (docs.VALUE,), container)
            else:
                aggregate = previous[:prefix]
                aggregate += children
                aggregate += previous[end_old:]
                self._publish(tx, container, aggregate)
        else:
            all_entries = [entries[k] for k in _keys_at(items, counts, 0, len(items))]
            out = container
            if self.kind != "map":
                for e in all_entries:  # as in `reconcile`: as private as the most private child
                    out = rescoped(out, narrower(out.scope, e.child.scope))
            aggregate = self._aggregate(tx, state, all_entries, items, out.key(identity))
            self._publish(tx, out, aggregate)
        tx.add_settle_callback(lambda _tx, res: self._settled(state, issuance, created, moved, res))
        if errors:
            raise ExceptionGroup(f"{self.label}: {len(errors)} releases failed", errors)
        if not deferred:
            state.items = items
            state.aggregate = tx.peek(out_key, (docs.VALUE,)) if self.kind == "map" else None

    def _issue(self, tx: Transaction, entry: _Entry, element: Link, issuance: _Issuance) -> None:
        if self.functions is not None:
            self.functions.issue(tx, entry.child, element, entry.index)
            entry.owed = False
            entry.issuer = issuance
            return
        argument: dict[str, Any] = {"element": element}
        if self.uses_index:
            argument["index"] = entry.index
        self.runner.stage_setup(tx, self.op, argument, entry.child, self.label)
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

    def _loaded(self, tx: Transaction, key: DocKey) -> bool:
        """Whether `key` is loaded (touching it first: a document nobody asked for yet loads
        now unless the store answers later)."""
        replica = self.runner.replica
        if replica.is_loaded(key):
            return True
        tx.peek(key)
        return replica.is_loaded(key)

    def _await_load(self, state: _State, key: DocKey, *, report: bool = False) -> None:
        """Load `key` and run again once it has: one sync per document, shared by every
        reconcile meanwhile, and counted as awaited only while it runs.

        A failed load runs again only to `report` it (the list's): the failure is kept
        for that reconcile to raise. Otherwise it is traced and the next reconcile loads
        the document again, so a store that keeps failing makes no loop.
        """
        if key in state.syncing:
            return
        state.syncing.add(key)

        def done(pending: Pending[None]) -> None:
            state.syncing.discard(key)
            try:
                pending.result()
            except Exception as exc:
                self.runner.trace.record("load-failed", key, error=type(exc).__name__)
                if not report:
                    return
                state.load_errors[key] = exc
            # The identity that awaited it runs again (its instance may have gone meanwhile).
            node = self.nodes.get(state.identity)
            if self.active and node is not None:
                self.runner.scheduler.invalidate(node)

        self.runner.replica.sync([key]).add_done_callback(done)

    def _aggregate(
        self,
        tx: Transaction,
        state: _State,
        entries: list[_Entry],
        items: list[Any],
        out_key: DocKey,
    ) -> Any:
        if self.kind == "map":
            return [e.child for e in entries]
        replica = self.runner.replica
        identity = tx.identity
        loading = [k for e in entries if not replica.is_loaded(k := e.child.key(identity))]
        if loading:
            # Cold resume: never republish a partial aggregate while results load; run
            # again when they have (nothing else would: their values were not read).
            for key in loading:
                self._await_load(state, key)
            previous = tx.peek(out_key, (docs.VALUE,))
            if previous is not MISSING:
                return previous
        out: list[Any] = []
        for e, item in zip(entries, items, strict=True):
            value = read_value(tx, e.child)
            if self.kind == "filter":
                if value is not MISSING and value:
                    out.append(item)
            elif value is MISSING or value is None:
                continue  # flat_map: not computed yet
            elif type(value) is list:
                out.extend(value)
            else:
                out.append(value)
        return thaw(out) if self.kind == "flat_map" else out

    def _settled(
        self,
        state: _State,
        issuance: _Issuance | None,
        created: list[_Entry],
        moved: list[tuple[_Entry, int, int]],
        res: CommitResult,
    ) -> None:
        if res.ok:
            state.failures = 0
            return
        state.items = None  # what it recorded did not land: walk the whole list next time
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
    def _release(self, state: _State, keys: list[ElementKey]) -> list[Exception]:
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
    def _held_elsewhere(others: list[_State], entry: _Entry, identity: Identity) -> bool:
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
        if errors:
            raise ExceptionGroup(f"{self.label}: {len(errors)} releases failed", errors)

    def _check(self) -> None:
        assert self.states.keys() == self.nodes.keys(), (self.states, self.nodes)
        for identity, state in self.states.items():
            assert not state.syncing & state.load_errors.keys(), state.load_errors
            assert state.identity == identity, state
            assert self.nodes[identity].identity == identity, state
            assert state.base is not None or not state.entries, state
            for key, entry in state.entries.items():
                assert entry.key == key, entry
                assert state.base is not None
                assert entry.child == child_link(self.kind, state.base, key), entry
            if state.items is not None:
                # What the next reconcile diffs against is exactly the last clean one.
                keys, counts = _keys_and_counts(state.items)
                assert state.counts == counts, (state.counts, counts)
                assert sum(counts.values()) == len(state.items), "links only"
                for start in range(len(keys) + 1):
                    assert keys[start:] == _keys_at(state.items, counts, start, len(keys))
                for key in keys:
                    assert key in state.entries, key
                if state.aggregate is not None:
                    assert state.aggregate == [state.entries[k].child for k in keys]
