"""Properties of values: equality, canonical bytes and ids, normalize, the JSON codec, paths.

P-VAL-1  `value_equal` is an equivalence (reflexive including nan, symmetric, transitive).
P-VAL-2  `canonical_bytes` / `entity_id` agree with `value_equal`: equal <=> same bytes.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from hypothesis import given
from hypothesis import strategies as st

from cells import (
    MISSING,
    Link,
    Path,
    canonical_bytes,
    decode_json,
    encode_json,
    entity_id,
    get_path,
    normalize,
    set_path,
    value_equal,
)

T = TypeVar("T")
Draw = Callable[[st.SearchStrategy[T]], T]

MAX_INT = 2**63 - 1
MIN_INT = -(2**63)

# --------------------------------------------------------------------------- strategies

# Numbers where the int/float and sign-of-zero rules bite.
EDGE_NUMBERS = st.sampled_from(
    [
        0,
        0.0,
        -0.0,
        1,
        1.0,
        -1.0,
        2**53,
        float(2**53),
        2**53 + 1,
        2**60,
        float(2**60),
        10**18,
        1e18,
        MAX_INT,
        MIN_INT,
        float(MIN_INT),
        float(2**63),
        0.5,
        5e-324,
    ]
)

keys = st.one_of(
    st.sampled_from(["a", "b", "c", "/", "", "~", "num@1", "link@1", "dict@1"]),
    st.text(max_size=6),
)

links = st.builds(
    Link,
    space=st.sampled_from(["sp", "other"]),
    id=st.sampled_from(["a", "b"]),
    scope=st.sampled_from(["space", "user", "session"]),
    path=st.lists(st.one_of(st.sampled_from(["x", "y"]), st.integers(0, 2)), max_size=2).map(tuple),
)

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=MIN_INT, max_value=MAX_INT),
    st.floats(allow_nan=False, allow_infinity=False),
    EDGE_NUMBERS,
    st.text(max_size=8),
    links,
)
"""Scalars a write accepts (finite floats only; text without lone surrogates)."""

values = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(keys, children, max_size=4),
    ),
    max_leaves=16,
)
"""Normalized-or-not JSON-like values (what a caller may hand to a write)."""

comparable_values = st.recursive(
    st.one_of(scalars, st.sampled_from([float("nan"), math.inf, -math.inf])),
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(keys, children, max_size=4),
    ),
    max_leaves=16,
)
"""Like `values`, plus the non-finite floats: writes refuse them, but `value_equal`
still compares them (a file written before they were refused may hold them)."""

raw_values = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.lists(children, max_size=4).map(tuple),
        st.dictionaries(keys, children, max_size=4),
    ),
    max_leaves=16,
)
"""Like `values`, plus tuples: anything `normalize` accepts."""


# --------------------------------------------------------------------------- helpers


def perturb(draw: Draw[Any], v: Any, *, may_change: bool) -> Any:
    """A rebuilt copy of `v` in other spellings; with `may_change`, sometimes a different value.

    Equal spellings: dict keys reordered, ints as the float they equal and back, a fresh
    nan object, a copied link. Changes: bool <-> int, 0.0 <-> -0.0, a nudged number,
    a dropped dict key or list item.
    """
    t = type(v)
    change = may_change and draw(st.integers(0, 9)) == 0
    if t is dict:
        items = draw(st.permutations(list(v.items())))
        if change and items:
            items = items[1:]
        return {k: perturb(draw, x, may_change=may_change) for k, x in items}
    if t is list:
        out = [perturb(draw, x, may_change=may_change) for x in v]
        if change and out:
            out.pop(draw(st.integers(0, len(out) - 1)))
        return out
    if t is bool:
        return int(v) if change else v
    if t is int:
        if change:
            nudged = v + 1 if v < MAX_INT else v - 1  # stay inside the 64-bit range
            negated = -0.0 if v == 0 else (-v if v != MIN_INT else MAX_INT)
            return draw(st.sampled_from([nudged, bool(v & 1), negated]))
        if draw(st.booleans()) and float(v) == v:
            return float(v)
        return v
    if t is float:
        if v != v:
            return float("nan")
        if change:
            return draw(st.sampled_from([-v, v + 1.0, math.nextafter(v, 0.0)]))
        if draw(st.booleans()) and v.is_integer() and MIN_INT <= v <= MAX_INT and v != 0:
            return int(v)
        if v == 0 and math.copysign(1.0, v) > 0 and draw(st.booleans()):
            return 0
        return v
    if t is Link:
        return Link(v.space, v.id, v.scope, tuple(v.path))
    return v


def strict_equal(a: Any, b: Any) -> bool:
    """Same types all the way down (so `1` is not `1.0`), with nan equal to nan."""
    if type(a) is not type(b):
        return False
    if type(a) is float:
        if a != a:
            return bool(b != b)
        return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
    if type(a) is dict:
        return a.keys() == b.keys() and all(strict_equal(a[k], b[k]) for k in a)
    if type(a) in (list, tuple):
        return len(a) == len(b) and all(strict_equal(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def all_paths(v: Any, prefix: Path = ()) -> Iterator[Path]:
    """The path of every node of `v`, the root included."""
    yield prefix
    if type(v) is dict:
        for k, x in v.items():
            yield from all_paths(x, (*prefix, k))
    elif type(v) is list:
        for i, x in enumerate(v):
            yield from all_paths(x, (*prefix, i))


def is_prefix(p: Path, q: Path) -> bool:
    return q[: len(p)] == p


# --------------------------------------------------------------------------- P-VAL-1


@given(comparable_values, st.data())
def test_value_equal_is_reflexive_across_spellings(v: Any, data: st.DataObject) -> None:
    assert value_equal(v, v)
    assert value_equal(v, copy.deepcopy(v))
    assert value_equal(v, perturb(data.draw, v, may_change=False))


@given(comparable_values, st.data())
def test_value_equal_is_symmetric(a: Any, data: st.DataObject) -> None:
    b = perturb(data.draw, a, may_change=True)
    assert value_equal(a, b) == value_equal(b, a)
    other = data.draw(comparable_values)
    assert value_equal(a, other) == value_equal(other, a)


@given(comparable_values, st.data())
def test_value_equal_is_transitive(a: Any, data: st.DataObject) -> None:
    b = perturb(data.draw, a, may_change=True)
    c = perturb(data.draw, b, may_change=True)
    if value_equal(a, b) and value_equal(b, c):
        assert value_equal(a, c)
    if value_equal(a, b) and not value_equal(b, c):
        assert not value_equal(a, c)


# --------------------------------------------------------------------------- P-VAL-2


@given(values, st.data())
def test_canonical_bytes_agree_with_value_equal(a: Any, data: st.DataObject) -> None:
    b = perturb(data.draw, a, may_change=True)
    assert value_equal(a, b) == (canonical_bytes(a) == canonical_bytes(b))
    assert value_equal(a, b) == (entity_id(a) == entity_id(b))


@given(values, values)
def test_canonical_bytes_agree_with_value_equal_on_unrelated_values(a: Any, b: Any) -> None:
    assert value_equal(a, b) == (canonical_bytes(a) == canonical_bytes(b))


@given(raw_values)
def test_canonical_bytes_ignore_how_a_value_is_spelled(v: Any) -> None:
    n = normalize(v)
    assert canonical_bytes(v) == canonical_bytes(n)
    assert entity_id(v) == entity_id(n)


@given(st.integers(min_value=MIN_INT, max_value=MAX_INT))
def test_an_int_and_the_float_equal_to_it_have_one_id(n: int) -> None:
    f = float(n)
    assert value_equal(n, f) == (entity_id(n) == entity_id(f))


# --------------------------------------------------------------------------- normalize and codec


@given(raw_values)
def test_normalize_is_idempotent(v: Any) -> None:
    once = normalize(v)
    assert strict_equal(once, normalize(once))


@given(values)
def test_normalize_keeps_the_value(v: Any) -> None:
    assert value_equal(normalize(v), v)


@given(raw_values)
def test_normalize_never_mutates_its_input(v: Any) -> None:
    before = copy.deepcopy(v)
    normalize(v)
    assert strict_equal(before, v)


@given(raw_values)
def test_json_round_trips(v: Any) -> None:
    stored = normalize(v)
    back = decode_json(encode_json(stored))
    assert value_equal(stored, back)
    assert canonical_bytes(stored) == canonical_bytes(back)


# --------------------------------------------------------------------------- paths


def _targets(root: Any) -> list[Path]:
    """Existing paths, plus one new dict key under each dict and an append under each list."""
    out: list[Path] = []
    for p in all_paths(root):
        out.append(p)
        node = get_path(root, p)
        if type(node) is dict:
            fresh = "new"
            while fresh in node:
                fresh += "+"
            out.append((*p, fresh))
        elif type(node) is list:
            out.append((*p, len(node)))
    return out


@given(values, values, st.data())
def test_set_then_get_returns_the_value_and_leaves_the_rest(
    root: Any, new: Any, data: st.DataObject
) -> None:
    root, new = normalize(root), normalize(new)
    target = data.draw(st.sampled_from(_targets(root)))
    snapshot = copy.deepcopy(root)
    out = set_path(root, target, new)
    assert value_equal(new, get_path(out, target))
    for q in all_paths(snapshot):
        if not is_prefix(q, target) and not is_prefix(target, q):
            assert value_equal(get_path(snapshot, q), get_path(out, q)), q
    assert strict_equal(snapshot, root)  # the input was not mutated


@given(values, st.data())
def test_deleting_a_dict_key_leaves_the_rest(root: Any, data: st.DataObject) -> None:
    root = normalize(root)
    deletable = [p for p in all_paths(root) if p and type(get_path(root, p[:-1])) is dict]
    if not deletable:
        return
    target = data.draw(st.sampled_from(deletable))
    snapshot = copy.deepcopy(root)
    out = set_path(root, target, MISSING)
    assert MISSING is get_path(out, target)
    for q in all_paths(snapshot):
        if not is_prefix(q, target) and not is_prefix(target, q):
            assert value_equal(get_path(snapshot, q), get_path(out, q)), q
    assert strict_equal(snapshot, root)
