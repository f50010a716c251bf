"""Change patches: the RFC 6902 JSON Patch operations from one plain value to another.

`patch_ops(old, new)` is what `sink_patches` delivers after a change: a list of
operations (`add`, `remove`, `replace`, `move`) with RFC 6901 JSON Pointer
paths that, applied in order to `old`, give a value equal to `new`
(`value_equal`). Both are plain data as `get()` returns it, or the stored
(immutable) values behind it.

Cost is what changed, not the whole value, as far as sharing allows: stored
values are never changed in place and a write copies only along its path, so
an unchanged subtree is the same object on both sides and is skipped with an
identity test. A list is compared from both ends first (identity, then
equality), so an edit, insert or removal at one place yields operations at
that place only. The middle that remains is walked with one element of
look-ahead on each side, so an insert or a removal there is one operation and
an element edited beside it is diffed in place. If container elements of the
middle appear on both sides in another order, they moved: matched by identity
(a linked element whose target did not change, an inline element a splice
kept), else by value (middles up to `VALUE_KEY_LIMIT` elements: materialized
elements are fresh equal copies), and delivered as `move` operations. A middle
too large to search for moves (over `MOVE_SEARCH_LIMIT` element pairs) is
walked position by position: still correct, more operations.

Invariants
- apply(old, patch_ops(old, new)) == new, for every pair of plain values;
- old == new (value_equal) gives no operation;
- an operation's `value` is a fresh copy (the receiver may change it).
Not here: applying patches (a view does that), or reading values (`read_value`).
"""

from __future__ import annotations

import collections
import itertools
import operator
from collections.abc import Callable, Iterable
from typing import Any, Final

import msgspec

from ._values import MISSING, Value, thaw, value_equal

MOVE_SEARCH_LIMIT: Final = 4_000_000
"""Element pairs (old middle x new middle) past which a list is not searched for moves."""

VALUE_KEY_LIMIT: Final = 2_000
"""Longest list middle whose elements are keyed by value when none is shared by identity."""

Op = dict[str, Any]


def pointer(path: tuple[str | int, ...]) -> str:
    """The RFC 6901 JSON Pointer of `path` ("" for the whole value; `~` and `/` escaped)."""
    return "".join("/" + _escape(p) for p in path)


def _escape(elem: str | int) -> str:
    if type(elem) is int:
        return str(elem)
    text = str(elem)
    if "~" in text or "/" in text:
        text = text.replace("~", "~0").replace("/", "~1")
    return text


def patch_ops(old: Value, new: Value) -> list[Op]:
    """The JSON Patch operations turning `old` into `new` (empty if they are equal).

    An absent value (`MISSING`) counts as `None`. O(changed parts + positions
    scanned): identical subtrees cost one identity test each.
    """
    if old is MISSING:
        old = None
    if new is MISSING:
        new = None
    ops: list[Op] = []
    _diff(old, new, "", ops)
    return ops


def patch_ops_at(old: Value, new: Value, paths: Iterable[tuple[str | int, ...]]) -> list[Op]:
    """`patch_ops(old, new)` when `old` and `new` are known to differ only at or below
    `paths` (what `Materializer.changes` reports): only those places are diffed, so
    an edit of one element of a 10,000-element list costs that element, not a pass
    over the list. A path may end at a dict key present on one side only (an `add`
    or `remove`); every element before the last must lead to a container present on
    both sides, as it does when only the places themselves changed. Operations come
    in the order the places have in `new`, whatever order `paths` has.
    O(len(paths) · depth · size of the dicts along them + changed parts).
    """
    if old is MISSING:
        old = None
    if new is MISSING:
        new = None
    ops: list[Op] = []
    done: set[tuple[str | int, ...]] = set()
    # In the order the places have in the new value (as `patch_ops` would walk it,
    # whatever order they were found in), so a place comes before the places inside
    # it, which it covers.
    for path in sorted(set(paths), key=lambda p: _position(new, old, p)):
        if any(path[:i] in done for i in range(len(path) + 1)):
            continue
        done.add(path)
        a, b = old, new
        for elem in path:
            a = _child(a, elem)
            b = _child(b, elem)
        where = pointer(path)
        if a is MISSING and b is MISSING:
            continue
        if a is MISSING:
            ops.append({"op": "add", "path": where, "value": thaw(b)})
        elif b is MISSING:
            ops.append({"op": "remove", "path": where})
        else:
            _diff(a, b, where, ops)
    return ops


def _position(new: Value, old: Value, path: tuple[str | int, ...]) -> tuple[tuple[int, str], ...]:
    """Where `path` sits in `new`: per level, the list index or the dict key's rank
    (a key only in `old` ranks after `new`'s keys, in `old`'s order). O(path length ·
    size of the dicts along it)."""
    out: list[tuple[int, str]] = []
    for elem in path:
        if type(new) is list and type(elem) is int:
            out.append((elem, ""))
        elif type(new) is dict or type(old) is dict:
            keys = list(new) if type(new) is dict else []
            if elem in keys:
                out.append((keys.index(elem), ""))
            else:
                gone = list(old) if type(old) is dict else []
                rank = gone.index(elem) if elem in gone else len(gone)
                out.append((len(keys) + rank, str(elem)))
        else:
            out.append((0, str(elem)))
        new, old = _child(new, elem), _child(old, elem)
    return tuple(out)


def _child(v: Value, elem: str | int) -> Value:
    t = type(v)
    if t is dict:
        return v.get(elem, MISSING)
    if t is list and type(elem) is int and 0 <= elem < len(v):
        return v[elem]
    return MISSING


def _same(a: Value, b: Value) -> bool:
    return a is b or value_equal(a, b)


def _diff(a: Value, b: Value, at: str, ops: list[Op]) -> None:
    if a is b:
        return
    ta, tb = type(a), type(b)
    if ta is dict and tb is dict:
        for k, va in a.items():
            vb = b.get(k, MISSING)
            if vb is MISSING:
                ops.append({"op": "remove", "path": f"{at}/{_escape(k)}"})
            elif va is not vb:
                _diff(va, vb, f"{at}/{_escape(k)}", ops)
        for k, vb in b.items():
            if k not in a:
                ops.append({"op": "add", "path": f"{at}/{_escape(k)}", "value": thaw(vb)})
        return
    if ta is list and tb is list:
        _diff_list(a, b, at, ops)
        return
    if not value_equal(a, b):
        ops.append({"op": "replace", "path": at, "value": thaw(b)})


def _run_of_same(xs: Iterable[Value], ys: Iterable[Value], n: int, at: Callable[[int], Any]) -> int:
    """How many of the first `n` pairs of `xs` and `ys` are the same, from the start.

    Identity is tested in C over all of them at once (`map(operator.is_)`), and a
    pair that is not identical is compared by value (`at(i)` gives it): a list whose
    unchanged elements are shared costs one C pass, not a Python step per element.
    """
    flags = list(map(operator.is_, itertools.islice(xs, n), itertools.islice(ys, n)))
    i = 0
    while True:
        try:
            i = flags.index(False, i)
        except ValueError:
            return n
        x, y = at(i)
        if not value_equal(x, y):
            return i
        i += 1


def _diff_list(a: list[Value], b: list[Value], at: str, ops: list[Op]) -> None:
    n, m = len(a), len(b)
    lim = min(n, m)
    start = _run_of_same(a, b, lim, lambda i: (a[i], b[i]))
    tail = _run_of_same(
        reversed(a), reversed(b), lim - start, lambda i: (a[n - 1 - i], b[m - 1 - i])
    )
    end_a, end_b = n - tail, m - tail
    if start == end_a and start == end_b:
        return
    mid_a, mid_b = a[start:end_a], b[start:end_b]
    if (len(mid_a) > 1 or len(mid_b) > 1) and len(mid_a) * len(mid_b) <= MOVE_SEARCH_LIMIT:
        keys = _reorder_keys(mid_a, mid_b)
        if keys is not None:
            _diff_keyed(mid_a, mid_b, keys[0], keys[1], start, at, ops)
            return
    _diff_aligned(mid_a, mid_b, start, at, ops)


def _diff_aligned(
    mid_a: list[Value], mid_b: list[Value], start: int, at: str, ops: list[Op]
) -> None:
    """The middle of a list, walked with one element of look-ahead on each side.

    Where the next old element equals the new one here, the old one here was
    removed; where the old one here equals the next new one, the new one here was
    added; otherwise the element here changed and is diffed in place. So one
    insert or removal together with edits elsewhere in the middle costs one
    operation, not a replace of every position after it. O(len) comparisons.
    """
    i = j = 0
    k = start  # the receiver's index of the position being decided
    na, nb = len(mid_a), len(mid_b)
    while i < na and j < nb:
        x, y = mid_a[i], mid_b[j]
        if x is y:
            i, j, k = i + 1, j + 1, k + 1
        elif na - i > nb - j and i + 1 < na and _same(mid_a[i + 1], y):
            ops.append({"op": "remove", "path": f"{at}/{k}"})
            i += 1
        elif nb - j > na - i and j + 1 < nb and _same(x, mid_b[j + 1]):
            ops.append({"op": "add", "path": f"{at}/{k}", "value": thaw(y)})
            j, k = j + 1, k + 1
        else:
            _diff(x, y, f"{at}/{k}", ops)
            i, j, k = i + 1, j + 1, k + 1
    for _ in range(i, na):
        ops.append({"op": "remove", "path": f"{at}/{k}"})
    for y in mid_b[j:]:
        ops.append({"op": "add", "path": f"{at}/{k}", "value": thaw(y)})
        k += 1


def _is_container(v: Value) -> bool:
    t = type(v)
    return t is dict or t is list


Key = object
"""What identifies a list element across the two sides: a container's identity or
encoded value, a scalar's encoded value."""


def _value_key(v: Value) -> Key:
    try:
        return msgspec.json.encode(v, order="sorted")
    except (TypeError, ValueError, msgspec.EncodeError):
        return object()  # (not plain data: matches nothing, still diffed correctly)


def _identity_key(v: Value) -> Key:
    return id(v) if _is_container(v) else _value_key(v)


def _reorder_keys(mid_a: list[Value], mid_b: list[Value]) -> tuple[list[Key], list[Key]] | None:
    """Keys for both middles if elements appear on both sides in another order (a
    move); None when nothing moved (the aligned walk is then the better diff).

    Containers by identity first (a linked element whose target did not change, an
    inline element a splice kept); then, for middles of at most `VALUE_KEY_LIMIT`
    elements, by value (a materialized element is a fresh but equal copy each time).
    """
    ka = [_identity_key(v) for v in mid_a]
    kb = [_identity_key(v) for v in mid_b]
    if _reordered(ka, kb):
        return ka, kb
    if max(len(mid_a), len(mid_b)) > VALUE_KEY_LIMIT:
        return None
    if not any(map(_is_container, mid_a)) or not any(map(_is_container, mid_b)):
        return None
    ka = [_value_key(v) for v in mid_a]
    kb = [_value_key(v) for v in mid_b]
    if _reordered(ka, kb):
        return ka, kb
    return None


def _match(ka: list[Key], kb: list[Key]) -> list[int]:
    """For each new position, the old position of the same key (first unused), or -1."""
    positions: dict[Key, collections.deque[int]] = {}
    for i, k in enumerate(ka):
        positions.setdefault(k, collections.deque()).append(i)
    out: list[int] = []
    for k in kb:
        found = positions.get(k)
        out.append(found.popleft() if found else -1)
    return out


def _reordered(ka: list[Key], kb: list[Key]) -> bool:
    """Do the elements both sides share appear in another relative order on the new side?"""
    last = -1
    for i in _match(ka, kb):
        if i >= 0:
            if i < last:
                return True
            last = i
    return False


def _increasing(seq: list[int]) -> set[int]:
    """The values of a longest strictly increasing subsequence of `seq` (ignoring -1).
    O(n log n)."""
    tails: list[int] = []  # tails[l]: index in seq of the smallest tail of a run of l+1
    prev = [-1] * len(seq)
    for idx, v in enumerate(seq):
        if v < 0:
            continue
        lo = _bisect(seq, tails, v)
        if lo > 0:
            prev[idx] = tails[lo - 1]
        if lo == len(tails):
            tails.append(idx)
        else:
            tails[lo] = idx
    out: set[int] = set()
    at = tails[-1] if tails else -1
    while at >= 0:
        out.add(seq[at])
        at = prev[at]
    return out


def _bisect(seq: list[int], tails: list[int], v: int) -> int:
    lo, hi = 0, len(tails)
    while lo < hi:
        mid = (lo + hi) // 2
        if seq[tails[mid]] < v:
            lo = mid + 1
        else:
            hi = mid
    return lo


def _diff_keyed(
    mid_a: list[Value],
    mid_b: list[Value],
    keys_a: list[Key],
    keys_b: list[Key],
    start: int,
    at: str,
    ops: list[Op],
) -> None:
    """The middle of a list whose elements moved: the fewest `move`s, then diffs in place.

    1. Match new positions to old ones by key (first unused); remove the old
       elements nothing matched, from the back, so earlier indices stay valid.
    2. The matched elements on a longest run that kept its order stay put; every
       other matched element is moved, and every unmatched new element added,
       right after the element that precedes it in the new list, in new-list
       order. (Stay elements keep their relative order, and each placed element
       lands right after its predecessor, so the result is the new order.)
    3. Each position now holds the old element matched to it: diff it with the
       new one in place (an equal key does not have to mean an equal value).
    O(n log n + n x moved) for a middle of n elements.
    """
    match = _match(keys_a, keys_b)
    used = {i for i in match if i >= 0}
    current = list(range(len(mid_a)))  # tokens: old positions; an add is -1 - its new position
    for i in range(len(mid_a) - 1, -1, -1):
        if i not in used:
            ops.append({"op": "remove", "path": f"{at}/{start + i}"})
            del current[i]
    stay = _increasing(match)
    for j, i in enumerate(match):
        if i >= 0 and i in stay:
            continue
        target = current.index(match[j - 1] if match[j - 1] >= 0 else -j) + 1 if j else 0
        if i >= 0:
            k = current.index(i)
            current.pop(k)
            if k < target:
                target -= 1
            current.insert(target, i)
            if k != target:
                ops.append(
                    {"op": "move", "from": f"{at}/{start + k}", "path": f"{at}/{start + target}"}
                )
        else:
            current.insert(target, -1 - j)
            ops.append({"op": "add", "path": f"{at}/{start + target}", "value": thaw(mid_b[j])})
    for j, tok in enumerate(current):
        if tok >= 0 and mid_a[tok] is not mid_b[j]:
            _diff(mid_a[tok], mid_b[j], f"{at}/{start + j}", ops)
