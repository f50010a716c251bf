"""What the SQL stores (`SQLiteStore`, `PostgresStore`) share, whatever their dialect.

- A document key is stored as five text columns (`KEY_COLUMNS`, `key_params`) and
  read back, checked, with `key_from_row`.
- Values are stored as the codec's JSON text (`encode_value` / `decode_value`), so
  what a backend can hold and how it escapes is one rule; an unreadable stored value
  is a `CorruptStoreError` naming the document.
- Revision paths are stored as JSON lists (`encode_paths`); `revisions_from_rows`
  turns stored revisions back into `Revision`s for `validate_commit`, naming the
  request's own session by its in-process id. A read older than its document's
  history floor meets `pruned_revision` (a write at the root: conflict).
- `WriterStore`: the writer thread both run (a FIFO queue of commits evaluated one
  at a time off the caller's thread, `flush`, a gate's accept evaluated in order, every
  evaluation failure answered as a rejection, and the closing sequence).
- `SessionVerdicts`: which commits of each session have a verdict. A session is
  recorded under a key unique to one store object (`<session id>@<uuid>`), so only
  that object ever evaluates its commits and its memory answers dependency checks
  (nothing per commit is written for them).
"""

from __future__ import annotations

import abc
import queue
import threading
import uuid
from collections.abc import Iterable
from typing import Final

import msgspec

from .._address import SCOPES, DocKey, Path
from .._codec import decode_json, encode_json
from .._store import CommitRequest, Revision, SessionListener, StoreBase, Verdict
from .._values import MISSING, Value
from ..errors import (
    CellweaveError,
    CorruptStoreError,
    LivenessError,
    StoreError,
    TerminalCommitError,
)
from .memory import _Resolved

KEY_COLUMNS: Final = ("space", "doc_id", "scope", "principal", "session")

KeyParams = tuple[str, str, str, str, str]


def key_params(key: DocKey) -> KeyParams:
    """The key's five column values, in `KEY_COLUMNS` order."""
    return (key.space, key.id, key.scope, key.principal, key.session)


def key_from_row(
    where: str, space: str, doc_id: str, scope: str, principal: str, session: str
) -> DocKey:
    if scope not in SCOPES:
        raise CorruptStoreError(f"{where}: document {space}/{doc_id} has scope {scope!r}")
    return DocKey(space, doc_id, scope, principal, session)


_PLAIN: Final = frozenset({int, str, bool, type(None)})
"""Field types `to_wire` leaves as they are (no float: a special one is tagged)."""


def encode_value(value: Value) -> str | None:
    """The stored text of a document (None: deleted)."""
    if value is MISSING:
        return None
    # The usual document, a dict of plain fields (a cell's {"value": 3}), encodes as
    # itself: `encode_json` without `to_wire`'s copy (a "/" key is escaped there).
    if type(value) is dict and "/" not in value:
        for field in value.values():
            if type(field) not in _PLAIN:
                break
        else:
            return msgspec.json.encode(value).decode()
    return encode_json(value).decode()


def decode_value(where: str, raw: str | None, key: DocKey) -> Value:
    if raw is None:
        return MISSING
    try:
        return decode_json(raw)
    except (msgspec.MsgspecError, CellweaveError, KeyError, TypeError, ValueError) as exc:
        raise CorruptStoreError(f"{where}: the stored value of {key} is unreadable: {exc}") from exc


def encode_paths(paths: Iterable[Path]) -> str:
    return msgspec.json.encode([list(p) for p in paths]).decode()


def pruned_revision(floor: int) -> Revision:
    """What a read older than its document's floor meets: the revisions after its basis
    were pruned, so assume the worst (a write at the document root), as MemoryStore
    does. Over-approximating is allowed."""
    return Revision(floor, "", -1, ((),))


def revisions_from_rows(
    rows: Iterable[tuple[int, str, int, str]], session_id: str, session_key: str
) -> list[Revision]:
    """Rows of (seq, stored session key, local seq, stored paths), oldest first."""
    out = []
    for rseq, sess, local_seq, paths in rows:
        # Only the request's own session may match `request.session_id`.
        own = session_id if sess == session_key else sess
        decoded: list[list[str | int]] = msgspec.json.decode(paths)
        out.append(Revision(int(rseq), own, int(local_seq), tuple(tuple(p) for p in decoded)))
    return out


class SessionVerdicts:
    """Per store object: each session's stored key, and which of its commits have a verdict."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._keys: dict[str, str] = {}
        self.resolved: dict[str, _Resolved] = {}

    def new_key(self, session_id: str) -> str:
        """A fresh stored key for `session_id` (on connect: session ids repeat across
        processes and reconnects; what the database records must not mix)."""
        with self._lock:
            key = self._keys[session_id] = f"{session_id}@{uuid.uuid4().hex}"
            return key

    def key(self, session_id: str) -> str:
        with self._lock:
            key = self._keys.get(session_id)
            if key is None:  # submitted without connect(): still unique to this store object
                key = self._keys[session_id] = f"{session_id}@{uuid.uuid4().hex}"
            return key

    def resolution(self, session_key: str, local_seq: int) -> int | bool | None:
        """`validate_commit`'s `resolution`: True accepted, None rejected, False no verdict."""
        resolved = self.resolved.get(session_key)
        if resolved is None or not resolved.resolved(local_seq):
            return False
        return None if local_seq in resolved.rejected else True

    def resolve(self, session_key: str, local_seq: int, *, rejected: bool) -> None:
        """Remember a verdict, once it is durable."""
        resolved = self.resolved.get(session_key)
        if resolved is None:
            resolved = self.resolved[session_key] = _Resolved()
        resolved.add(local_seq, rejected=rejected)

    def check(self) -> None:
        for session_key, resolved in self.resolved.items():
            assert all(s > resolved.low for s in resolved.above), session_key
            assert all(resolved.resolved(s) for s in resolved.rejected), session_key


_Item = tuple[SessionListener, CommitRequest] | None


class WriterStore(StoreBase):
    """A store whose commits one writer thread per store object evaluates, in FIFO order.

    `_submit_evaluation` queues; the thread evaluates (`_evaluate`), then posts the
    verdict and the fan-out under `_write_lock`. A test gate's `accept()` evaluates on
    the caller's thread instead, after the queue drained (per-session FIFO), under the
    same lock, which also serializes every fan-out (each mailbox hears commits in seq
    order). A backend names its thread (`_writer_name`), says how it reports being
    closed (`_closed_message`) and classifies evaluation failures (`_unevaluated`).
    """

    def __init__(self) -> None:
        super().__init__()
        self._write_lock = threading.RLock()
        self._cond = threading.Condition()  # guards the queue, `_queued` and closing
        self._queue: queue.SimpleQueue[_Item] = queue.SimpleQueue()
        self._queued = 0
        self._writer: threading.Thread | None = None

    @abc.abstractmethod
    def _writer_name(self) -> str: ...

    @abc.abstractmethod
    def _closed_message(self) -> str: ...

    @abc.abstractmethod
    def _unevaluated(
        self, request: CommitRequest, cause: BaseException
    ) -> LivenessError | TerminalCommitError:
        """The rejection of a commit whose evaluation raised `cause`."""

    def _submit_evaluation(self, listener: SessionListener, request: CommitRequest) -> None:
        with self._cond:
            if self.closed:  # re-checked under the lock: nothing may queue behind close()'s stop
                raise StoreError(self._closed_message())
            if self._writer is None:
                self._writer = threading.Thread(target=self._writer_loop, name=self._writer_name())
                self._writer.daemon = True
                self._writer.start()
            self._queued += 1
            self._queue.put((listener, request))

    def _writer_loop(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            try:
                self._evaluate_and_answer(*item)
            finally:
                with self._cond:
                    self._queued -= 1
                    self._cond.notify_all()

    def flush(self, timeout: float | None = None) -> bool:
        """Block until every commit queued so far has its verdict posted. False on timeout."""
        if threading.current_thread() is self._writer:
            return True
        with self._cond:
            return self._cond.wait_for(lambda: self._queued == 0, timeout)

    def _evaluate_and_answer(self, listener: SessionListener, request: CommitRequest) -> None:
        # A gate's accept() runs here on the caller's thread: commits queued before
        # it (from the same session, too) must be decided first, as in MemoryStore.
        self.flush()
        with self._write_lock:
            try:
                verdict = self._evaluate(request)
                self.commits_evaluated += 1
            except Exception as exc:  # the submitter hears of every failure, never only a log
                verdict = Verdict(None, error=self._unevaluated(request, exc))
            self._answer(listener, request, verdict)
            if verdict.error is None and verdict.seq is not None:
                self._broadcast(request.session_id, verdict.seq, verdict.docs)

    def _start_closing(self) -> tuple[bool, threading.Thread | None]:
        """Mark closed and queue the writer's stop behind every queued commit (they are all
        evaluated). Returns (False, None) if already closed, else (True, the writer)."""
        with self._cond:
            if self.closed:
                return False, None
            StoreBase.close(self)
            writer = self._writer
            if writer is not None:
                self._queue.put(None)
            return True, writer

    def _fail_held(self, closed: StoreError) -> None:
        """After the writer stopped: answer commits a verdict gate still holds with a
        LIVENESS rejection (cause: `closed`), and fail held loads."""
        gate = self._verdict_gate
        if gate is not None:
            held, gate._held = gate._held, []
            gate.active = False
            self._verdict_gate = None
            for h in held:
                self._answer(
                    h.listener, h.request, Verdict(None, error=self._unevaluated(h.request, closed))
                )
        for load_gate in list(self._load_gates):
            load_gate.fail()
