"""Access: which documents a transaction acting for an identity may touch.

A transaction acts for one resolution identity `(principal, session)`. It may
read and write exactly the document instances that identity resolves to:

- every space-scoped document (one shared instance);
- the user-scoped instances of its own principal;
- the session-scoped instances of its own principal *and* session.

Documents whose id starts with `INTERNAL_PREFIX` hold the runtime's own
bookkeeping (page records, event receipts). No identity reaches them: only a
transaction opened with the replica's `Authority` does. Their ids come from
`internal_id(cause)`, which `entity_id` (ids start with "of:") never produces.

The check runs once per document and transaction, at its first access (a
read, a peek, a write, a splice or a create-only mark), before anything is
staged: O(1), a few comparisons of strings a `DocKey` already holds.

Invariants
- `reaches(identity, key)` is False for every internal key, whatever the identity;
- a replica hands out its `Authority` at most once (`Replica.claim_authority`).
"""

from __future__ import annotations

from typing import Any, Final

from ._address import DocKey, Identity
from ._codec import entity_id
from .errors import OwnershipError

INTERNAL_PREFIX: Final = "cw:"
"""Ids of the runtime's internal documents start with this; user documents never do."""


def internal_id(cause: Any) -> str:
    """The id of an internal (runtime bookkeeping) document derived from `cause`.

    Deterministic like `entity_id`, and never equal to any `entity_id`: the two
    prefixes differ, so no user cause can name an internal document.
    """
    return INTERNAL_PREFIX + entity_id(cause)[3:]


def is_internal(key: DocKey) -> bool:
    """Whether `key` names one of the runtime's internal documents. O(1)."""
    return key.id.startswith(INTERNAL_PREFIX)


def reaches(identity: Identity, key: DocKey) -> bool:
    """Whether a transaction acting for `identity` may read or write `key`. O(1)."""
    if "cw:" <= key.id < "cw;":  # (`startswith(INTERNAL_PREFIX)`, without a method call)
        return False
    scope = key.scope
    if scope == "space":
        return True
    if key.principal != identity.principal:
        return False
    return scope == "user" or key.session == identity.session


def refusal(identity: Identity, key: DocKey, what: str) -> OwnershipError:
    """The error for a transaction acting for `identity` that tried to `what` `key`."""
    who = f"{identity.principal!r}/{identity.session!r}"
    if key.id.startswith(INTERNAL_PREFIX):
        why = "it holds the runtime's internal bookkeeping, which no identity may touch"
    elif key.scope == "user":
        why = f"it is user-scoped to {key.principal!r}"
    else:
        why = f"it is session-scoped to {key.principal!r}/{key.session!r}"
    return OwnershipError(f"cannot {what} {key}: the transaction acts for {who}, and {why}")


class Authority:
    """The capability to open transactions that reach every document, internal ones too.

    One per replica, handed out once by `Replica.claim_authority()` to whoever
    runs the replica (a `Runtime` claims it as it starts and keeps it private),
    so user code holding a `Session`, a cell or a transaction has no way to it.
    Transactions opened with it serve the runtime's own bookkeeping: page
    records, event receipts.
    """

    __slots__ = ()

    def __repr__(self) -> str:
        return "<Authority>"
