"""Value functions: node functions the scheduler may run without a transaction.

A *value function* is a node function that computes one value from the values at a
few places and writes it at its node's one output (`Scheduler.derive`'s node, a
runner's lift). Called with a transaction it runs as any node function does; the
scheduler may instead run it *directly* (`run_direct`): read the places' plain
values from the replica, call `compute`, and commit the result with no
`Transaction` (`Replica.run_field`), when its node's last run read exactly those
places and nothing else.

Invariants
- A direct run happens only when the node's read set is exactly what a transaction
  run of the same function would log now: one deep read per input at the input's
  place (``("value", *link.path)`` of the document the link names for the node's
  identity) when no link sits on the way; else, when the read set holds a shallow
  read (a link followed), the walk a transaction makes now (`Replica.plain_chain`,
  `Replica.walk_inputs`: a shallow read of each hop's place, a deep read at the end,
  element-id steps resolved as the transaction resolves them), each distinct read
  found in the read set and as many as it holds (`walk_matches`). A container at the
  end of a walk through links is the transaction's; `Replica.run_field` takes the
  walk's records and values (nothing runs between the walk and the reads' bases).
  So the read set, the reader index and the graph stay as the last run left them, and
  a re-pointed link makes a transaction run.
- With no link on the way, an input whose value is a container with no link anywhere
  inside it runs directly too: a transaction's `read_value` logs the same one deep
  read for it, and `compute` gets its own copy (what `thaw` gives the transaction
  run: `DeriveNode`'s `_plain`, the lift's `materialize`). A link inside it is the
  transaction's (`read_value` follows it, logging more reads).
- The output is one top-level field of one document (`Node.outputs`, one pair of
  path length 1); anything else runs in a transaction.
- `compute` is called once per run: a result the direct commit cannot write goes to
  a transaction with the value already computed (`given`).
- A join that keeps a plan (`DeriveNode`: `ValueFunction.keeps_plan`) has its places
  checked once per read set object (`Replica.field_plan`); a new read set, or one
  `Graph.replace_reads` changes in place, drops the plan.
Not here: when a node runs (`_passes`), or what a derive is (`_sinks`).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from itertools import chain as _chain
from typing import Any, ClassVar, Final, cast

from cells import (
    RUN_NONE,
    CommitResult,
    DocKey,
    FieldPlan,
    Path,
    Place,
    Replica,
    RunComputed,
    Transaction,
    read_value,
)

from ._node import VALUE_PATH, Node, OneRead, ReadSet, TwoReads

_SHALLOW: Final = operator.itemgetter(1)
"""A read set entry's shallow paths (mapped over its entries in C)."""

_WHOLE_READ: Final = ((VALUE_PATH,), ())
"""The read set entry of one deep read of a cell's whole value (shared)."""

VALUE_FUNCTION_TYPES: Final[set[type]] = set()
"""Every subclass of `ValueFunction` (each adds itself: `__init_subclass__`). A node's
run asks ``type(fn) in VALUE_FUNCTION_TYPES``, one set lookup, where `isinstance` walks
the class's bases in a C function the rest of a small drain does not use."""


class ValueFunction:
    """What a node function provides to be run directly (see the module docstring).

    A subclass (slotted, like this base) gives:

    - ``inputs``: the `Link` it reads (one input), or a tuple of them, in the order
      `compute` takes their values. Each is resolved for the node's identity
      (`Link.key`); a run reads each through `read_value`, and nothing else. An input
      may be a `Place`: a shared document's `DocKey` for its whole value (what a cell
      of one holds, `Cell.place`: a `derive` node keeps it, no link made).
    - ``compute(*values)``: the result from the inputs' values, as its transaction
      run computes it (an absent value is None). An attribute holding a callable or
      a method.
    - `put(tx, value)`: write `value`, which `compute` returned, in `tx` (whose reads
      of the inputs are already made): what its transaction run writes after it has
      computed `value`.
    - optionally `accepts(value)`: whether `value` may be written by the direct
      commit (False: `put` writes it in a transaction); and `wrote(value)`: told the
      value a direct run wrote (committed, or elided as equal to what is there),
      with nothing else to do. The base's say yes and do nothing, and the scheduler
      does not call them (`hooked` is False unless a subclass overrides either).
    - ``__call__(tx)``: the transaction run (its first run, and any run the direct
      one declines, is one).
    """

    __slots__ = ()

    hooked: ClassVar[bool] = False
    """Whether the class overrides `accepts` or `wrote` (set by `__init_subclass__`):
    without hooks a direct run calls neither (no call per update)."""

    accepts_hooked: ClassVar[bool] = False
    """Whether the class overrides `accepts` (set by `__init_subclass__`): a lift that
    only hears what it wrote is asked nothing before the write (no call per run)."""

    keeps_plan: ClassVar[bool] = False
    """Whether the class has a writable `plan` slot (`DeriveNode`): `run_direct` then
    keeps there the `FieldPlan` of its node's read set (no read set check per run)."""

    plan: FieldPlan | None = None
    """The `FieldPlan` of its node's read set when `keeps_plan` (its `tag` is the read
    set object it was checked against), else None."""

    compute: Callable[..., Any]

    @property
    def inputs(self) -> Place | tuple[Place, ...]:
        """The `Link` (or `Place`) it reads, or a tuple of them, in the order `compute`
        takes their values (a subclass's attribute or property: read-only here, so
        either fits)."""
        raise NotImplementedError

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        VALUE_FUNCTION_TYPES.add(cls)
        base = ValueFunction
        cls.accepts_hooked = cls.accepts is not base.accepts
        cls.hooked = cls.accepts_hooked or cls.wrote is not base.wrote

    def accepts(self, value: Any) -> bool:
        """Whether the direct commit may write `value` (else `put` does, in a transaction)."""
        return True

    def wrote(self, value: Any) -> None:
        """After a direct run wrote `value` (sent or elided)."""

    def put(self, tx: Transaction, value: Any) -> None:
        """Write `value` (computed by `compute`) in `tx`, as the transaction run does."""
        raise NotImplementedError


def _names(key: DocKey, link: Place) -> bool:
    """Whether `key` is the document `link` names for the node's identity, given that
    `Replica.run_field` then asks `reaches` of `key`: a scoped key with the link's
    space, id and scope that the identity reaches has the identity's principal (and,
    session-scoped, its session), so it is `link.key(identity)`."""
    return key.id == link.id and key.space == link.space and key.scope == link.scope


def _place(link: Place) -> Path:
    """Where a read of `link` reads in its document (no link on the way)."""
    return ("value", *link.path) if link.path else VALUE_PATH


def _only(entry: Any, path: Path) -> bool:
    """Whether read set `entry` is exactly one deep read at `path`."""
    if path is VALUE_PATH:
        return bool(entry == _WHOLE_READ)
    deep, shallow = entry
    return not shallow and len(deep) == 1 and deep[0] == path


def direct_places(
    node: Node, inputs: Place | tuple[Place, ...]
) -> tuple[tuple[DocKey, Path], ...] | None:
    """The places (document, path) of `inputs`, in order, when `node`'s read set is
    exactly one deep read of each (several inputs in one document: that document's deep
    paths, nothing shallow); else None. O(k)."""
    reads = node.reads
    identity = node.identity
    links: tuple[Place, ...] = inputs if isinstance(inputs, tuple) else (inputs,)
    if len(links) == 2 and type(reads) is TwoReads:
        # Two inputs in two documents (cellx's joins): no dict of expected paths.
        a, b = links
        pa, pb = _place(a), _place(b)
        if _names(reads.key, a) and _names(reads.key2, b):
            ea, eb = reads.entry, reads.entry2
            places = ((reads.key, pa), (reads.key2, pb))
        elif _names(reads.key2, a) and _names(reads.key, b):
            ea, eb = reads.entry2, reads.entry
            places = ((reads.key2, pa), (reads.key, pb))
        else:
            return None
        return places if _only(ea, pa) and _only(eb, pb) else None
    if not links:
        return None  # (a function that reads nothing, or keeps itself off this path)
    if type(reads) is dict and len(reads) == len(links):
        # Each input in a document of its own (a join): each document's entry is its
        # one place, deep; no dict of expected paths.
        out: list[tuple[DocKey, Path]] = []
        for link in links:
            key = DocKey(link.space, link.id) if link.scope == "space" else link.key(identity)
            entry = reads.get(key)
            if entry is None:
                return None
            path = _place(link)
            if not (entry == _WHOLE_READ if path is VALUE_PATH else _only(entry, path)):
                return None
            out.append((key, path))
        if len({key for key, _ in out}) == len(out):
            return tuple(out)
        # (An input repeats a document: the read set also holds one no input names.)
        return None
    out = []
    wanted: dict[DocKey, set[Path]] = {}
    for link in links:
        key = DocKey(link.space, link.id) if link.scope == "space" else link.key(identity)
        path = _place(link)
        out.append((key, path))
        paths = wanted.get(key)
        if paths is None:
            wanted[key] = {path}
        else:
            paths.add(path)
    if len(reads) != len(wanted):
        return None
    for key, paths in wanted.items():
        entry = reads.get(key)
        if (
            entry is None
            or entry[1]
            or len(entry[0]) != len(paths)
            or not paths.issuperset(entry[0])
        ):
            return None
    return tuple(out)


def walk_matches(
    reads: ReadSet, keys: tuple[DocKey, ...], pairs: tuple[tuple[Path, bool], ...]
) -> bool:
    """Whether the distinct reads a transaction's walk to a node's inputs would log now
    (`Replica.plain_chain`, `Replica.walk_inputs`: per read its document's key in `keys`
    and its (path, shallow) pair in `pairs`, aligned; each hop's place shallow, each
    input's place deep) are exactly the node's read set `reads`: each read in it, and as
    many as it holds (what `compact_reads` of the log would make). O(reads)."""
    if type(reads) is TwoReads:
        # (The usual lift over its element: its argument's link, then the element's
        # document. No `get` call per read; the count without `values()`.)
        # (The walk's keys are the replica's held ones, as the read set's: tested by
        # identity first, with no field-by-field comparison.)
        key, entry, key2, entry2 = reads.key, reads.entry, reads.key2, reads.entry2
        for i, rkey in enumerate(keys):
            path, shallow = pairs[i]
            if rkey is key or rkey == key:
                if path not in entry[shallow]:  # (entry[True]: its shallow paths)
                    return False
            elif (rkey is not key2 and rkey != key2) or path not in entry2[shallow]:
                return False
        # (Its four tuples of paths, counted with no tuple made.)
        return len(keys) == len(entry[0]) + len(entry[1]) + len(entry2[0]) + len(entry2[1])
    get = reads.get
    for i, rkey in enumerate(keys):
        found = get(rkey)
        path, shallow = pairs[i]
        if found is None or path not in found[shallow]:
            return False
    # (Counted in C: each entry's deep and shallow tuples' lengths, no loop in Python.)
    return len(keys) == sum(map(len, _chain.from_iterable(reads.values())))


def run_direct(
    node: Node, fn: ValueFunction, replica: Replica, on_failure: Any
) -> int | CommitResult | RunComputed:
    """Run `node` (whose function is `fn`) with no transaction if its last run allows
    it (see the module docstring): `Replica.run_field` decides the rest, and what it
    returns. `RUN_NONE` with nothing done otherwise."""
    outs = node._outs
    wpath: Path
    places: tuple[tuple[DocKey, Path], ...]
    if type(outs) is DocKey:
        wkey, wpath = outs, VALUE_PATH
    elif type(outs) is tuple and len(outs) == 2 and type(outs[0]) is DocKey:
        wkey, wpath = outs
        if len(wpath) != 1 or type(wpath[0]) is not str:
            return RUN_NONE  # deeper than a top-level field
    else:
        return RUN_NONE  # several outputs
    reads = node.reads
    inputs = fn.inputs
    # (`type` checks: no read set class has a subclass, and an `isinstance` of a
    # `Mapping` subclass is a call into `ABCMeta.__instancecheck__` per run.)
    if type(reads) is OneRead and not isinstance(inputs, tuple):
        # One input (the usual node): `direct_places` without its calls. (First: a one-read
        # set has no shallow read to walk here, and a one-input node keeps no plan.) A
        # `Link`, or a `DocKey` read as its link (`DocKey.path`).
        key = reads.key
        if key.id != inputs.id or key.space != inputs.space or key.scope != inputs.scope:
            return RUN_NONE  # (`_names`, inlined)
        if not inputs.path:
            if reads.entry != _WHOLE_READ:
                return RUN_NONE
            places = ((key, VALUE_PATH),)
        else:
            path = ("value", *inputs.path)
            if not _only(reads.entry, path):
                return RUN_NONE
            places = ((key, path),)
    elif (
        (reads.entry[1] or reads.entry2[1])
        if type(reads) is TwoReads
        else type(reads) is not OneRead and any(map(_SHALLOW, reads.values()))
    ):
        # A link on the way (a shallow read of its place): the walk a transaction would
        # make now decides (kept while nothing on it moves: the lifts of one element
        # walk its link once between them).
        if not isinstance(inputs, tuple):
            walked = replica.plain_chain(inputs, node.identity)
        elif inputs:
            walked = replica.walk_inputs(inputs, node.identity)
        else:
            return RUN_NONE  # (a run that keeps itself off this path)
        if walked is None or not walk_matches(reads, walked[2], walked[3]):
            return RUN_NONE  # a link re-pointed since the last run: the transaction's
        return replica.run_field(
            (), wkey, wpath, fn.compute, node.identity, node, on_failure,
            fn.accepts if fn.accepts_hooked else None, fn.wrote if fn.hooked else None,
            walked,
        )  # fmt: skip
    elif (plan := fn.plan) is not None and plan.tag is reads:
        # A join's plan of this read set object (`keeps_plan`, made below): its places are
        # the read set's, each deep (no shallow read: a walk above), checked then (a read
        # set changed in place drops it); `run_field` trusts it only for its own output
        # and identity.
        return replica.run_field(
            plan.places, wkey, wpath, fn.compute, node.identity, node, on_failure,
            fn.accepts if fn.accepts_hooked else None, fn.wrote if fn.hooked else None,
            None, plan,
        )  # fmt: skip
    else:
        found = direct_places(node, inputs)
        if found is None:
            return RUN_NONE
        places = found
        if fn.keeps_plan and len(places) > 1:
            # Checked once per read set from now on (the read set object is the tag: a new
            # one, or `Graph.replace_reads` changing it in place, drops the plan). A join's
            # only: one input's checks above cost about what a plan saves, and a plan would
            # cost every one-input node about 170 bytes.
            # (This run makes the checks itself: the plan serves from the next one on.)
            # Its places keep the replica's key objects (`held_key`), not the ones made
            # from the links above: each update looks its documents up by them (the
            # records, the store's heads), and an equal copy is compared field by field.
            held = replica.held_key
            places = tuple([(held(key), path) for key, path in places])
            plan = replica.field_plan(places, wkey, wpath, node.identity, reads)
            cast(Any, fn).plan = plan  # (its slot: `keeps_plan`)
            if plan is None:
                return RUN_NONE
    identity = node.identity
    if fn.hooked:
        return replica.run_field(
            places, wkey, wpath, fn.compute, identity, node, on_failure,
            fn.accepts if fn.accepts_hooked else None, fn.wrote,
        )  # fmt: skip
    return replica.run_field(places, wkey, wpath, fn.compute, identity, node, on_failure)


def given(fn: ValueFunction, value: Any) -> Callable[[Transaction], None]:
    """The node function of a run whose value `run_direct` computed but could not write
    (`RunComputed`): the same reads (logged: the read set) and `fn.put` of `value`, in
    the transaction, with no second call of `compute`."""

    def run(tx: Transaction) -> None:
        inputs = fn.inputs
        for link in inputs if isinstance(inputs, tuple) else (inputs,):
            read_value(tx, link)  # the reads `run_direct` made, logged: the read set
        fn.put(tx, value)

    return run
