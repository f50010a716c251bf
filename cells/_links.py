"""Following links: resolution with logged probes, and materializing values.

Every hop is logged as a shallow read of the link's position, so re-pointing,
adding or removing a link re-triggers whoever resolved through it; the final
deep read at the target covers a link appearing anywhere along the path.
Resolution stops with `LinkCycleError` on a cycle or after `MAX_HOPS` hops;
it never hangs.
"""

from __future__ import annotations

from typing import Final

from ._address import DocKey, Link, Path
from ._codec import describe
from ._transaction import Transaction
from ._values import MISSING, Value
from .errors import LinkCycleError

MAX_HOPS: Final = 100
VALUE: Final = "value"
"""Cell data lives under this key of a document; the rest of the document is metadata."""
_VALUE_PATH: Final = (VALUE,)
_WHOLE: Final = (_VALUE_PATH, False)
"""A deep read of a whole cell, as a transaction keeps it (`TxDoc.reads`)."""


def _first_link(root: Value, path: Path) -> tuple[int, Link] | None:
    node = root
    for i, elem in enumerate(path):
        if type(node) is Link:
            return i, node
        t = type(node)
        if t is dict and type(elem) is str:
            node = node.get(elem, MISSING)
        elif t is list and type(elem) is int and elem < len(node):
            node = node[elem]
        else:
            return None
        if node is MISSING:
            return None
    if type(node) is Link:
        return len(path), node
    return None


def resolve(tx: Transaction, link: Link, *, follow_last: bool = True) -> Link:
    """The link's final place after following every link along its path.

    With `follow_last=False` a link sitting exactly at the final position is
    not followed (writes replace it).  O(hops · path length).
    """
    return _resolve(tx, link, follow_last)[0]


def _resolve(tx: Transaction, link: Link, follow_last: bool) -> tuple[Link, DocKey]:
    """`resolve`, also returning the final place's document for `tx.identity`."""
    identity = tx.identity
    key = DocKey(link.space, link.id) if link.scope == "space" else link.key(identity)
    root = tx.peek(key, _VALUE_PATH)
    if not link.path:
        if type(root) is not Link:
            return link, key  # the common case: no link on the way, nothing to track
        found: tuple[int, Link] | None = (0, root)
    else:
        found = _first_link(root, link.path)
        if found is None:
            return link, key
    current = link
    seen: set[tuple[object, Path]] = set()
    chain: list[Link] = [link]  # formatted only if an error needs it
    for hop in range(MAX_HOPS + 1):  # the extra turn sees whether hop MAX_HOPS ended it
        if hop:
            key = current.key(identity)
            found = _first_link(tx.peek(key, _VALUE_PATH), current.path)
        if found is None:
            return current, key
        at, target = found
        if at == len(current.path) and not follow_last:
            return current, key
        tx.read(key, (VALUE, *current.path[:at]), shallow=True)
        marker = (key, current.path[:at])
        if marker in seen:
            names = tuple(map(str, chain))
            raise LinkCycleError(
                f"link cycle: {' -> '.join(map(describe, chain))} comes back to"
                f" {describe(current)}",
                chain=names,
            )
        seen.add(marker)
        current = Link(target.space, target.id, target.scope, target.path + current.path[at:])
        chain.append(current)
    raise LinkCycleError(
        f"following {describe(link)} took more than {MAX_HOPS} hops:"
        f" {' -> '.join(map(describe, chain[:5]))} ...",
        chain=tuple(map(str, chain)),
    )


_NO_ACTIVE: frozenset[tuple[object, Path]] = frozenset()


_UNREAD: Final = object()


def read_value(tx: Transaction, link: Link, *, log: bool = True) -> Value:
    """The value at `link`, with links inside it followed (a list of links reads as values).

    MISSING only if the value at `link` itself is absent: a followed link inside it
    whose target is absent drops its key from a dict and reads as None in a list.

    A repeated read of the same link in one transaction is answered from the
    transaction's memo in O(1), logging nothing: the first read logged exactly what
    a repeat would log (every document that decides the value was read through
    `tx`, and only a write of `tx` changes what `tx` sees, which empties the memo).
    Values with links inside are not kept: each read materializes a fresh copy.
    """
    memo = tx._values
    if memo is not None:
        value = memo.get(link, _UNREAD)
        if value is not _UNREAD:
            return value
    if not link.path and link.scope == "space":
        # `_read` and `_resolve` for the most common link (a whole cell of a shared
        # document) when no link sits there, without their two calls.
        key = DocKey(link.space, link.id)
        td = tx._docs.get(key)
        if td is not None:
            working = td.working
        else:
            rec = tx._replica._docs.get(key)
            working = rec.visible if rec is not None else None
        if type(working) is dict and tx.status == "open":
            probe = working.get(VALUE, MISSING)  # `peek`, without the call
        else:
            probe = tx.peek(key, _VALUE_PATH)
        if type(probe) is not Link:
            if td is not None and not td.unlogged and td.reads is not None and _WHOLE in td.reads:
                # A repeat of a logged read: `tx.read` would log and claim nothing new.
                value = probe
            else:
                value = tx.read(key, _VALUE_PATH, log=log)
            t = type(value)
            if t is dict or t is list:
                materialized = _materialize(tx, value, log, frozenset({(key, ())}))
                if materialized is not value:
                    return materialized  # a fresh copy each time, as before: not kept
            if log and (memo is not None or td is not None):
                # Kept from the second read of a document on: most transactions read
                # each document once and never need the memo.
                if memo is None:
                    tx._values = {link: value}
                else:
                    memo[link] = value
            return value
    final, key = _resolve(tx, link, True)
    path = final.path
    seen = memo is not None or key in tx._docs
    value = tx.read(key, (VALUE, *path) if path else _VALUE_PATH, log=log)
    t = type(value)
    if t is dict or t is list or t is Link:
        materialized = _materialize(tx, value, log, frozenset({(key, path)}))
        if materialized is not value:
            return materialized
    if log and seen:
        _remember(tx, memo, link, value)
    return value


def _remember(tx: Transaction, memo: dict[Link, Value] | None, link: Link, value: Value) -> None:
    if memo is None:
        tx._values = {link: value}
    else:
        memo[link] = value


def _read(tx: Transaction, link: Link, log: bool, active: frozenset[tuple[object, Path]]) -> Value:
    final, key = _resolve(tx, link, True)
    path = final.path
    marker = (key, path)
    if active and marker in active:
        raise LinkCycleError(f"the value at {final} contains a link back to itself")
    value = tx.read(key, (VALUE, *path) if path else _VALUE_PATH, log=log)
    t = type(value)
    if t is not dict and t is not list and t is not Link:
        return value  # a scalar holds no links: nothing to materialize
    return _materialize(tx, value, log, active | {marker})


def _materialize(
    tx: Transaction, value: Value, log: bool, active: frozenset[tuple[object, Path]]
) -> Value:
    t = type(value)
    if t is Link:
        return _read(tx, value, log, active)
    # A link inside a value whose target is absent (not computed yet, deleted) reads
    # as an absent key in a dict and as None in a list: values stay plain data, and
    # the MISSING sentinel never reaches a user (only the top level may be absent).
    if t is dict:
        out = None
        for k, v in value.items():
            m = _materialize(tx, v, log, active) if type(v) in (dict, list, Link) else v
            if m is not v and out is None:
                out = dict(value)
            if out is not None:
                if m is MISSING:
                    del out[k]
                else:
                    out[k] = m
        return value if out is None else out
    if t is list:
        items = None
        for i, v in enumerate(value):
            m = _materialize(tx, v, log, active) if type(v) in (dict, list, Link) else v
            if m is not v and items is None:
                items = list(value)
            if items is not None:
                items[i] = None if m is MISSING else m
        return value if items is None else items
    return value
