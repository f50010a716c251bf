"""Cold resume for list coordinators: documents a reconcile waits for.

A list document that has not loaded yet is never read as "empty", and an
element whose result document is loading keeps its setup owed. Each awaited
document gets one sync per identity's `State`, shared by every reconcile
meanwhile; when it ends, that identity's reconcile runs again (`rerun`).
"""

from __future__ import annotations

from collections.abc import Callable

from cells import DocKey, Pending, Replica, Transaction

from ._list_state import State
from ._trace import LifecycleTrace


def loaded(replica: Replica, tx: Transaction, key: DocKey) -> bool:
    """Whether `key` is loaded (touching it first: a document nobody asked for yet loads
    now unless the store answers later)."""
    if replica.is_loaded(key):
        return True
    tx.peek(key)
    return replica.is_loaded(key)


def await_load(
    replica: Replica,
    trace: LifecycleTrace,
    state: State,
    key: DocKey,
    rerun: Callable[[State], None],
    *,
    report: bool = False,
) -> None:
    """Load `key` and `rerun` the state's reconcile once it has: one sync per document,
    shared by every reconcile meanwhile, and counted as awaited only while it runs.

    A failed load runs again only to `report` it (the list's): the failure is kept for
    that reconcile to raise. Otherwise it is traced and the next reconcile loads the
    document again, so a store that keeps failing makes no loop.
    """
    if key in state.syncing:
        return
    state.syncing.add(key)

    def done(pending: Pending[None]) -> None:
        state.syncing.discard(key)
        try:
            pending.result()
        except Exception as exc:
            trace.record("load-failed", key, error=type(exc).__name__)
            if not report:
                return
            state.load_errors[key] = exc
        rerun(state)

    replica.sync([key]).add_done_callback(done)
