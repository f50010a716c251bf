"""Sinks, derive and pull: the ways a program reads the graph and feeds it.

- `sink` / `sink_patches`: an effect node that calls a function with the
  settled value (or JSON Patch operations) after the pass that read it, and
  after every settled change (`Sink`, `PatchSink`).
- `derive`: a computation node writing `fn(*inputs)` at a cell (`DeriveNode`).
- `pull_now` / `pull`: demand a cell until the graph feeding it settles
  (and, for `pull`, the verdicts are in), then its value.
Sinks and derive are nodes like any other: what runs them is the pass (`_passes`).
A pull makes no node: it holds the stale dormant nodes feeding what it reads (`_Pull`).

Invariants
- a sink is in its scheduler's deliveries iff a run in the current pass read a
  value other than the one it last delivered (`pending` is not UNSET).
- a pull in progress holds (`Graph.pulled`) exactly the nodes of its `hold`, and
  none once it returned (or raised).
Not here: when nodes run, or observations (`_observe`, built on `sink`).
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Iterable, Sequence
from typing import Any, ClassVar, Final

import attrs

from cells import (
    MISSING,
    Cell,
    CellweaveError,
    DocKey,
    FieldPlan,
    Identity,
    Link,
    Materializer,
    Path,
    Place,
    Transaction,
    patch_ops,
    patch_ops_at,
    reaches,
    read_value,
    same_value,
    thaw,
    walk_path,
)

from ._direct import ValueFunction
from ._graph import Hold
from ._host import Delivery, Host
from ._node import VALUE_PATH, Node, OneRead, SelfLabelled


def add_sink(host: Host, cell: Cell, fn: Any, kind: type[Sink]) -> Callable[[], None]:
    """Register a `kind` sink (`Sink` or `PatchSink`) calling `fn`, reading `cell`, settle
    (its first delivery), and return its cancel function. See `Scheduler.sink`."""
    if not callable(fn):
        raise CellweaveError(f"{kind.what}({cell!r}): fn must be callable, got {fn!r}")
    link = cell.link()
    node = host.register(
        _SINK_RUN,  # (replaced by the node itself: see `Sink`)
        identity=cell.identity,
        kind="effect",
        reads=declared(cell),
        make=lambda *args, label: kind(*args, scheduler=host, link=link, callback=fn),
    )
    host.settle()
    # A bound method, not a closure over `host` and the node (about 150 bytes less per
    # sink: see the `memory per unit` benchmark's observed derived node).
    assert isinstance(node, Sink)
    return node.cancel


def derive(
    host: Host,
    out: Cell,
    inputs: Sequence[Cell],
    fn: Callable[..., Any],
    label: str | None,
) -> Node:
    """See `Scheduler.derive`."""
    if not isinstance(out, Cell):
        raise CellweaveError(f"derive: out must be a Cell, got {out!r}")
    if isinstance(inputs, Cell | str) or not isinstance(inputs, Sequence):
        raise CellweaveError(f"derive({out!r}): inputs must be a sequence of Cells, got {inputs!r}")
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
    # Each input's place as its cell holds it (`Cell.place`): a cell of a whole shared
    # document holds its key, so the node keeps that key and no link is made.
    places = tuple(c.place() for c in inputs)
    one = places[0] if len(places) == 1 else places
    # The label given, if any, goes with the function (`DeriveNode.label`): the node
    # keeps no slot for it, and names itself "derive" (a formatted label cost 74 bytes
    # per node: its repr names the document it writes).
    compute = fn if not label else _Labelled(fn, label)
    return host.register(
        _derive_run,  # (replaced by the node itself: see `DeriveNode`)
        identity=out.identity,
        outputs=((key, path),),
        reads=[declared(c)[0] for c in inputs],
        label=label or DeriveNode._label,
        make=lambda *args, label: DeriveNode(*args, compute=compute, inputs=one),
    )


class _Labelled(functools.partial[Any]):
    """A labelled derive's function: the user's, called with no argument added (a
    `partial`: called in C, no frame of its own), and the label given (`label`)."""

    label: str

    def __new__(cls, fn: Callable[..., Any], label: str) -> _Labelled:
        self = super().__new__(cls, fn)
        self.label = label
        return self


def _derive_run(tx: Transaction) -> None:
    raise AssertionError("a DeriveNode runs itself")  # pragma: no cover


class _SinkRun(SelfLabelled):
    """What `add_sink` registers as the node function before the node replaces it with
    itself: `SelfLabelled`, so the node keeps no label string and asks the sink."""

    __slots__ = ()

    def __call__(self, tx: Transaction) -> None:
        raise AssertionError("a Sink runs itself")  # pragma: no cover


_SINK_RUN: Final = _SinkRun()


PULL_HOPS: Final = 8
"""How many links `_ahead` follows (a longer chain: the pull's read finds the rest)."""


_Walk = tuple[tuple[Any, ...], tuple[int, ...], Any, int, DocKey, Path, Any, Any]
"""What `_ahead` walked when its walk ended at a place: the records of the documents a
followed link sat in (`Replica.held_record`) and their versions then; the record of the
document the walk ended at and its version then, its key, and the place's value-relative
path there; that document as it was then, and the value the walk found at the place in it
(`walk_path`). (Records and versions, not documents: `_Pull.read` checks that none moved
with one comparison in C and no lookup, where a `peek` per document was a call each.)"""

_VERSION: Final = operator.attrgetter("version")
"""A record's version (mapped over a walk's records in C)."""


def _ahead(
    host: Host, cell: Cell, link: Place, identity: Identity
) -> tuple[list[tuple[DocKey, Path, bool]], _Walk | None]:
    """What a pull's read logs if no link on the way moves before it reads: the place
    of each link it follows (shallow, as `read_value` logs it) and the place they
    lead to (deep), found by walking the visible documents (nothing logged); and the
    walk itself (`_Walk`), or None when it stopped early (a document the pull may not
    read, or more than PULL_HOPS links). `link` and `identity` are the cell's.

    The pull holds demand on the writers of these places, so they run before it
    reads: holding only the cell's own document's writers, it would follow the links
    to a place whose writer had not run yet and have to settle again (issue 14).
    When a link does move first, the read reaches other places and the pull holds
    their writers and settles again (`_Pull.read`). Without a link on the way this
    is `declared(cell)`; with one, exactly what the read logs (so the pull compares
    the log with it and finds nothing new to hold). Each place's key is the one the
    replica holds (`held_key`): the graph's tables hold that object, so a lookup finds
    it by identity rather than comparing its five fields."""
    replica = host.replica
    held = replica.held_record
    path = link.path
    # (`cell.doc_key`, as each hop's key is made below: no call for a shared document)
    key = DocKey(link.space, link.id) if link.scope == "space" else link.key(identity)
    reads: list[tuple[DocKey, Path, bool]] = []
    recs: tuple[Any, ...] = ()
    for _hop in range(PULL_HOPS):
        # (`reaches`, called only for a key it may refuse: a shared document's is True.)
        if (key.scope != "space" or "cw:" <= key.id < "cw;") and not reaches(identity, key):
            # A document the pull's reads may be refused (or need authority): its run
            # decides; the walk makes no writer of it run first.
            return [declared(cell)[0], *reads], None
        rec: Any = held(key)  # (no argument check, no record made)
        if rec is None:
            doc = replica.visible(key)  # (a load starts: MISSING until it answers)
            rec = held(key)
        else:
            doc = rec.visible
            if type(doc) is bytes:  # (packed while idle: decoded)
                doc = replica.peek(key)
            key = rec.key or key
        # (`first_link`'s own walk, one call: a tuple only for a link found.)
        found = walk_path(doc.get("value", MISSING) if type(doc) is dict else MISSING, path, doc)
        if type(found) is not tuple:
            break
        at, target = found
        recs += (rec,)
        reads.append((key, _VALUE_PATH + path[:at], True))  # (one tuple made, not a list)
        # The place the link leads to, as the key and path of the `Link` it makes (no
        # link object per hop: its checks were a third of the walk).
        path = target.path + path[at:] if at < len(path) else target.path
        key = DocKey(target.space, target.id) if target.scope == "space" else target.key(identity)
    else:
        # Still links after PULL_HOPS of them: the run finds the rest (or the cycle).
        return [declared(cell)[0], *reads], None
    walk = (recs, tuple(map(_VERSION, recs)), rec, rec.version, key, path, doc, found)
    # (No link on the way: the cell's own place, `declared(cell)`.)
    reads.append((key, _VALUE_PATH + path, False))
    return reads, walk


class _Pull(Hold):
    """One pull in progress: it holds the stale dormant nodes feeding what it reads, and
    reads the value itself once the graph settled (no node of its own).

    A pull used to register an effect node reading the cell, settle, and remove it
    (issue 14); then it held demand on the writers of what it reads, which made them
    and everything upstream live and dormant again: O(N) for a list's output, whose
    combiner reads every element's result. Now it holds only the dormant nodes that
    may be out of date (`Graph.stale_region`: not clean, or fed by one that is), found
    by walking up from those writers through what changed since they were last
    current, and each held node runs when it is not clean (`Graph.pulled`), with
    nothing upstream made live. The rest is current: clean, with nothing stale
    upstream. So the settle runs exactly what demand on the writers made run, in the
    same order (by height), and the cost is that of what changed. A node going stale
    during the settle (a live node's run invalidated it) is held at once if a held
    node reads it (`Passes._adopt`): it runs first, as it would have while live.

    The value read is returned only once nothing stale feeds the places it read: a
    read that found a link leading elsewhere (moved by the settle, or first computed
    by it) holds what feeds the new places and settles again, as the node re-ran
    when its read set grew. A writer added to the graph meanwhile (a list's new
    element) is found the same way.
    """

    __slots__ = (
        "added",
        "ahead",
        "direct",
        "graph",
        "host",
        "identity",
        "link",
        "walk",
        "writers",
    )

    def __init__(self, host: Host, cell: Cell) -> None:
        self.host = host
        self.graph = graph = host.graph
        self.identity = identity = cell.identity
        self.link = link = cell.place()  # (a key reads as its link: `DocKey.path`)
        self.ahead, self.walk = _ahead(host, cell, link, identity)
        """What the next read is expected to log: the writers of these places are held;
        and the walk that found it (see `read`)."""
        self.added = graph.added
        self.writers: set[Node] | None = None
        """The writers of what the next read is expected to log, found when first asked
        (`_writers`): while nothing is filed stale (`Graph.suspect` empty, as in a graph
        whose every change was pulled or observed) a pull has nothing to hold and never
        asks."""
        self.nodes = {}  # (it is its own `Hold`: no object of its own per pull)
        self.direct = False
        """The last `read` read the place without a transaction (nothing started)."""
        if graph.suspect:
            self.writers = graph.writers_along(self.ahead, identity)
            self._hold()

    def _writers(self) -> set[Node]:
        """`writers`, found now if not yet."""
        writers = self.writers
        if writers is None:
            writers = self.writers = self.graph.writers_along(self.ahead, self.identity)
        return writers

    def _hold(self) -> bool:
        """Hold the stale dormant nodes feeding `writers` (they run in the next settle);
        True if there was one not held yet."""
        graph = self.graph
        region = graph.stale_region(self.writers or self._writers())
        if not region:
            return False
        new = graph.hold(self, region)
        if not new:
            return False  # (held, still not clean: gated, failing or deferred)
        on_held = graph.on_held  # (queues each that is not clean, as for a live node)
        if on_held is not None:
            on_held(new)
        return True

    def read(self) -> Any:
        """The value, or `_AGAIN` when something stale still feeds what it reads (now it
        is held: settle again). A read that fails raises to the puller.

        When every document a link of the walk sat in still holds the value it held
        then (stored values are never changed in place: a change makes a new one), the
        links lead to the same place, and no writer was added meanwhile, the read would
        log exactly `ahead`: the value at that place is read directly, without a
        transaction, if no link sits on the way into it or at it (else the read below
        follows them)."""
        graph = self.graph
        # A held node's run found a stale input (`Graph._note`), or a writer not held
        # went stale during the settle: hold what feeds it (if not held yet). (`reached`
        # is not cleared here: another pull in progress may hold what it names.)
        suspect = graph.suspect
        if suspect and (graph.reached or self._stale_writer(suspect)) and self._hold():
            return _AGAIN
        walk = self.walk
        if walk is not None and graph.added == self.added:
            recs, versions, rec, version, key, path, doc, value = walk
            # (No document a link sat in moved: one comparison of their versions, in C.)
            if not recs or tuple(map(_VERSION, recs)) == versions:
                if rec.version != version:
                    # (Changed by the settle: walked again, one walk for link and value.)
                    doc = rec.visible
                    if type(doc) is bytes:  # (packed meanwhile: decoded)
                        doc = self.host.replica.peek(key)
                    if type(doc) is dict:
                        value = doc.get("value", MISSING)
                        if path:
                            value = walk_path(value, path, doc)
                t = type(value)
                if (
                    type(doc) is dict
                    and t is not tuple  # (a link on the way: `walk_path`)
                    and t is not Link
                    and t is not dict
                    and t is not list
                ):
                    self.direct = True
                    return value
        # A reader, dropped open: counted open, as a plain transaction is until it
        # commits or aborts, every pull kept the replica busy for good (its store never
        # pruned the history it no longer needed).
        tx = self.host.replica.reader(self.identity)
        value = read_value(tx, self.link)
        log = tx.reads
        if log == self.ahead and graph.added == self.added:
            return value
        self.ahead = list(log)
        self.added = graph.added
        self.writers = graph.writers_along(log, self.identity)
        if self._hold():
            return _AGAIN
        return value

    def _stale_writer(self, suspect: dict[Node, Any]) -> bool:
        """Whether a writer of what it reads, not held, is filed stale now. (Anything else
        that went stale upstream of them reached a held node: `Graph.reached`.)"""
        held = self.nodes
        for w in self.writers or self._writers():  # noqa: SIM110 (no generator per call)
            if w in suspect and w not in held:
                return True
        return False

    def release(self) -> None:
        """Give back what it held (idempotent): those nodes are dormant again."""
        self.graph.let_go(self)


class _Again:
    def __repr__(self) -> str:
        return "AGAIN"


_AGAIN: Final = _Again()


def pull_now(host: Host, cell: Cell) -> Any:
    """See `Scheduler.pull_now`."""
    puller = _Pull(host, cell)
    try:
        while True:
            host.settle()  # (inside a run it returns at once: what is current is read)
            value = puller.read()
            if value is not _AGAIN:
                break
    finally:
        puller.release()
    failure = host.failure(cell)
    if failure is not None:
        raise failure
    return thaw(value)


async def pull(host: Host, cell: Cell) -> Any:
    """See `Scheduler.pull`."""
    puller = _Pull(host, cell)
    try:
        while True:
            await host.idle()
            value = puller.read()
            # (A read that started work, a load that answered at once: wait for it too.
            # A direct read starts nothing: `idle` just found nothing to wait for.)
            if value is not _AGAIN and (puller.direct or not host.busy()):
                break
    finally:
        puller.release()
    failure = host.failure(cell)  # the pull of a failing value raises its error
    if failure is not None:
        raise failure
    t = type(value)
    return thaw(value) if t is dict or t is list else value  # (`thaw` copies containers only)


def declared(cell: Cell) -> tuple[tuple[DocKey, Path, bool]]:
    """The read a node reading `cell` declares (its whole value, deep)."""
    return ((cell.doc_key, ("value", *cell.path), False),)


_VALUE_PATH: Final = VALUE_PATH


def _plain(value: Any) -> Any:
    """A read value as a function receives it: None for absent, containers copied."""
    t = type(value)
    if t is dict or t is list:
        return thaw(value)
    return None if value is MISSING else value


@attrs.define(slots=True, eq=False, weakref_slot=False, repr=False)
class DeriveNode(Node, ValueFunction):
    """The node of `Scheduler.derive`: it is its own node function (`fn` is the node),
    writing `compute(*input values)` at its one output. A `ValueFunction`: a run whose
    last run read its inputs' plain values runs with no transaction (`_direct`).

    Two slots more on the node rather than a function object of its own: a closure
    (its tuple and three cells) cost about 340 bytes, a separate slotted callable
    64. `inputs` is the one input's place itself when there is one (no tuple), else
    a tuple of them: each its cell's `Place` (`Cell.place`), a `Link`, or the `DocKey`
    of a whole shared document (no link made: 48 bytes a node). No label slot: the
    class's label is "derive", and a label given to `derive` is carried by `compute`
    (`_Labelled`).
    """

    compute: Callable[..., Any] = attrs.field(kw_only=True)
    inputs: Place | tuple[Place, ...] = attrs.field(kw_only=True)
    _label: ClassVar[str | None] = "derive"
    keeps_plan: ClassVar[bool] = True
    plan: FieldPlan | None = attrs.field(default=None, init=False)
    """`ValueFunction.plan`: its direct run's places, checked once per read set."""

    def __attrs_post_init__(self) -> None:
        self.fn = self

    @property
    def label(self) -> str:
        """The label `derive` was given (its function carries it), else "derive"."""
        compute = self.compute
        return compute.label if type(compute) is _Labelled else "derive"

    def __call__(self, tx: Transaction) -> None:
        inputs = self.inputs
        if isinstance(inputs, tuple):
            value = self.compute(*[_plain(read_value(tx, link)) for link in inputs])
        else:
            value = self.compute(_plain(read_value(tx, inputs)))
        self.put(tx, value)

    def put(self, tx: Transaction, value: Any) -> None:
        """`ValueFunction.put`: the write of `__call__`, of a value computed already."""
        outs = self._outs  # (its one output: the key alone at the value, see `Node._outs`)
        if type(outs) is DocKey:
            tx.write(outs, _VALUE_PATH, value)
        else:
            key, path = outs
            tx.write(key, path, value)  # type: ignore[arg-type]


def _has_link(value: Any) -> bool:
    """Whether a stored container holds a link anywhere inside it (what `read_value`
    would follow). O(size): the walk `read_value` makes of it to look for links."""
    for v in value.values() if type(value) is dict else value:
        t = type(v)
        if t is Link or ((t is dict or t is list) and _has_link(v)):
            return True
    return False


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


_UNSET: Final = _Unset()


@attrs.define(slots=True, eq=False, weakref_slot=False, repr=False)
class Sink(Node):
    """The node of `Scheduler.sink`: reads the value, delivers it after the pass.

    It is its own node function (`fn` is the node, as for `DeriveNode`): a separate
    sink object beside its node cost about 40 bytes more per sink (its header and
    the two references between them). `callback` is the user's function. `shown` is
    the value last delivered (stored form, never handed out), `pending` the one a
    run read this pass. Absent reads as None, so absent and None are one delivered
    value. Its `str()` is its node's label ("sink <link>").
    """

    what: ClassVar[str] = "sink"
    scheduler: Host = attrs.field(kw_only=True)
    link: Link = attrs.field(kw_only=True)
    callback: Any = attrs.field(kw_only=True)
    # Keeps the materialized value between runs: after a one-element edit of a long
    # mapped list, only that element's links are read again, and the unchanged
    # elements stay the same objects (the patch diff skips them by identity). None
    # while idle (`read`): most sinks read a value without links, and a materializer
    # costs about 200 bytes.
    materializer: Materializer | None = attrs.field(
        default=attrs.Factory(lambda self: Materializer(self.scheduler.replica), takes_self=True),
        init=False,
    )
    shown: Any = attrs.field(default=_UNSET, init=False)
    pending: Any = attrs.field(default=_UNSET, init=False)
    direct: bool = attrs.field(default=False, init=False)
    """Its last run read exactly its cell's whole value (one deep read at ``("value",)``
    of its own document, no link at it or inside it, no materializer kept): the next
    run may read the visible document directly (`run_direct`)."""

    def __attrs_post_init__(self) -> None:
        self.fn = self

    @property
    def node(self) -> Node:
        """The sink's node: itself (`Delivery`)."""
        return self

    def __str__(self) -> str:
        return f"{self.what} {self.link}"

    def read(self, tx: Transaction) -> Any:
        """The value at `link`, as `read_value` reads it: through the materializer, dropped
        while idle (a read found no link); a plain read that follows links makes a new
        one, which keeps from the next read on, as the idle one would have."""
        materializer = self.materializer
        if materializer is not None:
            value = materializer.read(tx, self.link)
            if materializer.idle:
                self.materializer = None  # (see `Materializer.idle`: this does the same)
            return value
        log = tx.reads
        start = len(log)
        value = read_value(tx, self.link)
        t = type(value)
        if (t is dict or t is list) and len(log) - start > 1:
            self.materializer = Materializer(self.scheduler.replica)
        return value

    def thaw(self, value: Any) -> Any:
        """A copy of `value` (one this sink read) the user may change."""
        materializer = self.materializer
        return thaw(value) if materializer is None else materializer.thaw(value)

    def __call__(self, tx: Transaction) -> None:
        log = tx.reads
        start = len(log)
        value = self.read(tx)
        # The same test as `run_direct`'s: one whole-cell read, no link followed. (A
        # sink's transaction reads nothing else, so `start` is 0 in a scheduler run.)
        # (One log entry: no link was followed, at the cell or inside its value.)
        self.direct = (
            len(log) - start == 1
            and start == 0
            and not self.link.path
            and self.materializer is None
            and log[0][1] == _VALUE_PATH
            and not log[0][2]
            and type(value) is not Link
        )
        self.take(value)

    def run_direct(self, replica: Any) -> bool:
        """Run without a transaction, if the last run allows it (`direct`): read the
        cell's visible value from the replica's record and take it as `__call__` would.
        False, with nothing done, when it cannot (the caller runs the sink in a
        transaction then).

        Why this is the same run: a sink writes nothing, so its transaction only ever
        elided; its one read is of one document, so no basis can be inconsistent; its
        identity and document are those its last run read through a transaction (the
        ownership check passed then and depends on nothing else); and its read set stays
        exactly what that run left (the same one deep read), so the reader index and the
        graph need no update. Any other case (a link at the cell or inside its value, a
        path inside the cell, a materializer, no record) goes through the transaction,
        which also recomputes `direct`. O(1) for a scalar; a list or dict is walked for
        links, as `read_value` walks it.
        """
        reads = self.reads
        if type(reads) is not OneRead:
            return False
        doc = replica.peek(reads.key)
        if doc is None:
            return False
        value = doc.get("value", MISSING) if type(doc) is dict else MISSING
        t = type(value)
        if t is Link or ((t is dict or t is list) and _has_link(value)):
            return False  # links to follow: `read_value` (and a materializer) decide
        self.take(value)
        return True

    def take(self, value: Any) -> None:
        """What a run does with the value it read: pending delivery if it differs from
        the one last delivered."""
        if value is MISSING:
            value = None
        shown = self.shown
        t = type(value)
        if value is shown or (
            # Two ints or two strs: `same_value` decides by one comparison (a sink's
            # every run compares; most read a scalar).
            (value == shown)
            if t is type(shown) and (t is int or t is str)
            else (shown is not _UNSET and same_value(value, shown))
        ):
            self.pending = _UNSET  # back to what was delivered: nothing to say
            return
        self.pending = value
        self.scheduler._deliveries[self] = None

    def cancel(self) -> None:
        """End the sink: remove its node and close its materializer (idempotent)."""
        self.scheduler.remove(self)
        if self.materializer is not None:
            self.materializer.close()

    def deliver(self) -> None:
        value = self.pending
        if value is _UNSET:
            return
        self.pending = _UNSET
        self.shown = value
        t = type(value)
        # (`thaw` copies containers only; a kept list of flat records in C.)
        self.callback(self.thaw(value) if t is dict or t is list else value)


@attrs.define(slots=True, eq=False, weakref_slot=False, repr=False)
class PatchSink(Sink):
    """`Scheduler.sink_patches`: delivers JSON Patch operations instead of the value.

    The run does not compare values (the diff after the pass does, once): an equal
    value yields no operation and no call.
    """

    what: ClassVar[str] = "patches"

    def take(self, value: Any) -> None:
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
        # Where the materializer read links again since `shown`: the diff looks there
        # only (one element edited in a long mapped list costs that element).
        materializer = self.materializer
        spots = None if materializer is None else materializer.changes(shown, value)
        if shown is _UNSET:
            ops = [{"op": "replace", "path": "", "value": self.thaw(value)}]
        else:
            ops = patch_ops(shown, value) if spots is None else patch_ops_at(shown, value, spots)
            if not ops:
                return
        self.callback(ops)


def deliver_all(deliveries: dict[Delivery, None], fail: Callable[[Node, Exception], None]) -> None:
    """Call the sinks whose run read a new value in the pass that just ended.

    A sink delivers once per pass, with the value its last run read: a run that
    read a value still being computed (a link found only by following it, whose
    writer ran after the sink in the same pass) is superseded by the re-run. A
    sink's function that raises fails its node (`fail`).
    """
    while deliveries:
        batch: Iterable[Delivery]
        if len(deliveries) == 1:
            # One sink (the usual pass): taken out, with no copy of the table.
            batch = (deliveries.popitem()[0],)
        else:
            batch = deliveries.copy()
            deliveries.clear()  # (a sink's function may write: its re-runs land here)
        for sink in batch:
            if sink.registered:  # (the sink's own: it is its node)
                try:
                    sink.deliver()
                except Exception as exc:
                    fail(sink.node, exc)  # the sink's function raised: its node fails
