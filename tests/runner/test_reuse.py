"""A restart recomputes nothing that did not change (`runner._reuse`).

Each test runs a pattern on a durable store, closes the runtime, optionally
changes something with another runtime while the first is closed, reopens and
counts which functions ran (`reuse_defs.CALLS`, keyed by their inputs).
"""

from __future__ import annotations

import collections
import math
from pathlib import Path
from typing import Any

import pytest
import reuse_defs
from reuse_defs import CALLS, Board, Launcher
from support import arun, turns

from cells import MISSING, MemoryStore, Outcome, SQLiteStore
from runner import Runtime
from runner import _docs as docs
from runner._reuse import INPUTS, function_key
from scheduler import NodeError

N = 12


def expected_board(items: list[int]) -> dict[str, Any]:
    return {"cards": [{"n": x, "double": 2 * x} for x in items]}


async def set_up_board(store: Any, items: list[int], *, reuse: bool = True) -> None:
    async with Runtime(store, space="t", reuse=reuse) as rt:
        cells, board = rt.get_cell("items"), rt.get_cell("board")
        async with rt.edit() as tx:
            cells.with_tx(tx).set(items)
            rt.run(tx, Board, {"items": cells}, board)
        assert expected_board(items) == await board.pull()


async def reopen_board(store: Any, *, reuse: bool = True) -> Any:
    async with Runtime(store, space="t", reuse=reuse) as rt:
        board = rt.get_cell("board")
        await rt.start(board)
        return await board.pull()


async def edit_items(store: Any, changes: dict[int, Any]) -> None:
    """Another runtime changes elements of the list (no pattern runs there)."""
    async with Runtime(store, space="t") as rt:
        items = rt.get_cell("items")
        await items.pull()
        async with rt.edit() as tx:
            for i, x in changes.items():
                items.with_tx(tx).key(i).set(x)


def card_calls() -> dict[Any, int]:
    return {k: v for k, v in CALLS.items() if k[0] == "card"}


@pytest.fixture(autouse=True)
def _clear_calls() -> None:
    CALLS.clear()


def test_a_restart_runs_no_card_whose_element_did_not_change(tmp_path: Path) -> None:
    path = tmp_path / "board.db"
    items = list(range(N))
    arun(lambda: set_up_board(SQLiteStore(path), items))
    assert N == sum(card_calls().values())
    CALLS.clear()
    assert expected_board(items) == arun(lambda: reopen_board(SQLiteStore(path)))
    assert {} == card_calls()


def test_a_restart_reruns_exactly_the_cards_whose_element_changed_while_closed(
    tmp_path: Path,
) -> None:
    path = tmp_path / "board.db"
    items = list(range(N))
    arun(lambda: set_up_board(SQLiteStore(path), items))
    arun(lambda: edit_items(SQLiteStore(path), {3: 103, 7: 107}))
    CALLS.clear()
    items[3], items[7] = 103, 107
    assert expected_board(items) == arun(lambda: reopen_board(SQLiteStore(path)))
    assert {("card", 103): 1, ("card", 107): 1} == card_calls()


def test_an_element_changed_from_zero_to_negative_zero_while_closed_reruns(tmp_path: Path) -> None:
    # 0 and -0.0 are different values (`value_equal`): the record's digest tells them
    # apart, or the board keeps showing 0 (found by the restart property test).
    path = tmp_path / "board.db"
    items: list[Any] = list(range(N))
    arun(lambda: set_up_board(SQLiteStore(path), items))
    arun(lambda: edit_items(SQLiteStore(path), {0: -0.0}))
    CALLS.clear()
    board = arun(lambda: reopen_board(SQLiteStore(path)))
    assert {("card", -0.0): 1} == card_calls()
    assert math.copysign(1.0, board["cards"][0]["n"]) < 0


def test_an_element_set_to_the_same_value_while_closed_reruns_nothing(tmp_path: Path) -> None:
    # A write that leaves the value as it was changes the document's seq, not what the
    # card read: the record compares values, not revisions.
    path = tmp_path / "board.db"
    items = list(range(N))
    arun(lambda: set_up_board(SQLiteStore(path), items))
    arun(lambda: edit_items(SQLiteStore(path), {2: 500}))
    arun(lambda: edit_items(SQLiteStore(path), {2: 2}))
    CALLS.clear()
    assert expected_board(items) == arun(lambda: reopen_board(SQLiteStore(path)))
    assert {} == card_calls()


def test_a_reused_card_still_reruns_when_its_element_changes_later() -> None:
    store = MemoryStore()
    items = list(range(N))

    async def main() -> None:
        async with Runtime(store, space="t") as rt:
            cells, board = rt.get_cell("items"), rt.get_cell("board")
            await rt.start(board)
            assert expected_board(items) == await board.pull()
            assert {} == card_calls()
            cells.key(5).set(55)
            items[5] = 55
            assert expected_board(items) == await board.pull()
            assert {("card", 55): 1} == card_calls()

    arun(lambda: set_up_board(store, list(items)))
    CALLS.clear()
    arun(main)


def test_a_stored_output_someone_else_changed_is_computed_again() -> None:
    store = MemoryStore()
    items = list(range(N))
    arun(lambda: set_up_board(store, items))

    async def overwrite_card_4() -> None:
        async with Runtime(store, space="t") as rt:
            board = rt.get_cell("board")
            await board.pull()  # loaded (not started: nothing runs here)
            card = board.key("cards").key(4).resolve()
            # The card's output document (its lift's internal cell): a value its
            # function never wrote.
            out = docs.internal_link(card.link(), 0).key(rt.identity)
            async with rt.edit() as tx:
                tx.write(out, (docs.VALUE,), {"n": 4, "double": -1})

    arun(overwrite_card_4)
    CALLS.clear()
    assert expected_board(items) == arun(lambda: reopen_board(store))
    assert {("card", 4): 1} == card_calls()


def test_reuse_false_calls_every_function_again(tmp_path: Path) -> None:
    path = tmp_path / "board.db"
    items = list(range(N))
    arun(lambda: set_up_board(SQLiteStore(path), items))
    CALLS.clear()
    assert expected_board(items) == arun(lambda: reopen_board(SQLiteStore(path), reuse=False))
    assert N == sum(card_calls().values())
    # Those runs recorded again: the next runtime that reuses runs nothing.
    CALLS.clear()
    assert expected_board(items) == arun(lambda: reopen_board(SQLiteStore(path)))
    assert {} == card_calls()


def test_a_lift_that_launched_a_child_runs_again_and_its_child_is_reused(
    tmp_path: Path,
) -> None:
    # The lift's run is what installs its child's registration: it is never skipped.
    # The child's own lift read nothing that changed, so it keeps its output.
    path = tmp_path / "launch.db"

    async def first() -> None:
        async with Runtime(SQLiteStore(path), space="t") as rt:
            res = rt.get_cell("res")
            async with rt.edit() as tx:
                rt.run(tx, Launcher, {"value": 21}, res)
            assert 42 == await res.key("child").key("doubled").pull()

    async def second() -> None:
        async with Runtime(SQLiteStore(path), space="t") as rt:
            res = rt.get_cell("res")
            await rt.start(res)
            assert 42 == await res.key("child").key("doubled").pull()
            child = res.key("child").resolve()
            assert child.link().key(rt.identity) in rt.registrations()

    arun(first)
    assert {("child_of", 21): 1, ("doubled", 21): 1} == dict(CALLS)
    CALLS.clear()
    arun(second)
    assert {("child_of", 21): 1} == dict(CALLS)


def test_a_launching_run_leaves_no_inputs_record() -> None:
    store = MemoryStore()

    async def main() -> None:
        async with Runtime(store, space="t") as rt:
            res = rt.get_cell("res")
            async with rt.edit() as tx:
                rt.run(tx, Launcher, {"value": 1}, res)
            await res.key("child").pull()
            # No record while the runtime runs: they are written when it closes.
            child = res.key("child").resolve().link()
            assert MISSING == rt.replica.visible(_out(rt, child)).get(INPUTS, MISSING)
        async with Runtime(store, space="t") as rt:
            out = _out(rt, rt.get_cell("res").link())
            await rt.get_cell("res").pull()
            assert MISSING == rt.replica.visible(out).get(INPUTS, MISSING)
            assert isinstance(rt.replica.visible(_out(rt, child)).get(INPUTS), str)

    arun(main)


def _out(rt: Runtime, result: Any) -> Any:
    """The output document of node 0 of the run on `result`."""
    return docs.internal_link(result, 0).key(rt.identity)


def test_a_run_that_raised_leaves_no_record_and_runs_again() -> None:
    # Card 3's function raises for this element: its output is absent, and closing
    # records nothing for it, so the next runtime calls it again.
    store = MemoryStore()
    items: list[Any] = [0, 1, 2, "boom", 4]

    async def first() -> None:
        async with Runtime(store, space="t") as rt:
            cells, board = rt.get_cell("items"), rt.get_cell("board")
            async with rt.edit() as tx:
                cells.with_tx(tx).set(items)
                rt.run(tx, Board, {"items": cells}, board)
            with pytest.raises(NodeError):
                await board.pull()

    arun(first)
    assert 5 == sum(card_calls().values())
    CALLS.clear()
    with pytest.raises(NodeError):
        arun(lambda: reopen_board(store))
    assert {("card", "boom"): 1} == card_calls()


def test_an_output_that_never_landed_leaves_no_record() -> None:
    # A card's commit is refused for good: what it computed is not in the store, so
    # closing records nothing for it and the next runtime computes it again.
    store = MemoryStore()
    items = list(range(4))

    async def first() -> None:
        async with Runtime(store, space="t") as rt:
            cells, board = rt.get_cell("items"), rt.get_cell("board")
            async with rt.edit() as tx:
                cells.with_tx(tx).set(items)
                rt.run(tx, Board, {"items": cells}, board)
            cancel = rt.scheduler.sink(board, lambda _value: None)  # keeps it computed
            await rt.idle()
            with store.testing.hold_verdicts() as gate:
                cells.key(2).set(20)
                rt.settle()  # card 2 runs on the pending element
                await turns()
                assert 2 == gate.waiting()
                gate.accept(0)  # the element
                gate.reject(0, Outcome.PERMANENT)  # card 2's output
            await rt.idle()
            assert {"n": 2, "double": 4} == (await board.pull())["cards"][2]
            cancel()

    arun(first)
    CALLS.clear()
    arun(lambda: reopen_board(store))
    assert ("card", 20) in card_calls()


def test_a_second_runtime_on_the_same_store_reuses_what_the_first_computed() -> None:
    store = MemoryStore()
    items = list(range(N))
    arun(lambda: set_up_board(store, items))
    CALLS.clear()
    assert expected_board(items) == arun(lambda: reopen_board(store))
    assert {} == card_calls()


# --------------------------------------------------------------------------- code keys


def _make(source: str, namespace: dict[str, Any]) -> Any:
    exec(compile(source, "<reuse-test>", "exec"), namespace)
    return namespace["f"]


def test_the_code_key_follows_the_code() -> None:
    one = _make("def f(x):\n    return x + 1\n", {"__name__": "m"})
    same = _make("def f(x):\n    return x + 1\n", {"__name__": "m"})
    other = _make("def f(x):\n    return x + 2\n", {"__name__": "m"})
    assert function_key(one) == function_key(same)
    assert function_key(one) != function_key(other)


def test_the_code_key_follows_module_constants_and_helpers() -> None:
    src = "def f(x):\n    return helper(x) * RATE\n"
    helper1 = "def helper(x):\n    return x\n"
    helper2 = "def helper(x):\n    return -x\n"
    base = {"__name__": "m", "RATE": 2}
    ns1: dict[str, Any] = dict(base)
    exec(compile(helper1, "<h>", "exec"), ns1)
    ns2: dict[str, Any] = dict(base)
    exec(compile(helper2, "<h>", "exec"), ns2)
    ns3: dict[str, Any] = dict(base, RATE=3)
    exec(compile(helper1, "<h>", "exec"), ns3)
    keys = {function_key(_make(src, ns)) for ns in (ns1, ns2, ns3)}
    assert 3 == len(keys)
    assert None not in keys


def test_a_function_over_an_object_it_cannot_hash_is_never_reused() -> None:
    held = object()

    def f(x: Any) -> Any:
        return (x, held)

    def g(x: Any, factor: int = 3) -> Any:
        return x * factor

    assert function_key(f) is None
    assert function_key(g) is not None
    assert function_key(collections.Counter) is None  # a class, not a function
    assert function_key(reuse_defs.card) is not None


async def splice_items(store: Any, at: int, x: int, items: list[int]) -> None:
    """A running board sees `x` inserted at `at` (the list gets element ids)."""
    async with Runtime(store, space="t") as rt:
        board = rt.get_cell("board")
        await rt.start(board)
        await rt.get_cell("items").insert(at, x)
        items.insert(at, x)
        assert expected_board(items) == await board.pull()


@pytest.mark.parametrize("spliced", [False, True], ids=["positions", "element-ids"])
def test_a_restart_derives_each_element_child_once(
    spliced: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The start cascade's element pre-sync derives every child a resumed list holds,
    keyed as the coordinator keys them (inline elements by element id once the list was
    spliced); the first reconcile takes those (an id is a SHA-256, and deriving each
    twice cost about a tenth of a restart)."""
    from runner import _lists

    path = tmp_path / "board.db"
    items = list(range(N))
    arun(lambda: set_up_board(SQLiteStore(path), items))
    if spliced:
        arun(lambda: splice_items(SQLiteStore(path), 0, 100, items))
        arun(lambda: splice_items(SQLiteStore(path), 5, 105, items))
    derived: collections.Counter[Any] = collections.Counter()
    real = _lists.child_link

    def counted(kind: str, container: Any, key: Any) -> Any:
        derived[kind, container, key] += 1
        return real(kind, container, key)

    monkeypatch.setattr(_lists, "child_link", counted)
    assert expected_board(items) == arun(lambda: reopen_board(SQLiteStore(path)))
    assert len(items) == len(derived)
    assert {1} == set(derived.values())
