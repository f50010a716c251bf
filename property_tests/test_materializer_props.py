"""P-MAT: a Materializer's kept, partly re-read value is what `read_value` reads.

Documents hold small nested values with links to each other (dangling ones and
cycles included); random steps change a document's value, re-point or remove a
link inside one, or delete one. After every step the materializer reads the root
in a fresh transaction, and `read_value` does in another: the same value (or the
same error) and the same set of logged reads, which is what the scheduler's read
set is built from.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from cells import (
    Link,
    LinkCycleError,
    Materializer,
    MemoryStore,
    Replica,
    Space,
    read_value,
)

IDS = ["a", "b", "c", "d", "e"]
KEYS = st.sampled_from(["x", "y", "z"])
LINKS = st.builds(
    lambda target, path: Link("sp", target, "space", path),
    st.sampled_from([*IDS, "nowhere"]),
    st.sampled_from([(), ("x",), (0,)]),
)
LEAVES = st.one_of(st.none(), st.integers(-2, 2), st.sampled_from(["s", "t"]), LINKS)
VALUES = st.recursive(
    LEAVES,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(KEYS, inner, max_size=3)),
    max_leaves=8,
)
STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("set"), st.sampled_from(IDS), VALUES),
        st.tuples(st.just("set_at"), st.sampled_from(IDS), st.sampled_from(["x", 0, 1]), VALUES),
        st.tuples(st.just("delete"), st.sampled_from(IDS)),
    ),
    max_size=12,
)


def _read(read: Any) -> tuple[str, Any, set[Any]]:
    try:
        value, reads = read()
    except LinkCycleError:
        return "cycle", None, set()
    return "value", value, reads


@given(st.dictionaries(st.sampled_from(IDS), VALUES), STEPS, st.sampled_from(IDS))
def test_a_kept_value_reads_as_read_value_reads_it(
    docs: dict[str, Any], steps: list[Any], root_id: str
) -> None:
    replica = Replica(MemoryStore())
    sp = Space(replica, "sp")

    def commit(pending: Any) -> None:
        replica.pump()
        pending.result()

    for id, value in docs.items():
        commit(sp.cell(id).set(value))
    materializer = Materializer(replica)
    root = Link("sp", root_id)

    def kept() -> tuple[Any, set[Any]]:
        tx = sp.edit()
        try:
            return materializer.read(tx, root), set(tx.reads)
        finally:
            tx.abort()

    def oracle() -> tuple[Any, set[Any]]:
        tx = sp.edit()
        try:
            return read_value(tx, root), set(tx.reads)
        finally:
            tx.abort()

    try:
        assert _read(oracle) == _read(kept)
        for step in steps:
            if step[0] == "set":
                commit(sp.cell(step[1]).set(step[2]))
            elif step[0] == "set_at":
                cell = sp.cell(step[1])
                doc = replica.visible(cell.doc_key)
                current = doc.get("value") if type(doc) is dict else None  # links not followed
                at = step[2]
                fits = type(at) is str and type(current) is dict
                fits |= type(at) is int and type(current) is list and at < len(current)
                if not fits:
                    continue
                commit(cell.key(at).set(step[3]))
            else:
                commit(sp.cell(step[1]).delete())
            assert _read(oracle) == _read(kept), step
            assert _read(oracle) == _read(kept), ("again", step)  # a read with no change
    finally:
        materializer.close()
