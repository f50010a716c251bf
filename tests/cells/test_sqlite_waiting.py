"""Who evaluates a SQLiteStore commit (issue 20 item 4): a thread blocked in
`Pending.wait()` evaluates the queued commits itself instead of handing them to the
writer thread and sleeping until it answers; the writer takes what nobody waits for
and what a submitter running an event loop sends. An interrupt on the waiting thread
(only it runs signal handlers) is answered as the commit ended: applied or not.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path as FsPath
from typing import Any

import pytest

from cells import Outcome, Space, SQLiteStore
from cells.errors import LivenessError

WAIT = 20.0


class Recording(SQLiteStore):
    """A SQLiteStore that records which thread evaluated each commit, and can be told to
    raise `KeyboardInterrupt` once before COMMIT (`interrupt_before`) or once after it
    (`interrupt_after`: where the writer remembers the head rows it left)."""

    def __init__(self, path: FsPath, **kwargs: Any) -> None:
        super().__init__(path, poll_interval=0, synchronous="OFF", **kwargs)
        self.threads: list[int] = []
        self.evaluated = threading.Event()
        self.interrupt_before = False
        self.interrupt_after = False

    def _evaluate(self, request: Any) -> Any:
        self.threads.append(threading.get_ident())
        try:
            return super()._evaluate(request)
        finally:
            self.evaluated.set()

    def _apply(self, *args: Any, **kwargs: Any) -> bool:
        if self.interrupt_before:
            self.interrupt_before = False
            raise KeyboardInterrupt
        return super()._apply(*args, **kwargs)

    def _commit_one(self, *args: Any) -> Any:  # (the usual one-write commit's `_apply`)
        if self.interrupt_before:
            self.interrupt_before = False
            raise KeyboardInterrupt
        return super()._commit_one(*args)

    def _remember(self, seq: int, rows: Any, docs: Any = None) -> None:
        if self.interrupt_after:
            self.interrupt_after = False
            raise KeyboardInterrupt
        super()._remember(seq, rows, docs)


@pytest.fixture
def store(tmp_path: FsPath) -> Iterator[Recording]:
    s = Recording(tmp_path / "cells.db")
    yield s
    if not s.closed:
        s._check()
    s.close()


def _writer_ident(store: Recording) -> int:
    writer = store._writer
    assert writer is not None and writer.ident is not None
    return writer.ident


def test_a_synchronous_wait_evaluates_the_commit_on_the_waiting_thread(store: Recording) -> None:
    cell = Space(store, "t").get_cell({"n": 1})
    assert cell.set(1).wait(WAIT).ok
    assert [threading.get_ident()] == store.threads
    assert 1 == store.seq


def test_a_commit_nobody_waits_for_is_evaluated_by_the_writer(store: Recording) -> None:
    space = Space(store, "t")
    pending = space.get_cell({"n": 1}).set(1)
    assert store.evaluated.wait(WAIT)
    assert [_writer_ident(store)] == store.threads
    assert pending.wait(WAIT).ok


def test_a_commit_sent_from_a_running_loop_is_evaluated_by_the_writer(store: Recording) -> None:
    space = Space(store, "t")

    async def main() -> bool:
        result = await space.get_cell({"n": 1}).set(1)
        return result.ok

    assert asyncio.run(main())
    assert [_writer_ident(store)] == store.threads


def test_an_interrupt_before_commit_answers_the_commit_as_not_applied(store: Recording) -> None:
    space = Space(store, "t")
    cell = space.get_cell({"n": 1})
    assert cell.set(1).wait(WAIT).ok
    store.interrupt_before = True
    pending = cell.set(2)
    with pytest.raises(KeyboardInterrupt):
        pending.wait(WAIT)
    result = pending.wait(WAIT)
    assert Outcome.LIVENESS == result.outcome
    assert isinstance(result.error, LivenessError)
    assert 1 == store.seq
    store._check()
    assert cell.set(3).wait(WAIT).ok  # the store goes on
    assert 2 == store.seq
    assert 3 == cell.get()


def test_an_interrupt_after_commit_answers_the_commit_as_applied(store: Recording) -> None:
    space = Space(store, "t")
    cell = space.get_cell({"n": 1})
    assert cell.set(1).wait(WAIT).ok
    store.interrupt_after = True
    pending = cell.set(2)
    with pytest.raises(KeyboardInterrupt):
        pending.wait(WAIT)
    result = pending.wait(WAIT)
    assert result.ok
    assert 2 == result.seq == store.seq
    store._check()
    assert 2 == cell.get()
    assert cell.set(3).wait(WAIT).ok
    assert 3 == store.seq


def _batch(space: Space, n: int, value: int) -> Any:
    """A commit of `n` documents' cells set to `value` in one transaction (pending)."""
    tx = space.edit()
    for i in range(n):
        space.get_cell({"n": i}).with_tx(tx).set(value)
    return tx.commit()


def test_a_commit_of_many_writes_is_evaluated_on_the_waiting_thread(store: Recording) -> None:
    # (Measured, `bench.sqlite_durable --documents 100`: handed to the writer thread, a
    # 100-document commit cost about 1.5 times the process CPU when the two threads ran
    # on different cores.)
    space = Space(store, "t")
    for n, value in ((17, 1), (100, 2), (3, 3)):
        assert _batch(space, n, value).wait(WAIT).ok
    assert [threading.get_ident()] * 3 == store.threads
    assert 3 == store.seq
    assert [3, 3, 3, 2, 2] == [space.get_cell({"n": i}).get() for i in (0, 1, 2, 3, 99)]


def test_an_interrupt_in_a_large_commit_answers_it_as_it_ended(store: Recording) -> None:
    space = Space(store, "t")
    assert _batch(space, 100, 1).wait(WAIT).ok
    store.interrupt_before = True
    pending = _batch(space, 100, 2)
    with pytest.raises(KeyboardInterrupt):
        pending.wait(WAIT)
    result = pending.wait(WAIT)
    assert Outcome.LIVENESS == result.outcome
    assert 1 == store.seq
    store._check()
    store.interrupt_after = True
    pending = _batch(space, 100, 3)
    with pytest.raises(KeyboardInterrupt):
        pending.wait(WAIT)
    assert pending.wait(WAIT).ok
    assert 2 == store.seq
    store._check()
    assert _batch(space, 100, 4).wait(WAIT).ok  # the store goes on
    assert 3 == store.seq
    assert [threading.get_ident()] * 4 == store.threads
    other = SQLiteStore(store.path, poll_interval=0)
    fresh = Space(other, "t")
    try:
        assert [4] * 100 == [fresh.get_cell({"n": i}).get() for i in range(100)]
    finally:
        fresh.replica.close()
        other.close()
