"""P-TRIG: the fast trigger rule equals the rule spelled out, and its basic laws."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from cells import MISSING, set_path
from scheduler._readers import changed_at, changed_at_reference

KEYS = st.sampled_from(["a", "b", "c"])
ELEMS = st.one_of(KEYS, st.integers(min_value=0, max_value=2))
PATHS = st.lists(ELEMS, max_size=3).map(tuple)
LEAVES = st.one_of(st.none(), st.booleans(), st.integers(-2, 2), st.sampled_from(["x", "y"]))
VALUES = st.recursive(
    LEAVES,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(KEYS, inner, max_size=3)),
    max_leaves=8,
)
DOCS = st.one_of(st.just(MISSING), VALUES)


def _edit(doc: Any, path: tuple[Any, ...], value: Any) -> Any:
    try:
        return set_path(doc, path, value)
    except Exception:
        return doc


@given(DOCS, PATHS, VALUES, PATHS, st.booleans())
def test_fast_rule_equals_reference(
    doc: Any, wpath: Any, value: Any, rpath: Any, shallow: bool
) -> None:
    after = _edit(doc, wpath, value)  # shares untouched subtrees, like real writes
    assert changed_at_reference(doc, after, rpath, shallow=shallow) == changed_at(
        doc, after, rpath, shallow=shallow
    )


@given(DOCS, DOCS, PATHS, st.booleans())
def test_fast_rule_equals_reference_on_unrelated_documents(
    before: Any, after: Any, path: Any, shallow: bool
) -> None:
    assert changed_at_reference(before, after, path, shallow=shallow) == changed_at(
        before, after, path, shallow=shallow
    )


@given(DOCS, PATHS, st.booleans())
def test_equal_values_never_trigger(doc: Any, path: Any, shallow: bool) -> None:
    assert not changed_at(doc, doc, path, shallow=shallow)


@given(DOCS, DOCS, PATHS)
def test_shallow_trigger_implies_deep_trigger(before: Any, after: Any, path: Any) -> None:
    if changed_at(before, after, path, shallow=True):
        assert changed_at(before, after, path, shallow=False)
