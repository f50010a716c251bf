"""SQLiteStore loads: batched per session, answered one by one in the order asked.

The loads a session asks for before its mailbox runs are read in one statement per
chunk of documents (one query per document was a fifth of a restart's CPU); each
still gets its own answer, a corrupt value fails its own document only, and an
answer that raises leaves the rest queued first.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path as FsPath

import pytest

from cells import MISSING, CorruptStoreError, DocKey, Space, SQLiteStore, value_equal
from cells._pending import Mailbox
from cells._store import CommitRequest, DocState, Verdict
from cells._values import Value

WAIT = 20.0
DOCS = 400
CHUNK = 150
"""`cells.stores.sqlite._CHUNK`: documents per statement."""


class Loads:
    """A bare session listener that records the loads it is answered, in order."""

    def __init__(self, raise_on: DocKey | None = None) -> None:
        self.mailbox = Mailbox()
        self.answers: list[tuple[DocKey, DocState | None, BaseException | None]] = []
        self.raise_on = raise_on

    def on_verdict(self, request: CommitRequest, verdict: Verdict) -> None:
        raise AssertionError("not used")

    def on_foreign(self, seq: int, docs: dict[DocKey, Value]) -> None:
        raise AssertionError("not used")

    def on_loaded(self, key: DocKey, state: DocState | None, error: BaseException | None) -> None:
        self.answers.append((key, state, error))
        if key == self.raise_on:
            raise RuntimeError(f"listener failed on {key}")


def _written(path: FsPath) -> list[DocKey]:
    with SQLiteStore(path, poll_interval=0) as store:
        space = Space(store, "l")
        cells = [space.cell(f"c{i}") for i in range(DOCS)]
        assert all(cell.set({"i": i}).wait(WAIT).ok for i, cell in enumerate(cells))
        return [cell.doc_key for cell in cells]


def _statements(store: SQLiteStore) -> list[str]:
    seen: list[str] = []
    store._reader_conn().set_trace_callback(seen.append)
    return seen


def test_loads_asked_together_are_read_in_one_statement_per_chunk_and_answered_in_order(
    tmp_path: FsPath,
) -> None:
    path = tmp_path / "l.db"
    keys = _written(path)
    absent = [DocKey("l", f"absent-{i}", "space", "", "") for i in range(3)]
    asked = [*reversed(keys[: DOCS // 2]), absent[0], *keys[DOCS // 2 :], *absent[1:]]
    with SQLiteStore(path, poll_interval=0) as store:
        listener = Loads()
        store.connect(listener)  # type: ignore[arg-type]
        statements = _statements(store)
        for key in asked:
            store.load(listener, key)  # type: ignore[arg-type]
        assert [] == listener.answers  # answered on the mailbox, never inside `load`
        listener.mailbox.drain()
        assert -(-len(asked) // CHUNK) == len(statements), statements
    assert asked == [key for key, _state, _error in listener.answers]
    by_key = {key: state for key, state, _error in listener.answers}
    assert all(error is None for _key, _state, error in listener.answers)
    for i, key in enumerate(keys):
        state = by_key[key]
        assert state is not None and state.seq > 0
        assert value_equal({"value": {"i": i}}, state.value)
    for key in absent:
        state = by_key[key]
        assert state is not None and (0, MISSING) == (state.seq, state.value)


def test_an_unreadable_value_fails_its_own_load_only(tmp_path: FsPath) -> None:
    path = tmp_path / "l.db"
    keys = _written(path)[:3]
    with sqlite3.connect(path) as conn:
        conn.execute(
            "UPDATE head SET value = '{' WHERE doc IN (SELECT doc FROM document WHERE doc_id = ?)",
            (keys[1].id,),
        )
    with SQLiteStore(path, poll_interval=0) as store:
        listener = Loads()
        store.connect(listener)  # type: ignore[arg-type]
        for key in keys:
            store.load(listener, key)  # type: ignore[arg-type]
        listener.mailbox.drain()
    (k0, s0, e0), (k1, s1, e1), (k2, s2, e2) = listener.answers
    assert (keys, None, None) == ([k0, k1, k2], e0, e2)
    assert s0 is not None and value_equal({"value": {"i": 0}}, s0.value)
    assert s2 is not None and value_equal({"value": {"i": 2}}, s2.value)
    assert s1 is None and type(e1) is CorruptStoreError
    assert str(keys[1]) in str(e1)


def test_an_answer_that_raises_leaves_the_rest_first_in_the_mailbox(tmp_path: FsPath) -> None:
    path = tmp_path / "l.db"
    keys = _written(path)[:4]
    with SQLiteStore(path, poll_interval=0) as store:
        listener = Loads(raise_on=keys[1])
        store.connect(listener)  # type: ignore[arg-type]
        for key in keys:
            store.load(listener, key)  # type: ignore[arg-type]
        later: list[str] = []
        listener.mailbox.post(lambda: later.append("posted after the loads"))
        with pytest.raises(RuntimeError, match="listener failed"):
            listener.mailbox.drain()
        assert keys[:2] == [key for key, _s, _e in listener.answers]
        listener.mailbox.drain()
    assert keys == [key for key, _s, _e in listener.answers]
    assert ["posted after the loads"] == later
