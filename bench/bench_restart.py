"""Benchmarks of a restart: what reopening a durable runtime recomputes.

Groups ``restart`` (``ELEMENTS``, 10,000 elements) and ``restart-1k`` (1,000):
a board maps a list of numbers, one child with one lift per element
(``items.map(Card)``), on a `SQLiteStore` file (``synchronous="NORMAL"``: the
rows compare computation, not the disk's flush).

- **first setup** (baseline), one op = one element: on a fresh file, set the
  list, run the board, commit, and pull the board's result (every card
  computes).
- **close after setup**, one op = one element: `aclose()` of the runtime that
  just did the first setup, which writes each card's inputs record (what its
  output was computed from) in one commit per identity (``sent``).
- **restart**, one op = one element: on a file where that was done and the
  runtime closed, open a new store and runtime on it, start the board again
  and pull its result. Nothing changed, so the goal is no computation at all
  (``runs`` 0: each card's lift keeps its stored output, see `runner._reuse`)
  and at most 0.3x the first setup.

- **edit after restart**, one op = one edit: on a restarted board whose
  element runs are still dormant (`runner._list_dormant`), set one element to a
  new value and pull the board (that card's run is installed and its lift runs,
  ``runs`` 1). Over a list of inline values every dormant element reads the
  list document, so this pays one comparison per dormant element.

Counted work: ``runs``, calls of the cards' lift function (counted inside it),
``sent``, transactions the runtime's replica sent to the store, and
``installed``, the registrations (runs) installed once the board was pulled
(every card's on a first setup; none but the board's on a restart).

See docs/performance.md ("Restart") for numbers.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import shutil
import tempfile
from typing import Any

from bench.harness import BenchError, Counts, Finish, Run, bench
from cells import SQLiteStore
from runner import Runtime, lift, pattern

ELEMENTS = int(os.environ.get("BENCH_RESTART_ELEMENTS", "10000"))
"""Elements of the ``restart`` group's board (``BENCH_RESTART_ELEMENTS`` overrides)."""
SMALL = 1000
"""Elements of the ``restart-1k`` group's board."""
RUNS = [0]
_dirs: list[str] = []


def card(x: Any) -> Any:
    RUNS[0] += 1
    return {"n": x, "double": (x or 0) * 2}


@pattern
def Card(element):  # type: ignore[no-untyped-def]
    return lift(card)(element)


@pattern
def Board(items):  # type: ignore[no-untyped-def]
    return {"cards": items.map(Card)}


def _clean_up() -> None:
    while _dirs:
        shutil.rmtree(_dirs.pop(), ignore_errors=True)


atexit.register(_clean_up)


def _fresh_file() -> str:
    _clean_up()
    directory = tempfile.mkdtemp(prefix="bench-restart-")
    _dirs.append(directory)
    return os.path.join(directory, "board.db")


def _check(value: Any, n: int) -> None:
    cards = value["cards"] if isinstance(value, dict) else None
    if (
        not isinstance(cards, list)
        or len(cards) != n
        or cards[-1] != {"n": n - 1, "double": 2 * (n - 1)}
    ):
        raise BenchError("restart: the board's result is wrong")


async def _first_setup(path: str, n: int) -> tuple[Runtime, SQLiteStore]:
    store = SQLiteStore(path, synchronous="NORMAL")
    rt = Runtime(store, space="bench")
    items, board = rt.get_cell("items"), rt.get_cell("board")
    async with rt.edit() as tx:
        items.with_tx(tx).set(list(range(n)))
        rt.run(tx, Board, {"items": items}, board)
    _check(await board.pull(), n)
    return rt, store


async def _restart(path: str, n: int) -> tuple[Runtime, SQLiteStore]:
    store = SQLiteStore(path, synchronous="NORMAL")
    rt = Runtime(store, space="bench")
    board = rt.get_cell("board")
    await rt.start(board)
    _check(await board.pull(), n)
    return rt, store


async def _close(rt: Runtime, store: SQLiteStore) -> None:
    await rt.aclose()
    store.close()


def _timed(path: str, n: int, *, first: bool) -> Run:
    """One sample: a first setup or a restart on `path`, on an event loop of its own."""
    loop = asyncio.new_event_loop()

    def run() -> Finish:
        runs = RUNS[0]
        rt, store = loop.run_until_complete(_first_setup(path, n) if first else _restart(path, n))
        ran = RUNS[0] - runs

        def finish() -> Counts:
            sent = rt.replica.stats.commits_sent
            installed = len(rt.runner.registrations)
            loop.run_until_complete(_close(rt, store))
            loop.close()
            if first and ran != n:
                raise BenchError(f"restart: the first setup ran {ran} cards, not {n}")
            return {"runs": ran, "sent": sent, "installed": installed}

        return finish

    return run


def _register(group: str, n: int) -> None:
    @bench(group=group, name=f"first setup ({n} elements)", ops=n, baseline=True)
    def first_setup() -> Run:
        return _timed(_fresh_file(), n, first=True)

    @bench(group=group, name=f"close after setup ({n} elements)", ops=n)
    def close_after_setup() -> Run:
        path = _fresh_file()
        loop = asyncio.new_event_loop()
        rt, store = loop.run_until_complete(_first_setup(path, n))
        loop.run_until_complete(rt.idle())
        sent = rt.replica.stats.commits_sent

        def run() -> Finish:
            loop.run_until_complete(_close(rt, store))

            def finish() -> Counts:
                loop.close()
                return {"runs": 0, "sent": rt.replica.stats.commits_sent - sent}

            return finish

        return run

    @bench(group=group, name=f"restart ({n} elements)", ops=n)
    def restart() -> Run:
        path = _fresh_file()
        loop = asyncio.new_event_loop()
        loop.run_until_complete(_close(*loop.run_until_complete(_first_setup(path, n))))
        loop.close()
        return _timed(path, n, first=False)

    @bench(group=group, name=f"edit after restart ({n} elements)", ops=1)
    def edit_after_restart() -> Run:
        path = _fresh_file()
        loop = asyncio.new_event_loop()
        loop.run_until_complete(_close(*loop.run_until_complete(_first_setup(path, n))))
        rt, store = loop.run_until_complete(_restart(path, n))
        board, items = rt.get_cell("board"), rt.get_cell("items")

        async def edit() -> Any:
            items.key(n // 2).set(-1)
            return await board.pull()

        def run() -> Finish:
            runs = RUNS[0]
            value = loop.run_until_complete(edit())
            ran = RUNS[0] - runs

            def finish() -> Counts:
                if value["cards"][n // 2] != {"n": -1, "double": -2}:
                    raise BenchError("restart: the edited card is wrong")
                installed = len(rt.runner.registrations)
                loop.run_until_complete(_close(rt, store))
                loop.close()
                return {"runs": ran, "installed": installed}

            return finish

        return run


_register("restart", ELEMENTS)
_register("restart-1k", SMALL)
