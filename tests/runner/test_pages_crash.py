"""Pages are durable intent: they survive `kill -9`, and only recorded decisions count.

The crash test runs a real process on a `SQLiteStore` file that opens two
pages, stops one, waits until every page record's verdict is in (`await
rt.idle()`: an accepted verdict is a `synchronous=FULL` commit, on disk) and
then kills itself with SIGKILL: no `close`, no `atexit`, no flush. A new
runtime on the same file must resume exactly the page left open.

The rest pin what "durable intent" must also mean when a record cannot be
written or a recorded page can no longer start; races hold verdicts with the
store's test controls, never sleep.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pathlib
import signal
import subprocess
import sys

from pattern_defs import Child
from support import arun

from cells import MISSING, CellweaveError, MemoryStore, Outcome, SQLiteStore
from runner import Runtime
from runner import _docs as docs

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent.parent

# The process that crashes. Its patterns come from `pattern_defs` (module level, so
# the test process finds them by the same identity, `pattern_defs:Child`).
CRASHING = """
import asyncio, os, signal, sys

from pattern_defs import Child

from cells import SQLiteStore
from runner import Runtime


async def main(path: str) -> None:
    rt = Runtime(SQLiteStore(path))
    kept, stopped = rt.get_cell("kept"), rt.get_cell("stopped")
    tx = rt.edit()
    rt.setup(tx, Child, {"value": 21}, kept)
    rt.setup(tx, Child, {"value": 5}, stopped)
    assert (await tx.commit()).ok
    assert await rt.open_page(kept) is True
    assert await rt.open_page(stopped) is True
    rt.stop(stopped)
    await rt.idle()  # every page record's verdict is in: durable
    assert [kept.id] == [c.id for c in rt.pages()]
    print("recorded", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
    print("still alive", flush=True)


asyncio.run(main(sys.argv[1]))
"""


def crash_after_recording(path: pathlib.Path) -> None:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(HERE), str(REPO), *filter(None, [env.get("PYTHONPATH")])]
    )
    proc = subprocess.run(
        [sys.executable, "-c", CRASHING, str(path)],
        cwd=str(HERE),
        env=env,
        capture_output=True,
        text=True,
        timeout=60,  # a watchdog: the child normally dies within a second
    )
    assert (-signal.SIGKILL, "recorded\n") == (proc.returncode, proc.stdout), proc.stderr


def test_a_page_open_at_kill_9_resumes_and_computes_a_stopped_one_does_not(
    tmp_path: pathlib.Path,
) -> None:
    path = tmp_path / "pages.db"
    crash_after_recording(path)

    async def main() -> None:
        async with Runtime(SQLiteStore(path)) as rt:
            kept, stopped = rt.get_cell("kept"), rt.get_cell("stopped")
            assert frozenset() == rt.registrations()
            resumed = await rt.resume()
            assert [kept.id] == [c.id for c in resumed]
            assert {rt.key(kept)} == rt.registrations() == rt.lifetimes()
            assert 42 == await resumed[0].key("doubled").pull()
            assert [kept.id] == [c.id for c in rt.pages()]
            assert rt.key(stopped) not in rt.registrations()
            rt._check()

    arun(main)


def test_resume_starts_the_other_pages_when_one_can_no_longer_start() -> None:
    """A page recorded open whose pattern can no longer be loaded (its module was renamed,
    say) must not keep the other pages from resuming; reporting it is fine."""
    store = MemoryStore()

    async def first() -> None:
        async with Runtime(store) as rt:
            broken, fine = rt.get_cell("broken"), rt.get_cell("fine")
            tx = rt.edit()
            rt.setup(tx, Child, {"value": 1}, broken)
            rt.setup(tx, Child, {"value": 2}, fine)
            assert (await tx.commit()).ok
            # Recorded first, so resume reaches it before the fine page.
            assert await rt.open_page(broken) is True
            assert await rt.open_page(fine) is True
            # Later, the broken page's pattern is gone (a renamed module, say).
            tx = rt.edit()
            tx.write(broken.doc_key, (docs.PATTERN,), "no_such_module_any_more:Child")
            assert (await tx.commit()).ok

    async def restart() -> None:
        async with Runtime(store) as rt:
            fine = rt.get_cell("fine")
            # Reporting the broken page is fine; abandoning the rest is not.
            with contextlib.suppress(CellweaveError):
                await rt.resume()
            assert rt.key(fine) in rt.registrations()

    arun(first)
    arun(restart)


def test_open_page_reports_success_only_once_its_record_is_durable() -> None:
    async def main() -> None:
        store = MemoryStore()
        async with Runtime(store) as rt:
            page = rt.get_cell("page")
            tx = rt.edit()
            rt.setup(tx, Child, {"value": 1}, page)
            assert (await tx.commit()).ok
            gate = store.testing.hold_verdicts()
            opened = rt.open_page(page)
            while gate.waiting() == 0:
                await asyncio.sleep(0)
            gate.reject(0, Outcome.PERMANENT)  # the page record's commit
            gate.release()
            try:
                ok = await opened
            except CellweaveError:
                ok = False
            await rt.idle()
            pages_doc = docs.pages_link(rt.space).key(rt.identity)
            recorded = store.read_durable(pages_doc) is not MISSING
            # Either the open succeeded and is recorded, or it failed and left nothing running.
            assert (True, True) == (ok, recorded) or (False, frozenset()) == (
                ok,
                rt.lifetimes() | rt.registrations(),
            )

    arun(main)


def test_a_stopped_page_stays_stopped_when_its_stop_record_first_fails() -> None:
    store = MemoryStore()

    async def stop_with_a_conflict() -> None:
        async with Runtime(store) as rt:
            page = rt.get_cell("page")
            tx = rt.edit()
            rt.setup(tx, Child, {"value": 1}, page)
            assert (await tx.commit()).ok
            assert await rt.open_page(page) is True
            await rt.idle()
            gate = store.testing.hold_verdicts()
            rt.stop(page)
            assert 1 == gate.waiting()  # the stop record's commit
            gate.reject(0, Outcome.STALE_BASIS)  # a conflict: retryable
            gate.release()
            await rt.idle()
            assert frozenset() == rt.registrations()

    async def restart() -> None:
        async with Runtime(store) as rt:
            assert [] == await rt.resume()

    arun(stop_with_a_conflict)
    arun(restart)


def test_an_open_whose_first_record_commit_conflicts_retries_and_opens() -> None:
    async def main() -> None:
        store = MemoryStore()
        async with Runtime(store) as rt:
            page = rt.get_cell("page")
            tx = rt.edit()
            rt.setup(tx, Child, {"value": 1}, page)
            assert (await tx.commit()).ok
            with store.testing.hold_verdicts() as gate:
                opened = rt.open_page(page)
                while gate.waiting() == 0:
                    await asyncio.sleep(0)
                gate.reject(0, Outcome.STALE_BASIS)  # retryable: the record is re-issued
            assert await opened is True
            await rt.idle()
            assert [page.id] == [c.id for c in rt.pages()]
            assert {rt.key(page)} == rt.lifetimes()

    arun(main)


def test_a_stop_while_the_page_record_is_pending_wins() -> None:
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
                rt.stop(page)  # before the record landed
            assert await opened is False
            await rt.idle()
            assert frozenset() == rt.registrations()
            assert [] == rt.pages()

    async def restart() -> None:
        async with Runtime(store) as rt:
            assert [] == await rt.resume()

    arun(main)
    arun(restart)


def test_two_principals_may_each_open_a_shared_result_as_a_page() -> None:
    async def main() -> None:
        async with Runtime(principal="service") as rt:
            alice, bob = rt.session("alice", "a1"), rt.session("bob", "b1")
            shared = rt.get_cell("shared")
            tx = rt.edit()
            rt.setup(tx, Child, {"value": 3}, shared)
            assert (await tx.commit()).ok
            assert await alice.open_page(shared) is True
            assert await bob.open_page(shared) is True
            bob.stop(shared)  # closes bob's page; alice's still holds the result
            assert [] == bob.pages() and 1 == len(alice.pages())
            assert rt.key(shared) in rt.registrations()
            alice.stop(shared)
            assert frozenset() == rt.registrations()
            # A user-scoped result: bob's own instance is his, whatever alice opened.
            mine = alice.get_cell("mine", scope="user")
            tx = alice.edit()
            alice.setup(tx, Child, {"value": 1}, mine)
            assert (await tx.commit()).ok
            assert await alice.open_page(mine) is True
            bobs = bob.get_cell("mine", scope="user")
            tx = bob.edit()
            bob.run(tx, Child, {"value": 2}, bobs)
            assert (await tx.commit()).ok
            bob.stop(bobs)  # not alice's page: no OwnershipError
            assert rt.key(bobs) not in rt.registrations()
            rt._check()

    arun(main)
