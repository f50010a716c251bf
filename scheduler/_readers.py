"""The reader index: who read which path, and which changes trigger whom.

A node's read set comes from its last run's transaction log, compacted per
document and applied as a delta (only documents whose paths changed are
touched). A change triggers a reader when the value it read actually changed:
deep readers on any value change at or below their path, shallow readers on
a change of key set, length, kind or link identity (a scalar replaced by
another of the same type is no change for them), and both when the
reachability of their path changes (a parent appeared, vanished or moved).

A document with one deep (or shallow) reader holds that node itself in `deep`
(`shallow`), its paths read from the node's read set; a dict of readers only
from two on: most documents have one reader, and a one-entry dict costs about
200 bytes per document.

Invariants (checked by `_check`)
- a document has either a path trie or entries in `deep` / `shallow`, never both;
- `deep[doc]` and `shallow[doc]` of a document without a trie hold exactly the
  nodes whose `node.reads[doc]` has deep (shallow) paths: the node itself when it
  is the only one, else a dict of at least two mapping each to exactly those paths,
  or (deep readers only) an `_Alike` of at least two that all read exactly its paths;
- a document's path trie, when it has one, holds exactly its readers' paths, and
  only documents with readers have one; a document with `TRIE_READERS` or more
  readers (deep and shallow counted apart) has one. (The trie alone: the tables
  beside it held every reader of a well-read document a second time, about 37
  bytes per reader: every `derive` of a fan-out, every element of a mapped list.)
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from itertools import compress
from operator import is_not
from typing import Any

import attrs

from cells import (
    ELEMENT_IDS,
    ELEMENT_KINDS,
    MISSING,
    Change,
    DocKey,
    Link,
    Path,
    element_id_at,
    element_ids,
    element_position,
    same_value,
    splice_ends,
    value_equal,
)

from ._node import Node, OneRead, ReadEntry, ReadSet, TwoReads


def shallow_equal(a: object, b: object) -> bool:
    """Does a shallow read see the same thing in `a` and `b`: the same key set, length,
    kind or link? Two scalars of one type are alike whatever their values: a list
    coordinator reads its inline scalars' kinds (`kinds_changed`) to see one become a
    link or a container, and a new value for the scalar must not re-run it (issue 14)."""
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
    return ta is tb and ta is not dict and ta is not list


def kind_changed(b: object, a: object) -> bool:
    """Does a read of the element kinds (`Transaction.read_kinds`) see element `b` become
    `a`: was `b` no inline container (a scalar, a link; a container's position is not
    read) and does a shallow read of it see a change?"""
    if b is a or b is MISSING:
        return False
    t = type(b)
    if t is dict or t is list or (t is type(a) and t is not Link):
        return False  # (two scalars of one type: `shallow_equal` without the call)
    return not shallow_equal(b, a)


def kinds_changed(b: object, a: object) -> bool:
    """Does a read of the element kinds of the list `b` see a change in `a`? `kind_changed`
    at any position; a change of length counts (the shallow read of the list sees it
    too). One C-level identity scan; Python steps only at the elements that are not
    the same object on both sides."""
    if b is a:
        return False
    if type(b) is not list or type(a) is not list:
        return not shallow_equal(b, a)
    if len(b) != len(a):
        return True
    for j in compress(range(len(b)), map(is_not, b, a)):  # noqa: SIM110 (a loop: no generator)
        if kind_changed(b[j], a[j]):
            return True
    return False


class _Unreachable:
    pass


_UNREACHABLE = _Unreachable()


def _step(v: object, elem: object) -> object:
    t = type(v)
    if t is dict:
        return v.get(elem, MISSING) if type(elem) is str else _UNREACHABLE  # type: ignore[attr-defined]
    if t is list:
        if type(elem) is not int or elem < 0:  # (`ELEMENT_KINDS` is handled by callers)
            return _UNREACHABLE
        return v[elem] if elem < len(v) else MISSING  # type: ignore[index,arg-type]
    return _UNREACHABLE


def _id_step(root: object, prefix: Path, v: object, eid: str) -> object:
    """The element named `eid` (an element id, `cells.element_ids`) of the list `v` at
    full path `prefix` of document `root` (a step of `_step` that needs the document)."""
    if type(v) is not list:
        return _step(v, eid)
    pos = element_position(root, prefix, v, eid)
    return MISSING if pos is None else v[pos]


def ids_kept(before: object, after: object) -> bool:
    """Whether two values of a document hold the same element id tables (`ELEMENT_IDS`):
    only then does a list that is the same object on both sides name the same element by
    each id. (A rejected splice reverted under a whole-list write built on it leaves the
    list object as it was and its id table changed: a reader by id then reads another
    element.)"""
    tb = before.get(ELEMENT_IDS, MISSING) if type(before) is dict else MISSING
    ta = after.get(ELEMENT_IDS, MISSING) if type(after) is dict else MISSING
    return tb is ta or bool(tb == ta)


def _same_run(a: list[object], b: list[object], start_a: int, start_b: int, limit: int) -> int:
    """How many elements from `a[start_a]` and `b[start_b]` on are equal pairwise (at
    most `limit`). Compares growing slices (C-level `==`, identity first), so a run
    of length r costs O(r) C work and O(log r) Python steps."""
    done, step = 0, 8
    while done < limit:
        step = min(step, limit - done)
        i, j = start_a + done, start_b + done
        if a[i : i + step] == b[j : j + step]:
            done += step
            step *= 2
        elif step == 1:
            return done
        else:
            step //= 2
    return done


def common_ends(old: list[Any], new: list[Any]) -> tuple[int, int]:
    """(prefix, suffix): the lengths of the longest common prefix and, of what remains,
    the longest common suffix of two lists (by `==`). O(prefix + suffix) C work and
    O(log) Python steps (a list coordinator diffs its elements with it, the reader
    index a list's element ids). O(1) for two lists one splice apart (`cells.splice_ends`),
    whose ends that splice kept are returned instead (perhaps not the longest)."""
    ends = splice_ends(old, new)
    if ends is not None:
        return ends
    n = min(len(old), len(new))
    prefix = _same_run(old, new, 0, 0, n)
    rest = n - prefix
    # Backwards: compare the reversed tails (slices of reversed copies would cost O(N)).
    suffix = 0
    step = 8
    lo, ln = len(old), len(new)
    while suffix < rest:
        step = min(step, rest - suffix)
        if old[lo - suffix - step : lo - suffix] == new[ln - suffix - step : ln - suffix]:
            suffix += step
            step *= 2
        elif step == 1:
            break
        else:
            step //= 2
    return prefix, suffix


def _changed_elements(
    children: dict[str | int, _Trie],
    roots: tuple[object, object],
    path: Path,
    lb: list[object],
    la: list[object],
    out: list[tuple[_Trie, object, object, Path]],
) -> None:
    """Push the children of a trie level of list `lb` / `la` (at full path `path`) that
    read an element by its id and whose element changed. The ids' common ends are found
    by C-level comparisons; there an id keeps its element's position (shifted by the
    same amount), so kept elements are compared by identity in C (a splice copies them
    by reference); only the middle's ids are looked at one by one. After a splice that
    is O(N) C work + O(changed) Python: a reader of an element that moved is not
    compared, and not triggered. After a splice made in this process (`cells.splice_ends`
    of both the elements and their ids) the ends are known and their elements are the
    same objects: O(changed)."""
    ids_b = element_ids(roots[0], path, lb)
    ids_a = element_ids(roots[1], path, la)
    prefix, suffix = common_ends(ids_b, ids_a)
    ob, oa = len(lb) - suffix, len(la) - suffix
    if splice_ends(lb, la) != (prefix, suffix):
        for j in compress(range(prefix), map(is_not, lb[:prefix], la[:prefix])):
            child = children.get(ids_a[j])
            if child is not None:
                out.append((child, lb[j], la[j], (*path, ids_a[j])))
        for k in compress(range(suffix), map(is_not, lb[ob:], la[oa:])):
            child = children.get(ids_a[oa + k])
            if child is not None:
                out.append((child, lb[ob + k], la[oa + k], (*path, ids_a[oa + k])))
    # An id of either middle is in neither list's common ends (ids are unique in a
    # list), so its positions are found in the middles alone: O(changed).
    at_b = {x: j for j, x in enumerate(ids_b[prefix:ob], prefix)}
    at_a = {x: j for j, x in enumerate(ids_a[prefix:oa], prefix)}
    for x in at_b.keys() | at_a.keys():
        child = children.get(x)
        if child is None:
            continue
        pb = at_b.get(x)
        pa = at_a.get(x)
        nb = MISSING if pb is None else lb[pb]
        na = MISSING if pa is None else la[pa]
        if nb is not na:
            out.append((child, nb, na, (*path, x)))


def changed_at(before: object, after: object, path: Path, *, shallow: bool) -> bool:
    """Did what a (deep or shallow) read at `path` sees differ between two documents?

    Walks both documents together and stops as soon as they share an object:
    writes copy only along their path, so untouched subtrees are identical.
    Reachability counts: a path that breaks (runs into a non-container) on one
    side only, or at different depths, has changed.  O(len(path)) plus the
    final comparison.
    """
    b, a = before, after
    for i, elem in enumerate(path):
        if b is a and (i == 0 or ids_kept(before, after)):
            return False  # (else an element id below may name another element: walk on)
        if type(b) is dict and type(a) is dict and type(elem) is str:
            # The usual step (a field of two documents), without two calls to _step.
            b = b.get(elem, MISSING)
            a = a.get(elem, MISSING)
            continue
        if type(elem) is str and (type(b) is list or type(a) is list):
            # An element-id step: resolved in each document's own ids.
            nb = _id_step(before, path[:i], b, elem)
            na = _id_step(after, path[:i], a, elem)
        elif elem == ELEMENT_KINDS and type(elem) is int:
            return kinds_changed(b, a)  # (always the last step)
        else:
            nb = _step(b, elem)
            na = _step(a, elem)
        if nb is _UNREACHABLE or na is _UNREACHABLE:
            return not (nb is _UNREACHABLE and na is _UNREACHABLE)
        b, a = nb, na
    if b is a:
        return False
    if shallow:
        return not shallow_equal(b, a)
    t = type(b)
    if t is type(a) and (t is int or t is str):
        return bool(b != a)  # what value_equal decides for two ints or two strs
    return not same_value(b, a)


_ENTRIES: dict[tuple[tuple[Path, ...], tuple[Path, ...]], tuple[tuple[Path, ...], tuple[Path, ...]]]
_ENTRIES = {}
"""Shared read-set entries for reads of field names (`(("value",),), ()` above all, and
one shallow read such as `(), (("value", "element"),)`): one tuple for every node that
reads the same way instead of one each (two tuples, 104 bytes). Bounded: the first ones
seen are kept."""
_ENTRIES_KEPT = 64


def _covered(p: Path, kept: set[Path]) -> bool:
    """Whether a path in `kept` is `p` or a prefix of it."""
    return any(p[:i] in kept for i in range(len(p) + 1))


def compact_reads(log: Iterable[tuple[DocKey, Path, bool]]) -> ReadSet:
    """Group a transaction's read log per document; drop deep paths below other deep paths."""
    if type(log) is not list:
        log = list(log)
    # Each document read at one place (a pull's walk through links, most node runs):
    # its one path is its entry, with nothing to group, cover or sort. The sets and
    # the key union below were most of a pull's compaction.
    out: dict[DocKey, ReadEntry] = {}
    for key, path, is_shallow in log:
        if key in out:
            break  # read at several places: grouped below
        one: ReadEntry = ((), (path,)) if is_shallow else ((path,), ())
        held = _ENTRIES.get(one)
        if held is None:
            held = one
            if len(_ENTRIES) < _ENTRIES_KEPT and _field_path(path):
                _ENTRIES[one] = one
        out[key] = held
    else:
        return out
    deep: dict[DocKey, set[Path]] = {}
    shallow: dict[DocKey, set[Path]] = {}
    for key, path, is_shallow in log:
        (shallow if is_shallow else deep).setdefault(key, set()).add(path)
    out = {}
    for key in deep.keys() | shallow.keys():
        ds = deep.get(key)
        ss = shallow.get(key)
        if ss is None and ds is not None and len(ds) == 1:
            # One deep path (most documents a node reads): nothing to cover or sort.
            one = (tuple(ds), ())
            out[key] = _ENTRIES.get(one, one)
            if len(_ENTRIES) < _ENTRIES_KEPT and one not in _ENTRIES and _field_paths(one[0]):
                _ENTRIES[one] = one
            continue
        if ds is None and ss is not None and len(ss) == 1:
            # One shallow path (a link followed on the way: every element's lift reads
            # its argument's ("value", "element") so), shared like a deep one.
            one = ((), tuple(ss))
            held = _ENTRIES.get(one)
            if held is None:
                held = one
                if len(_ENTRIES) < _ENTRIES_KEPT and _field_path(one[1][0]):
                    _ENTRIES[one] = one
            out[key] = held
            continue
        # Shortest first, so every deep path that could cover `p` is kept before `p`
        # is looked at; a set of the kept ones makes "is a prefix of p kept" one
        # lookup per prefix, O(len(p)), not one comparison per kept path (a sink on
        # a 1,000-row list logs thousands of reads: quadratic was most of an edit).
        dpaths: list[Path] = []
        kept: set[Path] = set()
        for p in sorted(deep.get(key, ()), key=len):
            if not _covered(p, kept):
                dpaths.append(p)
                kept.add(p)
        spaths = tuple(sorted((p for p in shallow.get(key, ()) if not _covered(p, kept)), key=repr))
        entry = (tuple(sorted(dpaths, key=repr)), spaths)
        out[key] = _ENTRIES.get(entry, entry)
        if len(_ENTRIES) < _ENTRIES_KEPT and entry not in _ENTRIES and _field_paths(dpaths):
            _ENTRIES[entry] = entry
    return out


def _field_path(path: Path) -> bool:
    """`_field_paths` of one path, without a generator (asked on every read set of one
    shallow path that is not shared yet: an element's read of its position). A loop, not
    `all()` over a generator: about half the bytecodes for the usual two elements."""
    for e in path:  # noqa: SIM110
        if type(e) is not str or e[:1] in ("#", "~"):
            return False
    return True


def _field_paths(paths: Iterable[Path]) -> bool:
    """Deep paths of field names only (no list index, no element id: `#k`, `~k`): the
    ways a program's nodes read (every element's lift declares its argument's
    ("value", "element")), kept in `_ENTRIES`; not one entry per element read."""
    return all(type(e) is str and e[:1] not in ("#", "~") for p in paths for e in p)


TRIE_READERS = 16
"""A document with at least this many reading nodes is matched through a path trie."""


_NO_CHILDREN: dict[str | int, _Trie] = {}
"""The children of every trie level that has none (shared, never written: `_Trie.add`
makes a level its own dict first)."""

LevelReaders = Node | dict[Node, None] | None
"""The readers whose path ends at one trie level, deep or shallow: None for none, the
node itself for one, an ordered set (a dict) only from two on."""


def _with(readers: LevelReaders, node: Node) -> LevelReaders:
    """`readers` with `node` added (the same dict, when it is one)."""
    if readers is None or readers is node:
        return node
    if type(readers) is dict:
        readers[node] = None
        return readers
    return {readers: None, node: None}  # type: ignore[dict-item]


def _without(readers: LevelReaders, node: Node) -> LevelReaders:
    """`readers` with `node` taken out (a lone one left is kept as itself)."""
    if readers is node:
        return None
    if type(readers) is dict:
        readers.pop(node, None)
        if len(readers) == 1:
            (only,) = readers
            return only
    return readers


def _size(readers: LevelReaders) -> int:
    if readers is None:
        return 0
    return len(readers) if type(readers) is dict else 1


def _hit(hits: dict[Node, None], readers: LevelReaders) -> None:
    """Add `readers` (not None) to `hits`."""
    if type(readers) is dict:
        hits.update(readers)
    else:
        hits[readers] = None  # type: ignore[index]


def _each_reader(readers: LevelReaders) -> Iterable[Node]:
    if readers is None:
        return ()
    return readers if type(readers) is dict else (readers,)  # type: ignore[return-value]


class _Trie:
    """The readers of one document by path: a node per path element.

    `deep` / `shallow` hold the readers whose read path ends here. Matching walks
    the trie and the two document values together, pruning every subtree whose
    values are the same object (writes copy only along their path), so an edit
    inside element i of a big list document compares only the readers under
    `[..., i]` and those above it, not every reader of the document.

    A level holds no empty dicts: `children` is the shared `_NO_CHILDREN` until it
    has one, `deep` and `shallow` are `LevelReaders` (None, the lone reader itself,
    or a dict from two on). Most levels are an element's, read by one node one way:
    three empty dicts and a one-entry one cost such a level about 350 bytes (two
    levels per element of a mapped list: the element's lift and the coordinator's
    shallow read of its position). `_check` holds these forms.
    """

    # Hand-written, not attrs: a trie node is made per read path element when a
    # well-read document's trie is built, and attrs' `factory=dict` fields made it
    # about 35% slower to create (1074 ns against 780 ns, measured).
    __slots__ = ("children", "deep", "named", "shallow")

    def __init__(self) -> None:
        self.children: dict[str | int, _Trie] = _NO_CHILDREN
        self.deep: LevelReaders = None
        self.shallow: LevelReaders = None
        self.named = 0
        """How many children have a str key (below a list level: element ids)."""

    def add(self, node: Node, path: Path, shallow: bool) -> None:
        t = self
        for elem in path:
            child = t.children.get(elem)
            if child is None:
                children = t.children
                if children is _NO_CHILDREN:
                    children = t.children = {}
                child = children[elem] = _Trie()
                if type(elem) is str:
                    t.named += 1
            t = child
        if shallow:
            t.shallow = _with(t.shallow, node)
        else:
            t.deep = _with(t.deep, node)

    def discard(self, node: Node, path: Path, shallow: bool) -> None:
        trail: list[tuple[_Trie, str | int]] = []
        t = self
        for elem in path:
            child = t.children.get(elem)
            if child is None:
                return
            trail.append((t, elem))
            t = child
        if shallow:
            t.shallow = _without(t.shallow, node)
        else:
            t.deep = _without(t.deep, node)
        # Drop the levels this left empty, deepest first.
        for parent, elem in reversed(trail):
            if t.deep is not None or t.shallow is not None or t.children:
                break
            del parent.children[elem]
            if not parent.children:
                parent.children = _NO_CHILDREN
            if type(elem) is str:
                parent.named -= 1
            t = parent

    def everyone(self, out: dict[Node, None]) -> int:
        """Add every reader in this subtree to `out`; returns how many paths there are."""
        count = 0
        stack = [self]
        while stack:
            t = stack.pop()
            for readers in (t.deep, t.shallow):
                if readers is not None:
                    _hit(out, readers)
                    count += _size(readers)
            stack.extend(t.children.values())
        return count

    def entries(self, prefix: Path = ()) -> Iterable[tuple[Node, Path, bool]]:
        for node in _each_reader(self.deep):
            yield node, prefix, False
        for node in _each_reader(self.shallow):
            yield node, prefix, True
        for elem, child in self.children.items():
            yield from child.entries((*prefix, elem))

    @property
    def empty(self) -> bool:
        """No reader at or below this level (`discard` prunes empty levels below)."""
        return self.deep is None and self.shallow is None and not self.children

    def readers_at(self, path: Path, shallow: bool) -> LevelReaders:
        """The readers whose (deep or shallow) read path is exactly `path`. O(len(path))."""
        t = self
        for elem in path:
            child = t.children.get(elem)
            if child is None:
                return None
            t = child
        return t.shallow if shallow else t.deep

    def a_reader(self) -> Node | None:
        """One reader at or below this level (the first found). O(depth): `discard`
        leaves no level without a reader below it."""
        t = self
        while True:
            for readers in (t.deep, t.shallow):
                if readers is not None:
                    return next(iter(readers)) if type(readers) is dict else readers  # type: ignore[return-value]
            if not t.children:
                return None
            t = next(iter(t.children.values()))

    def _check(self) -> None:
        """The compact forms (see the class doc), at every level below this one."""
        assert not _NO_CHILDREN, "the shared empty children dict was written"
        stack = [self]
        while stack:
            t = stack.pop()
            for readers in (t.deep, t.shallow):
                assert (
                    readers is None
                    or isinstance(readers, Node)
                    or (type(readers) is dict and len(readers) >= 2)
                ), readers
            assert t.children is _NO_CHILDREN or t.children, "an empty children dict kept"
            assert t.named == sum(type(e) is str for e in t.children), t.named
            stack.extend(t.children.values())


@attrs.define(slots=True, eq=False, weakref_slot=False)
class _Alike:
    """Two or more deep readers of one document that all read it at the same paths (a
    node's output, read whole by the nodes and the sink that read it: the usual
    document): the paths held once and the readers in a tuple, in the order they came
    (a dict's order). A change is compared once for all of them, and a change known to
    have moved the value there (`match_moved`) hands back `nodes` itself: no list made
    per commit. About 100 bytes where a dict of readers took 224."""

    paths: tuple[Path, ...]
    nodes: tuple[Node, ...]

    def joined(self, node: Node, paths: tuple[Path, ...]) -> Readers:
        """The readers once `node` reads the document deep at `paths` (new, or a reader
        whose paths changed): still alike, or a dict of each reader's paths."""
        nodes = self.nodes
        if paths == self.paths:
            return self if node in nodes else _Alike(self.paths, (*nodes, node))
        mixed = dict.fromkeys(nodes, self.paths)
        mixed[node] = paths  # (a reader already there keeps its place, as in a dict)
        return mixed

    def without(self, node: Node) -> Readers | None:
        """The readers once `node` reads the document no more (None: nobody)."""
        rest = tuple([n for n in self.nodes if n is not node])
        if len(rest) > 1:
            return _Alike(self.paths, rest)
        return rest[0] if rest else None


Readers = Node | dict[Node, tuple[Path, ...]] | _Alike
"""One document's deep (or shallow) readers: the node itself when it is the only one;
of two or more deep readers that read it the same way, an `_Alike` (made as the second
joins the first; a dict never turns back into one)."""


def _entries(readers: Readers, key: DocKey, kind: int) -> Iterable[tuple[Node, tuple[Path, ...]]]:
    """(node, paths) for each reader in `readers` of `key`; `kind` 0 deep, 1 shallow."""
    if type(readers) is dict:
        return readers.items()
    if type(readers) is _Alike:
        paths = readers.paths
        return [(n, paths) for n in readers.nodes]
    assert isinstance(readers, Node)
    return ((readers, readers.reads[key][kind]),)


def _count(readers: Readers | None) -> int:
    if readers is None:
        return 0
    if type(readers) is _Alike:
        return len(readers.nodes)
    return len(readers) if type(readers) is dict else 1


def _value_changed(b: object, a: object) -> bool:
    """The final comparison of `changed_at` for a deep read (`b is not a` known)."""
    t = type(b)
    if t is type(a) and (t is int or t is str):
        return bool(b != a)
    return not same_value(b, a)


@attrs.define(slots=True, eq=False, weakref_slot=False)
class ReaderIndex:
    """Readers per document, deep and shallow (and a path trie for well-read documents)."""

    deep: dict[DocKey, Readers] = attrs.field(factory=dict, init=False)
    shallow: dict[DocKey, Readers] = attrs.field(factory=dict, init=False)
    tries: dict[DocKey, _Trie] = attrs.field(factory=dict, init=False)
    """Made by `apply` when a document reaches `TRIE_READERS` readers, then kept in
    step by `apply` and `remove` until the document has no readers (a document whose
    readers fall below the threshold keeps its trie)."""
    comparisons: int = attrs.field(default=0, init=False)

    def apply(
        self, node: Node, new: ReadSet, before: dict[DocKey, ReadEntry | None] | None = None
    ) -> list[DocKey]:
        """Replace `node`'s read set by `new` as a delta; returns the documents that changed.
        `before`: `new` differs from the node's read set only in these documents, whose
        entries were these (`new` may be that read set, changed in place): O(len(before))."""
        old = node.reads
        touched: list[DocKey] = []
        if before is None:
            for key in old.keys() - new.keys():
                self._drop(node, key)
                touched.append(key)
            changed: Iterable[tuple[DocKey, ReadEntry]] = new.items()
        else:
            changed = []
            for key, was_entry in before.items():
                entry = new.get(key)
                if entry is not None:
                    changed.append((key, entry))
                elif was_entry is not None:
                    self._drop(node, key, was_entry)
                    touched.append(key)
        tries = self.tries
        untried: list[DocKey] = []
        for key, (dpaths, spaths) in changed:
            was = old.get(key) if before is None else before[key]
            if was == (dpaths, spaths):
                continue
            touched.append(key)
            trie = tries.get(key)
            if trie is not None:
                if was is not None:
                    for p in was[0]:
                        trie.discard(node, p, False)
                    for p in was[1]:
                        trie.discard(node, p, True)
                for p in dpaths:
                    trie.add(node, p, False)
                for p in spaths:
                    trie.add(node, p, True)
                continue  # (a document with a trie has no table entries)
            for kind, table, paths in ((0, self.deep, dpaths), (1, self.shallow, spaths)):
                readers = table.get(key)
                if paths:
                    if readers is None:
                        table[key] = node  # its paths: `node.reads`, set below
                    elif type(readers) is dict:
                        readers[node] = paths
                    elif type(readers) is _Alike:
                        table[key] = readers.joined(node, paths)
                    elif readers is not node:
                        assert isinstance(readers, Node)
                        other = readers.reads[key][kind]
                        table[key] = (
                            # (Deep readers alike: the usual document. The first one's
                            # paths object, so the shared tuple stays shared.)
                            _Alike(other, (readers, node))
                            if kind == 0 and other == paths
                            else {readers: other, node: paths}
                        )
                elif readers is not None:
                    self._unread(table, key, readers, node)
            if _count(self.deep.get(key)) + _count(self.shallow.get(key)) >= TRIE_READERS:
                untried.append(key)
        if not touched:
            new = old  # equal: keep the object the node (and maybe others) already hold
        elif type(new) is OneRead:
            new = self._shared(new)
        node.reads = new
        for key in untried:
            # Made here, as the readers register (a list's cards, in setup), not by the
            # first change's `match`: that change would pay for walking every reader
            # (about a third of an edit's work at 1,000 elements). After `node.reads`
            # is set: a lone reader's paths are read from it.
            self._make_trie(key)
        return touched

    def _make_trie(self, key: DocKey) -> None:
        """The path trie of `key`'s readers, once they are `TRIE_READERS` or more."""
        trie = self.tries[key] = _Trie()
        for kind, table in ((0, self.deep), (1, self.shallow)):
            readers = table.pop(key, None)  # (from now on the trie alone holds them)
            if readers is not None:
                for node, paths in _entries(readers, key, kind):
                    for p in paths:
                        trie.add(node, p, kind == 1)

    def _shared(self, one: OneRead) -> ReadSet:
        """An equal `OneRead` that another reader of the same document already holds, or
        `one`. Many nodes read one document the same way (a fan-out, every element of a
        list reading its container): they then share one read set, and its key, instead of
        48 + 56 bytes each. Safe because a read set is never changed in place (`apply`
        replaces it). Looks at the first and the newest other reader only: O(1), or the
        length of its path in the document's trie."""
        key, entry = one.key, one.entry
        trie = self.tries.get(key)
        readers: Readers | LevelReaders
        if trie is not None:
            # The readers of the same first path (those that may read the same way).
            readers = trie.readers_at(entry[0][0], False) if entry[0] else None
            if readers is None and entry[1]:
                readers = trie.readers_at(entry[1][0], True)
        else:
            readers = (self.deep if entry[0] else self.shallow).get(key)
        if readers is not None:
            others = (
                (next(iter(readers)), next(reversed(readers)))
                if isinstance(readers, dict)
                else (readers.nodes[0], readers.nodes[-1])
                if isinstance(readers, _Alike)
                else (readers,)
            )
            for other in others:
                held = other.reads
                if type(held) is OneRead and held.entry == entry and held.key == key:
                    return held
        return one

    def _drop(self, node: Node, key: DocKey, entry: ReadEntry | None = None) -> None:
        trie = self.tries.get(key)
        if trie is not None:
            dpaths, spaths = node.reads[key] if entry is None else entry
            for p in dpaths:
                trie.discard(node, p, False)
            for p in spaths:
                trie.discard(node, p, True)
            if trie.empty:
                del self.tries[key]
            return
        for table in (self.deep, self.shallow):
            readers = table.get(key)
            if readers is not None:
                self._unread(table, key, readers, node)

    @staticmethod
    def _unread(table: dict[DocKey, Readers], key: DocKey, readers: Readers, node: Node) -> None:
        """Take `node` out of `key`'s `readers` in `table` (a lone reader stays itself)."""
        if readers is node:
            del table[key]
        elif type(readers) is _Alike:
            rest = readers.without(node)
            if rest is None:
                del table[key]
            else:
                table[key] = rest
        elif type(readers) is dict:
            readers.pop(node, None)
            if len(readers) == 1:
                (table[key],) = readers
            elif not readers:
                del table[key]

    def remove(self, node: Node) -> None:
        for key in node.reads:
            self._drop(node, key)
        node.reads = {}

    def readers_of(self, key: DocKey) -> set[Node]:
        trie = self.tries.get(key)
        if trie is not None:
            found: dict[Node, None] = {}
            trie.everyone(found)
            return set(found)
        out: set[Node] = set()
        for table in (self.deep, self.shallow):
            readers = table.get(key)
            if type(readers) is dict:
                out.update(readers)
            elif type(readers) is _Alike:
                out.update(readers.nodes)
            elif readers is not None:
                assert isinstance(readers, Node)
                out.add(readers)
        return out

    def a_reader(self, key: DocKey) -> Node | None:
        """One node that reads `key` (the first found), or None. O(1), or the depth of
        the document's trie."""
        trie = self.tries.get(key)
        if trie is not None:
            return trie.a_reader()
        readers = self.deep.get(key)
        if readers is None:
            readers = self.shallow.get(key)
        if readers is None:
            return None
        if type(readers) is _Alike:
            return readers.nodes[0]
        return next(iter(readers)) if type(readers) is dict else readers  # type: ignore[return-value]

    def match(self, change: Change) -> list[Node]:
        """Readers whose read value changed between `change.before` and `change.after`.

        Readers that read the same way share one paths tuple (see `compact_reads`),
        so consecutive readers with the same tuple reuse its verdict: a document
        read by many nodes is compared once, not once per reader. A document with
        many readers goes through its path trie instead (`_match_trie`).
        """
        key = change.key
        before, after = change.before, change.after
        deep = self.deep.get(key)
        shallow = self.shallow.get(key)
        if shallow is None and deep is not None:  # (no trie then: the invariants)
            if type(deep) is _Alike:
                # The usual document: its readers all read it the same way (a node's
                # output, read whole by the nodes and the sink that read it).
                return self._alike(deep.nodes, deep.paths, before, after)
            if type(deep) is not dict:
                # One reader (a chain's every link): `_matching` for it, inlined.
                node: Node = deep  # type: ignore[assignment]
                reads = node.reads
                paths = (reads.entry if type(reads) is OneRead else reads[key])[0]
                if len(paths) == 1:
                    p = paths[0]
                    self.comparisons += 1
                    if (
                        len(p) == 1
                        and type(p[0]) is str
                        and type(before) is dict
                        and type(after) is dict
                    ):
                        b = before.get(p[0], MISSING)
                        a = after.get(p[0], MISSING)
                        if b is a:
                            return []
                        t = type(b)
                        if t is type(a) and (t is int or t is str):
                            return [node] if b != a else []
                        return [node] if changed_at(b, a, (), shallow=False) else []
                    return [node] if changed_at(before, after, p, shallow=False) else []
                return self._matching(((node, paths),), before, after, False)
            if len(deep) < TRIE_READERS:
                # Readers that all read it the same way since some read another way
                # (one shared paths tuple, `compact_reads`), asked in C.
                ways = list(deep.values())
                paths = ways[0]
                if ways.count(paths) == len(ways):
                    return self._alike(deep, paths, before, after)
                return self._matching(deep.items(), before, after, False)
        trie = self.tries.get(key) if deep is None and shallow is None else None
        if trie is not None:
            written = change.paths
            if written is not None:
                return self._match_along(trie, before, after, written)
            return self._match_trie(trie, before, after)
        hits: list[Node] = []
        if deep is not None:
            hits.extend(self._matching(_entries(deep, key, 0), before, after, False))
        if shallow is not None:
            readers = _entries(shallow, key, 1)
            if deep is not None:  # a node already hit by a deep read needs no shallow comparison
                found = hits
                deep_readers = (
                    deep if type(deep) is dict else deep.nodes if type(deep) is _Alike else (deep,)
                )
                readers = [(n, p) for n, p in readers if not (n in deep_readers and n in found)]
            hits.extend(self._matching(readers, before, after, True))
        return hits

    def _alike(
        self, nodes: Collection[Node], paths: tuple[Path, ...], before: object, after: object
    ) -> list[Node]:
        """`_matching` of deep readers `nodes` that all read at `paths`: one verdict for
        all of them, and the comparison count `_matching` gives each."""
        if len(paths) == 1 and type(before) is dict and type(after) is dict:
            # `_matching` of one reader of one path, for every reader.
            p = paths[0]
            self.comparisons += len(nodes)
            if len(p) == 1 and type(p[0]) is str:
                b = before.get(p[0], MISSING)
                a = after.get(p[0], MISSING)
                if b is a:
                    return []  # (one step: the same object is the same value)
                t = type(b)
                if t is type(a) and (t is int or t is str):
                    return list(nodes) if b != a else []
                return list(nodes) if not same_value(b, a) else []
            return list(nodes) if changed_at(before, after, p, shallow=False) else []
        return self._matching([(n, paths) for n in nodes], before, after, False)

    def match_moved(self, change: Change) -> Sequence[Node]:
        """`match` of a change whose commit moved the value at its one path (a top-level
        field: `Replica.subscribe`'s `moved`, a drain's node commit). A document read
        there and nowhere else by every reader, each reading it deep (a node's output,
        read whole by the nodes and the sink that read it: the usual document), has all
        its readers triggered with no comparison of values: that comparison is the one
        the replica made. Anything else is `match`. The same verdicts and comparison
        count as `match` (`tests/scheduler/test_readers.py`)."""
        key = change.key
        deep = self.deep.get(key)
        shallow = self.shallow
        if deep is None:
            if key not in shallow and key not in self.tries:
                return []  # no node reads it
        elif not shallow or key not in shallow:  # (no trie then: the invariants)
            # (An empty table is not asked: a lookup hashes the key, five fields.)
            # Its one written path, as a paths tuple: a reader's deep paths of `key`
            # equal to it read exactly there (one comparison of tuples, in C).
            written = change.paths
            if type(deep) is _Alike:
                # The usual document: its readers, as they are held (no list made).
                if deep.paths == written:
                    nodes = deep.nodes
                    self.comparisons += len(nodes)
                    return nodes
            elif type(deep) is dict:
                if len(deep) < TRIE_READERS:
                    # All read it the same way (one shared paths tuple), asked in C.
                    ways = list(deep.values())
                    if ways[0] == written and ways.count(written) == len(ways):
                        self.comparisons += len(ways)
                        return list(deep)
            else:
                # One reader (a chain's every link): its read set's deep paths of `key`.
                node: Node = deep  # type: ignore[assignment]
                reads = node.reads
                if (reads.entry if type(reads) is OneRead else reads[key])[0] == written:
                    self.comparisons += 1
                    return [node]
        return self.match(change)

    def _match_along(
        self, trie: _Trie, before: object, after: object, paths: tuple[Path, ...]
    ) -> list[Node]:
        """`_match_trie` for a change whose written paths are known: the values differ
        only at or below them, so only the trie levels on each path are compared, and
        the subtree under each path's end is walked as `_match_trie` walks it. An edit
        of element i of a big list document costs O(len(path)) levels plus the readers
        at and below `[..., i]`, with no scan of the list."""
        hits: dict[Node, None] = {}
        comparisons = 0
        # Ancestor levels already compared: only when several paths may share them.
        done: set[int] | None = set() if len(paths) > 1 else None
        kept: bool | None = None  # `ids_kept`, asked when a level is the same object
        below: list[tuple[_Trie, object, object, Path]] = []
        roots = (before, after)
        for written in paths:
            t: _Trie | None = trie
            b, a = before, after
            path = written  # (with an element id where the walk went on by id, below)
            for depth, elem in enumerate(written):
                assert t is not None
                if b is a:
                    # Nothing at or below here changed after all, unless the id tables
                    # did: then its readers by id are compared, unpruned (below).
                    if kept is None:
                        kept = ids_kept(before, after)
                    if not kept:
                        below.append((t, b, a, path[:depth]))
                    t = None
                    break
                if t.deep is not None or t.shallow is not None:  # (a level read here)
                    if done is None:
                        comparisons += self._compare_level(t, b, a, hits)
                    elif id(t) not in done:
                        done.add(id(t))
                        comparisons += self._compare_level(t, b, a, hits)
                children = t.children
                kinds = children.get(ELEMENT_KINDS)
                if kinds is not None:
                    # A read of the element kinds: only the written element's kind (the
                    # lists differ only there), unless the length (or more) changed.
                    comparisons += _size(kinds.shallow)
                    if (
                        (0 <= elem < len(b) and kind_changed(b[elem], a[elem]))
                        if type(b) is list
                        and type(a) is list
                        and len(b) == len(a)
                        and type(elem) is int
                        else kinds_changed(b, a)
                    ):
                        _hit(hits, kinds.shallow)
                if t.named and type(elem) is int and (type(b) is list or type(a) is list):
                    at = path[:depth]
                    if (
                        type(b) is list
                        and type(a) is list
                        and elem < len(b)
                        and elem < len(a)
                        and elem not in children
                    ):
                        x = element_id_at(before, at, b, elem)
                        if x == element_id_at(after, at, a, elem):
                            # The same element on both sides (an edit inside it, the usual
                            # case), read by id only: the walk goes on along the written
                            # path below it, by its id, so only its readers on that path
                            # are compared, not every reader of the element (a card's
                            # other inputs). The rest of the path is what the write
                            # changed, exactly as below a field.
                            named = children.get(x)
                            if named is None:
                                t = None
                                break
                            path = (*at, x, *path[depth + 1 :])
                            t, b, a = named, b[elem], a[elem]
                            continue
                    # Readers by element id below this list: the elements at this
                    # position before and after (their ids) are compared whole.
                    seen = None
                    for root, v in ((before, b), (after, a)):
                        if type(v) is list and elem < len(v):
                            x = element_id_at(root, at, v, elem)
                            if x == seen:
                                # The same element on both sides (an edit inside it, the
                                # usual case): its readers are compared once, not twice.
                                continue
                            seen = x
                            named = children.get(x)
                            if named is not None:
                                nb = _id_step(before, at, b, x)
                                na = _id_step(after, at, a, x)
                                if nb is not na:
                                    below.append((named, nb, na, (*at, x)))
                child = children.get(elem)
                if child is None:
                    t = None
                    break
                if type(b) is dict and type(a) is dict and type(elem) is str:
                    nb = b.get(elem, MISSING)  # (`_step` of a field, inlined)
                    na = a.get(elem, MISSING)
                else:
                    nb = _step(b, elem)
                    na = _step(a, elem)
                    if nb is _UNREACHABLE or na is _UNREACHABLE:
                        if nb is not na:  # the path breaks on one side only: changed
                            comparisons += child.everyone(hits)
                        t = None
                        break
                if (nb is MISSING) is not (na is MISSING):
                    # The write made (or removed) this level: every path below it, not
                    # only the written one, turns reachable (or not), so the whole
                    # subtree is compared. (A write at ["a", "a"] into a document
                    # without "a" makes ["a", "b"] absent where it was unreachable.)
                    below.append((child, nb, na, path[: depth + 1]))
                    t = None
                    break
                t, b, a = child, nb, na
            if t is not None and b is a:
                if kept is None:
                    kept = ids_kept(before, after)
                if not kept:
                    below.append((t, b, a, path))  # (as above)
            elif t is not None:
                if t.children:
                    below.append((t, b, a, path))
                else:  # (a level with no reader below it: `_match_trie_from`'s first step)
                    comparisons += self._compare_level(t, b, a, hits)
        self.comparisons += comparisons
        if below:
            return self._match_trie_from(below, hits, roots)
        return list(hits)

    @staticmethod
    def _compare_level(t: _Trie, b: object, a: object, hits: dict[Node, None]) -> int:
        """The readers whose path ends at trie level `t` (values `b` / `a`, `b is not a`):
        add those whose value changed to `hits`; returns how many were compared."""
        # (`_size` and `_hit` inlined: this runs for every trie level an edit walks.)
        count = 0
        deep, shallow = t.deep, t.shallow
        if deep is not None:
            if type(deep) is dict:
                count += len(deep)
                if _value_changed(b, a):
                    hits.update(deep)
            else:
                count += 1
                if _value_changed(b, a):
                    hits[deep] = None  # type: ignore[index]
        if shallow is not None:
            if type(shallow) is dict:
                count += len(shallow)
                if not shallow_equal(b, a):
                    hits.update(shallow)
            else:
                count += 1
                if not shallow_equal(b, a):
                    hits[shallow] = None  # type: ignore[index]
        return count

    def _match_trie(self, trie: _Trie, before: object, after: object) -> list[Node]:
        """`changed_at` for every reader of the document at once, walking the trie and
        both values together. O(readers whose path leads into a changed part + the
        trie levels walked there); a list level with many read elements finds its
        changed elements with one C-level identity scan."""
        return self._match_trie_from([(trie, before, after, ())], {}, (before, after))

    def _match_trie_from(
        self,
        stack: list[tuple[_Trie, object, object, Path]],
        hits: dict[Node, None],
        roots: tuple[object, object],
    ) -> list[Node]:
        comparisons = 0
        kept: bool | None = None  # `ids_kept`, asked when a level is the same object
        while stack:
            t, b, a, at = stack.pop()
            if b is a:
                if kept is None:
                    kept = ids_kept(roots[0], roots[1])
                if kept:
                    continue  # nothing at or below this path changed
                # (The id tables changed: a reader by id below may read another element.)
            deep, shallow = t.deep, t.shallow  # (`_size` and `_hit` inlined, as above)
            if deep is not None:
                if type(deep) is dict:
                    comparisons += len(deep)
                    if _value_changed(b, a):
                        hits.update(deep)
                else:
                    comparisons += 1
                    if _value_changed(b, a):
                        hits[deep] = None  # type: ignore[index]
            if shallow is not None:
                if type(shallow) is dict:
                    comparisons += len(shallow)
                    if not shallow_equal(b, a):
                        hits.update(shallow)
                else:
                    comparisons += 1
                    if not shallow_equal(b, a):
                        hits[shallow] = None  # type: ignore[index]
            children = t.children
            if not children:
                continue
            kinds = children.get(ELEMENT_KINDS)
            if kinds is not None:
                # A read of the element kinds (`kinds_changed`); it has no level below.
                comparisons += _size(kinds.shallow)
                if kinds_changed(b, a):
                    _hit(hits, kinds.shallow)
                if len(children) == 1:
                    continue  # no reader below this list's elements
            if type(b) is list and type(a) is list:
                lb: list[object] = b
                la: list[object] = a
                if t.named:
                    # Readers by element id: only those whose element changed.
                    _changed_elements(children, roots, at, lb, la, stack)
                    if t.named + (kinds is not None) == len(children):
                        continue  # no reader by position
                n = min(len(lb), len(la))
                if len(children) * 20 > n:
                    # Many read elements: visit only those that are not the same object
                    # on both sides (str keys below a list are unreachable on both).
                    for j in compress(range(n), map(is_not, lb, la)):
                        child = children.get(j)
                        if child is not None:
                            stack.append((child, lb[j], la[j], (*at, j)))
                    for j in range(n, max(len(lb), len(la))):
                        child = children.get(j)
                        if child is not None:
                            nb = lb[j] if j < len(lb) else MISSING
                            na = la[j] if j < len(la) else MISSING
                            stack.append((child, nb, na, (*at, j)))
                    continue
            for elem, child in children.items():
                if child is kinds:
                    continue  # (compared above)
                if type(elem) is str and (type(b) is list or type(a) is list):
                    if type(b) is list and type(a) is list:
                        continue  # (by `_changed_elements`, above)
                    nb = _id_step(roots[0], at, b, elem)
                    na = _id_step(roots[1], at, a, elem)
                else:
                    nb = _step(b, elem)
                    na = _step(a, elem)
                if nb is _UNREACHABLE or na is _UNREACHABLE:
                    if nb is not na:  # the path breaks on one side only: changed
                        comparisons += child.everyone(hits)
                    continue
                stack.append((child, nb, na, (*at, elem)))
        self.comparisons += comparisons
        return list(hits)

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
        kept: bool | None = None  # `ids_kept`, asked when a read place is the same object
        for node, paths in readers:
            if paths is not last:
                last, hit, tried = paths, False, 0
                for p in paths:
                    tried += 1
                    if dicts:
                        # `changed_at` for fields of two documents (("value",), ("value",
                        # "title")), inlined: step in while both sides are dicts, then
                        # compare two ints or two strs directly.
                        if len(p) == 1 and type(p[0]) is str:
                            b = before.get(p[0], MISSING)  # type: ignore[attr-defined]
                            a = after.get(p[0], MISSING)  # type: ignore[attr-defined]
                        else:
                            b, a = before, after
                            for e in p:
                                if b is a:
                                    break
                                if type(e) is not str or type(b) is not dict or type(a) is not dict:
                                    b = _UNREACHABLE  # (not fields all the way: below)
                                    break
                                b = b.get(e, MISSING)
                                a = a.get(e, MISSING)
                        if b is a:
                            if kept is None:  # (`ids_kept`, its usual answer inlined)
                                kept = before.get(ELEMENT_IDS, MISSING) is after.get(  # type: ignore[attr-defined]
                                    ELEMENT_IDS, MISSING
                                ) or ids_kept(before, after)
                            if kept:
                                continue
                            b = _UNREACHABLE  # (an element id below may name another element)
                        if b is not _UNREACHABLE:
                            t = type(b)
                            if not shallow and t is type(a) and (t is int or t is str):
                                if b != a:
                                    hit = True
                                    break
                                continue
                            if changed_at(b, a, (), shallow=shallow):
                                hit = True
                                break
                            continue
                    if changed_at(before, after, p, shallow=shallow):
                        hit = True
                        break
            comparisons += tried  # what comparing this reader's paths alone would count
            if hit:
                out.append(node)
        self.comparisons += comparisons
        return out

    def _check(self, nodes: Iterable[Node]) -> None:
        """The invariants (module doc); `nodes` are every registered reader."""
        read_by: dict[DocKey, set[tuple[Node, Path, bool]]] = {}
        """Per document with a trie: what `nodes` read of it, as the trie should hold it."""
        for node in nodes:
            reads = node.reads
            if type(reads) is OneRead:
                # Possibly shared between readers (`_shared`): it must hold only immutable
                # parts, or one reader's change could move another's read set.
                assert type(reads.entry) is tuple and len(reads.entry) == 2, node
                assert all(type(ps) is tuple for ps in reads.entry), node
            elif type(reads) is TwoReads:
                assert reads.key != reads.key2, node
            for key, (dpaths, spaths) in reads.items():
                if key in self.tries:
                    for p in dpaths:
                        read_by.setdefault(key, set()).add((node, p, False))
                    for p in spaths:
                        read_by.setdefault(key, set()).add((node, p, True))
                    continue
                for kind, table, paths in ((0, self.deep, dpaths), (1, self.shallow, spaths)):
                    held = dict(_entries(table[key], key, kind)) if key in table else {}
                    assert held.get(node, ()) == paths, (node, key)
        for kind, table in ((0, self.deep), (1, self.shallow)):
            for key, readers in table.items():
                assert type(readers) is not dict or len(readers) > 1, (key, readers)
                if type(readers) is _Alike:
                    # Two or more distinct deep readers (each one's paths checked above).
                    assert kind == 0, (key, readers)
                    assert len(set(readers.nodes)) == len(readers.nodes) > 1, (key, readers)
                for node, paths in _entries(readers, key, kind):
                    assert key in node.reads and node.registered, (node, key)
                    assert paths, (node, key)
        for key in self.deep.keys() | self.shallow.keys():
            assert key not in self.tries, f"{key} has a trie and table entries"
            if _count(self.deep.get(key)) + _count(self.shallow.get(key)) >= TRIE_READERS:
                raise AssertionError(f"{key} has many readers and no trie")
        for key, trie in self.tries.items():
            # The trie holds exactly the document's read paths.
            want = read_by.get(key, set())
            got = list(trie.entries())
            assert len(got) == len(set(got)) and set(got) == want, key
            assert want, f"an empty trie kept for {key}"
            assert not trie.empty, key
            trie._check()
