"""What a replica keeps per document, and the notifications it sends about it.

A `DocRecord` holds one document's *confirmed* state (the store's, as last
heard) and its *pending layers* (this replica's commits still waiting for a
verdict); its *visible* value is the layers folded over the confirmed state.
Every visible change is announced as a `Notification` of `Change`s.

Invariants (checked by `Replica._check`)
- visible == fold() (layers over confirmed);
- layers are in increasing local seq order;
- a document's version changes exactly when its visible value changes.
Not here: when layers are added or dropped (`cells._replica`), or what a
commit stages (`cells._staging`).
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Sequence
from typing import Literal, Protocol, TypeAlias

import attrs
import msgspec

from ._address import DocKey, Path
from ._values import MISSING, Value, set_path
from .errors import InvalidValueError


class Source(Protocol):
    """What a notification says of the transaction it reports (a `Transaction`):
    `source`, who ran it (a scheduler node), so its own commit does not invalidate it."""

    @property
    def source(self) -> object: ...


NotificationKind = Literal["commit", "revert", "integrate", "load"]


class Change(msgspec.Struct, frozen=True, gc=False):
    """One document's visible value before and after a change.

    `paths`, when known (a local commit), are the full-document paths written: the
    two values differ only at or below them (writes copy only along their path), so
    a reader index can look for readers there alone. None means unknown (a fold of
    layers, a foreign commit): compare everywhere.

    `gc=False`: it holds a key, two values and paths, which never refer back to it.
    """

    key: DocKey
    before: Value
    after: Value
    paths: tuple[Path, ...] | None = None


class Notification(msgspec.Struct, frozen=True):
    """One visible transition of the replica (the only change channel)."""

    kind: NotificationKind
    changes: tuple[Change, ...]
    source: Source | None = None
    reason: BaseException | None = None


CommitHook: TypeAlias = Callable[[Change, object, bool], None]
"""A subscriber's entry for one change of a local commit (`Replica.subscribe`'s
`on_commit`): the change, who made it (its transaction's `source`) and whether the
commit moved the value at the change's one path (`moved`: the replica compared it
there and found it changed, so a read of exactly that place changed with no
comparison; False says nothing), no `Notification` around them."""


class Layer(msgspec.Struct, gc=False):
    """One pending commit's writes to one document: `value` at `path` first, then the
    (path, value) pairs of `rest`, in order (`writes` lists them all).

    A Struct because one is made per commit; `gc=False` because it holds only
    paths and values, which never refer back to it. The first write is two fields,
    not a pair in a tuple: the usual layer (a node run's commit) has one write, and
    its two tuples were, with the transaction, most of what a commit in flight
    handed the cyclic collector (a drain of N runs keeps N layers until its
    verdicts).
    """

    seq: int
    path: Path
    value: Value
    rest: Sequence[tuple[Path, Value]] = ()

    @property
    def writes(self) -> Sequence[tuple[Path, Value]]:
        """Every write of the layer, in order, as (path, value) pairs. O(writes)."""
        first = (self.path, self.value)
        rest = self.rest
        return (first, *rest) if rest else (first,)

    @classmethod
    def of(cls, seq: int, ops: Sequence[tuple[Path, Value]]) -> Layer:
        """The layer of local commit `seq` carrying `ops` (at least one write)."""
        (path, value) = ops[0]
        return cls(seq, path, value, ops[1:] if len(ops) > 1 else ())

    def __repr__(self) -> str:
        return f"Layer({self.seq}, {self.writes!r})"


class DocRecord(msgspec.Struct, gc=False):
    """One document's state in the replica.

    A Struct with `gc=False`: one exists per document for the replica's life,
    and it holds only values, seqs and its layers, which never refer back to it,
    so the collector need not scan it (and it needs no collector header).
    """

    confirmed: Value = MISSING
    confirmed_seq: int = 0
    # A tuple while there are at most one pending layer (the shared empty tuple, or
    # a 1-tuple), a deque only for more: a deque costs 760 bytes, most documents
    # (every computation's output) have none, and a scheduler run's commit has one
    # in flight until its verdict.
    layers: collections.deque[Layer] | tuple[Layer, ...] = ()
    visible: Value = MISSING
    version: int = 0
    key: DocKey | None = None
    """The document's key once loaded, None until then (so it is also the loaded flag,
    `loaded`): the key object the replica shares with its callers (`Replica.held_key`),
    so the nodes, registrations and read sets of one document hold one key object, not
    one each (56 bytes per copy; a mapped element's three documents had nine). In the
    slot of the bool flag it replaces: a ninth field would cost every document 16 bytes
    (allocations come in steps of 16)."""
    # (Whether a load is in flight is the replica's `_loading`: a flag here would cost
    # every document 8 bytes for a state few have, and briefly.)

    @property
    def loaded(self) -> bool:
        """Whether the document's state has arrived from the store (or a verdict)."""
        return self.key is not None

    def fold(self) -> Value:
        v = self.confirmed
        for layer in self.layers:
            for path, value in layer.writes:
                try:
                    v = set_path(v, path, value)
                except InvalidValueError:
                    # A newer value put a scalar above this blind write, so it does not
                    # apply (the store refuses it the same way); raising here would wedge
                    # every later delivery to this replica.
                    continue
        return v


def push_layer(rec: DocRecord, layer: Layer) -> None:
    """Add `layer` on top of `rec`'s pending layers (a tuple up to one, a deque beyond)."""
    layers = rec.layers
    if not layers:
        rec.layers = (layer,)
    elif isinstance(layers, tuple):
        rec.layers = collections.deque((*layers, layer))
    else:
        layers.append(layer)


def adopt_oldest_layer(
    rec: DocRecord,
    key: DocKey,
    layers: collections.deque[Layer] | tuple[Layer, ...],
    value: Value,
    seq: int,
) -> None:
    """The store applied exactly `rec`'s oldest pending layer on exactly its confirmed
    state (verdicts arrive in order), giving `value` at `seq`: that layer folded over
    confirmed, so the visible value (the rest folded on top) does not move. Adopt it
    without re-folding or comparing documents, which would cost O(document x layers)
    per verdict. With no layer left the store's value equals the visible one: keep
    only one of the two (values are never changed in place) instead of a copy of
    every written document on each side (184 bytes for a one-field document)."""
    if isinstance(layers, tuple):
        layers = rec.layers = layers[1:]
    else:
        layers.popleft()
        if not layers:
            rec.layers = ()
    rec.confirmed = value
    if not layers:
        rec.visible = value
    rec.confirmed_seq = seq
    if rec.key is None:
        rec.key = key


@attrs.define
class ReplicaStats:
    """Counted work (for benchmarks and diagnostics; observes, never decides)."""

    commits_sent: int = 0
    commits_elided: int = 0
    local_stale: int = 0
    accepted: int = 0
    rejected: int = 0
    notifications: int = 0
    loads: int = 0
