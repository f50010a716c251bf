"""Node records: all per-node state in one place.

A node is a *computation* (idempotent; may run any number of times; writes
its declared outputs), or an *effect* (a demand source: a sink, a pull, a
view). Identity is the object itself, never a string. State few nodes ever
use (debounce, throttle, backoff, retries) lives in a `Gates` record made on
first write, and a run's read log is kept by the graph (`Graph.raw_logs`), for the
few nodes that need it: every node pays for the record's fields, so it keeps only
what every run needs.

Invariants
- `status` is "never-ran" until the first completed run; a run sets "clean"
  before it starts (its own commit never re-invalidates it; foreign changes
  during the run do).
- `outputs` (the static write surface) never changes after registration.
- `height` is above the height of every writer of the node (except around
  cycles, where it is capped), so ordering by (height, ordinal) is topological.
- `eligible_at` is max(debounce_ready_at, throttle_ready_at, backoff_until),
  0.0 while there is no `Gates` record.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Iterator, Mapping
from typing import ClassVar, Final, Literal, TypeAlias, TypeVar, overload

import attrs

from cells import DocKey, Identity, Path, Transaction, describe

NodeKind: TypeAlias = Literal["computation", "effect"]
Status: TypeAlias = Literal["never-ran", "clean", "invalid"]
ReadEntry: TypeAlias = tuple[tuple[Path, ...], tuple[Path, ...]]
"""One document's reads: (deep paths, shallow paths), compacted."""
ReadSet: TypeAlias = Mapping[DocKey, ReadEntry]
"""Per document read: its `ReadEntry`. A dict, or a `OneRead` / `TwoReads` for one or
two documents (`lean_reads`)."""


_T = TypeVar("_T")


@attrs.define(slots=True, eq=False, weakref_slot=False, repr=False)
class OneRead(Mapping[DocKey, ReadEntry]):
    """A read set of exactly one document, the usual one (a node reads its input).

    A two-slot object (48 bytes) instead of a one-entry dict (224 bytes): one per
    computation. Read-only, like every read set (a new read set replaces the old).
    """

    key: DocKey
    entry: ReadEntry

    def __getitem__(self, key: DocKey) -> ReadEntry:
        if key == self.key:
            return self.entry
        raise KeyError(key)

    def __iter__(self) -> Iterator[DocKey]:
        return iter((self.key,))

    def __len__(self) -> int:
        return 1

    def __contains__(self, key: object) -> bool:
        return key == self.key

    @overload
    def get(self, key: DocKey, /) -> ReadEntry | None: ...
    @overload
    def get(self, key: DocKey, /, default: ReadEntry | _T) -> ReadEntry | _T: ...
    def get(self, key: DocKey, /, default: object = None) -> object:
        # Mapping's own `get` asks `__getitem__` and catches its KeyError: four times
        # slower on a miss, the usual answer when edges are found (`_outputs_feed`).
        return self.entry if key == self.key else default

    def __repr__(self) -> str:
        return f"OneRead({{{self.key!r}: {self.entry!r}}})"


@attrs.define(slots=True, eq=False, weakref_slot=False, repr=False)
class TwoReads(Mapping[DocKey, ReadEntry]):
    """A read set of exactly two documents (a lift reading its argument and the element
    it links to): a four-slot object (64 bytes) instead of a two-entry dict (224 bytes).
    Read-only, like every read set. `key` and `key2` differ."""

    key: DocKey
    entry: ReadEntry
    key2: DocKey
    entry2: ReadEntry

    def __getitem__(self, key: DocKey) -> ReadEntry:
        if key == self.key:
            return self.entry
        if key == self.key2:
            return self.entry2
        raise KeyError(key)

    def __iter__(self) -> Iterator[DocKey]:
        return iter((self.key, self.key2))

    def __len__(self) -> int:
        return 2

    def __contains__(self, key: object) -> bool:
        return key == self.key or key == self.key2

    @overload
    def get(self, key: DocKey, /) -> ReadEntry | None: ...
    @overload
    def get(self, key: DocKey, /, default: ReadEntry | _T) -> ReadEntry | _T: ...
    def get(self, key: DocKey, /, default: object = None) -> object:
        if key == self.key:
            return self.entry
        return self.entry2 if key == self.key2 else default

    def __repr__(self) -> str:
        return f"TwoReads({{{self.key!r}: {self.entry!r}, {self.key2!r}: {self.entry2!r}}})"


def held_key(reads: ReadSet | None, key: DocKey) -> DocKey | None:
    """The key object equal to `key` that the small read set `reads` holds (a `OneRead`
    or `TwoReads`), or None (not there, or a dict: not looked through)."""
    t = type(reads)
    if t is OneRead:
        one: OneRead = reads  # type: ignore[assignment]
        return one.key if one.key == key else None
    if t is TwoReads:
        two: TwoReads = reads  # type: ignore[assignment]
        if two.key == key:
            return two.key
        return two.key2 if two.key2 == key else None
    return None


Output: TypeAlias = tuple[DocKey, Path]
"""One declared output: a document and a path in it."""


VALUE_PATH: Final = ("value",)
"""The path of a cell's value in its document: where nearly every node writes."""

Outs: TypeAlias = DocKey | Output | tuple[Output, ...]
"""How a node keeps its declared outputs (`Node._outs`, `one_output`)."""


def one_output(outputs: tuple[Output, ...]) -> Outs:
    """How a node keeps its declared outputs (`Node._outs`): one output at a cell's value
    (`(key, ("value",))`) as its key alone, any other one output bare, else the tuple.

    The key alone: the pair around it cost every computation 56 bytes, and nearly every
    computation writes one cell's whole value (`derive`, a lift, a list element)."""
    if len(outputs) == 1:
        out = outputs[0]
        return out[0] if out[1] == VALUE_PATH else out
    return outputs


def all_outputs(outs: Outs) -> tuple[Output, ...]:
    """The declared outputs `outs` (as `one_output` keeps them) as a tuple of pairs."""
    if type(outs) is DocKey:
        return ((outs, VALUE_PATH),)
    if outs and type(outs[0]) is DocKey:
        return (outs,)
    return outs


def _is_only(entry: ReadEntry, path: Path, shallow: bool) -> bool:
    """`entry` is exactly `path`, deep or shallow as `shallow` says."""
    other_kind, this_kind = entry if shallow else (entry[1], entry[0])
    return not other_kind and len(this_kind) == 1 and this_kind[0] == path


def two_reads_match(reads: TwoReads, log: list[tuple[DocKey, Path, bool]]) -> bool:
    """Whether a two-entry read `log` compacts to exactly `reads` (what `compact_reads`
    would make of it), without compacting it: a node reading two documents need not
    keep its last log (`Graph.raw_logs`, about 180 bytes) to see that it read the same."""
    (k1, p1, s1), (k2, p2, s2) = log
    if k1 == reads.key and k2 == reads.key2:
        e1, e2 = reads.entry, reads.entry2
    elif k1 == reads.key2 and k2 == reads.key:
        e1, e2 = reads.entry2, reads.entry
    else:
        return False  # (also when both read one document: `reads` has two)
    return _is_only(e1, p1, s1) and _is_only(e2, p2, s2)


NO_READS: ReadSet = types.MappingProxyType({})
"""The read set of a node that declared nothing and never ran (shared: read-only)."""


def lean_reads(reads: ReadSet) -> ReadSet:
    """`reads` in its smallest form: a `OneRead` for one document, a `TwoReads` for two."""
    t = type(reads)
    if t is OneRead or t is TwoReads:
        return reads
    n = len(reads)
    if n == 1:
        ((key, entry),) = reads.items()
        return OneRead(key, entry)
    if n == 2:
        ((key, entry), (key2, entry2)) = reads.items()
        return TwoReads(key, entry, key2, entry2)
    return reads if reads else NO_READS


class SelfLabelled:
    """A node function whose `str()` is its node's label (`register` with no label keeps
    none: `Node.label` asks the function). Only for functions whose `str()` never
    changes and is cheap to make."""

    __slots__ = ()


@attrs.define(slots=True, eq=False, weakref_slot=False)
class Gates:
    """A node's rarely used state: time gates, backoff, commit retries, last error.

    Made on first use (`Node.gates()`): most nodes never debounce, throttle,
    back off, retry or raise, and these eight fields would otherwise cost every node.
    """

    debounce: float = 0.0
    throttle: float = 0.0
    debounce_ready_at: float = 0.0
    throttle_ready_at: float = 0.0
    backoff_until: float = 0.0
    backoff_streak: int = 0
    retries: int = 0
    error: BaseException | None = None


@attrs.define(eq=False, slots=True, repr=False, weakref_slot=False)
class Node:
    fn: Callable[[Transaction], object]
    kind: NodeKind
    ordinal: int
    identity: Identity
    _outs: Outs = attrs.field(alias="outputs")
    """The declared outputs (`outputs`) as `one_output` keeps them: the key alone for one
    output at the cell's value, the usual case (a pair around it cost every node 56
    bytes, a 1-tuple around that 48 more), the one `(key, path)` pair itself for one
    elsewhere, else the tuple of pairs; `all_outputs` reads each form back. (Not an
    attrs converter: that makes attrs hook every attribute write of the node.)"""
    status: Status = "never-ran"
    reads: ReadSet = NO_READS
    declared: ReadSet | None = None
    """What the node said at registration it may read (`register(reads=...)`), or None.
    Its read set until the first run; for good, the writers of these places stay
    ordered before the node and live while it is (see `Graph`), so a read the last
    run did not make (a conditional one) still sees a current value."""
    live_refs: int = 0
    demand: int = 0
    """Explicit demand holders (pulls, event preflight); a root while > 0."""
    provisional: bool = False
    registered: bool = True
    height: int = 0
    pass_runs: int = 0
    runs: int = 0
    last_run: float = 0.0
    """When the drain holding the last run started (the clock's time), for a throttle
    set after it."""
    eligible_at: float = 0.0
    """max(debounce_ready_at, throttle_ready_at, backoff_until): the one time gate."""
    _gates: Gates | None = None

    # `_label` is a slot of `FunctionNode` (what `register` makes unless told
    # otherwise) and a class attribute of the node classes whose nodes need none of
    # their own (`DeriveNode`: "derive", its function carries a label given; `Sink`:
    # None, it names itself): nothing on the run path reads it. Tried and not done for
    # fields the run path reads: `kind` as a class attribute of `DeriveNode` and `Sink`
    # (CPython 3.11 does not specialize an instance's read of a class attribute: cellx
    # with a sink per node ran 4 to 5 % slower, for the same bytecodes), and
    # `DeriveNode` split into a one-input class without `plan` and a join class with it
    # (a site that sees two classes of node in turn keeps neither specialized: cellx 8
    # to 12 % slower).
    _label: ClassVar[str | None] = None
    """The label given at registration; None: `str(fn)` says it when asked (`label`)."""

    def __repr__(self) -> str:
        outputs = self.outputs
        writes = (
            f" -> {describe(outputs[0][0])}" if outputs else ""
        )  # which node, when labels repeat
        return f"<Node {self.kind} {self.label!r} #{self.ordinal}{writes} {self.status}>"

    @property
    def outputs(self) -> tuple[Output, ...]:
        """The places the node declared it writes (`register(outputs=...)`), in order."""
        outs = self._outs  # (`all_outputs`, inlined: read-set changes ask this often)
        if type(outs) is DocKey:
            return ((outs, VALUE_PATH),)
        return (outs,) if outs and type(outs[0]) is DocKey else outs

    @property
    def label(self) -> str:
        """What messages and inspection call the node. A node function that names itself
        (a sink: `SelfLabelled`) is asked when this is read, so a node holds no
        formatted string of its own (about 75 bytes per sink)."""
        label = self._label
        return str(self.fn) if label is None else label

    def gates(self) -> Gates:
        """The gate record, made on first use."""
        gates = self._gates
        if gates is None:
            gates = self._gates = Gates()
        return gates

    def update_gate(self) -> None:
        g = self._gates
        self.eligible_at = (
            0.0 if g is None else max(g.debounce_ready_at, g.throttle_ready_at, g.backoff_until)
        )

    # The gate fields, read and written through the side record (reads never make it).
    @property
    def debounce(self) -> float:
        return 0.0 if self._gates is None else self._gates.debounce

    @debounce.setter
    def debounce(self, value: float) -> None:
        self.gates().debounce = value

    @property
    def throttle(self) -> float:
        return 0.0 if self._gates is None else self._gates.throttle

    @throttle.setter
    def throttle(self, value: float) -> None:
        self.gates().throttle = value

    @property
    def debounce_ready_at(self) -> float:
        return 0.0 if self._gates is None else self._gates.debounce_ready_at

    @debounce_ready_at.setter
    def debounce_ready_at(self, value: float) -> None:
        self.gates().debounce_ready_at = value

    @property
    def throttle_ready_at(self) -> float:
        return 0.0 if self._gates is None else self._gates.throttle_ready_at

    @throttle_ready_at.setter
    def throttle_ready_at(self, value: float) -> None:
        self.gates().throttle_ready_at = value

    @property
    def backoff_until(self) -> float:
        return 0.0 if self._gates is None else self._gates.backoff_until

    @backoff_until.setter
    def backoff_until(self, value: float) -> None:
        self.gates().backoff_until = value

    @property
    def backoff_streak(self) -> int:
        return 0 if self._gates is None else self._gates.backoff_streak

    @backoff_streak.setter
    def backoff_streak(self, value: int) -> None:
        self.gates().backoff_streak = value

    @property
    def error(self) -> BaseException | None:
        """What the last run raised (None if it completed)."""
        return None if self._gates is None else self._gates.error

    @error.setter
    def error(self, value: BaseException | None) -> None:
        if value is not None or self._gates is not None:
            self.gates().error = value

    @property
    def retries(self) -> int:
        return 0 if self._gates is None else self._gates.retries

    @retries.setter
    def retries(self, value: int) -> None:
        self.gates().retries = value

    @property
    def is_root(self) -> bool:
        return self.kind == "effect" or self.provisional or self.demand > 0

    @property
    def is_live(self) -> bool:
        # live_refs first: most live nodes are computations read by a live node.
        return self.registered and (
            self.live_refs > 0 or self.kind == "effect" or self.provisional or self.demand > 0
        )


@attrs.define(eq=False, slots=True, repr=False, weakref_slot=False)
class FunctionNode(Node):
    """The node of a function registered with `register`: `Node`'s fields and the label
    given there, if any (not a node class that runs itself: `DeriveNode`, `Sink`)."""

    _label: str | None = attrs.field(kw_only=True, alias="label")  # type: ignore[misc]
