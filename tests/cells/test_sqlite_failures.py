"""SQLiteStore on a file it cannot use: every failure is a cellweave error, classified.

- A file with damaged pages raises `CorruptStoreError` on reads, and a commit that
  meets the damage settles TERMINAL (not LIVENESS: `edit_with_retry` must not retry
  what fails the same way again). No `sqlite3` error reaches a caller raw.
- A file this process may read but not write is refused at open with `StoreError`.
  As root, `chmod` does not stop writes, so the open runs in a child process that
  drops to an unprivileged user (for whom the file is genuinely read-only).
"""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import sqlite3
import tempfile
from collections.abc import Iterator
from pathlib import Path as FsPath

import pytest

from cells import (
    CorruptStoreError,
    Outcome,
    Space,
    SQLiteStore,
    StoreError,
    Transaction,
    edit_with_retry,
)
from cells.errors import TerminalCommitError

PAGE = 4096
DOCS = 200


def _filled(file: FsPath) -> None:
    with SQLiteStore(file, poll_interval=0) as store:
        space = Space(store, "x")
        for i in range(DOCS):
            space.get_cell(i).set({"text": "y" * 200, "i": i})
        store.flush()
        space.replica.pump()


def _damage(file: FsPath) -> None:
    """Overwrite every page past the schema's with fixed noise (the same in every run)."""
    noise = random.Random(13)
    pages = os.path.getsize(file) // PAGE
    assert pages > 20, pages  # the documents fill pages past the first twelve
    with open(file, "r+b") as f:
        for page in range(12, pages):
            f.seek(page * PAGE)
            f.write(noise.randbytes(PAGE))


@pytest.fixture
def damaged(tmp_path: FsPath) -> Iterator[tuple[SQLiteStore, Space]]:
    """A store opened on a good file, whose pages are then damaged on disk.

    Document 150 is loaded before the damage (its replica holds it), so a write to it
    reaches the store's writer, which then meets the damaged pages.
    """
    file = tmp_path / "cells.db"
    _filled(file)
    store = SQLiteStore(file, poll_interval=0)
    space = Space(store, "x")
    assert 150 == space.get_cell(150).get()["i"]
    _damage(file)
    yield store, space
    store.close()


def test_reads_of_damaged_pages_raise_corrupt_store_error(
    damaged: tuple[SQLiteStore, Space],
) -> None:
    _, space = damaged
    errors: list[BaseException] = []
    for i in range(DOCS):
        if i == 150:
            continue
        try:
            space.get_cell(i).get()
        except Exception as exc:
            errors.append(exc)
    assert errors, "no read met the damage"
    assert [] == [e for e in errors if not isinstance(e, CorruptStoreError)]
    assert all(isinstance(e.__cause__, sqlite3.DatabaseError) for e in errors)
    assert "damaged" in str(errors[0])


def test_a_commit_meeting_damaged_pages_is_terminal_and_not_retried(
    damaged: tuple[SQLiteStore, Space],
) -> None:
    _, space = damaged
    cell = space.get_cell(150)
    result = cell.set(5).wait(10)
    assert Outcome.TERMINAL is result.outcome
    assert isinstance(result.error, TerminalCommitError)
    assert isinstance(result.error.__cause__, CorruptStoreError)

    calls = 0

    def fn(tx: Transaction) -> None:
        nonlocal calls
        calls += 1
        tx.write(cell.doc_key, ("value",), 6)

    retried = asyncio.run(edit_with_retry(space.replica, space.identity, fn, attempts=5))
    assert Outcome.TERMINAL is retried.outcome
    assert 1 == calls


def test_poll_and_seq_on_a_damaged_file_raise_store_errors(tmp_path: FsPath) -> None:
    file = tmp_path / "cells.db"
    _filled(file)
    with SQLiteStore(file, poll_interval=0) as watcher, SQLiteStore(file, poll_interval=0) as w:
        watching = Space(watcher, "x")
        watching.get_cell(0).get()  # a session: polls deliver to it
        writer = Space(w, "x")
        assert writer.get_cell(150).set({"i": "new"}).wait(10).ok
        w.close()
        # Fold the commit into the file and empty the log: reads must go to the file's
        # pages (the log held every page the commit wrote, which is all the poll reads).
        conn = sqlite3.connect(file)
        try:
            assert 0 == conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
        finally:
            conn.close()
        _damage(file)
        failures: list[BaseException] = []
        for call in (watcher.poll, lambda: watcher.seq):
            try:
                call()
            except Exception as exc:
                failures.append(exc)
        assert failures, "neither call met the damage"
        assert [] == [e for e in failures if not isinstance(e, StoreError)]


def _open_as_unprivileged(file: FsPath) -> str:
    """Open `file` in a forked child that, when we are root, becomes user nobody first
    (for whom the file's mode holds). Forked, not exec'd: the interpreter may live
    where that user cannot reach. Returns what the child reports."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report through the pipe, never return into pytest
        code = 1
        try:
            os.close(read_end)
            if os.geteuid() == 0:
                os.setgroups([])
                os.setgid(65534)
                os.setuid(65534)
            try:
                SQLiteStore(file, poll_interval=0).close()
                report = "OPENED"
            except StoreError as exc:
                report = f"REFUSED {type(exc).__name__} {exc}"
            os.write(write_end, report.encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        report = pipe.read().decode()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, report
    return report


def test_a_read_only_file_is_refused_at_open() -> None:
    # Not pytest's tmp_path: its parents are private to this user, and the child may
    # run as another. The directory is writable for everyone, so the child could make
    # the -wal and -shm files: only the file itself is read-only.
    where = tempfile.mkdtemp(prefix="cellweave-ro-")
    try:
        os.chmod(where, 0o777)
        file = FsPath(where) / "cells.db"
        _filled(file)
        before = file.read_bytes()
        os.chmod(file, 0o444)
        report = _open_as_unprivileged(file)
        assert report.startswith("REFUSED StoreError"), report
        assert "read-only" in report
        assert before == file.read_bytes()
    finally:
        shutil.rmtree(where)
