"""`async with rt.edit() as tx:` and the warning for a transaction dropped uncommitted."""

from __future__ import annotations

import asyncio
import gc
import inspect
import warnings

import pytest

from cells import (
    MISSING,
    CommitRejected,
    DocKey,
    Identity,
    MemoryStore,
    Outcome,
    Replica,
    Space,
    TransactionAborted,
)
from cells.errors import InconsistentBasisError, TerminalCommitError
from runner import Runtime

ME = Identity("local", "local")
DOC = DocKey("sp", "doc")


def test_async_with_commits_on_exit_and_waits_for_the_verdict() -> None:
    async def main() -> tuple[str, object, bool]:
        rt = Runtime()
        c = rt.get_cell("x")
        async with rt.edit() as tx:
            c.with_tx(tx).set(5)
            assert "open" == tx.status
        assert tx.result is not None
        value = c.get()
        rt.close()
        return tx.status, value, tx.result.ok

    assert ("committed", 5, True) == asyncio.run(main())


def test_async_with_aborts_when_the_block_raises_and_reraises_that_exception() -> None:
    boom = KeyError("boom")

    async def main() -> None:
        rt = Runtime()
        c = rt.get_cell("x")
        try:
            async with rt.edit() as tx:
                c.with_tx(tx).set(5)
                raise boom
        except KeyError as exc:
            assert exc is boom
            assert "aborted" == tx.status
            assert tx.result is not None and Outcome.ABORTED == tx.result.outcome
            assert isinstance(tx.result.error, TransactionAborted)
            assert boom is tx.result.error.reason
            assert MISSING is c.get()  # nothing was written
        else:
            raise AssertionError("the block's exception was swallowed")
        rt.close()

    asyncio.run(main())


def test_async_with_raises_the_rejection_when_the_store_rejects_the_commit() -> None:
    store = MemoryStore()

    async def main() -> None:
        replica = Replica(store)
        replica.mailbox.attach(asyncio.get_running_loop())
        with store.testing.hold_verdicts() as gate:
            asyncio.get_running_loop().call_soon(gate.reject, 0, Outcome.TERMINAL)
            with pytest.raises(TerminalCommitError) as caught:
                async with replica.edit(ME) as tx:
                    tx.write(DOC, ("value",), 1)
        assert Outcome.TERMINAL == caught.value.outcome
        assert isinstance(caught.value, CommitRejected)
        assert "rejected" == tx.status
        replica.close()

    asyncio.run(main())


def test_async_with_raises_a_local_basis_failure_as_commit_rejected() -> None:
    async def main() -> None:
        sp = Space(MemoryStore(), "sp")
        c = sp.cell("doc")
        with pytest.raises(CommitRejected) as caught:
            async with sp.edit() as tx:
                tx.read(c.doc_key)
                c.set(1)  # another transaction changes what `tx` read
                tx.write(c.doc_key, ("value",), 2)
        assert isinstance(caught.value, InconsistentBasisError)
        assert Outcome.STALE_BASIS == caught.value.outcome
        sp.replica.close()

    asyncio.run(main())


def test_async_with_leaves_a_transaction_the_block_aborted_alone() -> None:
    async def main() -> str:
        sp = Space(MemoryStore(), "sp")
        async with sp.edit() as tx:
            tx.write(DOC, ("value",), 1)
            tx.abort("changed my mind")
        sp.replica.close()
        return tx.status

    assert "aborted" == asyncio.run(main())


def test_dropping_a_transaction_with_staged_writes_warns_naming_the_opening_line() -> None:
    rt = Runtime()
    c = rt.get_cell("x")
    with pytest.warns(ResourceWarning, match="staged writes") as record:
        opened_at = inspect.currentframe().f_lineno + 1  # type: ignore[union-attr]
        tx = rt.edit()
        c.with_tx(tx).set(5)
        del tx
        gc.collect()
    (warning,) = [w for w in record if w.category is ResourceWarning]
    assert (__file__, opened_at) == (warning.filename, warning.lineno)
    assert f"opened at {__file__}:{opened_at}" in str(warning.message)
    assert str(c.doc_key) in str(warning.message)
    rt.close()


def test_dropping_a_transaction_that_only_read_or_settled_does_not_warn() -> None:
    sp = Space(MemoryStore(), "sp")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        reader = sp.edit()
        reader.read(DOC)
        aborted = sp.edit()
        aborted.write(DOC, ("value",), 1)
        aborted.abort("no")
        committed = sp.edit()
        committed.write(DOC, ("value",), 2)
        committed.commit()
        sp.replica.pump()
        del reader, aborted, committed
        gc.collect()
    sp.replica.close()
