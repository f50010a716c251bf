"""Cells and transactions of another runtime: refused across stores, linked as
themselves on the same store (issue 15 item 9)."""

from __future__ import annotations

import asyncio

import pytest
from pattern_defs import Child

from cells import InvalidArgumentError, MemoryStore
from runner import Runtime


def test_a_cell_of_another_store_in_a_run_argument_is_refused_naming_both() -> None:
    a, b = Runtime(MemoryStore()), Runtime(MemoryStore())
    theirs = b.get_cell("value")
    tx = a.edit()
    with pytest.raises(InvalidArgumentError) as caught:
        a.run(tx, Child, {"value": theirs}, a.get_cell("r"))
    message = str(caught.value)
    assert b.replica.session_id in message and a.replica.session_id in message
    assert repr(theirs) in message
    assert frozenset() == a.registrations()
    tx.abort("refused")


def test_a_cell_of_another_store_nested_in_the_argument_is_refused() -> None:
    a, b = Runtime(MemoryStore()), Runtime(MemoryStore())
    tx = a.edit()
    with pytest.raises(InvalidArgumentError):
        a.setup(tx, Child, {"value": {"items": [1, b.get_cell("x")]}}, a.get_cell("r"))
    tx.abort("refused")


def test_a_result_cell_of_another_store_is_refused() -> None:
    a, b = Runtime(MemoryStore()), Runtime(MemoryStore())
    tx = a.edit()
    with pytest.raises(InvalidArgumentError):
        a.run(tx, Child, {"value": 1}, b.get_cell("r"))
    tx.abort("refused")
    with pytest.raises(InvalidArgumentError):
        a.key(b.get_cell("r"))
    with pytest.raises(InvalidArgumentError):
        a.stop(b.get_cell("r"))


def test_a_transaction_of_another_runtime_is_refused_on_any_store() -> None:
    store = MemoryStore()
    a, same, other = Runtime(store), Runtime(store), Runtime(MemoryStore())
    for b in (same, other):
        tx = b.edit()
        with pytest.raises(InvalidArgumentError) as caught:
            a.run(tx, Child, {"value": 1}, a.get_cell("r"))
        assert b.replica.session_id in str(caught.value)
        assert a.replica.session_id in str(caught.value)
        tx.abort("refused")
    assert frozenset() == a.registrations()


def test_with_tx_refuses_a_transaction_of_another_store() -> None:
    a, b = Runtime(MemoryStore()), Runtime(MemoryStore())
    tx = a.edit()
    with pytest.raises(InvalidArgumentError, match="another store"):
        b.get_cell("x").with_tx(tx).set(5)
    assert 0 == len(tx.documents())  # nothing was staged into a's store
    tx.abort("refused")
    with pytest.raises(InvalidArgumentError):
        a.get_cell("y").set(b.get_cell("x"))  # a link to another store's document


def test_a_cell_of_another_runtime_on_the_same_store_is_linked_as_itself() -> None:
    async def main() -> tuple[object, object]:
        store = MemoryStore()
        a = Runtime(store, space="a")
        b = Runtime(store, space="b")
        async with b.edit() as tx:
            b.get_cell("value").with_tx(tx).set(21)
        a.get_cell("value").set(1000)  # a's own cell of the same name: not this one
        await a.idle()
        await b.idle()
        result = a.get_cell("r")
        async with a.edit() as tx:
            a.run(tx, Child, {"value": b.get_cell("value")}, result)
        doubled = await result.key("doubled").pull()
        # b's cell used with a's transaction writes b's document (same store).
        async with a.edit() as tx:
            b.get_cell("value").with_tx(tx).set(4)
        await a.idle()
        again = await result.key("doubled").pull()
        await a.aclose()
        await b.aclose()
        return doubled, again

    assert (42, 8) == asyncio.run(main())
