"""The reader index: who read which path, and which changes trigger whom.

A node's read set comes from its last run's transaction log, compacted per
document and applied as a delta (only documents whose paths changed are
touched). A change triggers a reader when the value it read actually changed:
deep readers on any value change at or below their path, shallow readers on
a change of key set, length, kind or link identity, and both when the
reachability of their path changes (a parent appeared, vanished or moved).

Invariants (checked by `_check`)
- `deep[doc][node]` and `shallow[doc][node]` are exactly `node.reads[doc]`.
"""

from __future__ import annotations

from collections.abc import Iterable

from cells import MISSING, Change, DocKey, Link, Path, same_value, value_equal

from ._node import Node, ReadSet


def walk(value: object, path: Path) -> tuple[bool, object, int]:
    """(reachable, value there, depth reached): reachable iff every parent is a container."""
    v = value
    for i, elem in enumerate(path):
        t = type(v)
        if t is dict and type(elem) is str:
            v = v.get(elem, MISSING)  # type: ignore[attr-defined]
        elif t is list and type(elem) is int:
            v = v[elem] if elem < len(v) else MISSING  # type: ignore[arg-type,index]
        else:
            return False, MISSING, i
    return True, v, len(path)


def shallow_equal(a: object, b: object) -> bool:
    if a is b:
        return True
    if a is MISSING or b is MISSING:
        return False
    ta, tb = type(a), type(b)
    if ta is Link or tb is Link:
        return value_equal(a, b)
    if ta is dict and tb is dict:
        return bool(a.keys() == b.keys())  # type: ignore[attr-defined]
    if ta is list and tb is list:
        return len(a) == len(b)  # type: ignore[arg-type]
    return value_equal(a, b)


class _Unreachable:
    pass


_UNREACHABLE = _Unreachable()


def _step(v: object, elem: object) -> object:
    t = type(v)
    if t is dict:
        return v.get(elem, MISSING) if type(elem) is str else _UNREACHABLE  # type: ignore[attr-defined]
    if t is list:
        if type(elem) is not int:
            return _UNREACHABLE
        return v[elem] if elem < len(v) else MISSING  # type: ignore[index,arg-type]
    return _UNREACHABLE


def changed_at(before: object, after: object, path: Path, *, shallow: bool) -> bool:
    """Did what a (deep or shallow) read at `path` sees differ between two documents?

    Walks both documents together and stops as soon as they share an object:
    writes copy only along their path, so untouched subtrees are identical.
    Reachability counts: a path that breaks (runs into a non-container) on one
    side only, or at different depths, has changed.  O(len(path)) plus the
    final comparison.
    """
    b, a = before, after
    for elem in path:
        if b is a:
            return False
        if type(b) is dict and type(a) is dict and type(elem) is str:
            # The usual step (a field of two documents), without two calls to _step.
            b = b.get(elem, MISSING)
            a = a.get(elem, MISSING)
            continue
        nb = _step(b, elem)
        na = _step(a, elem)
        if nb is _UNREACHABLE or na is _UNREACHABLE:
            return not (nb is _UNREACHABLE and na is _UNREACHABLE)
        b, a = nb, na
    if b is a:
        return False
    t = type(b)
    if t is type(a) and (t is int or t is str):
        return bool(b != a)  # what value_equal decides for two ints or two strs
    return not (shallow_equal(b, a) if shallow else same_value(b, a))


def changed_at_reference(before: object, after: object, path: Path, *, shallow: bool) -> bool:
    """The rule spelled out separately (the oracle `changed_at` is tested against)."""
    b_ok, b_val, b_depth = walk(before, path)
    a_ok, a_val, a_depth = walk(after, path)
    if b_ok and a_ok:
        return not (shallow_equal(b_val, a_val) if shallow else same_value(b_val, a_val))
    if b_ok != a_ok:
        return True
    return b_depth != a_depth


_ENTRIES: dict[tuple[tuple[Path, ...], tuple[Path, ...]], tuple[tuple[Path, ...], tuple[Path, ...]]]
_ENTRIES = {}
"""Shared read-set entries for top-level deep reads (`(("value",),), ()` above all):
one tuple for every node that reads the same way instead of one each. Bounded."""
_ENTRIES_KEPT = 64


def compact_reads(log: Iterable[tuple[DocKey, Path, bool]]) -> ReadSet:
    """Group a transaction's read log per document; drop deep paths below other deep paths."""
    deep: dict[DocKey, set[Path]] = {}
    shallow: dict[DocKey, set[Path]] = {}
    for key, path, is_shallow in log:
        (shallow if is_shallow else deep).setdefault(key, set()).add(path)
    out: ReadSet = {}
    for key in deep.keys() | shallow.keys():
        dpaths: list[Path] = []
        for p in sorted(deep.get(key, ()), key=len):
            if not any(p[: len(q)] == q for q in dpaths):
                dpaths.append(p)
        spaths = tuple(
            sorted(
                (p for p in shallow.get(key, ()) if not any(p[: len(q)] == q for q in dpaths)),
                key=repr,
            )
        )
        entry = (tuple(sorted(dpaths, key=repr)), spaths)
        out[key] = _ENTRIES.get(entry, entry)
        if len(_ENTRIES) < _ENTRIES_KEPT and all(len(p) <= 1 for p in dpaths):
            _ENTRIES.setdefault(entry, entry)
    return out


class ReaderIndex:
    """Readers per document, deep and shallow."""

    __slots__ = ("comparisons", "deep", "shallow")

    def __init__(self) -> None:
        self.deep: dict[DocKey, dict[Node, tuple[Path, ...]]] = {}
        self.shallow: dict[DocKey, dict[Node, tuple[Path, ...]]] = {}
        self.comparisons = 0

    def apply(self, node: Node, new: ReadSet) -> list[DocKey]:
        """Replace `node`'s read set by `new` as a delta; returns the documents that changed."""
        old = node.reads
        touched: list[DocKey] = []
        for key in old.keys() - new.keys():
            self._drop(node, key)
            touched.append(key)
        for key, (dpaths, spaths) in new.items():
            if old.get(key) == (dpaths, spaths):
                continue
            touched.append(key)
            for table, paths in ((self.deep, dpaths), (self.shallow, spaths)):
                if paths:
                    table.setdefault(key, {})[node] = paths
                else:
                    readers = table.get(key)
                    if readers is not None:
                        readers.pop(node, None)
                        if not readers:
                            del table[key]
        node.reads = new
        return touched

    def _drop(self, node: Node, key: DocKey) -> None:
        for table in (self.deep, self.shallow):
            readers = table.get(key)
            if readers is not None:
                readers.pop(node, None)
                if not readers:
                    del table[key]

    def remove(self, node: Node) -> None:
        for key in node.reads:
            self._drop(node, key)
        node.reads = {}

    def readers_of(self, key: DocKey) -> set[Node]:
        return set(self.deep.get(key, ())) | set(self.shallow.get(key, ()))

    def match(self, change: Change) -> list[Node]:
        """Readers whose read value changed between `change.before` and `change.after`.

        Readers that read the same way share one paths tuple (see `compact_reads`),
        so consecutive readers with the same tuple reuse its verdict: a document
        read by many nodes is compared once, not once per reader.
        """
        hits: list[Node] = []
        before, after = change.before, change.after
        deep = self.deep.get(change.key)
        if deep:
            hits.extend(self._matching(deep.items(), before, after, False))
        shallow = self.shallow.get(change.key)
        if shallow:
            readers: Iterable[tuple[Node, tuple[Path, ...]]] = shallow.items()
            if deep:  # a node already hit by a deep read needs no shallow comparison
                found = hits
                readers = [(n, p) for n, p in readers if not (n in deep and n in found)]
            hits.extend(self._matching(readers, before, after, True))
        return hits

    def _matching(
        self,
        readers: Iterable[tuple[Node, tuple[Path, ...]]],
        before: object,
        after: object,
        shallow: bool,
    ) -> list[Node]:
        out: list[Node] = []
        last: tuple[Path, ...] | None = None
        hit = False
        tried = 0
        comparisons = 0
        dicts = type(before) is dict and type(after) is dict
        for node, paths in readers:
            if paths is not last:
                last, hit, tried = paths, False, 0
                for p in paths:
                    tried += 1
                    if dicts and len(p) == 1 and type(p[0]) is str:
                        # `changed_at` for one field of two documents, inlined: step
                        # in, and compare two ints or two strs directly.
                        b = before.get(p[0], MISSING)  # type: ignore[attr-defined]
                        a = after.get(p[0], MISSING)  # type: ignore[attr-defined]
                        if b is a:
                            continue
                        t = type(b)
                        if t is type(a) and (t is int or t is str):
                            if b != a:
                                hit = True
                                break
                            continue
                        if changed_at(b, a, (), shallow=shallow):
                            hit = True
                            break
                    elif changed_at(before, after, p, shallow=shallow):
                        hit = True
                        break
            comparisons += tried  # what comparing this reader's paths alone would count
            if hit:
                out.append(node)
        self.comparisons += comparisons
        return out

    def _check(self, nodes: Iterable[Node]) -> None:
        for node in nodes:
            for key, (dpaths, spaths) in node.reads.items():
                assert self.deep.get(key, {}).get(node, ()) == dpaths, (node, key)
                assert self.shallow.get(key, {}).get(node, ()) == spaths, (node, key)
        for table in (self.deep, self.shallow):
            for key, readers in table.items():
                for node in readers:
                    assert key in node.reads and node.registered, (node, key)
