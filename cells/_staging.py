"""Commit staging: from a transaction's documents to what its commit applies and sends.

`Replica._commit` runs these steps in order. Each only computes, so a step that
finds the commit stale leaves the replica as it was:

1. `basis_moved`: the local conflict check. A document the transaction read
   whose visible version moved since its first access makes the commit stale,
   even if the value moved back (divergence of the basis counts).
2. `stage_writes`: per written document, the writes its layer carries (`ops`),
   the visible value after them, and whether that value moved (a *shadow* write,
   equal to a still-pending value, moves nothing now but is still sent).
3. `read_claims`: the store's read claims (deep paths compacted) and the local
   commits the reads were built on (`deps`, ascending).

Applying the staged writes to the replica and sending the request is the
replica's (`Replica._apply_local`, `Replica._send`).

Complexity: O(documents + paths written + paths read) per commit, plus the sort
of the merged deps. (The deps of N read documents used to be merged by tuple
concatenation: a commit reading N documents that held pending writes cost
O(N^2), 0.45 s at N = 10,000.)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from ._address import DocKey, Path
from ._records import DocRecord
from ._store import ReadClaim
from ._transaction import TxDoc
from ._values import MISSING, Value, get_path, same_value, set_path, set_paths
from .errors import InvalidValueError

Staged = tuple[DocKey, DocRecord, Sequence[tuple[Path, Value]], Value, bool]
"""(key, record, ops, visible value after ops, whether the visible value moved)."""


def _created_level(working: Value, visible: Value, path: Path) -> Path | None:
    """The shortest prefix of `path` that exists in `working` but not in `visible`."""
    for i in range(len(path)):
        prefix = path[:i]
        if get_path(visible, prefix) is MISSING and get_path(working, prefix) is not MISSING:
            return prefix
    return None


def _path_order(p: Path) -> tuple[int, list[str]]:
    return (len(p), list(map(str, p)))  # (`map`, not a comprehension: no frame per path)


def compact(paths: Iterable[Path]) -> list[Path]:
    """Sorted unique paths with every path below another one removed."""
    unique = list(dict.fromkeys(paths))
    if len(unique) <= 1:
        return unique
    # Shortest first, so a covering path is kept before the paths below it; the set
    # makes the prefix test O(len(p)) instead of one comparison per kept path. (Loops,
    # not `any()` over a generator: a lift reading two fields of its element compacts
    # its read claims on every run.)
    out: list[Path] = []
    kept: set[Path] = set()
    for p in sorted(unique, key=_path_order):
        for i in range(len(p) + 1):
            if p[:i] in kept:
                break
        else:
            out.append(p)
            kept.add(p)
    return out


# ---------------------------------------------------------------------- 1. basis


def basis_moved(records: Mapping[DocKey, DocRecord], docs: Mapping[DocKey, TxDoc]) -> DocKey | None:
    """The first document `docs` read whose visible version moved since (None: none did)."""
    for key, td in docs.items():
        if td.read and records[key].version != td.version:
            return key
    return None


def stale_message(key: DocKey) -> str:
    return f"{key} changed locally after this transaction first read it"


# ---------------------------------------------------------------------- 2. writes


def changed_field(working: dict[str, Value], visible: dict[str, Value], field: str) -> bool:
    """Whether a write of top-level `field` moved it (what `same_value` decides, with
    the two usual cases, two ints or two strs, decided by one comparison)."""
    new = working.get(field, MISSING)
    old = visible.get(field, MISSING)
    t = type(new)
    if t is type(old) and (t is int or t is str):
        return bool(new != old)
    return not same_value(new, old)


def stage_writes(
    records: Mapping[DocKey, DocRecord], docs: Mapping[DocKey, TxDoc]
) -> list[Staged] | str:
    """Per written document of `docs`, what its layer carries; a message if stale.

    A document whose writes all equal its visible value, with nothing pending under
    them, stages nothing (the commit may then be elided).
    """
    staged: list[Staged] = []
    for key, td in docs.items():
        written = td.written
        if not written:
            continue
        rec = records[key]
        visible = rec.visible
        if len(written) == 1:
            path = written[0]
            working, baseline = td.working, td.baseline
            # One write to a top-level field of a dict document (the usual scheduler
            # write), which moved it: nothing to lift, and two lookups decide it.
            if (
                len(path) == 1
                and type(working) is dict
                and type(visible) is dict
                and type(baseline) is not list
                and type(path[0]) is str
                and changed_field(working, visible, path[0])
            ):
                new = working.get(path[0], MISSING)
                # On the state the transaction started from, the working copy is that
                # write applied to the visible value.
                after = working if visible is baseline else set_path(visible, path, new)
                # `ops` a tuple: it can leave the collector's view.
                staged.append((key, rec, ((path, new),), after, True))
                continue
        ops, visible_change = ops_for(td, rec)
        if not ops:
            continue
        if len(written) == 1 and visible is td.baseline and ops[0][0] is written[0]:
            # The one write, unlifted, on the state the transaction started from: the
            # working copy is that write applied to the visible value.
            staged.append((key, rec, ops, td.working, visible_change))
            continue
        try:
            # (Several elements of one long list: one copy, or the transaction's own
            # value when it made that same write on this same value: `set_paths`.)
            after = set_paths(visible, ops)
        except InvalidValueError as exc:
            # A blind write below a place that became a scalar since this transaction
            # first saw it: nothing applied, re-run on fresh state.
            return f"write to {key} no longer applies: {exc}"
        staged.append((key, rec, ops, after, visible_change))
    return staged


def ops_for(td: TxDoc, rec: DocRecord) -> tuple[Sequence[tuple[Path, Value]], bool]:
    """The writes a layer carries, and whether any of them changes the visible value.

    A write equal to the visible value is elided only when the document has no
    pending local layer. Otherwise it is kept as a *shadow* write that changes
    nothing now: a pending layer may still fail (the write must then survive
    it), and pending layers confirmed later land *before* this write, so the
    durable order must include it even when the confirmed value agrees. (Without
    this, a setup re-issued on top of an earlier pending setup commits nothing
    and is lost if the earlier fails; and a computation's fresh value, equal to
    what is shown, is overwritten when older pending writes are confirmed.)
    """
    visible = rec.visible
    written = td.written
    assert written is not None  # only called for written documents
    pending = bool(rec.layers)
    changes = False
    ops: list[tuple[Path, Value]] = []
    for path in written if len(written) == 1 else compact(written):
        target = path
        # Lift a write that changed a list's length to the list: list elements
        # are addressed by position, so a leaf write cannot say "insert" or
        # "remove". Writes that create dict levels stay leaf writes (the store
        # creates the levels, and records the first created one for conflict
        # checks), so two sessions creating different fields both keep theirs.
        for i in range(len(path)):
            prefix = path[:i]
            if i:
                base = get_path(td.baseline, prefix)
                work = get_path(td.working, prefix)
            else:
                base, work = td.baseline, td.working
            if type(base) is list and (type(work) is not list or len(work) != len(base)):
                target = prefix
                break
        new = get_path(td.working, target)
        if same_value(new, get_path(visible, target)):
            # The leaf did not change, but a level this transaction created and
            # then emptied (`{}` left behind) must still be written.
            created = _created_level(td.working, visible, target)
            if created is not None:
                target, new = created, get_path(td.working, created)
                changes = True
            elif not pending:
                continue
        else:
            changes = True
        ops.append((target, new))
    if len(ops) > 1:
        keep = set(compact(p for p, _ in ops))
        ops = [(p, v) for p, v in ops if p in keep]
    return ops, changes


# ---------------------------------------------------------------------- 3. claims


def read_claims(docs: Mapping[DocKey, TxDoc]) -> tuple[tuple[ReadClaim, ...], tuple[int, ...]]:
    """The read claims of `docs` and the local commits they build on (ascending, unique).

    O(read paths + deps log deps): the deps of several documents are gathered in
    one list and sorted once.
    """
    reads: list[ReadClaim] = []
    deps: tuple[int, ...] = ()
    gathered: list[int] | None = None  # deps of more than one document
    for key, td in docs.items():
        if not td.read:
            continue
        td_deps = td.deps
        if td_deps:
            if not deps:
                deps = td_deps  # ascending: a document's layers are in seq order
            elif gathered is None:
                gathered = [*deps, *td_deps]
            else:
                gathered += td_deps
        td_reads = td.reads
        assert td_reads is not None  # a read document has read paths
        if type(td_reads) is tuple:  # read at one place (however often)
            path, shallow = td_reads[0]
            reads.append(ReadClaim(key, path, shallow, td.basis_seq))
        else:
            _claims_of(key, td, reads)
    if gathered is not None:
        deps = tuple(sorted(set(gathered)))
    return tuple(reads), deps


def _claims_of(key: DocKey, td: TxDoc, out: list[ReadClaim]) -> None:
    """The read claims of a document read at more than one place: deep paths compacted."""
    assert td.reads is not None
    basis = td.basis_seq
    deep_paths: list[Path] = []
    shallow_paths: list[Path] = []
    for p, shallow in td.reads:  # (loops, not generators: see `compact`)
        (shallow_paths if shallow else deep_paths).append(p)
    deep = compact(deep_paths)
    for p in deep:
        out.append(ReadClaim(key, p, False, basis))
    for p in sorted(set(shallow_paths), key=str):
        for q in deep:
            if p[: len(q)] == q:
                break
        else:
            out.append(ReadClaim(key, p, True, basis))
