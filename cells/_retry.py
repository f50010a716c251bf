"""Retrying a transaction: re-run it on fresh state while its outcome allows a retry.

Retry is an allow-list (`RETRYABLE`: STALE_BASIS and LIVENESS); every other
outcome is final.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ._address import Identity
from ._args import bad_arg, check_arg, check_callable
from ._outcome import RETRYABLE, CommitResult
from ._replica import Replica
from ._transaction import Transaction


async def edit_with_retry(
    replica: Replica,
    identity: Identity,
    fn: Callable[[Transaction], Any],
    *,
    attempts: int = 5,
) -> CommitResult:
    """Run `fn(tx)` in a fresh transaction and commit; retry only allow-listed outcomes.

    Retries happen for `RETRYABLE` outcomes (STALE_BASIS, LIVENESS) up to
    `attempts` times in all; every other outcome is returned at once.
    """
    where = "edit_with_retry()"
    check_arg(replica, Replica, where=where, name="replica", accepts="a Replica")
    check_arg(identity, Identity, where=where, name="identity", accepts="an Identity")
    check_callable(fn, where=where, name="fn")
    check_arg(attempts, int, where=where, name="attempts", accepts="an int >= 1")
    if attempts < 1:
        raise bad_arg(attempts, where=where, name="attempts", accepts="an int >= 1", kind="value")
    result: CommitResult | None = None
    for _ in range(attempts):
        tx = replica.edit(identity)
        try:
            fn(tx)
        except BaseException:
            if tx.is_open:  # every transaction settles, also when `fn` raises
                tx.abort("edit_with_retry: fn raised")
            raise
        if tx.status == "aborted":
            assert tx.result is not None
            return tx.result
        result = await tx.commit()
        if result.ok or result.outcome not in RETRYABLE:
            return result
    assert result is not None
    return result
