"""Bounded history: SQLiteStore decides every commit as MemoryStore does (P-HIST-1).

Both stores keep a document's newest `REVISIONS_KEPT` revisions and treat a read older
than the pruned ones as conflicting. With the window made tiny (2, so a run of a few
dozen commits prunes many times), the same steps run against both stores: two sessions
open transactions that read a document at a path (their basis), other commits go by
(not pumped into the reader's replica, so the old basis reaches the store), then they
write and commit. Every commit must get the same outcome from both stores,
and both must end with the same document; the SQLite file is also reopened and read.
No under-approximation either: a commit accepted by the store must not have read a
path that an accepted commit after its basis wrote (checked against the model).
"""

from __future__ import annotations

import os
import sqlite3
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

import cells.stores.memory
import cells.stores.sqlite
from cells import MemoryStore, Outcome, Space, SQLiteStore, StoreBase, Transaction, value_equal
from cells._store import write_overlaps_read

KEPT = 2
FIELDS = ["a", "b", "c"]

steps = st.lists(
    st.one_of(
        st.tuples(st.just("open"), st.integers(0, 1), st.sampled_from(FIELDS)),
        st.tuples(st.just("commit"), st.integers(0, 1), st.sampled_from(FIELDS), st.integers(0, 9)),
        st.tuples(st.just("blind"), st.integers(0, 1), st.sampled_from(FIELDS), st.integers(0, 9)),
    ),
    min_size=10,
    max_size=60,
)


@contextmanager
def small_window(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    with monkeypatch.context() as m:
        m.setattr(cells.stores.memory, "REVISIONS_KEPT", KEPT)
        # (`MemoryStore`'s hot paths read the cap as a module constant made at import.)
        m.setattr(cells.stores.memory, "_HISTORY_CAP", 2 * KEPT)
        m.setattr(cells.stores.sqlite, "REVISIONS_KEPT", KEPT)
        yield


def run(store: StoreBase, script: list[tuple[Any, ...]]) -> tuple[list[Outcome], Any]:
    """Play `script` on `store`; the outcome of every commit, and the final document."""
    spaces = [Space(store, "h", session=f"s{i}") for i in range(2)]
    keys = [sp.get_cell("doc").doc_key for sp in spaces]
    assert spaces[0].get_cell("doc").set({f: 0 for f in FIELDS}).wait(20).ok
    open_tx: list[tuple[Transaction, str] | None] = [None, None]
    outcomes: list[Outcome] = []
    # (seq, field written) of every accepted commit, to check no stale read was accepted.
    accepted: list[tuple[int, str]] = []
    for step in script:
        kind, who = step[0], step[1]
        sp = spaces[who]
        if kind == "open":
            if open_tx[who] is None:
                sp.replica.pump()
                tx = sp.edit()
                tx.read(keys[who], ("value", step[2]))
                open_tx[who] = (tx, step[2])
            continue
        if kind == "commit":
            held = open_tx[who]
            if held is None:
                continue
            open_tx[who] = None
            tx, read_field = held
            basis = tx.documents()[keys[who]].basis_seq
            tx.write(keys[who], ("value", step[2]), step[3])
        else:
            tx, read_field, basis = sp.edit(), "", -1
            tx.write(keys[who], ("value", step[2]), step[3])
        result = tx.commit().wait(20)
        outcomes.append(result.outcome)
        if result.ok and result.seq is not None:  # (no seq: elided, nothing was sent)
            if basis >= 0:
                for seq, field in accepted:
                    assert not (
                        seq > basis
                        and write_overlaps_read(("value", field), ("value", read_field), False)
                    ), f"a read of {read_field!r} at seq {basis} missed seq {seq}"
            accepted.append((result.seq, step[2]))
        # The fan-out to the other session is posted once the writer is done (SQLite
        # answers first): wait for it, so both stores leave the same mailboxes. The
        # other session is not pumped: its open transaction keeps its old basis and
        # reaches the store with it (pumped, it would fail its local basis check).
        flush = getattr(store, "flush", None)
        if flush is not None:
            assert flush(20.0)
    for held in open_tx:
        if held is not None:
            held[0].abort("end of the run")
    return outcomes, store.read_durable(keys[0])


@settings(deadline=None)
@given(steps)
def test_sqlite_prunes_and_decides_as_memory_does(script: list[tuple[Any, ...]]) -> None:
    with pytest.MonkeyPatch.context() as monkeypatch, small_window(monkeypatch):
        memory = MemoryStore()
        expected_outcomes, expected_doc = run(memory, script)
        memory._check()
        with tempfile.TemporaryDirectory() as tmp:
            file = os.path.join(tmp, "cells.db")
            with SQLiteStore(file, poll_interval=0, synchronous="OFF") as sqlite:
                outcomes, doc = run(sqlite, script)
                sqlite._check()
                with sqlite3.connect(file) as conn:
                    pruned = "SELECT COUNT(*) FROM head WHERE floor IS NOT NULL"
                    floors = conn.execute(pruned).fetchone()[0]
                event("pruned" if floors else "not pruned")
            assert expected_outcomes == outcomes
            assert value_equal(expected_doc, doc)
            with SQLiteStore(file, poll_interval=0) as reopened:
                key = Space(reopened, "h").get_cell("doc").doc_key
                assert value_equal(expected_doc, reopened.read_durable(key))
                reopened._check()
