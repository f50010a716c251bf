"""Following links: resolution with logged probes, and materializing values.

Every hop is logged as a shallow read of the link's position, so re-pointing,
adding or removing a link re-triggers whoever resolved through it; the final
deep read at the target covers a link appearing anywhere along the path.
Resolution stops with `LinkCycleError` on a cycle or after `MAX_HOPS` hops;
it never hangs.
"""

from __future__ import annotations

import itertools
import operator
import weakref
from collections.abc import Callable
from typing import Any, Final

from ._address import DocKey, Link, Path, as_link
from ._codec import describe
from ._transaction import Transaction, TxDoc, _deps
from ._values import (
    MISSING,
    Value,
    element_id_at,
    element_position,
    get_path,
    same_value,
    thaw,
)
from .errors import LinkCycleError

MAX_HOPS: Final = 100
VALUE: Final = "value"
"""Cell data lives under this key of a document; the rest of the document is metadata."""
_VALUE_PATH: Final = (VALUE,)
_WHOLE: Final = (_VALUE_PATH, False)
"""A deep read of a whole cell, as a transaction keeps it (`TxDoc.reads`)."""


def first_link(root: Value, path: Path, doc: Value = None) -> tuple[int, Link] | None:
    """The first link met walking `path` down `root` (a document's value), with how
    many path elements lead to it, or None when the walk ends without one (the path
    leaves the value, or reaches a plain value). Reads nothing: `root` is in hand.
    A step naming a list element by its id (`element_ids`) is followed when `doc`,
    the whole document (which holds the ids), is given. O(len(path))."""
    found = _first_link(root, path, doc)
    return found if type(found) is tuple else None


class _IdStep:
    pass


_ID_STEP: Final = _IdStep()
"""What `_first_link` returns when it meets an element-id step and has no document."""


def _first_link(root: Value, path: Path, doc: Value) -> tuple[int, Link] | _IdStep | Value:
    """`first_link`, telling a walk stopped at an element id it could not follow
    (`doc` None: `_ID_STEP`) from one that found no link, which returns the value it
    reached: what `get_path(doc, (VALUE, *path))` gives (MISSING when the path leaves
    the value). A tuple only for a link found (a stored value is never a tuple)."""
    node = root
    for i, elem in enumerate(path):
        # (Per step one type test of the container; a link is the rare case, tested
        # last: it ends the walk.)
        t = type(node)
        if t is dict:
            if type(elem) is not str:
                return MISSING
            node = node.get(elem, MISSING)
            if node is MISSING:
                return MISSING
        elif t is list:
            if type(elem) is int:
                if elem >= len(node):
                    return MISSING
                node = node[elem]
            elif type(elem) is str:
                if doc is None:
                    return _ID_STEP
                at = element_position(doc, (VALUE, *path[:i]), node, elem)
                if at is None:
                    return MISSING
                node = node[at]
            else:
                return MISSING
        elif t is Link:
            return i, node
        else:
            return MISSING
    if type(node) is Link:
        return len(path), node
    return node


walk_path: Final[Callable[[Value, Path, Value], tuple[int, Link] | Value]] = _first_link
"""`walk_path(root, path, doc)`: the first link met walking `path` down `root` (a
document's value) as `(how many path elements lead to it, the link)`, or else the value
the walk reaches (`get_path(doc, (VALUE, *path))`: MISSING when the path leaves the
value). `doc` is the whole document (an element-id step is followed by its ids). One
call for both answers: `first_link` and then `get_path` walk the path twice (a pull's
walk through a list element's links, `scheduler._sinks._ahead`). A stored value is
never a tuple, so `type(found) is tuple` tells a link. O(len(path))."""


def resolve(tx: Transaction, link: Link, *, follow_last: bool = True) -> Link:
    """The link's final place after following every link along its path.

    With `follow_last=False` a link sitting exactly at the final position is
    not followed (writes replace it).  O(hops · path length).
    """
    return _resolve(tx, link, follow_last)[0]


def _resolve(
    tx: Transaction, link: Link, follow_last: bool, hops: list[tuple[DocKey, Path]] | None = None
) -> tuple[Link, DocKey]:
    """`resolve`, also returning the final place's document for `tx.identity` (and
    adding the place of every hop, its document and full-document path, to `hops`)."""
    final, key, _ = _walk(tx, link, follow_last, hops)
    return final, key


_UNWALKED: Final = object()
"""What `_walk` gives for the value when its walk did not reach the final place."""


def _walk(
    tx: Transaction, link: Link, follow_last: bool, hops: list[tuple[DocKey, Path]] | None = None
) -> tuple[Link, DocKey, Value]:
    """`_resolve`, also returning the value at the final place as the walk found it in
    the document `tx.peek` gave (nothing logged for it), or `_UNWALKED`."""
    identity = tx.identity
    key = DocKey(link.space, link.id) if link.scope == "space" else link.key(identity)
    if not link.path:
        root = tx.peek(key, _VALUE_PATH)
        if type(root) is not Link:
            return link, key, root  # the common case: no link on the way, nothing to track
        found: tuple[int, Link] = (0, root)
    else:
        # The whole document, in hand for an element-id step (its ids are beside the
        # value): one walk, not a walk that stops at the id and a second one.
        doc = tx.peek(key)
        first = _first_link(
            doc.get(VALUE, MISSING) if type(doc) is dict else MISSING, link.path, doc
        )
        if type(first) is not tuple:
            return link, key, _UNWALKED if first is _ID_STEP else first
        found = first
    current = link
    seen: set[tuple[object, Path]] = set()
    chain: list[Link] = [link]  # formatted only if an error needs it
    for hop in range(MAX_HOPS + 1):  # the extra turn sees whether hop MAX_HOPS ended it
        if hop:
            # (`Link.key` and `first_link`, without their calls for a shared document.)
            key = (
                DocKey(current.space, current.id)
                if current.scope == "space"
                else current.key(identity)
            )
            doc = tx.peek(key)
            step = _first_link(
                doc.get(VALUE, MISSING) if type(doc) is dict else MISSING, current.path, doc
            )
            if type(step) is not tuple:
                return current, key, _UNWALKED if step is _ID_STEP else step
            found = step
        at, target = found
        cpath = current.path
        if at == len(cpath) and not follow_last:
            return current, key, _UNWALKED
        head = cpath[:at] if at < len(cpath) else cpath
        place = (VALUE, *head)
        tx._logged(key, place, True, True)  # (`read`: its value, the link, is in hand)
        if hops is not None:
            hops.append((key, place))
        marker = (key, head)
        if marker in seen:
            names = tuple(map(str, chain))
            raise LinkCycleError(
                f"link cycle: {' -> '.join(map(describe, chain))} comes back to"
                f" {describe(current)}",
                chain=names,
            )
        seen.add(marker)
        # A link that ends the path is followed to its target as it is (no new link to
        # make and check: a map element's child reads its element so, per input read).
        current = (
            Link(target.space, target.id, target.scope, target.path + cpath[at:])
            if at < len(cpath)
            else target
        )
        chain.append(current)
    raise LinkCycleError(
        f"following {describe(link)} took more than {MAX_HOPS} hops:"
        f" {' -> '.join(map(describe, chain[:5]))} ...",
        chain=tuple(map(str, chain)),
    )


_NO_ACTIVE: frozenset[tuple[object, Path]] = frozenset()


_UNREAD: Final = object()


def read_value(tx: Transaction, link: Link | DocKey, *, log: bool = True) -> Value:
    """The value at `link`, with links inside it followed (a list of links reads as values).
    `link` may be a shared document's key (a `Place`: its whole value).

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
        # document) when no link sits there, without their two calls. (A key given is
        # such a place, `DocKey.path`.)
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
            elif (
                td is None
                and rec is not None
                and type(working) is dict
                and not ("cw:" <= key.id < "cw;")
            ):
                # The document's first access, of a shared document the identity reaches
                # (no guard to ask): what `Transaction.read` does for it (the basis taken
                # now, the read claimed and logged), without the call. Every node run's
                # input read comes here.
                layers = rec.layers
                tx._docs[key] = TxDoc(
                    working, rec.version, rec.confirmed_seq,
                    () if not layers else (layers[0].seq,) if len(layers) == 1 else _deps(layers),
                    working, True, not log, (_WHOLE,),
                )  # fmt: skip
                if log:
                    tx.reads.append((key, _VALUE_PATH, False))
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
        if type(link) is DocKey:
            link = as_link(link)  # (a key given, a link there: walked as the link to it)
    final, key, value = _walk(tx, link, True)  # type: ignore[arg-type]  # (a `Link` now)
    path = final.path
    seen = memo is not None or key in tx._docs
    if value is _UNWALKED:
        value = tx.read(key, (VALUE, *path) if path else _VALUE_PATH, log=log)
    else:
        # The read of the place the walk ended at, logged and claimed; its value is the
        # one the walk reached (the same document: nothing ran in between), without
        # walking the path again (an element id resolved twice per element read).
        tx._logged(key, (VALUE, *path) if path else _VALUE_PATH, False, log)
    t = type(value)
    if t is dict or t is list or t is Link:
        materialized = _materialize(tx, value, log, frozenset({(key, path)}))
        if materialized is not value:
            return materialized
    if log and seen:
        _remember(tx, memo, link, value)
    return value


def _remember(
    tx: Transaction, memo: dict[Link | DocKey, Value] | None, link: Link | DocKey, value: Value
) -> None:
    if memo is None:
        tx._values = {link: value}
    else:
        memo[link] = value


def _read(tx: Transaction, link: Link, log: bool, active: frozenset[tuple[object, Path]]) -> Value:
    final, key, value = _walk(tx, link, True)
    path = final.path
    marker = (key, path)
    if active and marker in active:
        raise LinkCycleError(f"the value at {final} contains a link back to itself")
    if value is _UNWALKED:
        value = tx.read(key, (VALUE, *path) if path else _VALUE_PATH, log=log)
    else:  # (as in `read_value`)
        tx._logged(key, (VALUE, *path) if path else _VALUE_PATH, False, log)
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


# --------------------------------------------------------------------------- kept values


class _Memo:
    """One followed link of a `Materializer`'s value: what it read, and what it made.

    `raw` is the value found at the link's target (never copied: stored values are
    never mutated), `out` its materialized value, `log` every read entry the link's
    whole subtree logged, in order (its own resolution and target read first, then
    each kid's `log`), `kids` the memo of each link inside `raw` by its path there,
    `places` the places its own reads saw (each hop's link position and the target,
    as document and full-document path). `valid` goes False when a change is written
    at, above or below one of its places; `dirty` holds the kids that are invalid or
    have invalid descendants.
    """

    __slots__ = (
        "at",
        "dirty",
        "kids",
        "link",
        "log",
        "out",
        "own",
        "parent",
        "places",
        "raw",
        "valid",
    )

    def __init__(self, link: Link, parent: _Memo | None, at: Path) -> None:
        self.link = link
        self.parent = parent
        self.at = at
        """Where the link sits in its parent's `raw`."""
        self.raw: Value = MISSING
        self.out: Value = MISSING
        self.log: list[tuple[DocKey, Path, bool]] = []
        self.own: list[tuple[DocKey, Path, bool]] = []
        self.kids: dict[Path, _Memo] = {}
        self.dirty: set[_Memo] = set()
        self.places: tuple[tuple[DocKey, Path], ...] = ()
        self.valid = True


class _Fallback(Exception):
    """An incremental re-read met something it does not handle: read it all again."""


class Materializer:
    """`read_value` for one reader that reads the same link again and again without
    writing (a sink): the materialized value of every link followed is kept, and the
    next read re-reads only the links whose documents changed since.

    It hears the replica's changes itself (one subscription per replica, shared
    by every materializer on it; `close` takes this one's links out of it). A
    read whose root document did not change and whose changed links read the
    same places as before costs O(changed links · their size), plus one C-level
    copy of the kept read log (the reader's transaction logs every read the whole
    value depends on, as `read_value` would, so the scheduler's read set stays
    exact); it returns the previous value object itself when nothing in it
    changed. Anything else (the root changed, a link now reads
    elsewhere, the transaction read before) reads the whole value as `read_value`
    does and keeps it anew.

    Invariant: the concatenation of the kept logs is a complete read log of the
    kept value (what `read_value` would log in a fresh transaction).
    """

    def __init__(self, replica: Any) -> None:
        self._replica = replica
        self._root: _Memo | None = None
        self._taken: list[tuple[DocKey, Path, bool]] = []
        """Log entries the running refresh took out (its reads, kept in the kept log)."""
        self._links = True
        """The last read found links to follow (or a hop), or none was made: keep the
        next one."""
        self._flat = False
        """The kept value is a list of dicts that hold no container (a mapped list of
        records, the usual view): `thaw` then copies it in C."""
        self._hub: _Hub | None = None
        """The replica's shared index of kept links by the places they read, once used."""
        self._base: Value = MISSING
        self._spots: list[Path] | None = None
        """When not None: the kept value differs from `_base` only at or below these
        paths (of the materialized value). None: unknown (read anew since)."""

    @property
    def idle(self) -> bool:
        """Keeps nothing and will keep nothing on the next read: the last read found no
        link to follow, so the next reads are plain `read_value`s until one finds links,
        and it keeps from the read after that. A reader may drop an idle materializer
        and make a new one when a plain read of its own finds links (a new one keeps
        from its next read on): the same reads, without the object meanwhile."""
        return self._root is None and not self._links

    def thaw(self, value: Value) -> Value:
        """`thaw(value)` (a deep copy a user may change), for a value this materializer
        returned: a kept list of flat dicts is copied with one C-level call per element
        instead of a walk over every field.  O(size)."""
        root = self._root
        if self._flat and root is not None and value is root.out:
            return list(map(dict.copy, value))
        return thaw(value)

    def close(self) -> None:
        """Forget the kept value (its links leave the replica's index). Idempotent."""
        self._forget()

    def read(self, tx: Transaction, link: Link) -> Value:
        log = tx.reads
        root = self._root
        if tx._docs or log or tx._values is not None:
            # Not a fresh transaction: its reads so far would hide entries from the kept
            # logs (a repeated read logs nothing). Read plainly, keep nothing.
            self._forget()
            return read_value(tx, link)
        if root is None and not self._links:
            # The usual sink (a scalar, or a container without links): the plain read,
            # nothing to keep. A value with links inside is kept from its next read on.
            value = read_value(tx, link)
            t = type(value)
            if (t is dict or t is list) and len(log) > 1:
                self._links = True
            return value
        if root is not None and root.link == link and root.valid:
            self._taken = []
            try:
                return self._refresh(tx, root, ())
            except _Fallback:
                # Reads this transaction made would not be logged again: put back what
                # the refresh took out of the log (each read of the value as it is now).
                log.extend(self._taken)
            except BaseException:
                self._forget()
                raise
            self._forget()
            return read_value(tx, link)
        self._forget()
        root = _Memo(link, None, ())
        value = self._compute(tx, root, _NO_ACTIVE)
        self._links = bool(root.kids)
        if root.kids:
            self._root = root
            self._flat = type(value) is list and all(map(_flat_dict, value))
            if self._hub is None:
                self._hub = _hub(self._replica)
            self._index(root)
        return value

    def changes(self, before: Value, after: Value) -> list[Path] | None:
        """Where `after` differs from `before`, both values this materializer returned,
        `before` the one the previous call was given as `after`: the paths (in the
        materialized value) of the links read again since, or None when not known (the
        value was read anew, or these are not the values kept). A path may name a dict
        key now absent or absent before. O(1); it starts the next record at `after`.
        """
        root, spots = self._root, self._spots
        known = root is not None and spots is not None and before is self._base
        if root is not None and root.out is after:
            self._base, self._spots = after, []
            return spots if known else None
        self._base, self._spots = MISSING, None
        return None

    # -- keeping
    def _forget(self) -> None:
        root, self._root = self._root, None
        self._spots = None
        if root is not None:
            self._unindex(root)

    def _index(self, memo: _Memo) -> None:
        hub = self._hub
        assert hub is not None
        for key, path in memo.places:
            hub.add(key, path, memo)
        for kid in memo.kids.values():
            self._index(kid)

    def _unindex(self, memo: _Memo) -> None:
        hub = self._hub
        assert hub is not None
        for key, path in memo.places:
            hub.discard(key, path, memo)
        for kid in memo.kids.values():
            self._unindex(kid)

    # -- reading
    def _compute(
        self, tx: Transaction, memo: _Memo, active: frozenset[tuple[object, Path]]
    ) -> Value:
        """Read `memo.link` as `_read` does, keeping what it read and made."""
        log = tx.reads
        start = len(log)
        hops: list[tuple[DocKey, Path]] = []
        final, key = _resolve(tx, memo.link, True, hops)
        path = final.path
        marker = (key, path)
        if active and marker in active:
            raise LinkCycleError(f"the value at {final} contains a link back to itself")
        place = (VALUE, *path) if path else _VALUE_PATH
        raw = tx.read(key, place)
        memo.raw = raw
        # From what was read, not from the transaction's log: a read this transaction
        # made before logs nothing there, and a change there must still reach this
        # link (and its kept log must hold the read for the next transaction).
        own = [(k, p, True) for k, p in hops]
        own.append((key, place, False))
        # The entries the transaction logged, where it did: the same objects from run
        # to run let the scheduler compare a sink's log with its last one by identity
        # (equal but distinct tuples cost a comparison each: milliseconds at 10,000).
        logged = log[start:]
        if logged == own:
            own = logged
        elif logged:
            same = {entry: entry for entry in logged}
            own = [same.get(entry, entry) for entry in own]
        memo.own = own
        hops.append((key, place))
        memo.places = tuple(dict.fromkeys(hops))
        memo.kids = {}
        memo.dirty = set()
        memo.valid = True
        inner = active | {marker}
        memo.out = self._walk(tx, memo, raw, (), inner)
        memo.log = _log_of(memo)
        return memo.out

    def _walk(
        self,
        tx: Transaction,
        memo: _Memo,
        value: Value,
        at: Path,
        active: frozenset[tuple[object, Path]],
    ) -> Value:
        """`_materialize`, with a kid memo for each link met (by its path in `raw`)."""
        t = type(value)
        if t is Link:
            kid = _Memo(value, memo, at)
            memo.kids[at] = kid
            return self._compute(tx, kid, active)
        if t is dict:
            out = None
            for k, v in value.items():
                m = (
                    self._walk(tx, memo, v, (*at, k), active)
                    if type(v) in (dict, list, Link)
                    else v
                )
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
                m = (
                    self._walk(tx, memo, v, (*at, i), active)
                    if type(v) in (dict, list, Link)
                    else v
                )
                if m is not v and items is None:
                    items = list(value)
                if items is not None:
                    items[i] = None if m is MISSING else m
            return value if items is None else items
        return value

    def _refresh(self, tx: Transaction, memo: _Memo, at_out: Path) -> Value:
        """Re-read a kept, still valid link: only its dirty kids; log what it depends on.
        `at_out` is where its value sits in the materialized root value: each kid read
        anew is recorded there (`changes`).

        A kid read anew that now reads other places (a link in it replaced by a value,
        re-pointed) gets its new log, and this link's log is rebuilt from its own
        reads and its kids' logs: O(kids), no re-read of the other kids.

        Raises `_Fallback` when this link itself now reads other places than it did."""
        log = tx.reads
        if not memo.dirty:
            log.extend(memo.log)
            return memo.out
        # Its own reads (resolution and target) again, first in the log as before.
        start = len(log)
        hops: list[tuple[DocKey, Path]] = []
        final, key = _resolve(tx, memo.link, True, hops)
        path = final.path
        place = (VALUE, *path) if path else _VALUE_PATH
        raw = tx.read(key, place)
        hops.append((key, place))
        if raw is not memo.raw or tuple(dict.fromkeys(hops)) != memo.places:
            raise _Fallback
        self._taken += log[start:]
        del log[start:]  # logged again below, with the kids, from the kept log
        out = memo.out
        dirty, memo.dirty = memo.dirty, set()
        # Any order: each kid's fresh log is checked against its kept one, then dropped
        # (the kept log, in order, is what the transaction logs). O(dirty kids).
        relog = False
        for kid in dirty:
            at = kid.at
            before = kid.out
            old_log = kid.log
            if kid.valid:
                mark = len(log)
                self._refresh(tx, kid, (*at_out, *at))
                self._taken += log[mark:]
                del log[mark:]  # unchanged: the kept log has it
            else:
                self._unindex(kid)
                mark = len(log)
                self._compute(tx, kid, _NO_ACTIVE)
                self._taken += log[mark:]
                del log[mark:]
                self._index(kid)
                if self._spots is not None:
                    self._spots.append((*at_out, *at))
            if kid.log is not old_log and kid.log != old_log:
                relog = True
            if kid.out is not before and not same_value(kid.out, before):
                out = _replaced(out, memo.raw, at, kid.out)
                if memo is self._root and not (len(at) == 1 and _flat_dict(kid.out)):
                    self._flat = False
        memo.out = out
        if relog:
            memo.log = _log_of(memo)
        log.extend(memo.log)
        return out


def _log_of(memo: _Memo) -> list[tuple[DocKey, Path, bool]]:
    """A kept link's read log: its own reads, then each kid's log in the order the
    kids sit in its value (one C-level pass)."""
    return list(itertools.chain(memo.own, *map(_LOG, memo.kids.values())))


_LOG: Final = operator.attrgetter("log")


class _Level:
    """One level of a document's path tree of kept links: the links whose own reads
    end at this path (`memos`), and the levels below by path element."""

    __slots__ = ("below", "memos")

    def __init__(self) -> None:
        self.memos: set[_Memo] = set()
        self.below: dict[str | int, _Level] = {}

    def everyone(self, hit: set[_Memo]) -> None:
        """Add the links at this level and at every level below to `hit`."""
        todo = [self]
        while todo:
            level = todo.pop()
            hit.update(level.memos)
            todo.extend(level.below.values())


class _Hub:
    """One replica's kept links by the places they read, shared by every `Materializer`
    on it: one subscription per replica, not one per sink.

    Each document has a path tree (`_Level`) of the links whose own reads saw it. A
    local commit says which paths it wrote (`Change.paths`), and the two values differ
    only at or below them, so a change invalidates only the links that read at, above
    or below a written path: an edit of element i of a big inline list invalidates
    the links into element i, not every link into the list (which made a one-element
    edit re-read all 10,000 rows of a view). O(len(path) + links at or below it) per
    written path. A change whose paths are unknown (a foreign commit, a fold)
    invalidates every link into the document.

    It holds no reference to the replica (the replica holds it, through its
    subscription), so it lives exactly as long as the replica."""

    __slots__ = ("by_key",)

    def __init__(self) -> None:
        self.by_key: dict[DocKey, _Level] = {}

    def add(self, key: DocKey, path: Path, memo: _Memo) -> None:
        level = self.by_key.get(key)
        if level is None:
            level = self.by_key[key] = _Level()
        for elem in path:
            nxt = level.below.get(elem)
            if nxt is None:
                nxt = level.below[elem] = _Level()
            level = nxt
        level.memos.add(memo)

    def discard(self, key: DocKey, path: Path, memo: _Memo) -> None:
        level = self.by_key.get(key)
        if level is None:
            return
        chain = [level]
        for elem in path:
            nxt = level.below.get(elem)
            if nxt is None:
                return
            chain.append(nxt)
            level = nxt
        level.memos.discard(memo)
        # Prune the emptied levels bottom up, so the tree holds only what is kept.
        for i in range(len(path), 0, -1):
            level = chain[i]
            if level.memos or level.below:
                return
            del chain[i - 1].below[path[i - 1]]
        if not chain[0].memos and not chain[0].below:
            del self.by_key[key]

    def on_notification(self, nf: Any) -> None:
        by_key = self.by_key
        if not by_key:
            return
        hit: set[_Memo] = set()
        for change in nf.changes:
            root = by_key.get(change.key)
            if root is None:
                continue
            written = change.paths
            if written is None:
                root.everyone(hit)
                continue
            docs = (change.before, change.after)
            for path in written:
                _hit_along(root, path, 0, docs, change.before, change.after, hit)
        for memo in hit:
            # The link reads again; each ancestor learns it has a dirty kid.
            memo.valid = False
            child, parent = memo, memo.parent
            while parent is not None and child not in parent.dirty:
                parent.dirty.add(child)
                child, parent = parent, parent.parent


def _hit_along(
    level: _Level,
    path: Path,
    start: int,
    docs: tuple[Value, Value],
    b: Value,
    a: Value,
    hit: set[_Memo],
) -> None:
    """Add the kept links that read at, above or below the written `path` (from
    `path[start]` on, at `level`, whose values are `b` before and `a` after; `docs`:
    the whole documents) to `hit`.

    Writes are positional; a link through an element id (`element_ids`) reads at the
    id: where the path enters a list at a position, the links below the ids of the
    elements there before and after are followed too. O(len(path) + links hit)."""
    cur: _Level | None = level
    for depth in range(start, len(path)):
        assert cur is not None
        elem = path[depth]
        hit.update(cur.memos)  # read above the write: contains it
        nb = _child(b, elem)
        na = _child(a, elem)
        if type(elem) is int and cur.below and (type(b) is list or type(a) is list):
            at = path[:depth]
            for doc, items in zip(docs, (b, a), strict=True):
                if type(items) is list and elem < len(items):
                    named = cur.below.get(element_id_at(doc, at, items, elem))
                    if named is not None:
                        _hit_along(named, path, depth + 1, docs, nb, na, hit)
        cur = cur.below.get(elem)
        if cur is None:
            return
        b, a = nb, na
    assert cur is not None
    cur.everyone(hit)  # read at or below the write


def _child(v: Value, elem: Any) -> Value:
    t = type(v)
    if t is dict or t is list:
        return get_path(v, (elem,))
    return MISSING


_HUBS: weakref.WeakKeyDictionary[Any, _Hub] = weakref.WeakKeyDictionary()


def _hub(replica: Any) -> _Hub:
    hub = _HUBS.get(replica)
    if hub is None:
        hub = _HUBS[replica] = _Hub()
        replica.subscribe(hub.on_notification)
    return hub


_LEAVES: Final = frozenset({str, int, float, bool, type(None), Link})


def _flat_dict(value: Value) -> bool:
    """A dict holding no container (what `dict.copy` copies deeply enough)."""
    return type(value) is dict and _LEAVES.issuperset(map(type, value.values()))


def _replaced(out: Value, raw: Value, at: Path, new: Value) -> Value:
    """`out` (the materialized `raw`) with the link at `at` in `raw` now reading as
    `new`, copied along `at` only. A dict level is rebuilt in `raw`'s key order, so the
    result equals what materializing `raw` again would make."""
    elem = at[0]
    if type(raw) is list:
        items = list(out)
        assert type(elem) is int
        if len(at) == 1:
            items[elem] = None if new is MISSING else new
        else:
            items[elem] = _replaced(items[elem], raw[elem], at[1:], new)
        return items
    assert type(raw) is dict and type(out) is dict and type(elem) is str
    if len(at) > 1:
        copy = dict(out)
        copy[elem] = _replaced(out[elem], raw[elem], at[1:], new)
        return copy
    rebuilt: dict[str, Value] = {}
    for k in raw:
        if k == elem:
            if new is not MISSING:
                rebuilt[k] = new
        elif k in out:
            rebuilt[k] = out[k]
    return rebuilt
