"""`MemoryStore`: the in-process authoritative store (the default).

Several runtimes may share one `MemoryStore`; each connects as its own
session with its own replica, so their commits conflict for real. Verdicts
are decided synchronously at submission (unless `store.testing` holds them)
but delivered on the submitting replica's mailbox, like a remote store's.
Nothing survives the process.

History: only what a conflict check can still need
- A commit's reads are checked against the revisions (who wrote which paths) of
  their documents after their basis. Each connected session says, when asked,
  below which seq it needs none (`SessionListener.low_water`: the mark taken
  when its current busy period began, or none at all when it is idle and has
  integrated everything sent to it). When a session goes quiet (`quiesced`),
  the revisions at or below the lowest of those marks are pruned (once at least
  `PRUNE_BATCH` revisions were added since the last prune). With one runtime,
  that leaves at most `PRUNE_BATCH` revisions in all after a settle, however
  many documents and commits it made.
- A document whose revisions were pruned has a *floor*, the newest pruned seq:
  `_floors` while some of its revisions remain, else its head's seq. A read
  whose basis is older than the floor conflicts (re-run), as if the pruned
  commits had written the whole document: over-approximating is allowed, and
  the marks make it happen only to a session that had not integrated those
  commits when it took its basis (so the conflict is real at document grain;
  with runtimes on several threads, a mark may count a commit applied but not
  yet posted to its mailbox, with the same effect).
- As a safety net (a transaction left open for long pins its mark), a document
  keeps at most 2 * `REVISIONS_KEPT` revisions, pruned to `REVISIONS_KEPT`.

Invariants (checked by `_check`)
- `seq` is the number of accepted commits; revisions of each document are in
  increasing seq order, all above its floor; a document with revisions has its
  head at its last revision's seq; only a document with revisions has a `_floors`
  entry.
- Every resolution names a seq that exists, or None (rejected).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from functools import partial
from typing import Any, ClassVar

import attrs

from .._address import DocKey, Path
from .._claims import MemoryClaimTable
from .._store import (
    NO_STATE,
    REQUEST_PAD,
    RUN_WIDTH,
    CommitRequest,
    DocState,
    ReadClaim,
    Revision,
    SessionListener,
    StoreBase,
    Verdict,
    revision_path,
    run_request,
    validate_commit,
)
from .._values import MISSING, Value, element_writes, set_elements, set_path
from ..errors import ConflictError, InternalError, InvalidValueError

PRUNE_BATCH = 64
"""A quiet session prunes history once at least this many revisions (and one per
session) were added since the last prune: a prune asks every session for its mark and
walks the documents, so pruning after each commit would cost more than it frees."""

REVISIONS_KEPT = 64
"""The cap on revisions kept per document (at most twice this many, pruned to this
many) when the sessions' low-water marks keep more; older bases conflict conservatively."""
_HISTORY_CAP = 2 * REVISIONS_KEPT
"""Revisions a document's list takes before `_add_revision` prunes it (one global per
commit instead of a product, in `submit_runs` and `commit_entry`)."""

_ONE_PATH: dict[Path, tuple[Path]] = {}
"""Shared `paths` of one-path revisions (`(("value",),)` above all): a document keeps up
to 2 * REVISIONS_KEPT revisions, and a 1-tuple each would cost 48 bytes. Bounded."""
_ONE_PATH_KEPT = 256


class MemoryStore(StoreBase):
    """An in-memory store; `MemoryStore()` takes no arguments."""

    _hooked: ClassVar[bool] = False
    """Whether the class overrides `_evaluate` (a subclass that counts or injects
    faults): then every commit goes through it. Set once per class, as it is made
    (`__init_subclass__`): a commit reads a class attribute instead of comparing two
    attributes looked up on types (about 12 L1i misses per op of `diamond 5`)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._hooked = cls._evaluate is not MemoryStore._evaluate

    def __init__(self) -> None:
        super().__init__()
        self._seq = 0
        self.claims: MemoryClaimTable = MemoryClaimTable(self._lock, lambda: self._heads)
        """The page claims (`cells.ClaimTable`): which process runs each open page."""
        self._heads: dict[DocKey, DocState] = {}
        self._claimed: set[DocKey] = set()
        """Create-only keys of accepted commits that have no head (never written): with
        the heads, every key that exists or existed. Not every written key: a set entry
        costs about 65 bytes per document, and heads are never removed."""
        self._revisions: dict[DocKey, Revision | list[Revision]] = {}
        """Per document its newest revisions, oldest first: the `Revision` itself while it
        has one (most documents are written once or rarely: a list costs 64 bytes more)."""
        self._floors: dict[DocKey, int] = {}
        """Per document that has revisions and had some pruned: the newest pruned one's
        seq (reads older than it conflict). A document with no revisions left has its
        head's seq as floor, without an entry here."""
        self._prune_in = PRUNE_BATCH
        """Revisions still to add before a quiet session prunes (`StoreBase._prune_in`)."""
        self._prune_base = PRUNE_BATCH
        """What `_prune_in` was set to by the last prune: `_prune_base - _prune_in`
        revisions were added since (each addition counts one down)."""
        self._kept = 0
        """Revisions the last prune kept (less those the per-document cap dropped since):
        with the ones added since, every revision held (`_check`), so a prune that drops
        all of them knows how many without a walk."""
        self._resolutions: dict[str, _Resolved] = {}
        """Per session: which of its commits (local seqs) have a verdict, and which were
        rejected. Kept as a watermark, not one entry per commit: it would otherwise grow
        with every commit the store ever evaluated."""
        self._holders: dict[DocKey, str | tuple[str, ...]] = {}
        """Per document, the sessions holding it (they loaded it): its foreign commits go
        to these alone (and to `_hears_all`), so a commit costs O(sessions holding what
        it wrote), not O(sessions). Session ids, not listeners, so a closed runtime's replica is not
        kept alive here; a disconnected id is skipped, and dropped when met."""
        self._session_of: dict[int, str] = {}
        """id(listener) -> its session id, while connected."""
        self._hears_all: set[str] = set()
        """Sessions that loaded documents while alone on this store (one runtime, the
        usual case): they are not recorded in `_holders` (an entry costs about 37 bytes
        per document) but hear every other session's commits, as if holding everything
        (`on_foreign` skips the documents they lack). Connected sessions only."""
        # Bound once: validate_commit runs for every commit.
        self._revisions_since_fn = self._revisions_since
        self._resolution_fn = self._resolution
        self._ever_written_fn = self._ever_written

    def __repr__(self) -> str:
        return f"<MemoryStore seq={self._seq} docs={len(self._heads)}>"

    @property
    def seq(self) -> int:
        return self._seq

    # -- sessions and who holds what
    def connect(self, listener: SessionListener, session_id: str | None = None) -> str:
        sid = super().connect(listener, session_id)
        self._session_of[id(listener)] = sid
        return sid

    def disconnect(self, session_id: str) -> None:
        with self._lock:
            listener = self._listeners.get(session_id)
            if listener is not None:
                self._session_of.pop(id(listener), None)
            self._hears_all.discard(session_id)
            super().disconnect(session_id)

    def _hold(self, listener: SessionListener, key: DocKey) -> None:
        """`listener` holds `key` from now on: it hears the document's foreign commits.

        Called before the load reads the document (under the lock, which every
        commit is applied under): a commit either precedes the read (the load
        carries it) or is sent to this session (which integrates it after the load).
        """
        sid = self._session_of.get(id(listener))
        if sid is None:
            return  # not connected (closed): it hears nothing
        hears_all = self._hears_all
        if hears_all and sid in hears_all:
            return
        if len(self._listeners) == 1:
            # Alone: nobody else's commits to route yet. Hearing every commit from now
            # on costs nothing until another session connects, and no entry per document.
            hears_all.add(sid)
            return
        holders = self._holders
        held = holders.get(key)
        if held is None:
            holders[key] = sid
        elif type(held) is str:
            if held != sid:
                holders[key] = (held, sid)
        elif sid not in held:
            holders[key] = (*held, sid)

    def load_now(self, key: DocKey, listener: SessionListener | None = None) -> DocState | None:
        if listener is None:
            return super().load_now(key)
        with self._lock:
            self._hold(listener, key)
            return super().load_now(key)

    def load(self, listener: SessionListener, key: DocKey) -> None:
        with self._lock:
            self._hold(listener, key)
            super().load(listener, key)

    def _broadcast(self, origin: str, seq: int, docs: dict[DocKey, Value]) -> None:
        """Send an accepted commit of `origin`'s to the other sessions holding a document
        it wrote (each once, with all of `docs`: `on_foreign` skips what it lacks)."""
        listeners = self._listeners
        if len(listeners) == 1 and origin in listeners:
            return  # nobody else to tell (the common single-runtime case)
        holders = self._holders
        targets: dict[str, SessionListener] = {}
        with self._lock:
            for key in docs:
                held = holders.get(key)
                if held is None:
                    continue
                for sid in (held,) if type(held) is str else held:
                    if sid == origin or sid in targets:
                        continue
                    lis = listeners.get(sid)
                    if lis is None:
                        self._drop_holder(key, sid)  # disconnected
                    else:
                        targets[sid] = lis
            for sid in self._hears_all:
                if sid != origin and sid not in targets:
                    targets[sid] = listeners[sid]
        for lis in targets.values():
            lis.mailbox.post(partial(lis.on_foreign, seq, docs))

    def _drop_holder(self, key: DocKey, sid: str) -> None:
        held = self._holders[key]
        if type(held) is str or len(held) == 1:
            del self._holders[key]
            return
        rest = tuple(s for s in held if s != sid)
        self._holders[key] = rest[0] if len(rest) == 1 else rest

    def _ever_written(self, key: DocKey) -> bool:
        return key in self._heads or key in self._claimed

    def _read(self, key: DocKey) -> DocState:
        return self._heads.get(key, NO_STATE)

    def _revisions_since(self, key: DocKey, seq: int) -> Iterable[Revision]:
        revs = self._revisions.get(key)
        if revs is None:
            head = self._heads.get(key)
            if head is not None and seq < head.seq:
                # Every revision was pruned, the head's too: its seq is the floor.
                return (Revision(head.seq, "", -1, ((),)),)
            return ()
        if seq < self._floors.get(key, 0):
            # The revisions after this basis were pruned: assume the worst (a write
            # at the document root). Over-approximating a conflict is allowed.
            return (Revision(self._floors[key], "", -1, ((),)),)
        if not isinstance(revs, list):
            return (revs,) if revs.seq > seq else ()
        i = len(revs)
        if revs[i - 1].seq <= seq:
            return ()  # nothing newer than the basis (the common case): no slice
        # Scan back from the newest: a basis is usually only a revision or two behind,
        # and a document keeps at most 2 * REVISIONS_KEPT revisions.
        i -= 1
        while i and revs[i - 1].seq > seq:
            i -= 1
        return revs[i:]

    def _resolution(self, session_id: str, local_seq: int) -> int | bool | None:
        got = self._resolutions.get(session_id)
        if got is None or not got.resolved(local_seq):
            return False
        return None if local_seq in got.rejected else True

    def _record_rejection(self, request: CommitRequest) -> None:
        with self._lock:
            self._resolve(request.session_id, request.local_seq, None)

    def submit(self, listener: SessionListener, request: CommitRequest) -> None:
        """`StoreBase.submit` with `_submit_evaluation`'s body here, not a call away: it
        runs once per commit made outside a batch (every Cell API commit)."""
        if self._verdict_gate is not None or self.closed:
            super().submit(listener, request)  # held by the gate, or refused: closed
            return
        if self._hooked:
            # A subclass hooks `_evaluate` (to count or to inject faults): go through it.
            self._evaluate_and_answer(listener, request)
            return
        # An accepted one-write commit (the usual) is answered with `on_accepted`, as in
        # a batch: no `Verdict` and no per-document dicts, on either side.
        with self._lock:
            accepted = self._apply_one(request)
            verdict = self._evaluate_general(request) if accepted is None else None
        self.commits_evaluated += 1
        if verdict is None:
            assert accepted is not None
            seq, base_seq, value = accepted
            listener.mailbox.post(partial(listener.on_accepted, request, seq, base_seq, value))
            if len(self._listeners) > 1:
                self._broadcast(request.session_id, seq, {request.writes[0].key: value})
            return
        self._answer(listener, request, verdict)
        if verdict.error is None and verdict.seq is not None and len(self._listeners) > 1:
            self._broadcast(request.session_id, verdict.seq, verdict.docs)

    def _submit_evaluation(self, listener: SessionListener, request: CommitRequest) -> None:
        # (`StoreBase`'s hook, reached only past its gate and closed checks, which
        # `submit` repeats: it then evaluates.)
        self.submit(listener, request)

    def _submit_batch_evaluation(
        self, listener: SessionListener, requests: Sequence[CommitRequest]
    ) -> None:
        if self._hooked:
            # A subclass hooks `_evaluate` (to count or to inject faults): every commit
            # must go through it, one delivery each.
            super()._submit_batch_evaluation(listener, requests)
            return
        # One lock and one mailbox delivery for the whole batch, each commit still
        # validated and applied alone, in order, as `submit` would: a run log of
        # requests (see RUN_WIDTH), which `submit_runs` takes now (it declines only
        # what was handled above: a held gate, a closed store, a hooked evaluation).
        runs: list[Any] = []
        for request in requests:
            runs += (request, *REQUEST_PAD)
        taken = self.submit_runs(listener, requests[0].session_id, runs) if runs else True
        assert taken, "submit_runs declined a batch submit_batch let through"

    takes_runs = True

    def submit_runs(self, listener: SessionListener, session_id: str, runs: list[Any]) -> bool:
        """`StoreBase.submit_runs`: a drain's node-run commits, evaluated in one loop.

        Each entry is decided as `_apply_one` decides its request (the same checks, in
        the same order, each seeing the ones before it), and an entry it cannot decide
        goes through `_evaluate_general` as its request: the verdicts are exactly those
        of `submit_batch`. What it saves is the per-commit objects and calls around
        that: no request, claim or write per commit, one lock and one delivery per
        drain, and no copy of the written document when the replica's new value was
        made from this store's current one (`baseline` is the head's value: the
        replica's `working` is then exactly what `set_path` would make here).
        """
        if self._verdict_gate is not None or self.closed or self._hooked:
            return False  # held or hooked: every commit goes through `submit` as a request
        entries = len(runs) // RUN_WIDTH
        if entries * RUN_WIDTH != len(runs):
            raise InternalError(f"a run log of {len(runs)} items, not entries of {RUN_WIDTH}")
        results: list[Any] = []
        heads = self._heads
        general = self._evaluate_general
        slow = 0  # entries the general path (or `_apply_one`) decided: they count their own
        with self._lock:
            floors = self._floors  # (under the lock: a prune replaces both tables)
            revisions = self._revisions
            resolutions = self._resolutions.get(session_id)
            if resolutions is None:
                resolutions = self._resolutions[session_id] = _Resolved()
            # Kept in locals for the loop, and put back before anything else reads them
            # (a request's evaluation, the end): the store's seq and the session's
            # resolution watermark (`above` and `rejected` are sets changed in place).
            seq = self._seq
            low, above, rejected = resolutions.low, resolutions.above, resolutions.rejected
            last_path: Path | None = None  # the path `paths` was made for
            paths: tuple[Path, ...] = ()
            it = iter(runs)
            # (One entry per step, unpacked from the tuple `zip` reuses: no slice per entry.
            # Its RUN_WIDTH iterators written out, its length checked above: no tuple made,
            # no keyword parsed, no C path used only here per drain.)
            for (
                sent, local_seq, rkey, basis, rpath, shallow, deps, key, path, new, baseline,
                working,
            ) in zip(it, it, it, it, it, it, it, it, it, it, it, it):  # noqa: B905  # fmt: skip
                if local_seq is None:  # a request of its own
                    self._seq = seq
                    resolutions.low = low
                    accepted = self._apply_one(sent)
                    if accepted is None:
                        results += (None, general(sent), sent)
                    else:
                        results += accepted
                    slow += 1
                    seq = self._seq
                    low = resolutions.low
                    continue
                # `_apply_one`'s checks, inlined (see there); `ok` False: ask the general path.
                # Every dep resolved and none rejected (a loop of comparisons, not a `max`:
                # no C function called for it).
                ok = True
                if deps:
                    if rejected:
                        for dep in deps:
                            if (dep > low and dep not in above) or dep in rejected:
                                ok = False
                                break
                    else:
                        for dep in deps:
                            if dep > low and dep not in above:
                                ok = False
                                break
                # (Deps are looked up in a set when many, and only where a revision after
                # a basis is: `_apply_one`'s `built_on`.)
                if not ok:
                    pass
                elif rkey is None:
                    built_on = deps if len(deps) <= 8 else frozenset(deps)
                    if shallow is None:  # several documents read: their claims
                        ok = self._reads_clear(session_id, basis, built_on)
                    else:  # two or k reads, (document, basis) each (see RUN_WIDTH)
                        ok = self._bases_clear(session_id, basis, built_on)
                else:  # one read (`_bases_clear` of one, inlined)
                    revs = revisions.get(rkey)
                    if revs is None:
                        head = heads.get(rkey)
                        ok = head is None or basis >= head.seq
                    elif type(revs) is not Revision:  # (a list: `Revision` is final)
                        j = len(revs) - 1
                        if revs[j].seq > basis:
                            built_on = deps if len(deps) <= 8 else frozenset(deps)
                            while j >= 0 and revs[j].seq > basis:
                                rev = revs[j]
                                if rev.session_id != session_id or rev.local_seq not in built_on:
                                    ok = False
                                    break
                                j -= 1
                            if ok and floors and basis < floors.get(rkey, 0):
                                ok = False
                    elif revs.seq > basis:
                        ok = (
                            revs.session_id == session_id
                            and revs.local_seq in deps
                            and not (floors and basis < floors.get(rkey, 0))
                        )
                    # (Else no revision after the basis: a floor is below the oldest kept
                    # revision, so no floor to check.)
                head = heads.get(key, NO_STATE)
                current = head.value
                if ok:
                    if current is baseline:
                        value = working  # what the copy below would make: no copy
                    elif type(current) is dict:
                        value = current.copy()
                        if new is MISSING:
                            value.pop(path[0], None)
                        else:
                            value[path[0]] = new
                    else:
                        ok = False  # (not a dict: `set_path` decides, on the general path)
                if not ok:
                    self._seq = seq
                    resolutions.low = low
                    entry = (sent, local_seq, rkey, basis, rpath, shallow, deps, key, path, new)
                    request = run_request(session_id, entry, 0)
                    results += (None, general(request), request)
                    slow += 1
                    seq = self._seq
                    low = resolutions.low
                    continue
                seq += 1
                heads[key] = DocState(seq, value)
                if path is not last_path:  # (a drain's entries mostly write one path)
                    last_path = path
                    shared = _ONE_PATH.get(path)
                    if shared is None:
                        shared = (path,)
                        if len(_ONE_PATH) < _ONE_PATH_KEPT:
                            _ONE_PATH[path] = shared
                    paths = shared
                revision = Revision(seq, session_id, local_seq, paths)
                revs = revisions.get(key)
                if revs is None:  # (`_add_revision`'s first case, inlined)
                    if head.seq:
                        floors[key] = head.seq  # its history was pruned: keep that floor
                    revisions[key] = revision
                elif type(revs) is not Revision and len(revs) < _HISTORY_CAP:
                    revs.append(revision)
                else:
                    self._add_revision(key, revision, head.seq)
                if local_seq == low + 1 and not above:
                    low = local_seq  # `_Resolved.add` for the usual next commit
                else:
                    resolutions.low = low
                    resolutions.add(local_seq, rejected=False)
                    low = resolutions.low
                results += (seq, head.seq, value)
            self._seq = seq
            resolutions.low = low
            self._prune_in -= entries - slow  # (the general path counts its own)
        self.commits_evaluated += entries
        listener.mailbox.post(partial(listener.accept_runs, runs, results, 0))
        if len(self._listeners) > 1:
            self._broadcast_runs(session_id, runs, results)
        return True

    takes_entries = True

    def commit_entry(
        self, listener: SessionListener, session_id: str, entry: tuple[Any, ...]
    ) -> bool:
        """`StoreBase.commit_entry`: one Cell API commit of the usual shape (one read,
        one top-level field written; or a user's plain write, below a top-level field
        too, with the read claims of the links it followed), decided as `submit_runs`
        decides an entry (as `_apply_one` decides its request), with no request, claim
        or write object and no run log. Anything the general path must decide is
        declined before anything changes."""
        if self._verdict_gate is not None or self.closed or self._hooked:
            return False  # held or hooked: the request goes through `submit`
        _, local_seq, rkey, basis, _, _, deps, key, path, new, baseline, working = entry
        with self._lock:
            resolutions = self._resolutions.get(session_id)
            built_on: Collection[int] = deps
            if deps:
                if resolutions is None:
                    return False
                low, above, rejected = resolutions.low, resolutions.above, resolutions.rejected
                for dep in deps:
                    if (dep > low and dep not in above) or dep in rejected:
                        return False  # not evaluated yet, or rejected
                if len(deps) > 8:
                    built_on = frozenset(deps)
            # The read's check (`_reads_clear` of one claim, inlined).
            heads = self._heads
            revisions = self._revisions
            floors = self._floors
            revs = revisions.get(rkey)
            if revs is None:
                if rkey is None:
                    # The read claims in `basis` (see RUN_WIDTH), or none: a user's plain
                    # write (`Replica._commit_write`). Two reads of a node (`shallow` not
                    # None) are `submit_runs`' to decide: declined here.
                    if entry[5] is not None or (
                        basis and not self._reads_clear(session_id, basis, built_on)
                    ):
                        return False
                else:
                    head = heads.get(rkey)
                    if head is not None and basis < head.seq:
                        return False
            elif type(revs) is not Revision:  # (a list: no subtype walk; `Revision` is final)
                j = len(revs) - 1
                while j >= 0 and revs[j].seq > basis:
                    rev = revs[j]
                    if rev.session_id != session_id or rev.local_seq not in built_on:
                        return False
                    j -= 1
            elif revs.seq > basis and (
                revs.session_id != session_id or revs.local_seq not in built_on
            ):
                return False
            if floors and rkey is not None and basis < floors.get(rkey, 0):
                return False
            head = heads.get(key, NO_STATE)
            current = head.value
            if current is baseline:
                value = working  # what the copy below would make: no copy
            elif len(path) != 1:
                return False  # (`set_path` on another state: the general path decides)
            elif type(current) is dict:
                value = current.copy()
                if new is MISSING:
                    value.pop(path[0], None)
                else:
                    value[path[0]] = new
            else:
                return False  # (not a dict: `set_path` decides, on the general path)
            self._seq = seq = self._seq + 1
            heads[key] = DocState(seq, value)
            paths = _ONE_PATH.get(path)
            if paths is None:
                paths = (path,)
                if len(_ONE_PATH) < _ONE_PATH_KEPT:
                    _ONE_PATH[path] = paths
            revision = Revision(seq, session_id, local_seq, paths)
            revs = revisions.get(key)
            if revs is None:  # (`_add_revision`'s first case, inlined)
                if head.seq:
                    floors[key] = head.seq  # its history was pruned: keep that floor
                revisions[key] = revision
            elif type(revs) is not Revision and len(revs) < _HISTORY_CAP:
                revs.append(revision)
            else:
                self._add_revision(key, revision, head.seq)
            if resolutions is None:
                resolutions = self._resolutions[session_id] = _Resolved()
            if local_seq == resolutions.low + 1 and not resolutions.above:
                resolutions.low = local_seq  # `_Resolved.add` for the usual next commit
            else:
                resolutions.add(local_seq, rejected=False)
            self._prune_in -= 1
        self.commits_evaluated += 1
        listener.mailbox.post(partial(listener.accept_entry, entry, seq, head.seq, value))
        if len(self._listeners) > 1:
            self._broadcast(session_id, seq, {key: value})
        return True

    def _reads_clear(
        self, session_id: str, reads: Iterable[ReadClaim], built_on: Collection[int]
    ) -> bool:
        """`_apply_one`'s read check: nothing was written after any read's basis but
        `session_id`'s commits in `built_on`, and no basis is below a floor."""
        revisions = self._revisions
        floors = self._floors
        for claim in reads:
            # Each checked inline: a join of five inputs checks five per update.
            rkey, basis = claim.key, claim.basis_seq
            revs = revisions.get(rkey)
            if revs is None:
                # No revision left: the head's seq is the floor (see `_revisions_since`).
                head = self._heads.get(rkey)
                if head is not None and basis < head.seq:
                    return False
                continue
            if isinstance(revs, list):
                j = len(revs) - 1
                while j >= 0 and revs[j].seq > basis:
                    rev = revs[j]
                    if rev.session_id != session_id or rev.local_seq not in built_on:
                        return False
                    j -= 1
            elif revs.seq > basis and (
                revs.session_id != session_id or revs.local_seq not in built_on
            ):
                return False
            if floors and basis < floors.get(rkey, 0):
                return False
        return True

    def _bases_clear(
        self, session_id: str, bases: tuple[Any, ...], built_on: Collection[int]
    ) -> bool:
        """`_reads_clear` of the reads of a two- or k-read run log entry: `bases` is
        (document, basis seq, ...), one pair per read, with no claim object (see
        RUN_WIDTH). A read's path and shallowness do not matter here (as there): a
        revision of its document after its basis by another commit fails it, and the
        general path decides, from the entry's claims (`run_request`)."""
        revisions = self._revisions
        floors = self._floors
        n = len(bases)
        i = 0
        while i < n:
            # (Indexed: `zip` over the pairs is fewer bytecodes but more time, measured; a
            # counted `while`, not a `range`: no range object per entry.)
            rkey, basis = bases[i], bases[i + 1]
            i += 2
            revs = revisions.get(rkey)
            if revs is None:
                # No revision left: the head's seq is the floor (see `_revisions_since`).
                head = self._heads.get(rkey)
                if head is not None and basis < head.seq:
                    return False
            elif type(revs) is not Revision:  # (a list: no subtype walk; `Revision` is final)
                j = len(revs) - 1
                if revs[j].seq > basis:
                    while j >= 0 and revs[j].seq > basis:
                        rev = revs[j]
                        if rev.session_id != session_id or rev.local_seq not in built_on:
                            return False
                        j -= 1
                    if floors and basis < floors.get(rkey, 0):
                        return False
            elif revs.seq > basis and (
                revs.session_id != session_id
                or revs.local_seq not in built_on
                or (floors and basis < floors.get(rkey, 0))
            ):
                return False
            # (Else every revision kept is at or below the basis, and a floor is below
            # the oldest kept one: no floor to check.)
        return True

    def _broadcast_runs(self, session_id: str, runs: list[Any], results: list[Any]) -> None:
        """`_broadcast` of each accepted commit of a run log, in order."""
        for i in range(0, len(runs), RUN_WIDTH):
            j = i // RUN_WIDTH * 3
            seq, verdict, value = results[j : j + 3]
            if seq is not None:
                key = runs[i + 7] if runs[i + 1] is not None else runs[i].writes[0].key
                self._broadcast(session_id, seq, {key: value})
            elif verdict.error is None and verdict.seq is not None:
                self._broadcast(session_id, verdict.seq, verdict.docs)

    def _evaluate(self, request: CommitRequest) -> Verdict:
        with self._lock:
            return self._evaluate_locked(request)

    def _evaluate_locked(self, request: CommitRequest) -> Verdict:
        accepted = self._apply_one(request)
        if accepted is None:
            return self._evaluate_general(request)
        seq, base_seq, value = accepted
        key = request.writes[0].key
        return Verdict(seq, {key: value}, base_seqs={key: base_seq})

    def _apply_one(self, request: CommitRequest) -> tuple[int, int, Value] | None:
        """The usual scheduler commit, applied if `validate_commit` would surely accept
        it: (seq, base seq, new value).

        The usual shape is one write, no create-only keys, resolved dependencies, and
        reads with nothing written since their basis but this session's commits they
        were built on (the chain case: the writer's commit, evaluated just before). It
        is applied without the per-document dicts of the general path. None, with
        nothing changed, means "ask `validate_commit`", not "reject".
        """
        writes = request.writes
        if len(writes) != 1 or request.create_only or request.fence is not None:
            return None
        session_id = request.session_id
        deps = request.deps
        resolutions = self._resolutions.get(session_id)
        built_on: tuple[int, ...] | frozenset[int] = deps
        if deps:
            if resolutions is None:
                return None
            low, above, rejected = resolutions.low, resolutions.above, resolutions.rejected
            for dep in deps:
                if (dep > low and dep not in above) or dep in rejected:
                    return None  # not evaluated yet, or rejected
            if len(deps) > 8:
                # Many deps (a commit reading N documents that hold pending writes has
                # up to N) are looked up in a set: in the tuple, that cost O(N^2) here.
                built_on = frozenset(deps)
        if not self._reads_clear(session_id, request.reads, built_on):
            return None
        heads = self._heads
        revisions = self._revisions
        w = writes[0]
        key, path, new = w.key, w.path, w.value
        head = heads.get(key, NO_STATE)
        current = head.value
        rpath: Path
        if len(path) == 1 and type(current) is dict and type(path[0]) is str:
            # One field of an existing dict document (`set_path`'s own shortcut, and
            # it creates no level, so it is its own revision path).
            value = current.copy()
            if new is MISSING:
                value.pop(path[0], None)
            else:
                value[path[0]] = new
            rpath = path
        else:
            try:
                value = set_path(current, path, new, where="commit")
            except InvalidValueError:
                return None  # the general path rejects it with its message
            rpath = revision_path(current, path)
        self._seq = seq = self._seq + 1
        heads[key] = DocState(seq, value)
        paths = _ONE_PATH.get(rpath)
        if paths is None:
            paths = (rpath,)
            if len(_ONE_PATH) < _ONE_PATH_KEPT:
                _ONE_PATH[rpath] = paths
        revision = Revision(seq, session_id, request.local_seq, paths)
        revs = revisions.get(key)
        self._prune_in -= 1
        if isinstance(revs, list) and len(revs) < 2 * REVISIONS_KEPT:
            revs.append(revision)
        else:
            self._add_revision(key, revision, head.seq)
        local_seq = request.local_seq
        if resolutions is not None and local_seq == resolutions.low + 1 and not resolutions.above:
            resolutions.low = local_seq  # `_Resolved.add` for the usual next commit
        else:
            self._resolve(session_id, local_seq, seq)
        return seq, head.seq, value

    def _evaluate_general(self, request: CommitRequest) -> Verdict:
        fence = request.fence
        if fence is not None:  # under the lock, as the commit applies: a takeover orders
            fenced = self.claims.fence_error(fence)  # before or after it, never inside
            if fenced is not None:
                self._resolve(request.session_id, request.local_seq, None)
                return Verdict(None, error=fenced)
        error = validate_commit(
            request,
            revisions_since=self._revisions_since_fn,
            resolution=self._resolution_fn,
            ever_written=self._ever_written_fn,
        )
        if error is not None:
            self._resolve(request.session_id, request.local_seq, None)
            return Verdict(None, error=error)
        heads = self._heads
        docs: dict[DocKey, Value] = {}
        base_seqs: dict[DocKey, int] = {}
        paths: dict[DocKey, list[Path]] = {}
        writes = request.writes
        # Several writes to one document: those replacing elements of one long list make
        # one new list (`set_paths`: the replica's own value when it made the same).
        by_key: dict[DocKey, list[tuple[Path, Value]]] | None = None
        if len(writes) > 1:
            by_key = {}
            for w in writes:
                by_key.setdefault(w.key, []).append((w.path, w.value))
        grouped: set[DocKey] = set()
        try:
            for w in writes:
                key = w.key
                current = docs.get(key, MISSING)
                if key not in docs:
                    head = heads.get(key, NO_STATE)
                    current = head.value
                    base_seqs[key] = head.seq
                    ops = by_key.get(key) if by_key is not None else None
                    if ops is not None and len(ops) > 1:
                        found = element_writes(current, ops)
                        if found is not None:
                            docs[key] = set_elements(current, found)
                            # Elements of a list that exists: each its own revision path.
                            paths[key] = [path for path, _ in ops]
                            grouped.add(key)
                            continue
                elif key in grouped:
                    continue
                path = w.path
                docs[key] = set_path(current, path, w.value, where="commit")
                # A one-level write to an existing document creates no level.
                rpath = (
                    path
                    if len(path) == 1 and current is not MISSING
                    else revision_path(current, path)
                )
                kpaths = paths.get(key)
                if kpaths is None:
                    paths[key] = [rpath]
                else:
                    kpaths.append(rpath)
        except InvalidValueError as exc:
            # A blind write below a place a newer commit made a scalar cannot apply.
            # Raising would strand the commit: no verdict, its layer never dropped.
            self._resolve(request.session_id, request.local_seq, None)
            return Verdict(
                None,
                error=ConflictError(
                    f"commit {request.session_id}#{request.local_seq} no longer applies: {exc}"
                ),
            )
        # Only now: a refused commit must not use up a seq (seqs are gap-free).
        self._seq = seq = self._seq + 1
        session_id, local_seq = request.session_id, request.local_seq
        for key, value in docs.items():
            heads[key] = DocState(seq, value)
            self._add_revision(
                key, Revision(seq, session_id, local_seq, tuple(paths[key])), base_seqs[key]
            )
        self._prune_in -= len(docs)
        if request.create_only:
            self._claimed.update(k for k in request.create_only if k not in heads)
        self._resolve(session_id, local_seq, seq)
        return Verdict(seq, docs, base_seqs=base_seqs)

    def _resolve(self, session_id: str, local_seq: int, seq: int | None) -> None:
        resolutions = self._resolutions.get(session_id)
        if resolutions is None:
            resolutions = self._resolutions[session_id] = _Resolved()
        resolutions.add(local_seq, rejected=seq is None)

    def _add_revision(self, key: DocKey, revision: Revision, previous: int) -> None:
        """Record `revision` of `key`, whose head was at seq `previous` before it."""
        revs = self._revisions.get(key)
        if revs is None:
            if previous:
                # Its history was pruned (the head's seq was its floor): keep that floor.
                self._floors[key] = previous
            self._revisions[key] = revision
            return
        if not isinstance(revs, list):
            self._revisions[key] = [revs, revision]
            return
        revs.append(revision)
        if len(revs) > 2 * REVISIONS_KEPT:
            # Bounded history: keep the newest REVISIONS_KEPT per document.
            self._floors[key] = revs[-REVISIONS_KEPT - 1].seq
            self._kept -= len(revs) - REVISIONS_KEPT
            del revs[:-REVISIONS_KEPT]

    # -- history pruning (see the module docstring)
    def quiesced(self, listener: SessionListener) -> None:
        if self._prune_in <= 0:
            self.prune_history()

    def low_water(self) -> int:
        """The seq at or below which no connected session needs revision history: the
        lowest of their `low_water()` marks (the newest seq when none needs any).
        O(sessions)."""
        with self._lock:
            mark = self._seq
            for listener in self._listeners.values():
                got = listener.low_water()
                if got is not None and got < mark:
                    mark = got
            return mark

    def prune_history(self) -> int:
        """Drop every revision no session's conflict check can need any more (those at
        or below `low_water()`); returns how many. Runs by itself when a session goes
        quiet; callable by tests and tools. O(revisions pruned + documents scanned).

        Documents are scanned in the order their oldest kept revision was added and the
        scan stops at the first one with nothing to prune. A document pruned only in
        part moves to the end of that order, so one behind it may keep its history
        until a later prune reaches it (the `REVISIONS_KEPT` cap still bounds it).
        """
        with self._lock:
            held = self._kept + self._prune_base - self._prune_in
            # Asking every session costs O(sessions): prune again after that many new
            # revisions (and at least PRUNE_BATCH), so each revision pays O(1).
            self._prune_in = self._prune_base = max(PRUNE_BATCH, len(self._listeners))
            self._kept = held
            revisions = self._revisions
            if not revisions:
                return 0
            mark = self.low_water()
            if mark >= self._seq:
                # Every revision is at or below the newest seq: all go (one runtime after
                # a settle, the usual case), with no walk over the documents, in fresh
                # tables (a dict never shrinks: 2000 emptied entries would keep 80 KB).
                self._revisions = {}
                self._floors = {}
                self._kept = 0
                return held
            floors = self._floors
            gone: list[DocKey] = []
            partly: list[tuple[DocKey, list[Revision]]] = []
            pruned = 0
            for key, revs in revisions.items():
                if not isinstance(revs, list):
                    if revs.seq > mark:
                        break
                    gone.append(key)
                    pruned += 1
                    continue
                if revs[0].seq > mark:
                    break
                if revs[-1].seq <= mark:
                    gone.append(key)
                    pruned += len(revs)
                    continue
                i = 1
                while revs[i].seq <= mark:
                    i += 1
                floors[key] = revs[i - 1].seq
                partly.append((key, revs[i:]))
                pruned += i
            self._kept = held - pruned
            if len(gone) == len(revisions):
                # All of it: fresh tables, as above.
                self._revisions = {}
                self._floors = {}
                return pruned
            for key in gone:
                del revisions[key]
                if floors:
                    floors.pop(key, None)
            for key, rest in partly:
                del revisions[key]
                revisions[key] = rest[0] if len(rest) == 1 else rest
            return pruned

    def _check(self) -> None:
        super()._check()
        for session_id, resolved in self._resolutions.items():
            assert all(s > resolved.low for s in resolved.above), session_id
            assert all(resolved.resolved(s) for s in resolved.rejected), session_id
        assert self._hears_all <= self._listeners.keys(), "a disconnected session hears all"
        for key, held in self._holders.items():
            sids = (held,) if type(held) is str else held
            assert len(sids) == len(set(sids)) and (type(held) is str or len(held) > 1), key
        for key, revs in self._revisions.items():
            assert not isinstance(revs, list) or len(revs) > 1, f"a one-revision list of {key}"
            seqs = [r.seq for r in revs] if isinstance(revs, list) else [revs.seq]
            assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs), f"revisions of {key}"
            assert self._heads[key].seq == seqs[-1], f"head of {key} is not its last revision"
            assert not seqs or seqs[0] > self._floors.get(key, 0), f"floor of {key}"
            assert self._ever_written(key)
        for key in self._floors:
            assert key in self._revisions, f"a floor of {key}, which has no revisions left"
        count = sum(len(r) if isinstance(r, list) else 1 for r in self._revisions.values())
        assert count == self._kept + self._prune_base - self._prune_in, "revisions miscounted"


@attrs.define(eq=False)
class _Resolved:
    """One session's commits that have a verdict: every local seq up to `low`, and
    those in `above` (resolved out of order, when a test gate reorders); `rejected`
    names the rejected ones (few). O(1) memory per session in the usual run, instead of
    an entry per commit.

    attrs, not hand-written slots: one is made per session, and reading its fields
    (every commit does) costs the same."""

    low: int = 0
    above: set[int] = attrs.field(factory=set)
    rejected: set[int] = attrs.field(factory=set)

    def resolved(self, local_seq: int) -> bool:
        return local_seq <= self.low or local_seq in self.above

    def add(self, local_seq: int, *, rejected: bool) -> None:
        if rejected:
            self.rejected.add(local_seq)
        elif self.rejected:
            self.rejected.discard(local_seq)  # a session id reused: the newest verdict counts
        if local_seq <= self.low:
            return  # a session id reused after a reconnect: its old commits stay resolved
        above = self.above
        if local_seq != self.low + 1:
            above.add(local_seq)
            return
        low = local_seq
        while low + 1 in above:
            low += 1
            above.remove(low)
        self.low = low
