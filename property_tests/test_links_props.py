"""Properties of link resolution over random link graphs.

- Resolution always ends: it returns, or raises `LinkCycleError`, within `MAX_HOPS` hops.
- A resolved address has no link at any prefix of its path (the final place included,
  unless `follow_last=False`, which stops exactly at a link sitting there).
- Every logged probe sits on a link; reading a value (links inside followed) also ends.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from hypothesis import event, given
from hypothesis import strategies as st

from cells import (
    MAX_HOPS,
    MISSING,
    DocKey,
    Identity,
    InvalidValueError,
    Link,
    LinkCycleError,
    MemoryStore,
    Replica,
    Transaction,
    get_path,
    read_value,
    resolve,
)
from cells._links import VALUE

ME = Identity("alice", "s1")
IDS = ("d0", "d1", "d2", "d3")
SCOPES = ("space", "user")
PATH_ELEMS: st.SearchStrategy[str | int] = st.sampled_from(["a", "b", 0, 1])

places = st.builds(
    lambda id, scope, path: Link("sp", id, scope, tuple(path)),
    st.sampled_from(IDS),
    st.sampled_from(SCOPES),
    st.lists(PATH_ELEMS, max_size=2),
)

contents = st.recursive(
    st.one_of(places, st.integers(0, 3), st.none()),
    lambda children: st.one_of(
        st.lists(children, max_size=3),
        st.dictionaries(st.sampled_from(["a", "b"]), children, max_size=2),
    ),
    max_leaves=6,
)
"""Cell data mixing plain values and links (about half the leaves) into a few documents."""

graphs = st.dictionaries(
    st.tuples(st.sampled_from(IDS), st.sampled_from(SCOPES)),
    st.one_of(places, contents),  # a document that is one link is the common chain case
    min_size=1,
)


def _anchors(graph: dict[tuple[str, str], Any]) -> list[Link]:
    """A place at every node of every document, so a start often lands on a link."""
    out: list[Link] = []

    def walk(id: str, scope: str, v: Any, path: tuple[Any, ...]) -> None:
        out.append(Link("sp", id, scope, path))  # type: ignore[arg-type]
        if type(v) is dict:
            for k, x in v.items():
                walk(id, scope, x, (*path, k))
        elif type(v) is list:
            for i, x in enumerate(v):
                walk(id, scope, x, (*path, i))

    for (id, scope), value in graph.items():
        walk(id, scope, value, ())
    return out


def _at(graph: dict[tuple[str, str], Any], place: Link) -> Any:
    return get_path(graph.get((place.id, place.scope), MISSING), place.path)


def _start(data: st.DataObject, graph: dict[tuple[str, str], Any]) -> Link:
    anchors = _anchors(graph)
    on_links = [a for a in anchors if type(_at(graph, a)) is Link]
    choices = [st.sampled_from(anchors), places]
    if on_links:
        choices.insert(0, st.sampled_from(on_links))
    base = data.draw(st.one_of(choices))
    return base.child(*data.draw(st.lists(PATH_ELEMS, max_size=1)))


def _build(graph: dict[tuple[str, str], Any]) -> tuple[MemoryStore, Replica]:
    store = MemoryStore()
    replica = Replica(store)
    tx = replica.edit(ME)
    for (id, scope), value in graph.items():
        tx.write(Link("sp", id, scope).key(ME), (), {VALUE: value})  # type: ignore[arg-type]
    pending = tx.commit()
    replica.pump()
    assert pending.result().ok
    return store, replica


def _data(replica: Replica, key: DocKey) -> Any:
    doc = replica.visible(key)
    return MISSING if doc is MISSING else doc.get(VALUE, MISSING)


def _has_link(value: Any) -> bool:
    if type(value) is Link:
        return True
    if type(value) is dict:
        return any(_has_link(v) for v in value.values())
    if type(value) is list:
        return any(_has_link(v) for v in value)
    return False


def _shallow_probes(tx: Transaction) -> list[tuple[DocKey, tuple[Any, ...]]]:
    return [(key, path) for key, path, shallow in tx.reads if shallow]


def _check_probes_sit_on_links(replica: Replica, tx: Transaction) -> None:
    probes = _shallow_probes(tx)
    assert len(probes) <= MAX_HOPS + 1
    for key, path in probes:
        assert type(get_path(replica.visible(key), path)) is Link, (key, path)


@given(graphs, st.sampled_from([True, True, False]), st.data())
def test_resolution_ends_at_a_place_without_links(
    graph: dict[tuple[str, str], Any], follow_last: bool, data: st.DataObject
) -> None:
    start = _start(data, graph)
    store, replica = _build(graph)
    tx = replica.edit(ME)
    try:
        end = resolve(tx, start, follow_last=follow_last)
    except LinkCycleError:
        event("cycle")
        _check_probes_sit_on_links(replica, tx)
    else:
        event(f"follow_last={follow_last}: {len(_shallow_probes(tx))} hops")
        _check_probes_sit_on_links(replica, tx)
        stored = _data(replica, end.key(ME))
        last = len(end.path) + 1 if follow_last else len(end.path)
        for n in range(last):
            assert type(get_path(stored, end.path[:n])) is not Link, (end, n)
        if not follow_last:
            # Stopping before a final link is the only difference from following it.
            again = replica.edit(ME)
            try:
                full = resolve(again, start)
            except LinkCycleError:
                full = None
            if type(get_path(stored, end.path)) is not Link:
                assert end == full
            again.abort()
    tx.abort()
    store._check()
    replica._check()


@given(graphs, st.data())
def test_reading_through_links_ends(graph: dict[tuple[str, str], Any], data: st.DataObject) -> None:
    start = _start(data, graph)
    store, replica = _build(graph)
    tx = replica.edit(ME)
    try:
        value = read_value(tx, start)
    except LinkCycleError:
        event("cycle")
    else:
        event("read")
        assert not _has_link(value)  # every link inside was followed
    tx.abort()
    store._check()
    replica._check()


@given(st.integers(1, MAX_HOPS + 5))
def test_a_chain_resolves_exactly_when_it_is_within_max_hops(length: int) -> None:
    store = MemoryStore()
    replica = Replica(store)
    tx = replica.edit(ME)
    for i in range(length):
        tx.write(DocKey("sp", f"c{i}"), (), {VALUE: Link("sp", f"c{i + 1}")})
    tx.write(DocKey("sp", f"c{length}"), (), {VALUE: "end"})
    tx.commit()
    replica.pump()
    reader = replica.edit(ME)
    if length <= MAX_HOPS:
        assert Link("sp", f"c{length}") == resolve(reader, Link("sp", "c0"))
    else:
        try:
            resolve(reader, Link("sp", "c0"))
        except LinkCycleError:
            pass
        else:
            raise AssertionError(f"a chain of {length} links resolved")
    assert len(_shallow_probes(reader)) <= MAX_HOPS + 1
    reader.abort()
    store._check()
    replica._check()


# One step of a transaction: read a value at a place (logged or not), read a document
# path directly (deep or shallow), or write a content at a place.
steps = st.lists(
    st.one_of(
        st.tuples(st.just("value"), places, st.booleans()),
        st.tuples(st.just("read"), places, st.booleans(), st.booleans()),
        st.tuples(st.just("write"), places, contents),
    ),
    min_size=1,
    max_size=12,
)

Claim = tuple[DocKey, tuple[Any, ...], bool]


def _apply(tx: Transaction, step: tuple[Any, ...]) -> Any:
    """Do `step` in `tx`; what a read returned (an exception counts as a result)."""
    kind, place = step[0], step[1]
    key, path = place.key(ME), (VALUE, *place.path)
    try:
        if kind == "value":
            return read_value(tx, place, log=step[2])
        if kind == "read":
            return tx.read(key, path, shallow=step[2], log=step[3])
        tx.write(key, path, step[2])
    except (LinkCycleError, InvalidValueError) as exc:
        return type(exc)
    return None


def _claimed(reads: Iterable[Claim]) -> set[Claim]:
    """The claims a document's reads make: deep paths compacted, shallow ones under a
    deep one dropped (what the replica sent for every read, repeats included)."""
    by_doc: dict[DocKey, list[tuple[tuple[Any, ...], bool]]] = {}
    for key, path, shallow in reads:
        by_doc.setdefault(key, []).append((path, shallow))
    out: set[Claim] = set()
    for key, entries in by_doc.items():
        deep = {p for p, s in entries if not s}
        deep = {p for p in deep if not any(p[: len(q)] == q and p != q for q in deep)}
        out |= {(key, p, False) for p in deep}
        out |= {(key, p, True) for p, s in entries if s and not any(p[: len(q)] == q for q in deep)}
    return out


@given(graphs, steps)
def test_repeated_reads_log_and_claim_what_fresh_reads_would(
    graph: dict[tuple[str, str], Any], steps: list[tuple[Any, ...]]
) -> None:
    """Each read in one transaction returns what the same read returns in a fresh
    transaction that made the same writes first; the transaction's log and its commit's
    read claims are, as sets, the union of those fresh reads' logs and reads."""
    store, replica = _build(graph)
    tx = replica.edit(ME)
    logged: set[Claim] = set()
    read: list[Claim] = []
    for i, step in enumerate(steps):
        got = _apply(tx, step)
        if step[0] == "write":
            continue
        fresh = replica.edit(ME)
        for earlier in steps[:i]:
            if earlier[0] == "write":
                _apply(fresh, earlier)
        assert _apply(fresh, step) == got, step
        logged |= set(fresh.reads)
        for key, td in fresh.documents().items():
            read.extend((key, p, s) for p, s in td.reads or ())
        fresh.abort()
    assert logged == set(tx.reads)
    if all(step[-1] for step in steps if step[0] != "write"):
        # Every read logged: nothing logged twice. (After an unlogged read of a
        # document, a repeat of a read of it may be logged again, which is harmless.)
        assert len(tx.reads) == len(set(tx.reads))
    tx.write(DocKey("sp", "out"), (VALUE,), 1)  # something to commit: the claims reach the store
    with store.testing.hold_verdicts() as gate:
        tx.commit()
        (held,) = gate.held()
        assert _claimed(read) == {(c.key, c.path, c.shallow) for c in held.request.reads}
    replica.pump()
    store._check()
    replica._check()
