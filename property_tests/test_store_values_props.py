"""Every JSON-like value round-trips exactly through every store, whatever its keys.

P-VAL-RT: a sequence of writes, each either of a whole cell value or at a path below
it, with adversarial dict keys ("/", "", "~", the codec's tag spellings, unicode) and
values (tag look-alikes, -0.0, links, unicode text), committed one by one, leaves in
the store exactly the fold of the writes (`set_path` over the normalized values):
- on a `MemoryStore`, read by a fresh replica;
- on a `SQLiteStore`, read after closing and reopening the file, and by a second
  store object on the same file that learned every commit by polling (a foreign
  poller must never stop because of a value).
A write the fold refuses (a path through a scalar) must be refused by the
transaction too, with nothing staged.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from cells import (
    MISSING,
    InvalidValueError,
    Link,
    MemoryStore,
    Replica,
    Space,
    SQLiteStore,
    normalize,
    set_path,
    value_equal,
)

TAGS = ["/", "", "~", "~0", "~1", "num@1", "link@1", "dict@1", "esc@1", "NaN", "-0"]

keys = st.one_of(st.sampled_from(TAGS), st.text(max_size=4))
"""Dict keys and path elements: the codec's tag spellings beside arbitrary unicode."""

links = st.builds(
    Link,
    space=st.sampled_from(["sp", "/"]),
    id=st.sampled_from(["a", "num@1"]),
    scope=st.sampled_from(["space", "user", "session"]),
    path=st.lists(keys, max_size=2).map(tuple),
)

look_alikes = st.sampled_from(
    [
        {"/": {"num@1": "NaN"}},
        {"/": {"num@1": "-0"}},
        {"num@1": "Infinity"},
        {"/": {"link@1": {"space": "sp", "id": "a", "scope": "space", "path": []}}},
        {"/": {"dict@1": {"/": 1}}},
        {"/": "x"},
        {"/": None},
        {"/": []},
    ]
)
"""Values spelled like the codec's tags (each must read back as itself)."""

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.just(-0.0),
    st.text(max_size=6),
    links,
    look_alikes,
)

values = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=3),
        st.dictionaries(keys, children, max_size=3),
    ),
    max_leaves=10,
)

writes = st.lists(
    st.tuples(st.lists(keys, max_size=3).map(tuple), values),
    min_size=1,
    max_size=5,
)
"""(path below the cell, value): the empty path writes the whole value."""


def _apply(space: Space, cells: list[str], ops: list[tuple[tuple[str, ...], Any]]) -> Any:
    """Write `ops` to each document in `cells` through `space`; return the expected document."""
    model: Any = MISSING
    for path, value in ops:
        full = ("value", *path)
        try:
            expected = set_path(model, full, normalize(value))
        except InvalidValueError:
            expected = None
        for name in cells:
            key = space.get_cell(name).doc_key
            tx = space.edit()
            if expected is None:
                try:
                    tx.write(key, full, value)
                except InvalidValueError:
                    tx.abort("refused, as expected")
                    continue
                raise AssertionError(f"a write the fold refuses was staged: {full} {value!r}")
            tx.write(key, full, value)
            result = tx.commit().wait(20)
            assert result.ok, result
        if expected is not None:
            model = expected
    return model


@settings(deadline=None)
@given(writes)
def test_memory_store_round_trips_every_value(ops: list[tuple[tuple[str, ...], Any]]) -> None:
    store = MemoryStore()
    space = Space(store, "sp")
    expected = _apply(space, ["doc"], ops)
    key = space.get_cell("doc").doc_key
    assert value_equal(expected, store.read_durable(key))
    fresh = Replica(store)
    assert value_equal(expected, fresh.visible(key))
    store._check()


@settings(deadline=None)
@given(writes)
def test_sqlite_store_round_trips_every_value_through_reopening_and_polling(
    ops: list[tuple[tuple[str, ...], Any]],
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        file = os.path.join(tmp, "cells.db")
        with (
            SQLiteStore(file, poll_interval=0) as writer,
            SQLiteStore(file, poll_interval=0) as watcher,
        ):
            watching = Space(watcher, "sp")
            key = watching.get_cell("doc").doc_key
            assert MISSING is watching.replica.visible(key)  # loaded: it hears foreign commits
            expected = _apply(Space(writer, "sp"), ["doc"], ops)
            watcher.poll()
            watching.replica.pump()
            assert value_equal(expected, watching.replica.visible(key))
            # The watcher still commits (its writer caught up on every foreign commit).
            assert watching.get_cell("other").set(1).wait(20).ok
            writer._check()
            watcher._check()
        with SQLiteStore(file, poll_interval=0) as reopened:
            assert value_equal(expected, reopened.read_durable(key))
            assert value_equal(expected, Replica(reopened).visible(key))
            reopened._check()
