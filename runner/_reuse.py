"""Reuse across restarts: a lift's stored output is trusted when nothing it read changed.

When the runtime closes (`Runtime.aclose`, through `Book.checkpoint`), each
lift whose output stands for its inputs (its last run wrote a plain value
that landed, and nothing it read changed since) gets, in its output document,
an *inputs record* at the `"inputs"` field: one string (one object to
hold in memory, which the garbage collector never scans), the concatenation of

- the node's code key (below), 32 hex digits;
- a digest, 32 hex digits (16-byte BLAKE2b) over the code key, what each read
  saw (the whole value at a deep read; at a shallow one only what a shallow
  reader sees: kind, key set, length, link) and the output value written;
- the node's read set as JSON, each read as `[space, id, scope, path,
  shallow]` (a canonical address: the instance is the reader's identity).

Writing it at close, not with every run, keeps a lift's update the one-field
commit the scheduler's fast path makes (a second written field cost about 40 µs
per update). A record written at an earlier close stays valid: it vouches for
an (inputs, output) pair, and its digest covers the output, so it matches
only while the document holds that same output. A run that launches children
removes the record in its own commit.

The first run of a lift node in a runtime (`Node.runs == 1`: after a restart,
or on a second runtime over the same store) first checks the record: when the
code key is the same and the digest over what those places hold now equals
the recorded one, the stored output is what the function would write again
(functions are idempotent: same code, same inputs, same output), so the
function is not called. The reads are logged as the recorded run logged them,
so the node's read set is installed and a later change still re-runs it.
Anything else (no record, other code, any input or the output changed) runs
the function as always. An input still loading reads as absent, as it would
for the function, and its arrival runs the node again (the read is logged).
Deciding costs O(size of what the last run read and wrote), a hash of it, and
writes nothing.

The code key says which computation wrote the record: the function's import
path, a hash of its code object (bytecode, constants, names, nested code,
recursively), its default arguments and closure values, the scalar constants
(int, float, str, bool, None, tuples of them) and same-module functions (their
code, recursively) it names as globals, the Python version, and the node's
place in its traced graph (kind, target and input bindings). A function whose
parts cannot be hashed this way (a closure over an arbitrary object, a
`functools.partial`, a callable instance) gets no key: it is never reused. Not
covered, by design: mutable module state (a global list or dict), and code the
function reaches only through another module (a helper imported from
elsewhere counts by its import path, not its code); `Runtime(reuse=False)`
turns reuse off for a runtime whose code changed in such a way.

Not here: what runs when (the scheduler), the lift itself (`_instantiate`).
"""

from __future__ import annotations

import functools
import hashlib
import sys
import types
import weakref
from collections.abc import Callable
from math import copysign
from typing import Any, Final, Protocol

import msgspec

from cells import (
    MISSING,
    CellweaveError,
    DocKey,
    Identity,
    Link,
    Replica,
    Transaction,
    canonical_bytes,
    instance_key,
    value_equal,
)
from scheduler import Node

from ._builder import NodeSpec, Pattern

INPUTS: Final = "inputs"
"""The output document's field holding the inputs record."""

_KEY_CHARS: Final = 32
"""Hex characters of a code key and of a digest (16-byte BLAKE2b)."""
_MAX_GLOBAL_DEPTH: Final = 8
"""How deep same-module helper functions are followed for the code key."""


class _Unhashable(Exception):
    """A part of a function that the code key cannot cover."""


# --------------------------------------------------------------------------- code keys

_node_keys: weakref.WeakKeyDictionary[Pattern, dict[int, tuple[NodeSpec, str | None]]]
_node_keys = weakref.WeakKeyDictionary()


def node_code_key(pattern: Pattern, spec: NodeSpec, fn: Callable[..., Any]) -> str | None:
    """The code key of lift node `spec` of `pattern` running `fn` (None: never reuse).
    Computed once per pattern node."""
    keys = _node_keys.setdefault(pattern, {})
    held = keys.get(spec.index)
    if held is not None and held[0] is spec:
        return held[1]
    fn_key = function_key(fn)
    key = None
    if fn_key is not None:
        h = hashlib.blake2b(digest_size=16)
        h.update(fn_key.encode())
        h.update(msgspec.msgpack.encode([spec.kind, spec.target, spec.inputs]))
        key = h.hexdigest()
    keys[spec.index] = (spec, key)
    return key


@functools.lru_cache(maxsize=4096)
def function_key(fn: Callable[..., Any]) -> str | None:
    """A hex digest of `fn`'s code as the module docstring says, or None when some part
    of it cannot be hashed (then nothing it computed is reused)."""
    h = hashlib.blake2b(digest_size=16)
    h.update(sys.implementation.cache_tag.encode())
    try:
        _function(fn, h, set(), 0)
    except (_Unhashable, RecursionError):
        return None
    return h.hexdigest()


def _function(fn: Any, h: Any, seen: set[int], depth: int) -> None:
    if isinstance(fn, types.BuiltinFunctionType):
        h.update(f"B{fn.__module__}:{fn.__qualname__};".encode())
        return
    if not isinstance(fn, types.FunctionType):
        raise _Unhashable(fn)
    h.update(f"F{fn.__module__}:{fn.__qualname__};".encode())
    if id(fn) in seen:
        return  # recursion (a function naming itself, two helpers naming each other)
    seen.add(id(fn))
    names: list[str] = []
    _code(fn.__code__, h, names)
    _value(fn.__defaults__, h, seen, depth)
    _value(fn.__kwdefaults__, h, seen, depth)
    for cell in fn.__closure__ or ():
        try:
            contents = cell.cell_contents
        except ValueError:  # an empty cell (a name bound later in the enclosing scope)
            h.update(b"E;")
            continue
        _value(contents, h, seen, depth)
    module = fn.__module__
    namespace = fn.__globals__
    for name in dict.fromkeys(names):
        held = namespace.get(name, MISSING)
        if held is MISSING:
            continue  # a builtin or an attribute name: named by the bytecode already
        h.update(f"G{name}=".encode())
        if isinstance(held, types.FunctionType):
            if held.__module__ == module and depth < _MAX_GLOBAL_DEPTH:
                _function(held, h, seen, depth + 1)
            else:
                h.update(f"{held.__module__}:{held.__qualname__};".encode())
        elif _scalar(held):
            h.update(repr(held).encode() + b";")
        else:
            # A module, class, pattern or mutable object: named, not hashed (see the
            # module docstring: mutable state is not part of the key).
            kind = type(held)
            h.update(f"{kind.__module__}.{kind.__qualname__};".encode())


def _scalar(value: Any) -> bool:
    t = type(value)
    if t in (int, float, str, bool, type(None), bytes):
        return True
    return t is tuple and all(_scalar(v) for v in value)


def _code(code: types.CodeType, h: Any, names: list[str]) -> None:
    h.update(code.co_code)
    h.update(repr((code.co_argcount, code.co_kwonlyargcount, code.co_flags)).encode())
    h.update(repr(code.co_names).encode())
    names.extend(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            h.update(b"C")
            _code(const, h, names)
        else:
            h.update(_const(const).encode() + b";")


def _const(const: Any) -> str:
    if isinstance(const, frozenset):  # its repr's order depends on the hash seed
        return "frozenset(" + ",".join(sorted(_const(c) for c in const)) + ")"
    if isinstance(const, tuple):
        return "(" + ",".join(_const(c) for c in const) + ")"
    return repr(const)


def _value(value: Any, h: Any, seen: set[int], depth: int) -> None:
    """A default argument or a closure value."""
    if value is None or _scalar(value):
        h.update(b"V" + repr(value).encode() + b";")
    elif isinstance(value, (types.FunctionType, types.BuiltinFunctionType)):
        _function(value, h, seen, depth + 1)
    elif isinstance(value, dict) and all(type(k) is str for k in value):
        h.update(b"D")
        for k in sorted(value):
            h.update(repr(k).encode())
            _value(value[k], h, seen, depth)
    elif isinstance(value, (list, tuple)):
        h.update(b"L%d" % len(value))
        for v in value:
            _value(v, h, seen, depth)
    elif isinstance(value, Link):
        h.update(canonical_bytes(value))
    else:
        raise _Unhashable(value)


# --------------------------------------------------------------------------- records

_encode_reads = msgspec.json.encode
_decode_reads = msgspec.json.decode


def _tag(value: Any) -> Any:
    """`value` as msgpack-able data that is equal for equal values (`value_equal`):
    type-tagged, dict keys sorted, an integral float as its int. Values read from a
    document are normalized already, so none is copied or checked again (what
    `canonical_bytes` would spend most of its time on)."""
    t = type(value)
    if t is int or t is str:
        return value  # (msgpack keeps the two apart)
    if value is None or t is bool:
        return ("b", value)
    if t is dict:
        return ("d", [(k, _tag(value[k])) for k in sorted(value)])
    if t is list:
        return ("l", [_tag(v) for v in value])
    if t is float:
        if value != value:
            return ("f", "nan")
        if value.is_integer() and -(2**63) <= value < 2**63 and (value or copysign(1.0, value) > 0):
            return int(value)  # (not -0.0: `value_equal` tells it from 0)
        return ("f", value.hex())
    if t is Link:
        return ("k", value.space, value.id, value.scope, list(value.path))
    return ("v", canonical_bytes(value))  # anything else a document may hold


def _seen(value: Any, shallow: bool) -> Any:
    """What a (deep or shallow) read of `value` sees, as `_tag` data."""
    if value is MISSING:
        return ("m",)
    if not shallow:
        return _tag(value)
    t = type(value)
    if t is dict:
        return ("d", sorted(value))
    if t is list:
        return ("l", len(value))
    if t is Link:
        return _tag(value)
    return ("t", t.__name__)


_encode_seen = msgspec.msgpack.encode


def _digest(
    code: str,
    reads: list[tuple[DocKey, tuple[Any, ...], bool]],
    tx: Transaction,
    out_key: DocKey,
    value_path: tuple[Any, ...],
    inputs: list[Any] | None = None,
) -> str:
    """The digest over `code`, what `reads` see in `tx` (`inputs`: that list, if the
    caller made it already) and the output at `value_path` of `out_key`."""
    peek = tx.peek
    if inputs is None:
        inputs = [_seen(peek(key, path), shallow) for key, path, shallow in reads]
    seen = [code, inputs, _seen(peek(out_key, value_path), False)]
    return hashlib.blake2b(_encode_seen(seen), digest_size=16).hexdigest()


def drop_record(tx: Transaction, out_key: DocKey) -> None:
    """Stage the removal of `out_key`'s inputs record, if it holds one: a run that
    launched children must never be skipped."""
    if tx.peek(out_key, (INPUTS,)) is not MISSING:
        tx.write(out_key, (INPUTS,), MISSING)


def _record(
    tx: Transaction,
    out_key: DocKey,
    value_path: tuple[Any, ...],
    code: str,
    reads: list[tuple[DocKey, tuple[Any, ...], bool]],
) -> None:
    """Stage the inputs record for `reads` and the output at `value_path` of `out_key`
    as `tx` sees them (nothing when the document holds that record already)."""
    stored = _encode_reads([[k.space, k.id, k.scope, list(p), s] for k, p, s in reads])
    text = code + _digest(code, reads, tx, out_key, value_path) + stored.decode()
    if tx.peek(out_key, (INPUTS,)) != text:
        tx.write(out_key, (INPUTS,), text)


PENDING: Final = object()
"""`Entry.written` while a run is under way, failed or launched children: no record."""
REUSED: Final = object()
"""`Entry.written` of a node whose first run kept the stored output (its record stands)."""


class Entry(Protocol):
    """One lift node's part in the book: where it writes and what its last run wrote.

    The lift instance itself (`_instantiate._Lift`), not an object of its own beside it:
    the lift already holds the output key and its shape the code key (a separate
    three-slot record cost 56 bytes per lift node)."""

    written: Any
    """What the last run wrote, `PENDING` or `REUSED`."""

    @property
    def out_key(self) -> DocKey: ...

    @property
    def code(self) -> str | None:
        """The node's code key (`node_code_key`); None: never in a book."""


class Book:
    """The lift nodes of a runner that can leave an inputs record, and what each last
    wrote (set by the node's run: two assignments per run, no other cost per update).

    `checkpoint` writes the records: when the runtime closes (`Runtime.aclose`).
    A run does not write its record itself: a second written field would cost every
    update a general commit instead of the one-field commit a computation makes.
    """

    def __init__(self) -> None:
        self.entries: dict[Node, Entry] = {}

    def add(self, node: Node, entry: Entry) -> None:
        self.entries[node] = entry

    def discard(self, node: Node) -> None:
        self.entries.pop(node, None)

    def checkpoint(self, replica: Replica) -> list[Transaction]:
        """Stage, per identity, the inputs record of every node whose output stands for
        its inputs now, and return those transactions (open: the caller commits them).

        A node qualifies when its last run completed and wrote a plain value (not
        `PENDING`: under way, raised or launched children), it is clean (nothing it
        read changed since), it is not failing, and the visible output is still what
        it wrote (a rejected commit's value never landed). A node that kept a stored
        output (`REUSED`) already has its record. O(nodes + what they read).
        """
        txs: dict[Identity, Transaction] = {}
        for node, entry in self.entries.items():
            written, code = entry.written, entry.code
            if (
                code is None
                or written is PENDING
                or written is REUSED
                or not node.registered
                or node.status != "clean"
                or node.error is not None
            ):
                continue
            tx = txs.get(node.identity)
            if tx is None:
                tx = txs[node.identity] = replica.edit(node.identity)
            reads = [
                (key, path, shallow)
                for key, (deep, shallow_paths) in node.reads.items()
                for path, shallow in (
                    *((p, False) for p in deep),
                    *((p, True) for p in shallow_paths),
                )
            ]
            try:
                if value_equal(tx.peek(entry.out_key, _VALUE_PATH), written):
                    _record(tx, entry.out_key, _VALUE_PATH, code, reads)
            except CellweaveError:
                # (A place this identity no longer reaches, a value the digest cannot
                # take.) A missing record only costs the next runtime a run.
                continue
        return list(txs.values())


_VALUE_PATH: Final = ("value",)


def reused(tx: Transaction, out_key: DocKey, value_path: tuple[Any, ...], code: str | None) -> bool:
    """Whether the output stored at `value_path` of `out_key` can stand for a run in `tx`
    (see the module docstring). When it can, the recorded reads are logged in `tx` (the
    node's read set) and nothing is written; otherwise `tx` is left as it was."""
    found = vouched(tx, out_key, value_path, code)
    if found is None:
        return False
    read = tx.read
    reads = found[0]
    for key, path, shallow in reads:
        read(key, path, shallow=shallow)
    return True


Reads = list[tuple[DocKey, tuple[Any, ...], bool]]

_KEYS: dict[tuple[str, str, Any, Identity], DocKey] = {}
_PATHS: dict[tuple[Any, ...], tuple[Any, ...]] = {}
_SHARED_MAX: Final = 1 << 16
"""The document keys and paths records name, shared: every card of a board reads the
same list document and the same argument path (one object each, not one per card,
while a restarted runtime's cards are dormant, `_list_dormant`). Cleared when full."""
"""A read set as an inputs record lists it: (document, path, shallow) per read."""


def vouched(
    tx: Transaction, out_key: DocKey, value_path: tuple[Any, ...], code: str | None
) -> tuple[Reads, list[Any]] | None:
    """The reads of the inputs record of `out_key`, and what each sees now (`seen_now`),
    when the record vouches, in `tx`, for the output stored at `value_path` (same code
    key, same digest over what those places hold now); else None. Peeks only: nothing
    is logged or written in `tx`."""
    if code is None:
        return None
    held = tx.peek(out_key, (INPUTS,))
    if type(held) is not str or not held.startswith(code):
        return None
    digest = held[_KEY_CHARS : 2 * _KEY_CHARS]
    try:
        stored = _decode_reads(held[2 * _KEY_CHARS :])
    except msgspec.DecodeError:
        return None  # not a record this module wrote: run
    if type(stored) is not list:
        return None
    identity = tx.identity
    reads: Reads = []
    keys, paths = _KEYS, _PATHS
    if len(keys) > _SHARED_MAX or len(paths) > _SHARED_MAX:
        keys.clear()
        paths.clear()
    try:
        for space, id_, scope, path, shallow in stored:
            if type(space) is not str or type(id_) is not str or type(path) is not list:
                return None  # not a record this module wrote: run
            where = (space, id_, scope, identity)
            key = keys.get(where)
            if key is None:
                key = keys[where] = instance_key(space, id_, scope, identity)
            at = tuple(path)
            at = paths.setdefault(at, at)
            reads.append((key, at, shallow is True))
    except (TypeError, ValueError):
        return None  # not a record this module wrote: run
    inputs = seen_now(tx, reads)
    if _digest(code, reads, tx, out_key, value_path, inputs) != digest:
        return None
    return reads, inputs


def seen_now(tx: Transaction, reads: Reads) -> list[Any]:
    """What each of `reads` sees in `tx` now (comparable with `==`: equal exactly when a
    function reading those places would see equal values, as the digest compares them)."""
    peek = tx.peek
    return [_seen(peek(key, path), shallow) for key, path, shallow in reads]
