"""Argument checks and the principal boundary of the public `Runtime` / `Session` calls.

Every public call checks its arguments before it does anything and raises a
cellweave error naming the call, the argument, what it accepts and what it
got (`ArgumentError` for a wrong type, `OwnershipError` for something that
belongs to another identity). Without these a wrong type surfaced as an
`AttributeError` deep inside, or was ignored (`stop(cell, generation="1")`).

The principal boundary, as the calls apply it:

- A cell handed to a call acting for identity I must name a document
  instance that I resolves to: a `Cell` made for another principal (or
  session) of a user- (session-) scoped document is refused, never silently
  re-pointed at I's own instance.
- A session's stop or release acting for I may end only what I's principal
  launched or opened. A registration none of whose instances runs for that
  principal is refused, and so is, with nothing registered, a key whose
  pending starts or starts in flight another principal scheduled; this is
  decided before any generation is looked at (generations are fences, not
  secrets). A registration that runs for that principal and others loses only
  that principal's instances (`Runner.let_go`); one that runs for that
  principal alone ends as the runtime's own stop or release would end it.
- The runtime's own calls (`rt.stop`, `rt.release`, `rt.stop_all`) are the
  operator's and may end any run; pages stay their principal's for everyone.

Not here: the transaction-level check (every read and write of a transaction
acting for an identity, `cells._access`), or page records (`_pages`).
"""

from __future__ import annotations

from cells import Cell, DocKey, Identity, OwnershipError, Transaction

from . import _docs as docs
from .errors import ArgumentError


def check_cell(value: object, call: str, arg: str = "cell") -> Cell:
    if not isinstance(value, Cell):
        raise ArgumentError(
            f"{call}: {arg} must be a Cell (rt.get_cell(...) or a result), got"
            f" {type(value).__name__} {value!r}"
        )
    return value


def check_tx(value: object, call: str, *, optional: bool = False) -> Transaction | None:
    if value is None and optional:
        return None
    if not isinstance(value, Transaction):
        accepts = "a Transaction (rt.edit()) or None" if optional else "a Transaction (rt.edit())"
        raise ArgumentError(f"{call}: tx must be {accepts}, got {type(value).__name__} {value!r}")
    return value


def check_bool(value: object, call: str, arg: str) -> bool:
    if type(value) is not bool:
        raise ArgumentError(f"{call}: {arg} must be True or False, got {value!r}")
    return value


def check_optional_str(value: object, call: str, arg: str) -> str | None:
    if value is not None and (type(value) is not str or not value):
        raise ArgumentError(f"{call}: {arg} must be a non-empty str or None, got {value!r}")
    return value


def check_generation(value: object, call: str) -> int | None:
    # bool is an int subclass: True would otherwise fence on generation 1.
    if value is not None and type(value) is not int:
        raise ArgumentError(
            f"{call}: generation must be an int (a Registration's .generation) or None,"
            f" got {type(value).__name__} {value!r}"
        )
    return value


def check_name(value: object, what: str) -> str:
    """A principal or session name: a non-str is a wrong argument; an empty one is a
    missing identity, refused as such (DESIGN §4.3 item 5)."""
    if not isinstance(value, str):
        raise ArgumentError(
            f"Runtime: {what} must be a non-empty str, got {type(value).__name__} {value!r}"
        )
    if not value:
        raise OwnershipError(f"Runtime: {what} must be a non-empty str, got {value!r}")
    return value


def owner(key: DocKey) -> str:
    return repr(key.principal) if key.scope == "user" else f"{key.principal!r}/{key.session!r}"


def own_cell(identity: Identity, cell: Cell, call: str) -> DocKey:
    """The registration key `cell` names for `identity`; `OwnershipError` if the cell was
    made for another identity whose instance of it `identity` does not reach. O(1)."""
    root = docs.root(cell.link())
    key = root.key(identity)
    if cell.identity != identity:
        theirs = root.key(cell.identity)
        if theirs != key:
            me = owner(key) if key.scope != "space" else repr(identity.principal)
            raise OwnershipError(
                f"{call}: cannot act on {theirs}: it belongs to {owner(theirs)}, not {me}"
            )
    return key


def may_end(
    holders: set[str | None], identity: Identity, key: DocKey, call: str, *, registered: bool
) -> None:
    """Refuse a stop or release of `key` acting for `identity` unless its principal
    launched or opened some of what it would end (`holders`, from `Runner.holders`;
    an empty set is nothing to end: allowed, a no-op). A registration other principals
    also run is allowed (the caller ends only this principal's instances); pending
    starts or start attempts of other principals with nothing registered are refused
    (nothing there tells one principal's part from another's)."""
    me = identity.principal
    others = sorted(repr(p) if p is not None else "the runtime" for p in holders - {me})
    if not others or (registered and me in holders):
        return
    if me in holders:
        why = f"it is also being started by {', '.join(others)}, which {me!r} did not launch"
    else:
        why = f"it was launched or opened by {', '.join(others)}, not {me!r}"
    raise OwnershipError(f"{call}: cannot end {key}: {why}")
