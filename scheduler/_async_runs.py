"""Async runs: a node whose function returned an awaitable commits when it ends.

The run's transaction, holding what the node read before its first await,
stays open while the awaitable runs in a task (`AsyncWork`, one per node: a
newer run supersedes an older one). When it completes the transaction is
committed: its basis is those reads, so a result computed from inputs that
changed meanwhile fails the commit as STALE_BASIS and the node runs again.
A run that raised makes the node failing, as a sync run's would. Without a
running event loop the run fails (nothing could ever await it).

Invariants: a run's transaction is open until its coroutine ends, is
superseded, or is cancelled, and then it is committed or aborted, never left.
Not here: the task table (`_async`), or handlers' async handling (`_dispatch`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs

from cells import Transaction

from ._host import Host
from ._node import Node

if TYPE_CHECKING:
    import asyncio  # at run time only where a loop runs (it is loaded then): see running_loop


@attrs.define(slots=True, eq=False, weakref_slot=False)
class AsyncRuns:
    """Starts and finishes the async runs of one scheduler's nodes."""

    _host: Host

    def start(self, node: Node, tx: Transaction, awaitable: Any) -> None:
        """Run `node`'s awaitable in a task (superseding its previous one); commit `tx`
        when it completes."""
        _start(self._host, node, tx, awaitable)


def _start(host: Host, node: Node, tx: Transaction, awaitable: Any) -> None:
    task = host.work.start(
        node,
        _finish(host, node, tx, awaitable),
        node.label,
        awaitable,
        hint=" (await rt.idle(), pull() or send's handle instead of settle())",
    )

    def ended(_task: asyncio.Task[None]) -> None:
        # (also for a task cancelled before its first step, which ran none of its body)
        if tx.is_open:
            tx.abort(f"{node.label}: its coroutine was cancelled")

    task.add_done_callback(ended)


async def _finish(host: Host, node: Node, tx: Transaction, awaitable: Any) -> None:
    import asyncio  # loaded: this coroutine runs on a loop

    task = asyncio.current_task()
    work = host.work
    try:
        await awaitable
    except Exception as exc:
        if tx.is_open:
            tx.abort(f"{node.label} raised")
        if work.current(node, task) and node.registered:
            work.release(node, task)
            host._fail(node, exc)
            host._report_failures()
            host._kick()
        return
    if not (work.current(node, task) and node.registered and tx.is_open):
        if tx.is_open:
            tx.abort(f"{node.label}: superseded")
        return
    work.release(node, task)
    host._recovered(node)
    host._commit_run(node, tx)
    host._kick()
