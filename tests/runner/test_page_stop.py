"""Stopping a page: acknowledged only once durable, and the page records stay small.

Issue 13, item 5: `rt.stop(page)` returned before the page's record said it
was closed, so a kill right after a stop could bring the page back on
`resume()`, and a closed record that failed for good was dropped silently
(the page stayed listed, and was resumed). Now the stop returns a `Pending`
that resolves once the removal of the page's record is durable, raises if it
failed for good, and the page is then reported stop-failed.

Issue 13, item 6: every page record ever written stayed in the principal's
pages document, so an open and a stop cost O(pages ever opened). Now closed
records are removed, and `resume()` drops the ones an older version left.

Races are pinned by holding the store's verdicts; nothing sleeps.
"""

from __future__ import annotations

import asyncio
import pathlib

import pytest
from pattern_defs import Child
from support import arun

from cells import MISSING, Cell, CommitRejected, MemoryStore, Outcome, Pending, SQLiteStore
from runner import Runtime
from runner import _docs as docs


async def _open(rt: Runtime, name: str, value: int = 1) -> Cell:
    page = rt.get_cell(name)
    tx = rt.edit()
    rt.setup(tx, Child, {"value": value}, page)
    assert (await tx.commit()).ok
    assert await rt.open_page(page) is True
    await rt.idle()
    return page


def _records(store: MemoryStore | SQLiteStore, rt: Runtime) -> dict[str, object]:
    """The page records durable in the store (none if the document was never written)."""
    doc = store.read_durable(docs.pages_link(rt.space).key(rt.identity))
    if doc is MISSING:
        return {}
    assert isinstance(doc, dict), doc
    records = doc.get(docs.VALUE, {})
    assert isinstance(records, dict), records
    return records


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_a_page_stop_resolves_only_once_its_record_is_durable(
    kind: str, tmp_path: pathlib.Path
) -> None:
    store = MemoryStore() if kind == "memory" else SQLiteStore(tmp_path / "pages.db")

    async def main() -> None:
        async with Runtime(store) as rt:
            page = await _open(rt, "page")
            with store.testing.hold_verdicts() as gate:
                stopped = rt.stop(page)
                assert isinstance(stopped, Pending)
                # Decision before cleanup: the work has ended, the record is on its way.
                assert frozenset() == rt.registrations() | rt.lifetimes()
                assert [] == rt.pages()
                assert 1 == gate.waiting()
                await asyncio.sleep(0)
                assert not stopped.done()  # not acknowledged while its verdict is held
                gate.accept(0)
            assert await stopped is None  # type: ignore[func-returns-value]
            assert {} == _records(store, rt)

    async def restart() -> None:
        async with Runtime(store) as rt:
            assert [] == await rt.resume()

    arun(main)
    arun(restart)


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_a_page_stop_that_fails_for_good_raises_and_the_page_says_so(
    kind: str, tmp_path: pathlib.Path
) -> None:
    store = MemoryStore() if kind == "memory" else SQLiteStore(tmp_path / "pages.db")

    async def main() -> None:
        async with Runtime(store) as rt:
            page = await _open(rt, "page")
            with store.testing.hold_verdicts() as gate:
                stopped = rt.stop(page)
                assert 1 == gate.waiting()
                gate.reject(0, Outcome.PERMANENT)  # not retryable: it fails for good
            with pytest.raises(CommitRejected):
                await stopped
            await rt.idle()
            # Still recorded open in the store, but stopped here: not listed as open, not
            # resumed by this runtime, and shown as stop-failed.
            assert [] == rt.pages()
            assert [] == await rt.resume()
            assert frozenset() == rt.registrations()
            failed = rt.inspect()["pages_stop_failed"]
            assert [str(page.link())] == [f["page"] for f in failed]
            assert "PreconditionFailedError" in failed[0]["error"]
            rt._check()

    async def restart_then_stop_again() -> None:
        async with Runtime(store) as rt:
            # The stop was never acknowledged: a new runtime sees the page open.
            page = rt.get_cell("page")
            assert [page.id] == [c.id for c in await rt.resume()]
            assert None is await rt.stop(page)  # type: ignore[func-returns-value]

    async def restart_after_the_retry() -> None:
        async with Runtime(store) as rt:
            assert [] == await rt.resume()

    arun(main)
    arun(restart_then_stop_again)
    arun(restart_after_the_retry)
    store.close()


def test_stopping_a_stop_failed_page_again_retries_its_record() -> None:
    store = MemoryStore()

    async def main() -> None:
        async with Runtime(store) as rt:
            page = await _open(rt, "page")
            with store.testing.hold_verdicts() as gate:
                first = rt.stop(page)
                gate.reject(0, Outcome.TERMINAL)
            with pytest.raises(CommitRejected):
                await first
            assert 1 == len(rt.inspect()["pages_stop_failed"])
            assert None is await rt.stop(page)  # type: ignore[func-returns-value]
            assert [] == rt.inspect()["pages_stop_failed"]
            assert {} == _records(store, rt)
            rt._check()

    async def restart() -> None:
        async with Runtime(store) as rt:
            assert [] == await rt.resume()

    arun(main)
    arun(restart)


def test_an_open_record_retried_after_a_conflict_never_undoes_an_acknowledged_stop() -> None:
    """The open's record commit conflicts while a stop of the same page is on its way:
    the retry of the open must not be re-issued after the stop's removal."""
    store = MemoryStore()

    async def main() -> None:
        async with Runtime(store) as rt:
            page = rt.get_cell("page")
            tx = rt.edit()
            rt.setup(tx, Child, {"value": 1}, page)
            assert (await tx.commit()).ok
            with store.testing.hold_verdicts() as gate:
                opened = rt.open_page(page)
                while gate.waiting() == 0:
                    await asyncio.sleep(0)
                stopped = rt.stop(page)
                assert 2 == gate.waiting()  # the open's record, then the stop's removal
                gate.reject(0, Outcome.STALE_BASIS)  # the open's: retryable
                await asyncio.sleep(0)
            assert await opened is False
            assert None is await stopped  # type: ignore[func-returns-value]  # acknowledged
            await rt.idle()
            assert {} == _records(store, rt)

    async def restart() -> None:
        async with Runtime(store) as rt:
            assert [] == await rt.resume()

    arun(main)
    arun(restart)


def test_stop_works_without_a_running_loop_and_for_results_that_are_not_pages() -> None:
    store = MemoryStore()
    rt = Runtime(store)

    async def set_up() -> Cell:
        return await _open(rt, "page")

    page = arun(set_up)
    plain = rt.get_cell("plain")
    tx = rt.edit()
    rt.run(tx, Child, {"value": 2}, plain)
    tx.commit().wait()
    # A plain script: no loop runs; the stop's result may be ignored or waited on.
    not_a_page = rt.stop(plain)
    assert not_a_page.done() and None is not_a_page.result()
    assert None is rt.stop(page).wait()
    assert frozenset() == rt.registrations()
    rt.close()
    assert {} == _records(store, rt)


def test_closed_page_records_are_removed_so_the_pages_document_stays_small(
    tmp_path: pathlib.Path,
) -> None:
    path = tmp_path / "pages.db"

    async def churn() -> None:
        store = SQLiteStore(path)
        async with Runtime(store) as rt:
            kept = await _open(rt, "kept")
            for i in range(20):
                page = await _open(rt, f"page {i}", i)
                await rt.stop(page)
            assert [docs.page_id(kept.link())] == list(_records(store, rt))
            # Nothing in memory grows with the pages ever opened either.
            book = rt._pages_book
            assert (1, {}) == (len(book.by_pid), book.stop_failed)
        store.close()

    arun(churn)


def test_resume_drops_the_closed_records_an_older_version_kept() -> None:
    store = MemoryStore()

    async def older_version() -> None:
        async with Runtime(store) as rt:
            page = await _open(rt, "open one")
            closed = rt.get_cell("closed one")
            # What a stop used to leave behind: the record, marked closed, forever. (The
            # records are internal documents: only the runtime's authority writes them.)
            tx = rt.replica.edit(rt.identity, authority=rt._authority)
            record = {"target": closed.link(), "open": False, "session": "local", "via": "stop"}
            pages_doc = docs.pages_link(rt.space).key(rt.identity)
            tx.write(pages_doc, (docs.VALUE, docs.page_id(closed.link())), record)
            tx.write(pages_doc, (docs.VALUE, "withdrawn"), None)
            assert (await tx.commit()).ok
            assert 3 == len(_records(store, rt))
            assert [page.id] == [c.id for c in rt.pages()]

    async def restart() -> None:
        async with Runtime(store) as rt:
            resumed = await rt.resume()
            await rt.idle()
            assert [rt.get_cell("open one").id] == [c.id for c in resumed]
            assert [docs.page_id(rt.get_cell("open one").link())] == list(_records(store, rt))

    arun(older_version)
    arun(restart)


def test_a_stop_closes_a_page_that_another_runtime_opened() -> None:
    """A runtime that neither opened nor resumed a page still closes its record when it
    stops the page: otherwise the stop resolves, and the page comes back on resume()."""
    store = MemoryStore()

    async def open_two() -> None:
        async with Runtime(store) as rt:
            await _open(rt, "one")
            await _open(rt, "two", 2)

    async def stop_both_elsewhere() -> None:
        async with Runtime(store) as rt:
            one, two = rt.get_cell("one"), rt.get_cell("two")
            stopped = rt.stop(one)  # the pages document is not loaded here yet
            assert not stopped.done()
            assert None is await stopped  # type: ignore[func-returns-value]
            assert [two.id] == [c.id for c in rt.pages()]  # loaded by now
            assert None is await rt.stop(two)  # type: ignore[func-returns-value]
            assert {} == _records(store, rt)

    async def restart() -> None:
        async with Runtime(store) as rt:
            assert [] == await rt.resume()

    arun(open_two)
    arun(stop_both_elsewhere)
    arun(restart)
