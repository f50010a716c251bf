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
import collections
import functools
import threading
import uuid
from collections.abc import Callable, Iterable
from typing import ClassVar, Final

import msgspec

from .._address import SCOPES, DocKey, Path
from .._codec import decode_json, encode_json
from .._pending import running_loop
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


PLAIN_FIELDS: Final = frozenset({int, str, bool, type(None)})
"""Field types `to_wire` leaves as they are (no float: a special one is tagged)."""


def plain_dict(value: Value) -> bool:
    """Whether `value` is the usual document, a dict of plain fields (a cell's
    {"value": 3}) with no "/" key, which `encode_value` encodes as itself: `encode_json`
    without `to_wire`'s copy (a "/" key is escaped there). A field of a type in
    `PLAIN_FIELDS` set on such a dict (under a key other than "/") keeps it plain."""
    if type(value) is not dict or "/" in value:
        return False
    for field in value.values():
        if type(field) not in PLAIN_FIELDS:
            break
    else:
        return True  # (a loop, not `all()` over a generator: a call less per document)
    return False


def encode_value(value: Value) -> str | None:
    """The stored text of a document (None: deleted)."""
    if value is MISSING:
        return None
    if plain_dict(value):
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


class Acceptance(msgspec.Struct, frozen=True):
    """An accepted commit as a backend's evaluation gives it (`WriterStore._evaluate_lists`),
    without the `Verdict`'s dictionaries keyed by `DocKey`: its `seq`, and per written
    document, in the order of their first writes (`CommitRequest.keys_in_order`), its new
    value and the seq of the state it applied on. Where every write names a different
    document (the usual batch), that is write order, and the committing replica adopts
    them so (`SessionListener.on_accepted_many`); the dictionaries are made only for
    another listener's fan-out or the general verdict (`verdict`)."""

    seq: int
    values: list[Value]
    base_seqs: list[int]

    def verdict(self, request: CommitRequest) -> Verdict:
        """The same answer as a `Verdict`."""
        keys = request.keys_in_order()
        return Verdict(
            self.seq,
            dict(zip(keys, self.values, strict=True)),
            base_seqs=dict(zip(keys, self.base_seqs, strict=True)),
        )


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
        key = self._keys.get(session_id)  # (one dict read needs no lock: every commit asks)
        if key is not None:
            return key
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


_LAZY_WAKE_S: Final = 0.05
"""How long a commit nobody waits for may sit queued before the writer thread takes it,
when its submitter ran no event loop (`WriterStore._submit_evaluation`). Each timed
wake-up takes the GIL from a thread that may be evaluating (and, on a loaded machine,
can keep it for a time slice): measured at 2 ms, one commit in 20 waited a time slice."""
_LAZY_ROUNDS: Final = 20
"""Timed sleeps in a row with nothing to do (1 s) before the writer sleeps until woken."""


class WriterStore(StoreBase):
    """A store whose commits one writer thread per store object evaluates, in FIFO order.

    `_submit_evaluation` queues; the thread evaluates (`_evaluate`), then posts the
    verdict and the fan-out under `_write_lock`. A test gate's `accept()` evaluates on
    the caller's thread instead, after the queue drained (per-session FIFO), under the
    same lock, which also serializes every fan-out (each mailbox hears commits in seq
    order). A backend names its thread (`_writer_name`), says how it reports being
    closed (`_closed_message`) and classifies evaluation failures (`_unevaluated`).

    Waiting threads help (`helps_waiters`): a thread blocked in `Pending.wait()` on a
    session of this store evaluates the queued commits itself (`_help`, the session
    mailbox's `helper`) instead of sleeping while the writer thread does them; a submit
    from a thread running no loop does not wake the writer. Evaluations still run one at
    a time in queue order: an item is taken off the queue only by a thread holding
    `_write_lock`, and evaluated before it lets go. A synchronous commit so costs no
    hand-over to the writer thread and back (two thread switches: about a third of a
    one-document SQLite commit's CPU, and of a 100-document one's process CPU about a
    third on tmpfs when the two threads ran on different cores, `bench.sqlite_durable`).
    Only the waiting thread runs signal handlers, so an interrupt can stop an evaluation
    anywhere there: the backend then finds out whether the commit was applied and
    answers it (`_interrupted`).
    """

    helps_waiters: bool = False
    """Whether threads waiting on a verdict evaluate queued commits (`_help`); a backend
    that sets it implements `_interrupted`."""

    def __init__(self) -> None:
        super().__init__()
        self._write_lock = threading.RLock()
        lock = self._queue_lock = threading.Lock()
        """Taken directly where no condition is waited on or notified (a `Condition`'s
        `with` and `notify_all` run Python code: about 60 bytecodes a commit)."""
        self._cond = threading.Condition(lock)  # `_queued` reaching 0 (flush)
        self._work = threading.Condition(lock)  # the writer thread's wake-up
        # The queue, `_queued`, `_flushing`, `_stopping` and closing: under `lock`, except
        # that an item is taken off (popleft) only under `_write_lock` (which orders
        # evaluations).
        self._queue: collections.deque[tuple[SessionListener, CommitRequest]] = collections.deque()
        self._queued = 0
        self._flushing = 0
        """Threads waiting in `flush` for `_queued` to reach 0: an evaluation notifies
        `_cond` only when there is one."""
        self._stopping = False
        self._evaluating = False
        """A queued commit is being evaluated (`_run_queued`; under `_write_lock`)."""
        self._writer_untimed = False
        """The writer sleeps until woken (not for at most `_LAZY_WAKE_S`): a submit must wake it."""
        self._writer: threading.Thread | None = None
        self._writer_ident: int | None = None
        """The writer thread's `threading.get_ident()` once it runs (`_help` compares it:
        `threading.current_thread()` is a Python function)."""

    @abc.abstractmethod
    def _writer_name(self) -> str: ...

    @abc.abstractmethod
    def _closed_message(self) -> str: ...

    @abc.abstractmethod
    def _unevaluated(
        self, request: CommitRequest, cause: BaseException
    ) -> LivenessError | TerminalCommitError:
        """The rejection of a commit whose evaluation raised `cause`."""

    def _interrupted(self, listener: SessionListener, request: CommitRequest) -> None:
        """A BaseException (an interrupt: `_help` runs on a thread that runs signal
        handlers) stopped `request`'s evaluation or its answer at an unknown point:
        answer it as it ended (applied or not). Under `_write_lock`. Default: nothing
        (a backend with `helps_waiters` implements it)."""
        return

    def connect(self, listener: SessionListener, session_id: str | None = None) -> str:
        sid = super().connect(listener, session_id)
        if self.helps_waiters:
            mailbox = getattr(listener, "mailbox", None)
            if mailbox is not None and getattr(mailbox, "helper", False) is None:
                mailbox.helper = self._help
        return sid

    def disconnect(self, session_id: str) -> None:
        with self._lock:
            listener = self._listeners.get(session_id)
        super().disconnect(session_id)
        mailbox = getattr(listener, "mailbox", None)
        if mailbox is not None and getattr(mailbox, "helper", None) == self._help:
            mailbox.helper = None

    def _submit_evaluation(self, listener: SessionListener, request: CommitRequest) -> None:
        with self._queue_lock:
            if self.closed:  # re-checked under the lock: nothing may queue behind close()'s stop
                raise StoreError(self._closed_message())
            if self._writer is None:
                self._writer = threading.Thread(target=self._writer_loop, name=self._writer_name())
                self._writer.daemon = True
                self._writer.start()
            self._queued += 1
            self._queue.append((listener, request))
            if self._writer_untimed or not self.helps_waiters or running_loop() is not None:
                self._work.notify()
            # (Else no wake-up: the writer is evaluating, or asleep for at most
            # `_LAZY_WAKE_S`, and the submitting thread, running no loop, usually waits
            # for the verdict next and evaluates it itself (`_help`). Waking the writer
            # anyway measured as costly as the hand-over it spares: it takes the GIL
            # from the evaluating thread at every statement.)

    def _writer_loop(self) -> None:
        self._writer_ident = threading.get_ident()
        queue = self._queue
        idle = 0  # timed sleeps in a row that found nothing to do
        while True:
            with self._work:
                while not queue and not self._stopping:
                    if self.helps_waiters and idle < _LAZY_ROUNDS:
                        if self._work.wait(_LAZY_WAKE_S):
                            idle = 0
                        elif not queue:
                            idle += 1
                    else:  # (idle for a while: sleep until a submit wakes it, at no cost)
                        self._writer_untimed = True
                        self._work.wait()
                        self._writer_untimed = False
                        idle = 0
                if not queue:
                    return  # stopping, and every queued commit was answered
            self._run_queued(blocking=True, most=len(queue))

    def _help(self) -> bool:
        """A waiting thread's turn (`Mailbox.helper`): evaluate the commits queued now,
        if no one else is evaluating (else wait as before). Whether it evaluated any."""
        queue = self._queue
        if not queue or self._evaluating or threading.get_ident() == self._writer_ident:
            # (`_evaluating`: another thread is evaluating, or this one is, and waits from
            # inside it (a post listener): the re-entrant lock would let it in.)
            return False
        return self._run_queued(blocking=False, most=len(queue))

    def _run_queued(self, *, blocking: bool, most: int) -> bool:
        """Evaluate and answer up to `most` queued commits, oldest first, each taken off
        the queue under `_write_lock` (so evaluations keep queue order, whichever thread
        runs them). `blocking=False`: stop when another thread holds the lock."""
        lock = self._write_lock
        queue = self._queue
        ran = False
        for _ in range(most):
            if not lock.acquire(blocking):
                break
            try:
                try:
                    item = queue.popleft()
                except IndexError:
                    break
                self._evaluating = True
                try:
                    self._answer_evaluation(*item)
                except BaseException:
                    self._interrupted(*item)
                    raise
                finally:
                    self._evaluating = False
                    with self._queue_lock:
                        self._queued -= 1
                        if self._flushing:
                            self._cond.notify_all()
                ran = True
            finally:
                lock.release()
        return ran

    def flush(self, timeout: float | None = None) -> bool:
        """Block until every commit queued so far has its verdict posted. False on timeout."""
        if threading.current_thread() is self._writer:
            return True
        with self._cond:
            if self._queued:
                self._work.notify()  # (the writer may be in a timed sleep: no need to wait it out)
            self._flushing += 1
            try:
                return self._cond.wait_for(lambda: self._queued == 0, timeout)
            finally:
                self._flushing -= 1

    def _evaluate_and_answer(self, listener: SessionListener, request: CommitRequest) -> None:
        # A gate's accept() runs here on the caller's thread: commits queued before
        # it (from the same session, too) must be decided first, as in MemoryStore.
        self.flush()
        with self._write_lock:
            self._answer_evaluation(listener, request)

    _lists_of: ClassVar[Callable[..., Verdict] | None] = None
    """The backend's own `_evaluate` when it has `_evaluate_lists` (else None): a store
    whose `_evaluate` is another one (a subclass, a test or a bench hooking it to count
    or to inject faults, in its class or on the instance) is evaluated through it."""

    def _evaluate_lists(self, request: CommitRequest) -> Verdict | Acceptance:
        """`_evaluate`, giving an accepted commit as an `Acceptance` if the backend can
        (no dictionaries by `DocKey`). Default: `_evaluate`."""
        return self._evaluate(request)

    def _answer_evaluation(self, listener: SessionListener, request: CommitRequest) -> None:
        """Evaluate `request` and post its verdict and fan-out. Under `_write_lock`."""
        cls = type(self)
        try:
            verdict: Verdict | Acceptance
            if cls._evaluate is cls._lists_of and "_evaluate" not in self.__dict__:
                verdict = self._evaluate_lists(request)
            else:
                verdict = self._evaluate(request)
            self.commits_evaluated += 1
        except Exception as exc:  # the submitter hears of every failure, never only a log
            verdict = Verdict(None, error=self._unevaluated(request, exc))
        if isinstance(verdict, Acceptance):
            # An accepted commit as the backend gives it, without dictionaries: one write
            # is answered with `on_accepted` (as `MemoryStore` answers it), writes each
            # to a different document with `on_accepted_many` (values and base seqs in
            # write order), so the replica adopts its layers without `on_verdict`'s
            # lookups by `DocKey`; the fan-out's dictionary is made only when another
            # session listens. A document written twice gets its `Verdict`.
            writes = request.writes
            values = verdict.values
            n = len(writes)
            if n == len(values) and n:
                at = verdict.seq
                if n == 1:
                    listener.mailbox.post(
                        functools.partial(
                            listener.on_accepted, request, at, verdict.base_seqs[0], values[0]
                        )
                    )
                else:
                    listener.mailbox.post(
                        functools.partial(
                            listener.on_accepted_many, request, at, values, verdict.base_seqs
                        )
                    )
                listeners = self._listeners
                if len(listeners) > 1 or request.session_id not in listeners:
                    docs = {w.key: value for w, value in zip(writes, values, strict=True)}
                    self._broadcast(request.session_id, at, docs)
                return
            verdict = verdict.verdict(request)
        seq = verdict.seq
        if seq is not None and len(request.writes) == 1 and len(verdict.base_seqs) == 1:
            # An accepted one-write commit (the usual) is answered with `on_accepted`, as
            # `MemoryStore` answers it: the replica adopts its own layer without going
            # through the `Verdict` (`on_verdict`, `_apply_verdict`: about 180 bytecodes).
            ((key, base_seq),) = verdict.base_seqs.items()
            value = verdict.docs[key]
            listener.mailbox.post(
                functools.partial(listener.on_accepted, request, seq, base_seq, value)
            )
        else:
            self._answer(listener, request, verdict)
        if verdict.error is None and seq is not None:
            self._broadcast(request.session_id, seq, verdict.docs)

    def _start_closing(self) -> tuple[bool, threading.Thread | None]:
        """Mark closed and queue the writer's stop behind every queued commit (they are all
        evaluated). Returns (False, None) if already closed, else (True, the writer)."""
        with self._cond:
            if self.closed:
                return False, None
            StoreBase.close(self)
            self._stopping = True
            self._work.notify()
            return True, self._writer

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
