"""One exception hierarchy for cellweave.

Every error the library raises on purpose derives from `CellweaveError`, mixed
with the builtin a user would naturally catch (`InvalidValueError` is also a
`ValueError`). Messages name the object, the value and the place.

Commit rejections carry the `Outcome` a classifier assigns them (`classify`,
at the end of this module, beside the classes it sorts); `CommitRejected` is
their common base.
"""

from __future__ import annotations

import enum
from typing import Any, Final


class CellweaveError(Exception):
    """Base of every error cellweave raises on purpose."""


class InternalError(CellweaveError, AssertionError):
    """An internal invariant broke. This is a bug in cellweave; please report it."""


class InvalidValueError(CellweaveError, ValueError):
    """A value is not JSON-like (or a path is not usable) at a write boundary.

    `path` is the place inside the value (or document) where the problem is,
    `value` the offending value.
    """

    def __init__(self, message: str, *, path: tuple[str | int, ...] = (), value: Any = None):
        super().__init__(message)
        self.path = path
        self.value = value


class InvalidArgumentError(CellweaveError, ValueError):
    """An argument has a usable type but a value the call cannot take (a negative
    duration, `attempts=0`, an unknown mode). Also a `ValueError`, so existing
    `except ValueError` keeps working."""


class ArgumentTypeError(InvalidArgumentError, InvalidValueError, TypeError):
    """A public call got an argument of a type it does not accept (a str where a
    `Transaction` belongs, a list where a path tuple belongs).

    Also a `TypeError`, and an `InvalidArgumentError` and `InvalidValueError` (so a
    `ValueError`): code catching any of them catches it. The message names the
    call, the argument, what it accepts and what it got; `value` is the argument.
    """


class LinkCycleError(CellweaveError, RuntimeError):
    """Following links came back to a place it had already visited, or took too many hops."""

    def __init__(self, message: str, *, chain: tuple[str, ...] = ()):
        super().__init__(message)
        self.chain = chain


class TransactionError(CellweaveError, RuntimeError):
    """A transaction was used in a way its state does not allow (written after commit)."""


class StoreError(CellweaveError, RuntimeError):
    """A store could not do what was asked (it is closed, its file is unusable, ...)."""


class CorruptStoreError(StoreError):
    """A store file is not a cellweave store, or is damaged. The file is left untouched."""


class CommitRejected(CellweaveError, RuntimeError):
    """Base of every reason a commit did not become durable.

    Subclasses map one-to-one onto `Outcome` values; `classify(error)` reads
    the mapping, and anything else is `Outcome.NON_RETRYABLE`.
    """

    @property
    def outcome(self) -> Outcome:
        """The outcome this rejection stands for (`classify(self)`)."""
        return classify(self)


class ConflictError(CommitRejected):
    """The store saw a write, since this transaction's basis, that overlaps something it read.

    Outcome: STALE_BASIS. Re-running against fresher state can succeed.
    """


class InconsistentBasisError(CommitRejected):
    """Locally, a document the transaction read changed between its first read and commit.

    Outcome: STALE_BASIS. Nothing was applied and nobody was notified.
    """


class DependencyRejectedError(CommitRejected):
    """An earlier commit of this replica that this one was built on was rejected.

    Outcome: STALE_BASIS (the cascade of a dropped layer).
    """


class PreconditionFailedError(CommitRejected):
    """A commit-time precondition failed, for example a create-only document already exists.

    Outcome: PERMANENT. Retrying the same commit fails the same way.
    """

    def __init__(self, message: str, *, kind: str = "receipt-exists"):
        super().__init__(message)
        self.kind = kind


class FencedError(PreconditionFailedError):
    """A commit of a claimed page's run carried a fence older than the page's newest claim:
    another process took the page over, so this one may no longer write for it.

    Outcome: PERMANENT (`kind="fenced"`). Retrying cannot succeed: the writer lost the page.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message, kind="fenced")


class TerminalCommitError(CommitRejected):
    """The store refuses the data itself. Outcome: TERMINAL."""


class LivenessError(CommitRejected):
    """The commit or load was never evaluated (connection lost, load failed). Outcome: LIVENESS."""


class TransactionAborted(CommitRejected):
    """The transaction was aborted before it became durable. Outcome: ABORTED."""

    def __init__(self, message: str, *, reason: object = None):
        super().__init__(message)
        self.reason = reason


class OwnershipError(CellweaveError, PermissionError):
    """An identity acted on what is not its own: another principal's (or session's)
    scoped document, the runtime's internal documents, another principal's run or
    page; or an action was attempted without an identity.

    `runner.OwnershipError` is this same class.
    """


# --------------------------------------------------------------------------- outcomes


class Outcome(enum.Enum):
    """How a transaction settled."""

    OK = "ok"
    STALE_BASIS = "stale-basis"
    """A conflict or a local inconsistency: a re-run against fresher state can succeed."""
    PERMANENT = "permanent"
    """A commit-time precondition failed (a create-only document already exists)."""
    TERMINAL = "terminal"
    """The store refuses the data itself."""
    LIVENESS = "liveness"
    """Never evaluated (connection lost, a load failed)."""
    ABORTED = "aborted"
    """`abort()` was called before the commit."""
    NON_RETRYABLE = "non-retryable"
    """Everything else, including every unknown error."""

    def __repr__(self) -> str:
        return f"Outcome.{self.name}"


_BY_CLASS: Final[tuple[tuple[type[BaseException], Outcome], ...]] = (
    (ConflictError, Outcome.STALE_BASIS),
    (InconsistentBasisError, Outcome.STALE_BASIS),
    (DependencyRejectedError, Outcome.STALE_BASIS),
    (PreconditionFailedError, Outcome.PERMANENT),
    (TerminalCommitError, Outcome.TERMINAL),
    (LivenessError, Outcome.LIVENESS),
    (TransactionAborted, Outcome.ABORTED),
)


def classify(error: BaseException | None) -> Outcome:
    """The outcome for `error` (`None` means success). Total: unknown errors are NON_RETRYABLE."""
    if error is None:
        return Outcome.OK
    for cls, outcome in _BY_CLASS:
        if isinstance(error, cls):
            return outcome
    return Outcome.NON_RETRYABLE
