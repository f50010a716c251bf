"""`PostgresStore`: the store for several processes and hosts, on one PostgreSQL database.

Needs the extra `cellweave[postgres]` (psycopg 3 and psycopg_pool).

Tables live in one schema (`schema="cellweave"` by default; created on first use):
`counter` (one row: the last accepted seq), `revision` (per document, the paths each
accepted commit wrote and which session's commit it was), `head` (each document's
materialized value and the seq that wrote it; a NULL value is a deleted document, and
the row still counts as "ever written" for create-only), `claimed` (create-only keys of
accepted commits), `revision_floor` (per document, the newest pruned revision) and
`meta` (format marker and version).

Commits
- One writer thread per store object evaluates queued commits in submission order. Each
  commit is one SQL transaction: `SELECT ... FOR UPDATE` on the counter row (so commits
  of every process are serialized and seqs are gap-free, in commit order), the shared
  `validate_commit` answered from SQL, the writes, the counter update and a
  `pg_notify`, then COMMIT. The verdict is posted only after COMMIT returned, so an
  acknowledged commit is durable (as durable as the server's settings make it).
- Bounded history, as `MemoryStore`'s and `SQLiteStore`'s: a document keeps its newest
  `REVISIONS_KEPT` revisions once it has more than twice that many; a read whose basis
  is older than its document's floor conflicts (re-run).

Foreign commits (other processes, other store objects on the same schema)
- Reach this store's sessions as `integrate` changes, read by sequence: every
  document written after the last delivered seq, at its newest value, in one
  snapshot (`poll()`). The writer also catches up before answering its own commit, so
  each session hears commits in seq order.
- While a session is connected and `poll_interval > 0`, a thread LISTENs on the
  schema's channel: a notification only wakes it early; it polls at least every
  `poll_interval` seconds, so a lost notification (or a dropped listening
  connection) delays nothing beyond one interval.

Errors: every database failure reaches the caller as a `StoreError` (a
`CorruptStoreError` for a schema that is not a cellweave store or was written by a
newer version), or, for a commit, as its rejection: `LivenessError` when a later
attempt can succeed (server gone or restarting, connection lost, serialization
failure, pool exhausted), `TerminalCommitError` otherwise. No psycopg exception
reaches a caller raw. Messages name the server by host, port, database and user,
never the password.
"""

from __future__ import annotations

import functools
import math
import re
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Final

try:
    import psycopg
    import psycopg_pool
    from psycopg import conninfo as _conninfo
except ImportError as _exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "PostgresStore needs psycopg 3 and psycopg_pool: pip install 'cellweave[postgres]'"
    ) from _exc

from .._address import DocKey, Path
from .._args import bad_arg
from .._store import (
    NO_STATE,
    CommitRequest,
    DocState,
    Revision,
    SessionListener,
    Verdict,
    revision_path,
    validate_commit,
)
from .._values import MISSING, Value, set_path
from ..errors import (
    CommitRejected,
    ConflictError,
    CorruptStoreError,
    InvalidArgumentError,
    InvalidValueError,
    LivenessError,
    StoreError,
    TerminalCommitError,
)
from ._claims_sql import SQLClaimTable
from ._claims_sql import schema as claims_schema
from ._sql import (
    KEY_COLUMNS,
    SessionVerdicts,
    WriterStore,
    decode_value,
    encode_paths,
    encode_value,
    key_from_row,
    key_params,
    pruned_revision,
    revisions_from_rows,
)
from .memory import REVISIONS_KEPT

FORMAT: Final = "cellweave-store"
VERSION: Final = 1
"""The schema version this module writes and reads; a newer one is refused."""

_SCHEMA_NAME: Final = re.compile(r"[a-z_][a-z0-9_]{0,62}")
_NO_ORIGIN: Final = ""
_COLS: Final = ", ".join(KEY_COLUMNS)
_MATCH: Final = " AND ".join(f"{c} = %s" for c in KEY_COLUMNS)
_R_MATCH: Final = " AND ".join(f"r.{c} = %s" for c in KEY_COLUMNS)
_KEY_DEFS: Final = ", ".join(f"{c} text NOT NULL" for c in KEY_COLUMNS)
_TABLES: Final = frozenset({"meta", "counter", "revision", "head", "claimed", "revision_floor"})

_TRANSIENT_CLASSES: Final = ("08", "40", "53", "57", "55P03", "58")
"""SQLSTATE classes a later attempt can get past: connection exceptions, serialization
failures and deadlocks, insufficient resources, operator intervention (a shutting-down
or restarting server), lock timeouts, system errors."""

_Change = tuple[int, dict[DocKey, Value]]
_Conn = psycopg.Connection[tuple[Any, ...]]


def _schema_sql(s: str) -> tuple[str, ...]:
    return (
        f"CREATE TABLE {s}.meta (key text PRIMARY KEY, value text NOT NULL)",
        f"CREATE TABLE {s}.counter (id int PRIMARY KEY CHECK (id = 1), seq bigint NOT NULL)",
        f"INSERT INTO {s}.counter (id, seq) VALUES (1, 0)",
        f"""CREATE TABLE {s}.revision ({_KEY_DEFS}, seq bigint NOT NULL,
            session_id text NOT NULL, local_seq bigint NOT NULL, paths text NOT NULL,
            PRIMARY KEY ({_COLS}, seq))""",
        f"CREATE INDEX revision_by_seq ON {s}.revision (seq)",
        f"""CREATE TABLE {s}.head ({_KEY_DEFS}, seq bigint NOT NULL, value text,
            PRIMARY KEY ({_COLS}))""",
        f"CREATE INDEX head_by_seq ON {s}.head (seq)",
        f"CREATE TABLE {s}.claimed ({_KEY_DEFS}, seq bigint NOT NULL, PRIMARY KEY ({_COLS}))",
        f"""CREATE TABLE {s}.revision_floor ({_KEY_DEFS}, seq bigint NOT NULL,
            PRIMARY KEY ({_COLS}))""",
    )


def _sqlstate(exc: BaseException) -> str:
    return str(getattr(exc, "sqlstate", None) or "")


def _refusal(exc: BaseException) -> str | None:
    """Why the server refused a connection attempt (libpq reports these as a FATAL
    message without a SQLSTATE), or None if it did not answer or did not refuse."""
    state = _sqlstate(exc)
    if state.startswith("28"):
        return "authentication failed"
    if state == "3D000":
        return "no such database"
    text = str(exc)
    if state or "FATAL:" not in text:
        return None
    if "database" in text and "does not exist" in text:
        return "no such database"
    if any(w in text for w in ("authentication", "role ", "pg_hba", "password")):
        return "authentication failed"
    return "the server refused the connection"


def _is_transient(exc: BaseException) -> bool:
    """Can a later attempt get past `exc`? (A refused login or a missing database cannot.)"""
    if isinstance(exc, psycopg_pool.PoolTimeout):
        return True
    if _refusal(exc) in ("authentication failed", "no such database"):
        return False
    state = _sqlstate(exc)
    if isinstance(exc, psycopg.OperationalError) and not state:
        return True  # the connection failed or broke
    return state.startswith(_TRANSIENT_CLASSES)


IDLE_IN_TRANSACTION_MS: Final = 5000
"""The server ends a session of this store idle inside a transaction for longer: a
process paused in the middle of a commit (SIGSTOP, a debugger, a VM freeze) must not
hold row locks, and with them every takeover of its claimed pages, for as long as it
is paused. Its commit then fails as a lost connection when it resumes."""

CLAIM_LOCK_TIMEOUT_MS: Final = 2000
"""A claims statement waiting longer than this for a row lock fails (the serving loop
tries again at its next heartbeat) rather than stall the loop. Set on the pooled
connections only (reads and claims; the writer's commits wait their turn)."""


def _session_setup(conn: _Conn) -> None:
    conn.execute(f"SET idle_in_transaction_session_timeout = {IDLE_IN_TRANSACTION_MS}")


def _pool_session_setup(conn: _Conn) -> None:
    _session_setup(conn)
    conn.execute(f"SET lock_timeout = {CLAIM_LOCK_TIMEOUT_MS}")


CHECK_AFTER: Final = 1.0
"""Seconds: a pooled connection checked (one round trip) this recently is handed out
unchecked. Checking at every checkout doubled the round trips of a burst of reads
(a takeover starting many pages); a connection the server dropped meanwhile fails
its statement with a retryable `StoreError`, and the pool replaces it."""


def _check_recent(conn: _Conn) -> None:
    """The pool's check: the usual round trip, unless this connection passed one in the
    last `CHECK_AFTER` seconds (the time is kept on the connection object)."""
    now = time.monotonic()
    if now - getattr(conn, "_cellweave_checked", -math.inf) < CHECK_AFTER:
        return
    psycopg_pool.ConnectionPool.check_connection(conn)
    conn._cellweave_checked = now  # type: ignore[attr-defined]


def describe_dsn(dsn: str) -> str:
    """The server a DSN names, for messages: host, port, database, user (no password)."""
    try:
        parts = _conninfo.conninfo_to_dict(dsn)
    except psycopg.Error:
        return "PostgreSQL (unparsable DSN)"
    host = parts.get("host") or "localhost"
    port = parts.get("port") or "5432"
    db = parts.get("dbname") or parts.get("user") or "?"
    user = f" as {parts['user']}" if parts.get("user") else ""
    return f"postgresql://{host}:{port}/{db}{user}"


class PostgresStore(WriterStore):
    """A durable store in a PostgreSQL database, shared by any number of processes.

    `PostgresStore(dsn, schema="cellweave", poll_interval=1.0, pool_size=4,
    connect_timeout=10.0)`. `dsn` is a libpq connection string or URI. `schema` names
    the PostgreSQL schema holding the tables (created if missing). `poll_interval` is
    the longest time (seconds) a foreign commit waits to be delivered when its
    notification is lost; 0 disables the listening thread (call `poll()`).
    """

    def __init__(
        self,
        dsn: str,
        *,
        schema: str = "cellweave",
        poll_interval: float = 1.0,
        pool_size: int = 4,
        connect_timeout: float = 10.0,
    ) -> None:
        super().__init__()
        where = "PostgresStore()"
        if not isinstance(dsn, str):
            raise bad_arg(dsn, where=where, name="dsn", accepts="a libpq connection string")
        if not isinstance(schema, str):
            raise bad_arg(schema, where=where, name="schema", accepts="a schema name")
        if not _SCHEMA_NAME.fullmatch(schema):
            raise bad_arg(
                schema,
                where=where,
                name="schema",
                accepts="a lower-case SQL identifier ([a-z_][a-z0-9_]*, at most 63 chars)",
                kind="value",
            )
        seconds = "a finite number of seconds >= 0"
        for name, number in (
            ("poll_interval", poll_interval),
            ("connect_timeout", connect_timeout),
        ):
            if isinstance(number, bool) or not isinstance(number, (int, float)):
                raise bad_arg(number, where=where, name=name, accepts=seconds)
            if not math.isfinite(number) or number < 0:
                raise bad_arg(number, where=where, name=name, accepts=seconds, kind="value")
        if connect_timeout == 0:
            raise bad_arg(
                connect_timeout,
                where=where,
                name="connect_timeout",
                accepts="a finite number of seconds > 0",
                kind="value",
            )
        if isinstance(pool_size, bool) or not isinstance(pool_size, int):
            raise bad_arg(pool_size, where=where, name="pool_size", accepts="an int >= 1")
        if pool_size < 1:
            raise bad_arg(
                pool_size, where=where, name="pool_size", accepts="an int >= 1", kind="value"
            )
        try:
            _conninfo.conninfo_to_dict(dsn)
        except psycopg.Error as exc:
            # Not `bad_arg`: it would show the string, and a DSN may hold a password.
            raise InvalidArgumentError(
                f"{where}: dsn must be a libpq connection string or URI; this one is not"
                f" ({str(exc).strip()})"
            ) from None

        self.dsn = dsn
        self.schema = schema
        self.poll_interval = float(poll_interval)
        self.connect_timeout = float(connect_timeout)
        self.server = describe_dsn(dsn)
        self._where = f"PostgresStore {self.server} schema {schema}"
        self._channel = f"cellweave_{schema}"
        self._s = f'"{schema}"'
        """The schema as an SQL identifier (quoted: a name like `user` is a keyword)."""
        self.last_poll_error: BaseException | None = None
        """The last error the listening thread hit (it keeps going; `poll()` raises directly)."""

        self._listener_thread: threading.Thread | None = None
        self._listening = threading.Event()
        """Set once the listening thread LISTENs and has polled after that (tests wait on it)."""
        self._stop = threading.Event()
        self._sessions = SessionVerdicts()
        self._wconn: _Conn | None = None

        timeout = max(1, math.ceil(self.connect_timeout))
        # The first connection is made directly: its failure (server gone, bad password,
        # no such database) carries libpq's own reason, which a pool would only log.
        try:
            conn = psycopg.connect(dsn, connect_timeout=timeout, autocommit=True)
            _session_setup(conn)
        except psycopg.Error as exc:
            raise self._wrap(exc, "cannot connect") from exc
        try:
            self._init_schema(conn)
            self._delivered: int = self._max_seq(conn)
            """Every seq up to here was fanned out to this store's sessions (or predates it)."""
        except BaseException as exc:
            conn.close()
            if isinstance(exc, psycopg.Error):
                raise self._wrap(exc, "cannot initialize the store") from exc
            raise
        self._wconn = conn
        self.claims: SQLClaimTable = SQLClaimTable(
            f"{self._s}.claims", f"{self._s}.head", self._in_pool, postgres=True
        )
        """The page claims (`cells.ClaimTable`): which process runs each open page."""
        self._load_batches: dict[int, tuple[SessionListener, list[DocKey]]] = {}
        """Loads asked but not yet read, per listener (`_deliver_load`)."""
        self._pool = psycopg_pool.ConnectionPool(
            dsn,
            min_size=1,
            max_size=pool_size,
            kwargs={"autocommit": True, "connect_timeout": timeout},
            configure=_pool_session_setup,
            timeout=self.connect_timeout,
            # The pool retries a lost connection with a doubling delay; giving up soon
            # keeps that delay short, and the next read asks for a fresh connection at
            # once, so a server back after an outage is used within about a second.
            reconnect_timeout=max(1.0, 2 * self.connect_timeout),
            check=_check_recent,
            name=f"cellweave-{schema}",
            open=False,
        )
        try:
            self._pool.open(wait=False)
        except psycopg.Error as exc:  # pragma: no cover - open(wait=False) does not connect
            conn.close()
            raise self._wrap(exc, "cannot open the connection pool") from exc

    # ------------------------------------------------------------------ plumbing
    def __repr__(self) -> str:
        state = " closed" if self.closed else ""
        return f"<PostgresStore {self.server} schema={self.schema} seq={self._delivered}{state}>"

    def __enter__(self) -> PostgresStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _wrap(self, exc: BaseException, what: str) -> StoreError:
        """The cellweave error for a psycopg error: none reaches a caller raw."""
        state = _sqlstate(exc)
        detail = str(exc).strip() or type(exc).__name__
        if isinstance(exc, psycopg_pool.PoolTimeout):
            return StoreError(
                f"{self._where}: {what}: no connection to the server within"
                f" {self.connect_timeout:g} s (is it running and reachable?): {detail}"
            )
        refusal = _refusal(exc)
        if refusal is not None:
            return StoreError(f"{self._where}: {what}: {refusal}: {detail}")
        if isinstance(exc, psycopg.OperationalError) and not state:
            return StoreError(f"{self._where}: {what}: the server is unreachable: {detail}")
        code = f" [SQLSTATE {state}]" if state else ""
        return StoreError(f"{self._where}: {what}: {detail}{code}")

    def _init_schema(self, conn: _Conn) -> None:
        s = self._s
        with conn.transaction():
            # Two processes opening a fresh database at once: one creates, the other waits.
            conn.execute(
                "SELECT pg_advisory_xact_lock(hashtext(%s))", (f"cellweave:{self.schema}",)
            )
            tables = {
                str(row[0])
                for row in conn.execute(
                    "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
                    (self.schema,),
                )
            }
            if not tables:
                # An administrator may have made the schema for a user who may not create one.
                exists = conn.execute(
                    "SELECT 1 FROM pg_namespace WHERE nspname = %s", (self.schema,)
                ).fetchone()
                if exists is None:
                    conn.execute(f"CREATE SCHEMA {s}")
                for stmt in _schema_sql(s):
                    conn.execute(stmt)
                conn.execute(
                    f"INSERT INTO {s}.meta (key, value) VALUES ('format', %s), ('version', %s)",
                    (FORMAT, str(VERSION)),
                )
                for stmt in claims_schema(f"{s}.claims", postgres=True):
                    conn.execute(stmt)
                return
            not_ours = (
                f"{self._where}: schema {self.schema} is not a cellweave store (no"
                f" {FORMAT!r} format marker; it has tables {', '.join(sorted(tables)[:8])});"
                " it was left untouched"
            )
            if "meta" not in tables:
                raise CorruptStoreError(not_ours)
            try:
                with conn.transaction():
                    meta = {str(k): v for k, v in conn.execute(f"SELECT key, value FROM {s}.meta")}
            except psycopg.Error as exc:  # someone else's table called meta
                raise CorruptStoreError(not_ours) from exc
            if meta.get("format") != FORMAT:
                raise CorruptStoreError(not_ours)
            raw = meta.get("version")
            try:
                version = int(raw)  # type: ignore[arg-type]
            except (TypeError, ValueError):
                raise CorruptStoreError(
                    f"{self._where}: cellweave store with an unreadable schema version {raw!r};"
                    " it was left untouched"
                ) from None
            if version > VERSION:
                raise CorruptStoreError(
                    f"{self._where} was written by a newer cellweave (schema version {version};"
                    f" this version reads {VERSION}); it was left untouched"
                )
            if version < 1:
                raise CorruptStoreError(
                    f"{self._where}: invalid schema version {version}; it was left untouched"
                )
            missing = _TABLES - tables
            if missing:
                raise CorruptStoreError(
                    f"{self._where}: cellweave store is damaged: missing tables"
                    f" {sorted(missing)}; it was left untouched"
                )
            # The page claims (a schema made before they existed gains the table).
            for stmt in claims_schema(f"{s}.claims", postgres=True):
                conn.execute(stmt)

    def _in_pool(self, fn: Callable[[_Conn], Any]) -> Any:
        """`fn(conn)` on a pooled connection, autocommit (the claims: one statement each)."""
        try:
            # Each claims operation is one statement, run on its own (autocommit): its
            # row locks last only while the server executes it, never across a round
            # trip to a client that may be slow or paused.
            for attempt in range(3):
                try:
                    with self._pool.connection() as conn:
                        return fn(conn)
                except psycopg.errors.DeadlockDetected:
                    # Two multi-row claim statements locked rows in opposite orders;
                    # the server undid this one. A statement of its own: run it again.
                    if attempt == 2:
                        raise
            raise AssertionError("unreachable")  # pragma: no cover
        except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
            raise self._wrap(exc, "claims statement failed") from exc

    def _max_seq(self, conn: _Conn) -> int:
        row = conn.execute(f"SELECT seq FROM {self._s}.counter WHERE id = 1").fetchone()
        if row is None:
            raise CorruptStoreError(f"{self._where}: the counter row is missing")
        return int(row[0])

    @property
    def seq(self) -> int:
        """The highest accepted sequence number in the schema (any writer)."""
        try:
            with self._pool.connection() as conn:
                return self._max_seq(conn)
        except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
            raise self._wrap(exc, "cannot read the last seq") from exc

    def _decode(self, raw: str | None, key: DocKey) -> Value:
        return decode_value(self._where, raw, key)

    # ------------------------------------------------------------------ sessions
    def connect(self, listener: SessionListener, session_id: str | None = None) -> str:
        sid = super().connect(listener, session_id)
        self._sessions.new_key(sid)
        with self._lock:
            if self.poll_interval > 0 and self._listener_thread is None and not self.closed:
                self._listener_thread = threading.Thread(
                    target=self._listen_loop, name=f"cellweave-pg-listen {self.schema}", daemon=True
                )
                self._listener_thread.start()
        return sid

    # ------------------------------------------------------------------ reads
    def _deliver_load(self, listener: SessionListener, key: DocKey) -> None:
        """Loads a listener asks for in one step of its mailbox are read together, in one
        statement, when the mailbox runs next (answers in the order asked): a burst of
        page starts (a takeover) costs a round trip per stage, not per document."""
        with self._lock:
            batch = self._load_batches.get(id(listener))
            if batch is not None:
                batch[1].append(key)
                return
            self._load_batches[id(listener)] = (listener, [key])
        listener.mailbox.post(lambda: self._flush_loads(listener))

    def _flush_loads(self, listener: SessionListener) -> None:
        with self._lock:
            _listener, keys = self._load_batches.pop(id(listener))
        try:
            states: dict[DocKey, DocState] | None = self._read_many(keys)
            error: BaseException | None = None
        except Exception as exc:  # a store failure reaches every waiter
            states, error = None, exc
        for key in keys:
            listener.on_loaded(key, None if states is None else states[key], error)

    def _read_many(self, keys: list[DocKey]) -> dict[DocKey, DocState]:
        if len(keys) == 1:
            return {keys[0]: self._read(keys[0])}
        self._check_open()
        out: dict[DocKey, DocState] = {}
        unique = list(dict.fromkeys(keys))
        try:
            with self._pool.connection() as conn:
                for start in range(0, len(unique), 500):
                    chunk = unique[start : start + 500]
                    params: list[str | None] = []
                    for key in chunk:
                        params += key_params(key)
                    rows = conn.execute(
                        f"SELECT {', '.join(KEY_COLUMNS)}, seq, value FROM {self._s}.head"
                        f" WHERE ({', '.join(KEY_COLUMNS)}) IN"
                        f" ({', '.join(['(%s, %s, %s, %s, %s)'] * len(chunk))})",
                        params,
                    ).fetchall()
                    found = {tuple(r[:5]): r for r in rows}
                    for key in chunk:
                        row = found.get(key_params(key))
                        out[key] = (
                            NO_STATE
                            if row is None
                            else DocState(int(row[5]), self._decode(row[6], key))
                        )
        except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
            raise self._wrap(exc, f"cannot read {len(unique)} documents") from exc
        return out

    def _read(self, key: DocKey) -> DocState:
        self._check_open()
        try:
            with self._pool.connection() as conn:
                row = conn.execute(
                    f"SELECT seq, value FROM {self._s}.head WHERE {_MATCH}", key_params(key)
                ).fetchone()
        except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
            raise self._wrap(exc, f"cannot read {key}") from exc
        if row is None:
            return NO_STATE
        return DocState(int(row[0]), self._decode(row[1], key))

    # ------------------------------------------------------------------ validation callbacks
    def _revisions_since(
        self, conn: _Conn, session_id: str, session_key: str, key: DocKey, seq: int
    ) -> list[Revision]:
        s = self._s
        k = key_params(key)
        floor = conn.execute(f"SELECT seq FROM {s}.revision_floor WHERE {_MATCH}", k).fetchone()
        if floor is not None and seq < floor[0]:
            return [pruned_revision(int(floor[0]))]
        rows = conn.execute(
            f"SELECT r.seq, r.session_id, r.local_seq, r.paths FROM {s}.revision r"
            f" WHERE {_R_MATCH} AND r.seq > %s ORDER BY r.seq",
            (*k, seq),
        ).fetchall()
        return revisions_from_rows(rows, session_id, session_key)

    def _ever_written(self, conn: _Conn, key: DocKey) -> bool:
        s = self._s
        row = conn.execute(
            f"SELECT EXISTS (SELECT 1 FROM {s}.head WHERE {_MATCH})"
            f" OR EXISTS (SELECT 1 FROM {s}.claimed WHERE {_MATCH})",
            key_params(key) * 2,
        ).fetchone()
        return bool(row and row[0])

    # ------------------------------------------------------------------ commits
    def _writer_name(self) -> str:
        return f"cellweave-pg-writer {self.schema}"

    def _closed_message(self) -> str:
        return f"{self._where} is closed"

    def _unevaluated(
        self, request: CommitRequest, cause: BaseException
    ) -> LivenessError | TerminalCommitError:
        """The rejection of a commit whose evaluation failed: LIVENESS when a later attempt
        can succeed (the store closed, the server unreachable or restarting), TERMINAL
        when it fails again (data the database refuses, a damaged schema)."""
        transient = self.closed or _is_transient(cause)
        if isinstance(cause, (psycopg.Error, psycopg_pool.PoolTimeout)):
            wrapped = self._wrap(cause, "commit failed")
            wrapped.__cause__ = cause
            cause = wrapped
        reason = "the store is closed" if self._wconn is None else f"{cause}"
        message = f"commit {request.session_id}#{request.local_seq} was not applied: {reason}"
        err = LivenessError(message) if transient else TerminalCommitError(message)
        err.__cause__ = cause
        return err

    def _writer_conn(self) -> _Conn:
        conn = self._wconn
        if conn is None:
            raise StoreError(f"{self._where} is closed")
        if conn.closed or conn.broken:
            # The server went away (or restarted): reconnect; a failure is transient,
            # and the next commit tries again.
            conn.close()
            timeout = max(1, math.ceil(self.connect_timeout))
            self._wconn = conn = psycopg.connect(self.dsn, connect_timeout=timeout, autocommit=True)
            _session_setup(conn)
        return conn

    def _evaluate(self, request: CommitRequest) -> Verdict:
        """Validate and apply `request` in one transaction; returns after COMMIT."""
        s = self._s
        with self._write_lock:
            conn = self._writer_conn()
            session_key = self._sessions.key(request.session_id)
            with conn.transaction():
                top = self._lock_counter(conn)
                behind = self._changes_after(conn, self._delivered, top)
                error: CommitRejected | None = (
                    None if request.fence is None else self.claims.fence_error(conn, request.fence)
                ) or validate_commit(
                    request,
                    revisions_since=functools.partial(
                        self._revisions_since, conn, request.session_id, session_key
                    ),
                    resolution=lambda _sid, local_seq: self._sessions.resolution(
                        session_key, local_seq
                    ),
                    ever_written=functools.partial(self._ever_written, conn),
                )
                docs: dict[DocKey, Value] = {}
                paths: dict[DocKey, list[Path]] = {}
                if error is None:
                    try:
                        for w in request.writes:
                            current = docs[w.key] if w.key in docs else self._head(conn, w.key)
                            docs[w.key] = set_path(current, w.path, w.value, where="commit")
                            paths.setdefault(w.key, []).append(revision_path(current, w.path))
                    except InvalidValueError as exc:
                        error = ConflictError(
                            f"commit {request.session_id}#{request.local_seq} no longer"
                            f" applies: {exc}"
                        )
                if error is not None:
                    verdict = Verdict(None, error=error)
                else:
                    seq = top + 1
                    self._apply(conn, request, session_key, seq, docs, paths)
                    conn.execute(
                        f"WITH u AS (UPDATE {s}.counter SET seq = %s WHERE id = 1 RETURNING seq)"
                        " SELECT pg_notify(%s, seq::text) FROM u",
                        (seq, self._channel),
                    )
                    verdict = Verdict(seq, docs)
            # COMMIT returned: durable from here on.
            self._sessions.resolve(session_key, request.local_seq, rejected=verdict.seq is None)
            self._deliver(behind)
            self._delivered = max(self._delivered, top, verdict.seq or 0)
            return verdict

    def _lock_counter(self, conn: _Conn) -> int:
        row = conn.execute(f"SELECT seq FROM {self._s}.counter WHERE id = 1 FOR UPDATE").fetchone()
        if row is None:
            raise CorruptStoreError(f"{self._where}: the counter row is missing")
        return int(row[0])

    def _head(self, conn: _Conn, key: DocKey) -> Value:
        row = conn.execute(
            f"SELECT value FROM {self._s}.head WHERE {_MATCH}", key_params(key)
        ).fetchone()
        return MISSING if row is None else self._decode(row[0], key)

    def _apply(
        self,
        conn: _Conn,
        request: CommitRequest,
        session_key: str,
        seq: int,
        docs: dict[DocKey, Value],
        paths: dict[DocKey, list[Path]],
    ) -> None:
        s = self._s
        for key, value in docs.items():
            k = key_params(key)
            conn.execute(
                f"INSERT INTO {s}.revision ({_COLS}, seq, session_id, local_seq, paths)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
                (*k, seq, session_key, request.local_seq, encode_paths(paths[key])),
            )
            conn.execute(
                f"INSERT INTO {s}.head ({_COLS}, seq, value) VALUES (%s, %s, %s, %s, %s, %s, %s)"
                f" ON CONFLICT ({_COLS}) DO UPDATE SET seq = excluded.seq, value = excluded.value",
                (*k, seq, encode_value(value)),
            )
        for key in request.create_only:
            conn.execute(
                f"INSERT INTO {s}.claimed ({_COLS}, seq) VALUES (%s, %s, %s, %s, %s, %s)"
                " ON CONFLICT DO NOTHING",
                (*key_params(key), seq),
            )
        for key in docs:
            self._prune(conn, key_params(key), seq)

    def _prune(self, conn: _Conn, k: tuple[str, ...], seq: int) -> None:
        """Keep a document's newest `REVISIONS_KEPT` revisions once it has more than twice
        that many. One index lookup decides the usual case (see SQLiteStore._prune)."""
        s = self._s
        oldest = conn.execute(f"SELECT MIN(seq) FROM {s}.revision WHERE {_MATCH}", k).fetchone()
        if oldest is None or oldest[0] is None or seq - int(oldest[0]) < 2 * REVISIONS_KEPT:
            return
        newest_first = f"SELECT seq FROM {s}.revision WHERE {_MATCH} ORDER BY seq DESC"
        if conn.execute(f"{newest_first} LIMIT 1 OFFSET %s", (*k, 2 * REVISIONS_KEPT)).fetchone():
            row = conn.execute(f"{newest_first} LIMIT 1 OFFSET %s", (*k, REVISIONS_KEPT)).fetchone()
            assert row is not None
            cutoff = int(row[0])
            conn.execute(f"DELETE FROM {s}.revision WHERE {_MATCH} AND seq <= %s", (*k, cutoff))
            conn.execute(
                f"INSERT INTO {s}.revision_floor ({_COLS}, seq) VALUES (%s, %s, %s, %s, %s, %s)"
                f" ON CONFLICT ({_COLS}) DO UPDATE SET seq = excluded.seq",
                (*k, cutoff),
            )

    def _record_rejection(self, request: CommitRequest) -> None:
        with self._write_lock:
            key = self._sessions.key(request.session_id)
            self._sessions.resolve(key, request.local_seq, rejected=True)

    # ------------------------------------------------------------------ foreign commits
    def _changes_after(self, conn: _Conn, after: int, top: int) -> list[_Change]:
        """Commits in (after, top] with the documents whose head they still are, oldest
        first. Run inside one snapshot (or under the counter lock)."""
        if top <= after:
            return []
        with self._lock:
            if not self._listeners:
                return []  # nobody to tell; a later session loads fresh state
        cols = ", ".join(f"r.{c}" for c in KEY_COLUMNS)
        rows = conn.execute(
            f"SELECT r.seq, {cols}, h.value FROM {self._s}.revision r"
            f" JOIN {self._s}.head h USING ({_COLS})"
            " WHERE r.seq > %s AND r.seq <= %s AND h.seq = r.seq ORDER BY r.seq",
            (after, top),
        ).fetchall()
        out: dict[int, dict[DocKey, Value]] = {}
        for seq, space, doc_id, scope, principal, session, raw in rows:
            key = key_from_row(self._where, space, doc_id, scope, principal, session)
            out.setdefault(int(seq), {})[key] = self._decode(raw, key)
        return list(out.items())

    def _deliver(self, changes: list[_Change]) -> None:
        for seq, docs in changes:
            self._broadcast(_NO_ORIGIN, seq, docs)

    def poll(self) -> int:
        """Deliver commits other writers made since the last look; returns how many.

        Reads by sequence in one snapshot, so nothing depends on a notification having
        arrived. Safe from any thread. One indexed query when nothing changed.
        """
        if self.closed:
            return 0
        try:
            with self._pool.connection() as conn:
                if self._max_seq(conn) <= self._delivered:
                    return 0
                with self._write_lock:  # orders this fan-out against the writer's own
                    conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
                    try:
                        top = self._max_seq(conn)
                        changes = self._changes_after(conn, self._delivered, top)
                    finally:
                        conn.execute("ROLLBACK")
                    self._deliver(changes)
                    self._delivered = max(self._delivered, top)
        except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
            raise self._wrap(exc, "poll failed") from exc
        return len(changes)

    def _listen_loop(self) -> None:
        """Poll every `poll_interval`, or at once when a notification arrives."""
        conn: _Conn | None = None
        next_poll = 0.0
        try:
            while not self._stop.is_set():
                with self._lock:
                    if self.closed or not self._listeners:
                        self._listener_thread = None
                        return
                try:
                    if conn is None or conn.closed or conn.broken:
                        if conn is not None:
                            conn.close()
                        conn = None
                        conn = psycopg.connect(
                            self.dsn,
                            autocommit=True,
                            connect_timeout=max(1, math.ceil(self.connect_timeout)),
                        )
                        self._listening.clear()
                        conn.execute(f'LISTEN "{self._channel}"')
                        next_poll = 0.0  # notifications may have been missed meanwhile
                    wait = max(0.0, min(0.1, next_poll - time.monotonic()))
                    woken = any(True for _ in conn.notifies(timeout=wait, stop_after=1))
                    if woken or time.monotonic() >= next_poll:
                        next_poll = time.monotonic() + self.poll_interval
                        self.poll()
                        self._listening.set()
                except Exception as exc:  # keep going: the server may come back
                    self.last_poll_error = exc
                    if self._stop.wait(min(self.poll_interval, 0.5)):
                        return
        finally:
            if conn is not None:
                conn.close()

    # ------------------------------------------------------------------ closing
    def close(self) -> None:
        """Answer queued commits, fail held ones, stop threads, close every connection."""
        closing, writer = self._start_closing()
        if not closing:
            return
        with self._lock:
            listening = self._listener_thread
        self._stop.set()
        me = threading.current_thread()
        for thread in (writer, listening):
            if thread is not None and thread is not me:
                thread.join()
        self._fail_held(StoreError(f"{self._where} was closed"))
        with self._write_lock:
            if self._wconn is not None:
                self._wconn.close()
                self._wconn = None
        self._pool.close()

    def drop_schema(self) -> None:
        """Delete the schema and everything in it (tests and tools). Closes the store."""
        self.close()
        try:
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                conn.execute(f"DROP SCHEMA IF EXISTS {self._s} CASCADE")
        except psycopg.Error as exc:
            raise self._wrap(exc, "cannot drop the schema") from exc

    # ------------------------------------------------------------------ invariants
    def _check(self) -> None:
        super()._check()
        with self._pool.connection() as conn, conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            for sql, what in self._checks():
                row = conn.execute(sql).fetchone()
                assert row is not None and not row[0], f"{self._where}: {what}"
            top = self._max_seq(conn)
            assert self._delivered <= top, (self._delivered, top)
        with self._write_lock:
            self._sessions.check()

    def _checks(self) -> Iterator[tuple[str, str]]:
        s = self._s
        match = " AND ".join(f"r.{c} = h.{c}" for c in KEY_COLUMNS)
        floor = " AND ".join(f"r.{c} = f.{c}" for c in KEY_COLUMNS)
        yield (
            f"SELECT COUNT(*) FROM {s}.revision r JOIN {s}.revision_floor f ON {floor}"
            " WHERE r.seq <= f.seq",
            "a revision at or below its document's floor was kept",
        )
        yield (
            f"SELECT COUNT(*) FROM {s}.revision_floor f WHERE"
            f" (SELECT COUNT(*) FROM {s}.revision r WHERE {floor}) < {REVISIONS_KEPT}",
            f"a pruned document keeps fewer than {REVISIONS_KEPT} revisions",
        )
        yield (
            f"SELECT COUNT(*) FROM {s}.head h WHERE"
            f" (SELECT COUNT(*) FROM {s}.revision r WHERE {match}) > {2 * REVISIONS_KEPT}",
            f"a document keeps more than {2 * REVISIONS_KEPT} revisions",
        )
        yield (
            f"SELECT COUNT(*) FROM {s}.head h WHERE h.seq IS DISTINCT FROM"
            f" (SELECT MAX(r.seq) FROM {s}.revision r WHERE {match})",
            "a head's seq is not its document's last revision",
        )
        yield (
            f"SELECT COUNT(*) FROM {s}.revision r"
            f" WHERE NOT EXISTS (SELECT 1 FROM {s}.head h WHERE {match})",
            "a revised document has no head",
        )
        yield (
            f"SELECT COUNT(*) FROM {s}.revision r, {s}.counter c WHERE r.seq > c.seq",
            "a revision is newer than the counter",
        )
