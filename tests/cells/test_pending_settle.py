"""A `Pending` is resolved by the code that made it, through its public methods."""

from __future__ import annotations

import asyncio

import pytest

from cells import Pending, TransactionError


def test_set_result_resolves_and_runs_callbacks_at_once() -> None:
    p: Pending[int] = Pending()
    seen: list[int] = []
    p.add_done_callback(lambda q: seen.append(q.result()))
    assert not p.done()
    p.set_result(7)
    assert p.done() and p.result() == 7 and seen == [7]
    assert asyncio.run(_await(p)) == 7


def test_set_exception_makes_every_reader_raise_it() -> None:
    p: Pending[int] = Pending()
    p.set_exception(LookupError("gone"))
    with pytest.raises(LookupError, match="gone"):
        p.result()
    with pytest.raises(LookupError, match="gone"):
        asyncio.run(_await(p))


def test_a_second_resolve_is_refused() -> None:
    p: Pending[int] = Pending()
    p.set_result(1)
    with pytest.raises(TransactionError, match="resolved twice"):
        p.set_result(2)
    with pytest.raises(TransactionError, match="resolved twice"):
        p.set_exception(ValueError("late"))
    assert p.result() == 1


async def _await(p: Pending[int]) -> int:
    return await p
