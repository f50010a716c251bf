"""JSON-like values: checking at the write boundary, equality, and paths.

Values are `None`, `bool`, `int` (64-bit), finite `float`, `str` (valid Unicode
text), `list`, `dict[str, value]` (any keys) and `Link`, nested at most `MAX_DEPTH`
containers deep in a document. Python's `==` is the wrong equality for them (`True == 1`,
`nan != nan`), so `value_equal` decides every "did it change" question:

- bool is not a number (`value_equal(True, 1)` is false);
- numbers compare by value across int and float (`1` equals `1.0`);
- `nan` equals `nan`; `0.0` and `-0.0` differ;
- containers compare by content (dict key order does not matter).

Stored values are immutable by convention: nothing in cellweave mutates a
value once it is stored, and writes copy along the path they change. (A long
list written one element or one splice at a time is not copied each time: the
version before the last, once nothing can reach it, is brought up to date and
becomes the next one; see `_reuse`. A value anyone holds never changes.)
`normalize` is the write boundary: it returns a fresh, checked copy, so a
caller mutating its own object afterwards cannot reach stored state.

`MISSING` means "absent" (a key that is not there, a document that does not
exist); writing `MISSING` deletes.
"""

from __future__ import annotations

import contextlib
import math
import sys
import sysconfig
from collections.abc import Sequence
from typing import Any, Final, TypeAlias

from ._address import Link, Linkable, Path
from .errors import InvalidValueError


class _Missing:
    __slots__ = ()
    _instance: _Missing | None = None

    def __new__(cls) -> _Missing:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "MISSING"

    def __bool__(self) -> bool:
        return False

    def __reduce__(self) -> str:
        return "MISSING"


MISSING: Final = _Missing()
"""Absent: a key that is not there, or a document that does not exist."""

Value: TypeAlias = Any
"""A JSON-like value (see the module docstring). `Any` because Python cannot spell it usefully."""

MAX_INT: Final = 2**63 - 1
MIN_INT: Final = -(2**63)
"""The int64 range a stored int must fall in (`MIN_INT` spelled out: a check on the write
path loads one name, not `-MAX_INT - 1`'s four steps)."""
_EXACT_FLOAT_INT: Final = 2**53

MAX_DEPTH: Final = 100
"""How deeply containers may nest in a document, counted in path elements from its root.

A document's top level holds each cell's value (`get_cell` cells live there), so a
value written at such a cell may nest up to `MAX_DEPTH` containers (`[[...]]` nests
2); at `cell.key("a", "b")` two fewer. Deeper writes raise `InvalidValueError` at
the write boundary, on every store alike: nothing recursive (`normalize`,
`value_equal`, encoding, decoding) then ever meets a value deep enough to exhaust
Python's recursion limit."""


_AS_IS: Final = frozenset({Link, str, bool, type(None)})
"""Element types a list keeps exactly as they are (see `_normalize`)."""


def _fmt_path(path: Path) -> str:
    return "".join(f"[{p!r}]" for p in path) or "(root)"


def normalize(value: Any, *, where: str = "value", path: Path = (), depth: int = 1) -> Value:
    """Check `value` is JSON-like and return a fresh normalized copy.

    Integral floats become ints (so `1.0` is stored as `1`), tuples become
    lists, and `Cell`-like objects (anything with `.link()`) become links.
    Refused: non-finite floats (`nan`, `inf`, `-inf`: JSON cannot spell them),
    strings (values or keys) that are not valid Unicode text (a lone surrogate
    such as `"\\ud800"`), and nesting deeper than `MAX_DEPTH` counting `depth`,
    the number of path elements from the document's root to `value` (1: a
    cell's value at the top level of its document).
    Raises `InvalidValueError` naming `where`, the path inside the value and
    the offending type; nothing is partially written because nothing is
    written here at all.  O(size of value).
    """
    t = type(value)
    if (
        (t is str and value.isascii())
        or t is bool
        or value is None
        or (t is int and -MAX_INT - 1 <= value <= MAX_INT)
    ):
        return value  # a scalar that needs no change: no path list or cycle set to make
    # `limit`: the longest the path list may grow before a container is too deep.
    return _normalize(value, where, list(path), set(), MAX_DEPTH - depth + len(path))


def _text_ok(s: str) -> bool:
    """Is `s` encodable as UTF-8 (no lone surrogates)? O(1) for ASCII (a flag in CPython)."""
    if s.isascii():
        return True
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _bad_text(s: str, where: str, path: list[Any], what: str) -> InvalidValueError:
    at = next(i for i, ch in enumerate(s) if 0xD800 <= ord(ch) <= 0xDFFF)
    return InvalidValueError(
        f"{where}: {what} {s!r} at {_fmt_path(tuple(path))} holds a lone surrogate"
        f" ({s[at]!r} at index {at}); strings must be valid Unicode text",
        path=tuple(path),
        value=s,
    )


def _too_deep(value: Any, where: str, path: list[Any]) -> InvalidValueError:
    return InvalidValueError(
        f"{where}: {type(value).__name__} at {_fmt_path(tuple(path))} nests deeper than the"
        f" maximum depth of {MAX_DEPTH} containers in a document",
        path=tuple(path),
        value=type(value).__name__,
    )


def _normalize(value: Any, where: str, path: list[Any], active: set[int], limit: int) -> Value:
    t = type(value)
    if value is None or t is bool:
        return value
    if t is str:
        if value.isascii() or _text_ok(value):
            return value
        raise _bad_text(value, where, path, "string")
    if t is int:
        if -MAX_INT - 1 <= value <= MAX_INT:  # int64: -2**63 is in range
            return value
        raise InvalidValueError(
            f"{where}: integer {value} at {_fmt_path(tuple(path))} is outside the 64-bit range",
            path=tuple(path),
            value=value,
        )
    if t is float:
        if not math.isfinite(value):
            raise InvalidValueError(
                f"{where}: float {value!r} at {_fmt_path(tuple(path))} is not finite;"
                " JSON (and every browser) has no nan or infinity: store None or a string",
                path=tuple(path),
                value=value,
            )
        if (
            value.is_integer()
            and abs(value) <= _EXACT_FLOAT_INT
            and not (value == 0.0 and math.copysign(1.0, value) < 0)
        ):
            return int(value)
        return value
    if t is dict:
        if len(path) > limit:
            raise _too_deep(value, where, path)
        ident = id(value)
        if ident in active:
            raise _cycle(value, where, path)
        active.add(ident)
        out: dict[str, Value] = {}
        for k, v in value.items():
            if type(k) is not str:
                raise InvalidValueError(
                    f"{where}: dict key {k!r} at {_fmt_path(tuple(path))} is of type"
                    f" {type(k).__name__}; keys must be str",
                    path=tuple(path),
                    value=k,
                )
            if not k.isascii() and not _text_ok(k):
                raise _bad_text(k, where, path, "dict key")
            path.append(k)
            out[k] = _normalize(v, where, path, active, limit)
            path.pop()
        active.discard(ident)
        return out
    if t is list or t is tuple:
        if len(path) > limit:
            raise _too_deep(value, where, path)
        if len(value) > 16:
            types = set(map(type, value))
            if types <= _AS_IS and (
                str not in types
                # One C-level join and check for all strings (a lone surrogate stays
                # lone when joined): about 4x faster than a per-string test at 10,000.
                or _text_ok("".join(value if len(types) == 1 else _strs(value)))
            ):
                # Links, ASCII strs, bools and None only (a list of links, say):
                # nothing to check or convert per element, and no container to
                # recurse into. The type scan and the copy run in C: about 3x
                # faster at 10,000.
                return list(value)
        ident = id(value)
        if ident in active:
            raise _cycle(value, where, path)
        active.add(ident)
        items: list[Value] = []
        for i, v in enumerate(value):
            tv = type(v)
            if tv is Link or (tv is str and v.isascii()) or v is None or tv is bool:
                items.append(v)  # needs no change: no call, no path bookkeeping
                continue
            path.append(i)
            items.append(_normalize(v, where, path, active, limit))
            path.pop()
        active.discard(ident)
        return items
    if t is Link:
        return value
    # Subclasses (an IntEnum, an OrderedDict, a str subclass): store the plain kind.
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, str):
        return _normalize(str(value), where, path, active, limit)
    if isinstance(value, int):
        return _normalize(int(value), where, path, active, limit)
    if isinstance(value, float):
        return _normalize(float(value), where, path, active, limit)
    if isinstance(value, dict):
        return _normalize(dict(value), where, path, active, limit)
    if isinstance(value, (list, tuple)):
        return _normalize(list(value), where, path, active, limit)
    if isinstance(value, Linkable):
        return value.link()
    raise InvalidValueError(
        f"{where}: {type(value).__name__} at {_fmt_path(tuple(path))} is not a JSON-like value"
        " (use None, bool, int, float, str, list, dict with str keys, or a link)",
        path=tuple(path),
        value=value,
    )


def _strs(items: Any) -> list[str]:
    return [v for v in items if type(v) is str]


def _cycle(value: Any, where: str, path: list[Any]) -> InvalidValueError:
    return InvalidValueError(
        f"{where}: {type(value).__name__} at {_fmt_path(tuple(path))} contains itself (a cycle)",
        path=tuple(path),
        value=value,
    )


def value_equal(a: Value, b: Value) -> bool:
    """JSON equality (see the module docstring).  O(size) in the worst case; O(1) when `a is b`.

    Raises `InvalidValueError` for containers nesting deeper than any document
    may (`MAX_DEPTH`), rather than exhausting Python's recursion limit.
    """
    if a is b:
        return True
    return _equal(a, b, 0)


def _equal(a: Value, b: Value, depth: int) -> bool:
    if a is b:
        return True
    ta = type(a)
    tb = type(b)
    if ta is bool or tb is bool:
        return ta is tb and a == b
    if ta is float or tb is float:
        if (ta is float or ta is int) and (tb is float or tb is int):
            if a == b:
                # 0.0 and -0.0 are different values; everything else equal is equal.
                return a != 0 or math.copysign(1.0, a) == math.copysign(1.0, b)
            return ta is float and tb is float and a != a and b != b  # nan equals nan
        return False
    if ta is not tb:
        return False
    if ta is dict:
        if len(a) != len(b):
            return False
        if depth > MAX_DEPTH:  # a document's containers sit at depths 0..MAX_DEPTH
            raise _too_deep_to_compare()
        for k, v in a.items():
            w = b.get(k, MISSING)
            if w is MISSING or not _equal(v, w, depth + 1):
                return False
        return True
    if ta is list:
        if len(a) != len(b):
            return False
        if depth > MAX_DEPTH:
            raise _too_deep_to_compare()
        return all(_equal(x, y, depth + 1) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def _too_deep_to_compare() -> InvalidValueError:
    return InvalidValueError(
        f"value_equal: the values nest deeper than the maximum depth of {MAX_DEPTH}"
        " containers in a document; no stored value can be like them"
    )


def same_value(a: Value, b: Value) -> bool:
    """`value_equal`, with `MISSING` (absent) equal only to itself.  O(1) when `a is b`."""
    if a is b:
        return True
    if a is MISSING or b is MISSING:
        return False
    return value_equal(a, b)


def get_path(value: Value, path: Path) -> Value:
    """The value at `path` inside `value`, or `MISSING` if it is not reachable.  O(len(path)).

    A str step on a list names an element by its id (`element_ids`), looked up in the
    document `value`'s id tables (so `value` must be the whole document then)."""
    if len(path) == 1 and type(value) is dict:
        elem = path[0]
        return value.get(elem, MISSING) if type(elem) is str else MISSING
    root = value
    for elem in path:
        t = type(value)
        if t is dict:
            if type(elem) is not str:
                return MISSING
            value = value.get(elem, MISSING)
            if value is MISSING:
                return MISSING
        elif t is list:
            if type(elem) is not int:
                return _get_by_ids(root, path) if type(elem) is str else MISSING
            if elem >= len(value):
                return MISSING
            value = value[elem]
        else:
            return MISSING
    return value


def _get_by_ids(root: Value, path: Path) -> Value:
    """`get_path` of a path with element-id steps: each resolved to its position."""
    node = root
    for i, elem in enumerate(path):
        t = type(node)
        if t is dict and type(elem) is str:
            node = node.get(elem, MISSING)
            if node is MISSING:
                return MISSING
        elif t is list and type(elem) is str:
            at = element_position(root, path[:i], node, elem)
            if at is None:
                return MISSING
            node = node[at]
        elif t is list and type(elem) is int and elem < len(node):
            node = node[elem]
        else:
            return MISSING
    return node


def set_path(root: Value, path: Path, new: Value, *, where: str = "write") -> Value:
    """Return a copy of `root` with `new` at `path` (copying only along the path).

    Missing dict levels are created; a list index may be at most the list's
    length (equal appends). Writing `MISSING` deletes the key or list element.
    Raises `InvalidValueError` when the path runs through a scalar or a list
    with a non-int or out-of-range index.  O(len(path) + sizes of the copied containers);
    a long list written one element at a time is not copied (`_replaced`).

    The result is a stored-value-like value: never mutate it. It shares every part
    off the path with `root`, and the same call made again with the same objects
    (`root`, `path` and `new` themselves) returns the same result object.
    """
    if not path:
        return new
    if len(path) == 1 and type(root) is dict:
        elem = path[0]
        if type(elem) is str:
            # One field of a dict (the usual cell write): `_set` without the call.
            out = root.copy()  # (not `dict(root)`: see `_VALUE_DOC`)
            if new is MISSING:
                out.pop(elem, None)
            else:
                out[elem] = new
            return out
    global _LAST
    last = _LAST
    if last is not None:
        if last[0] is root and last[1] is path and last[2] is new:
            # The same write on the same value as the last call made (a store applying
            # the write its replica's transaction just made): the same result.
            return last[3]
        # Let go of the last value first: the lists it holds may then be reusable.
        _LAST = last = None
    if _LAST_ITEMS is not None:
        _forget_items()  # (`set_paths`' last values, likewise)
    out = _set(root, path, 0, new, where)
    _LAST = (root, path, new, out)
    return out


_LAST: tuple[Value, Path, Value, Value] | None = None
"""The last `set_path` call past its one-field shortcut: (root, path, new, result), the
same objects. Values are never mutated once made, so the same write of the same objects
has the same result: a store applying the write its replica just staged (the memory
store, whose head is the replica's value) shares the replica's new value instead of
copying the document again. One slot, so at most one extra value is kept alive."""

_EDGES: dict[int, tuple[list[Any], list[Any], int, int, int]] = {}
"""Per long list made from another by replacing one element (`_set`) or by a splice
(`spliced`), by the new list's id (the entry keeps both lists alive, so neither id is
reused meanwhile): (new list, the list it was made from, index, elements removed there,
elements put there). Bounded: the oldest entry goes first (so at most `_EDGES_KEPT`
older versions of long lists are kept alive for reuse)."""
_EDGES_KEPT = 8
_EDGE_MIN = 256
"""Lists shorter than this are copied as before: a copy costs less than the upkeep."""

_REUSE: Final = (
    sys.implementation.name == "cpython"
    and sys.version_info < (3, 14)
    and not sysconfig.get_config_var("Py_GIL_DISABLED")
)
"""Whether `sys.getrefcount` tells exactly who holds a list: CPython with the GIL, up to
3.13 (3.14 may leave some references on the interpreter's stack uncounted; check its
count of a local before allowing it here). Elsewhere every write copies."""


def _replaced(node: list[Any], elem: int, new: Value) -> list[Any]:
    """`node` with element `elem` (an index of it) replaced by `new`, as a new list (one
    nobody else holds). O(1) when a long list is written one element at a time, else
    O(N) C-level copying (`_reuse` tells how)."""
    if len(node) < _EDGE_MIN or not _REUSE:
        items = list(node)
        items[elem] = new
        return items
    reused = _reuse(node, elem, 1, (new,))
    if reused is None:
        items = list(node)
        items[elem] = new
    else:
        items = reused
    _edge(items, node, elem, 1, 1)
    return items


def element_writes(
    root: Value, ops: Sequence[tuple[Path, Value]]
) -> tuple[Path, list[Any], dict[int, Value]] | None:
    """(the path to the list, the list, {index: new element}) when `ops` (several leaf
    writes, in order) all replace elements of one long list of `root` reached through
    dicts only: the same path to it, int indices in range, nothing deleted. Else None.
    O(len(ops))."""
    if len(ops) < 2:
        return None
    first = ops[0][0]
    if not first:
        return None
    head = first[:-1]
    node = root
    for elem in head:
        if type(node) is not dict or type(elem) is not str:
            return None
        node = node.get(elem, MISSING)
    if type(node) is not list or len(node) < _EDGE_MIN:
        return None  # a short list: copied once per write, as before
    n = len(node)
    changes: dict[int, Value] = {}
    for path, value in ops:
        i = path[-1] if path else None
        if (
            type(i) is not int
            or not 0 <= i < n
            or value is MISSING
            or len(path) != len(first)
            or path[:-1] != head
        ):
            return None
        changes[i] = value
    return head, node, changes


def set_paths(root: Value, ops: Sequence[tuple[Path, Value]], *, where: str = "write") -> Value:
    """`set_path` of each (path, value) of `ops` in turn, from `root`.

    Several writes of elements of one long list (`element_writes`) make one new list,
    not one per write: a copy, or a version of it nobody holds brought up to date
    (`_reuse`). Like `set_path`, the same call made again with the same objects (in
    any order of the element writes) returns the same result object: a transaction's
    staged writes, its commit's `after` and the memory store's new head are one value.
    Raises what `set_path` raises."""
    found = element_writes(root, ops)
    if found is None:
        out = root
        for path, value in ops:
            out = set_path(out, path, value, where=where)
        return out
    return set_elements(root, found)


def set_elements(root: Value, found: tuple[Path, list[Any], dict[int, Value]]) -> Value:
    """`set_paths` of writes that `element_writes(root, ...)` found (`found`, its
    answer) to replace elements of one long list: for a caller that asked it already
    (the memory store, `Transaction.write_items`), so the writes are not checked twice.
    Never raises."""
    head, node, changes = found
    global _LAST, _LAST_ITEMS
    last = _LAST_ITEMS
    if last is not None:
        if last[0] is root and last[1] == head and len(last[2]) == len(changes):
            held = last[2]
            if all(held.get(i, MISSING) is v for i, v in changes.items()):
                return last[3]
        # Let go of the last values first (as `set_path` does): their lists may then
        # be reusable.
        _LAST_ITEMS = last = None
    _LAST = None
    items = _replaced_items(node, changes)
    out = _along(root, head, 0, items)
    _LAST_ITEMS = (root, head, changes, out)
    return out


_LAST_ITEMS: tuple[Value, Path, dict[int, Value], Value] | None = None
"""`set_paths`' `_LAST`: (root, path to the list, {index: element}, result)."""


def _forget_items() -> None:
    global _LAST_ITEMS
    _LAST_ITEMS = None


def _along(node: Value, head: Path, i: int, new: Value) -> Value:
    """`node` (dicts along `head`, checked by `element_writes`) with `new` at `head[i:]`,
    copying the dicts on the way."""
    if i == len(head):
        return new
    out = node.copy()  # (not `dict(node)`: see `_VALUE_DOC`)
    out[head[i]] = _along(node[head[i]], head, i + 1, new)
    return out


def _replaced_items(node: list[Any], changes: dict[int, Value]) -> list[Any]:
    """`node` with each element `i` of `changes` replaced by `changes[i]`, as a new list
    (one nobody else holds): `_replaced` of several elements at once, the range from the
    lowest to the highest of them counting as the changed span (`_edge`)."""
    lo = min(changes)
    hi = max(changes) + 1
    reused = None
    if _REUSE:
        span = node[lo:hi]
        for i, v in changes.items():
            span[i - lo] = v
        reused = _reuse(node, lo, hi - lo, span)
    if reused is None:
        items = list(node)
        for i, v in changes.items():
            items[i] = v
    else:
        items = reused
    if _REUSE:
        _edge(items, node, lo, hi - lo, hi - lo)
    return items


def spliced(old: list[Any], index: int, delete: int, added: list[Any]) -> list[Any]:
    """`old` with the `delete` elements from `index` on replaced by `added`, as a new list
    (one nobody else holds), noted as such (`note_splice`). O(N) C-level copying, or
    O(changed) plus a C-level move of the tail when a version nobody holds any more can
    be brought up to date instead (`_reuse`)."""
    reused = None
    if len(old) >= _EDGE_MIN and _REUSE:
        reused = _reuse(old, index, delete, added)
    if reused is None:
        new = old.copy()  # (one C-level copy, the tail moved in place)
        new[index : index + delete] = added
    else:
        new = reused
    if len(old) >= _EDGE_MIN and _REUSE:
        _edge(new, old, index, delete, len(added))
    note_splice(old, new, index, delete, len(added))
    return new


def _edge(new: list[Any], old: list[Any], index: int, delete: int, added: int) -> None:
    edges = _EDGES
    if len(edges) >= _EDGES_KEPT:
        # (Suppressed: another thread, a store's writer, changed the table meanwhile.)
        with contextlib.suppress(KeyError, RuntimeError, StopIteration):
            del edges[next(iter(edges))]
    edges[id(new)] = (new, old, index, delete, added)


def _reuse(node: list[Any], index: int, delete: int, added: Any) -> list[Any] | None:
    """The list `node` was made from (`_EDGES`), brought up to date in place (the
    change that made `node` from it, then `added` put in place of its `delete` elements
    from `index` on), when nothing but this module's caches holds it; else None (then
    nothing changed, but a cache entry about `node` may be gone).

    Writing one element of a long list, or splicing it, copies it; once the version it
    was copied from is held by nothing but `_EDGES` and the splice hints (every
    transaction, replica layer, store head, reader, caller and `_LAST` let go of it:
    `sys.getrefcount` counts them all), that version is made the next one instead of
    copying the current one and freeing the old one. So what anyone holds never
    changes: a list is reused only when nobody but this module can reach it, and the
    module's own entries about it go first."""
    edge = _EDGES.pop(id(node), None)
    if edge is None:
        return None
    spare, at, gone, put = edge[1], edge[2], edge[3], edge[4]
    del edge
    if len(spare) - gone + put != len(node):
        return None  # (cannot be: `node` was made from it so)
    # The module's own references to `spare`, each counted once (identity checked),
    # and the tables holding them (forgotten below if it is reused).
    mine = 2  # `spare` here and getrefcount's argument
    sid = id(spare)
    tables = []
    for table in (_EDGES, _SPLICES, _TYPES, _POSITIONS):
        held = table.get(sid)
        if held is not None and held[0] is spare:
            mine += 1
            tables.append(table)
    held = _SPLICES.get(id(node))  # (node, spare, ...): the splice that made `node`
    made = held is not None and held[0] is node and held[1] is spare
    held = None
    if made:
        mine += 1
    if sys.getrefcount(spare) != mine:
        return None  # someone holds it: it stays as it is
    # Nobody else can reach it: forget it here, then make it the next version.
    # (`pop`, not `del`: another thread may evict an entry meanwhile.)
    for table in tables:
        table.pop(sid, None)
    if made:
        _SPLICES.pop(id(node), None)
    if gone == 1 and put == 1:
        spare[at] = node[at]
    else:
        spare[at : at + gone] = node[at : at + put]
    if delete == 1 and len(added) == 1:
        spare[index] = added[0]
    else:
        spare[index : index + delete] = added
    return spare


class _ValueDocKeys:
    """Its instances' attribute table is the key table `_VALUE_DOC` shares (below)."""

    value: object


for _ in range(64):  # (each instance made shrinks the room kept for more attributes)
    _ValueDocKeys()
_value_doc_keys = _ValueDocKeys()
_value_doc_keys.value = None

_VALUE_DOC: Final[dict[str, Any]] = _value_doc_keys.__dict__
"""A document's value dict, `{"value": None}`, whose copies (`dict.copy`) share its key
table: a stored document is nearly always `{"value": ...}`, and the smallest dict CPython
makes of its own holds a table for five keys (184 bytes in all); a copy of this one holds
a reference to the shared table and room for one value (80 bytes: CPython's key-sharing
dicts, PEP 412). It is a plain `dict` in every other way: a key added to a copy gives that
copy a table of its own, and so does `dict(copy)` (272 bytes: so documents are copied with
`.copy()`, which keeps the sharing). Built from an instance's attributes after enough
instances were made for CPython to keep room for no key beyond "value"
(`_ValueDocKeys`); an interpreter that shares no key table makes ordinary dicts of it."""


def _set(node: Value, path: Path, i: int, new: Value, where: str) -> Value:
    elem = path[i]
    last = i == len(path) - 1
    t = type(node)
    if node is MISSING:
        if new is MISSING:
            return node
        if type(elem) is not str:
            raise InvalidValueError(
                f"{where}: cannot create list index {elem!r} at {_fmt_path(path[:i])}:"
                " nothing is there",
                path=path[:i],
                value=elem,
            )
        # A document's first value (`{"value": new}`): a copy of `_VALUE_DOC`, which
        # shares its key table (80 bytes, not 184).
        node = _VALUE_DOC if last and i == 0 and elem == "value" else {}
        t = dict
    if t is dict:
        if type(elem) is not str:
            raise InvalidValueError(
                f"{where}: {_fmt_path(path[:i])} is a dict; path element {elem!r} must be a str",
                path=path[:i],
                value=elem,
            )
        out = node.copy()  # (not `dict(node)`: see `_VALUE_DOC`)
        if last:
            if new is MISSING:
                out.pop(elem, None)
            else:
                out[elem] = new
        else:
            child = _set(node.get(elem, MISSING), path, i + 1, new, where)
            if child is MISSING:
                out.pop(elem, None)
            else:
                out[elem] = child
        return out
    if t is list:
        if type(elem) is not int or elem > len(node) or elem < 0:
            raise InvalidValueError(
                f"{where}: {_fmt_path(path[:i])} is a list of {len(node)};"
                f" index {elem!r} is not usable",
                path=path[:i],
                value=elem,
            )
        if elem < len(node) and (new is not MISSING or not last):
            # One element replaced (the usual write into a list): `_replaced`.
            return _replaced(
                node,
                elem,
                new if last else _set(node[elem], path, i + 1, new, where),
            )
        items = list(node)
        if last:
            if new is MISSING:
                if elem < len(items):
                    del items[elem]
            elif elem == len(items):
                items.append(new)
            else:
                items[elem] = new
        else:
            current = items[elem] if elem < len(items) else MISSING
            child = _set(current, path, i + 1, new, where)
            if elem == len(items):
                items.append(child)
            else:
                items[elem] = child
        return items
    raise InvalidValueError(
        f"{where}: {_fmt_path(path[:i])} holds a {type(node).__name__}, not a dict or list;"
        f" cannot write below it",
        path=path[:i],
        value=node,
    )


def thaw(value: Value) -> Value:
    """A deep copy a user may mutate freely (links are immutable and kept).  O(size)."""
    t = type(value)
    if t is dict:
        return {k: thaw(v) for k, v in value.items()}
    if t is list:
        return [thaw(v) for v in value]
    return value


# ---------------------------------------------------------------------- element ids

ELEMENT_KINDS: Final = -1
"""The last step of a read path that reads the *kinds* of a list's elements
(`Transaction.read_kinds`): never a position (positions are never negative)."""

ELEMENT_IDS: Final = "element_ids"
"""The document field holding its lists' element-id tables (beside `value`): per list,
keyed by `ids_key(path)` of its full-document path, `[next, [id, ...]]`."""


def ids_key(path: Path, doc: Value = None) -> str:
    """The key of the id table of the list at full-document `path`: the `repr` of its
    positional path (which tells a str from an int and cannot mix up two paths). A
    path through element ids needs `doc`, the whole document, to find the positions."""
    if doc is not None:
        path = positional(doc, path) or path
    return repr(tuple(path))


def _id_table(root: Value, path: Path) -> tuple[int, list[str]]:
    """(next counter, stored ids) of the list at `path` of document `root`: (0, []) when
    it has no table."""
    tables = root.get(ELEMENT_IDS, MISSING) if type(root) is dict else MISSING
    if type(tables) is not dict:
        return 0, []
    # Tables are kept by positional path: a path through element ids is translated.
    entry = tables.get(ids_key(path, root), MISSING)
    if type(entry) is not list or len(entry) != 2:
        return 0, []
    nxt, ids = entry
    return nxt, ids


def has_ids(root: Value, path: Path) -> bool:
    """Whether the list at `path` of document `root` has a stored id table."""
    tables = root.get(ELEMENT_IDS, MISSING) if type(root) is dict else MISSING
    return type(tables) is dict and ids_key(path, root) in tables


def element_ids(root: Value, path: Path, items: list[Any]) -> list[str]:
    """The element ids of `items`, the list at full-document `path` of document `root`.

    An id names one element of a list for as long as the list holds it, wherever a
    splice (`Transaction.splice`, `Cell.insert`, `Cell.remove`) moves it. A list that
    was never spliced has no table: its ids are `#0`, `#1`, ... by position. A splice
    stores the table, the ids of what it inserts drawn from a counter (`~<next>`)
    (a splice of a list that holds only links, and inserts only links, stores none
    while the list has none: a link is its own identity). Any other
    write keeps the ids by position: positions past the table get `#<next + k>`
    (deterministic, so every reader and every restart sees the same ids), and a
    shorter list keeps the first ones. Returns the stored list itself when it covers
    `items` exactly (do not mutate it). O(1) then, else O(N)."""
    nxt, ids = _id_table(root, path)
    n = len(items)
    if len(ids) == n:
        return ids
    if len(ids) > n:
        return ids[:n]
    return ids + [f"#{nxt + k}" for k in range(n - len(ids))]


def element_id_at(root: Value, path: Path, items: list[Any], i: int) -> str:
    """The id of element `i` of `items`, the list at `path` of document `root` (what
    `element_ids(...)[i]` is, in O(1))."""
    if type(root) is dict and ELEMENT_IDS not in root:
        return f"#{i}"  # no table: ids by position (what the end below gives)
    nxt, ids = _id_table(root, path)
    if i < len(ids) and i < len(items):
        return ids[i]
    return f"#{nxt + i - len(ids)}"


_POSITIONS: dict[int, tuple[list[str], dict[str, int] | int]] = {}
"""Per recently searched stored id table (by the table list's id; the entry keeps the
list alive, so that id is not reused meanwhile): how many entries the C-level scans
of it went through so far, then, once that is more than its length, the position of
each id. Bounded."""
_POSITIONS_KEPT = 64


def element_position(root: Value, path: Path, items: list[Any], eid: str) -> int | None:
    """The position of the element `eid` in `items`, the list at full-document `path`
    of document `root`, or None when the list holds no such element. O(1) after the
    first lookup in a stored table (O(N) C-level, once per table)."""
    if type(root) is dict and ELEMENT_IDS not in root:
        # No table in the document (no list of it was spliced): ids by position, what
        # the end of this function decides, without `_id_table`. Every read of an
        # element of a never-spliced list through its id comes here.
        if eid[:1] != "#" or not eid[1:].isdigit():
            return None
        pos = int(eid[1:])
        return pos if pos < len(items) else None
    nxt, ids = _id_table(root, path)
    n = len(items)
    if ids:
        held = _POSITIONS.get(id(ids))
        if held is None or held[0] is not ids:
            if len(_POSITIONS) >= _POSITIONS_KEPT:
                _POSITIONS.clear()
            held = (ids, 0)
        index = held[1]
        if isinstance(index, int):
            # Scan (`list.index` stops at the id: a splice makes a new table, and the
            # reads that follow it are mostly of the element it added, at the front)
            # until the scans went through more entries than an index would hold.
            at: int | None
            try:
                found = ids.index(eid)
            except ValueError:
                at = None
                index += len(ids)
            else:
                at = found
                index += found + 1
            if index <= len(ids):
                _POSITIONS[id(ids)] = (ids, index)
            else:
                _POSITIONS[id(ids)] = (ids, dict(zip(ids, range(len(ids)), strict=True)))
        else:
            at = index.get(eid)
        if at is not None:
            return at if at < n else None
    if eid[:1] != "#" or not eid[1:].isdigit():
        return None
    k = int(eid[1:]) - nxt
    if k < 0:
        return None
    at = len(ids) + k
    return at if at < n else None


def spliced_ids(
    root: Value, path: Path, items: list[Any], index: int, delete: int, added: int
) -> list[Any]:
    """The id table entry of the list at `path` (now `items`, before the splice) after
    replacing `delete` elements from `index` on by `added` new ones, which get fresh
    ids. O(N) C-level copying. The new id list is noted as spliced (`splice_ends`)."""
    nxt, ids = _id_table(root, path)
    current = element_ids(root, path, items)
    nxt += len(current) - len(ids) if len(current) > len(ids) else 0
    new = spliced(current, index, delete, [f"~{nxt + k}" for k in range(added)])
    return [nxt + added, new]


# ---------------------------------------------------------------------- splice hints

_SPLICES: dict[int, tuple[list[Any], list[Any], int, int]] = {}
"""Per list made by a recent splice in this process (by the new list's id; the entry
keeps both lists alive, so neither id is reused meanwhile): (new list, the list it was
made from, index, elements inserted). Bounded: the oldest entry goes first."""
_SPLICES_KEPT = 16


def note_splice(old: list[Any], new: list[Any], index: int, delete: int, added: int) -> None:
    """Remember that `new` is `old` with `delete` elements from `index` on replaced by
    `added` others, its kept elements the same objects (`Transaction.splice` makes it so):
    `splice_ends(old, new)` then answers without comparing. O(1). (Short lists too: a
    dict entry costs less than a branch on the length would save, and every list test
    then runs the same way as a long list.)"""
    if len(_SPLICES) >= _SPLICES_KEPT:
        del _SPLICES[next(iter(_SPLICES))]
    _SPLICES[id(new)] = (new, old, index, added)


def splice_ends(old: list[Any], new: list[Any]) -> tuple[int, int] | None:
    """(prefix, suffix) when `new` was made from `old` itself by one splice in this
    process: the elements before the splice point and after the inserted ones, which
    are the same objects at the same distance from each end in both lists (so equal,
    though a longer common prefix or suffix may exist). None when unknown (another
    process's change, several changes in between, a splice noted too long ago):
    compare then. O(1).

    What keeps a splice O(changed) at every N: the reader index and the list
    coordinators take their common ends from here instead of comparing N elements."""
    held = _SPLICES.get(id(new))
    if held is None or held[0] is not new or held[1] is not old:
        return None
    index, added = held[2], held[3]
    return index, len(new) - index - added


_TYPES: dict[int, tuple[list[Any], frozenset[type]]] = {}
"""Per recently seen list (by its id; the entry keeps it alive): the set of its
elements' types. Bounded: the oldest entry goes first."""
_TYPES_KEPT = 16


def element_types(items: list[Any]) -> frozenset[type]:
    """The types of the elements of `items` (a stored list value: never mutated). O(1) for
    a list seen lately or made by a splice of a list of one type with elements of that
    type (`note_types`), else one C-level pass."""
    held = _TYPES.get(id(items))
    if held is not None and held[0] is items:
        return held[1]
    kinds = frozenset(map(type, items))
    _keep_types(items, kinds)
    return kinds


def _keep_types(items: list[Any], kinds: frozenset[type]) -> None:
    if len(_TYPES) >= _TYPES_KEPT:
        del _TYPES[next(iter(_TYPES))]
    _TYPES[id(items)] = (items, kinds)


def note_types(old: list[Any], new: list[Any], added: list[Any]) -> None:
    """`new` is `old` spliced with `added` inserted: when `old` is known to hold one type
    only and every added element is of that type, so is `new` (exactly; a removal never
    adds a type). O(len(added))."""
    held = _TYPES.get(id(old))
    if held is None or held[0] is not old or len(held[1]) != 1:
        return
    kinds = held[1]
    (kind,) = kinds
    for x in added:
        if type(x) is not kind:
            return
    _keep_types(new, kinds if new else frozenset())


def positional(root: Value, path: Path) -> Path | None:
    """`path` with each element-id step replaced by the element's position in document
    `root`, or None when it has none or names an element the list does not hold."""
    out: list[Any] | None = None
    node = root
    for i, elem in enumerate(path):
        t = type(node)
        if t is list and type(elem) is str:
            at = element_position(root, path[:i], node, elem)
            if at is None:
                return None
            if out is None:
                out = list(path[:i])
            out.append(at)
            node = node[at]
            continue
        if out is not None:
            out.append(elem)
        if t is dict and type(elem) is str:
            node = node.get(elem, MISSING)
        elif t is list and type(elem) is int and elem < len(node):
            node = node[elem]
        else:
            node = MISSING
    return None if out is None else tuple(out)
