"""Settle outcomes: the one classifier that sorts every way a transaction can end.

Every transaction settles exactly once: committed (`OK`), rejected, or
aborted. `classify(error)` is total: each `CommitRejected` subclass maps to
one outcome and anything else (including an error class invented tomorrow)
is `NON_RETRYABLE`. Retrying is an allow-list (`RETRYABLE`): a new kind of
failure is not retried until someone argues that a re-run can converge.
"""

from __future__ import annotations

from typing import Final

import msgspec

from .errors import (
    CommitRejected,
    ConflictError,
    InvalidArgumentError,
    LivenessError,
    PreconditionFailedError,
    TerminalCommitError,
    TransactionAborted,
)
from .errors import Outcome as Outcome
from .errors import classify as classify

RETRYABLE: Final[frozenset[Outcome]] = frozenset({Outcome.STALE_BASIS, Outcome.LIVENESS})
"""Outcomes `edit_with_retry` retries. ABORTED is not here: an abort is the caller's decision."""


def error_for(outcome: Outcome, message: str) -> CommitRejected:
    """A fresh error of the class that `classify` maps to `outcome` (used by test gates)."""
    if outcome is Outcome.STALE_BASIS:
        return ConflictError(message)
    if outcome is Outcome.PERMANENT:
        return PreconditionFailedError(message)
    if outcome is Outcome.TERMINAL:
        return TerminalCommitError(message)
    if outcome is Outcome.LIVENESS:
        return LivenessError(message)
    if outcome is Outcome.ABORTED:
        return TransactionAborted(message)
    if outcome is Outcome.NON_RETRYABLE:
        return CommitRejected(message)
    raise InvalidArgumentError(f"no rejection error for {outcome!r}")


class CommitResult(msgspec.Struct, frozen=True):
    """What `await tx.commit()` returns: `ok`, the `outcome`, and the `error` if any."""

    outcome: Outcome
    error: BaseException | None = None
    seq: int | None = None
    """The store sequence number the commit got, if it reached the store and was accepted."""

    @property
    def ok(self) -> bool:
        return self.outcome is Outcome.OK
