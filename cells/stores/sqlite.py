"""`SQLiteStore`: the embedded, durable store (one SQLite file, several processes).

Every accepted commit gets a gap-free sequence number and a row in the `log`, keyed by
it, holding an entry per document it wrote (the paths it wrote, for conflict checks),
and each written document its materialized value in `head`.
Validation is the shared `validate_commit`, answered from SQL inside the same
`BEGIN IMMEDIATE` transaction that applies the commit, so the verdict and the data can
never disagree, even with other processes writing the same file.

Layout (format version 7): what one commit writes is close together
- `log` has one row per commit, keyed by its seq (appended at the end of the tree,
  which SQLite does without rebalancing the last pages; the newest row holds the max
  seq), naming its session (by number, `session`) and local seq, with its revision
  entries as one JSON array (`entries`: [doc, previous revision's seq, paths] per
  document written, paths `0` for a cell's whole value; none for a commit that only
  claimed). A 100-document commit so writes one row of about 1.2 KB where version 5
  wrote 100 rows, each repeating its commit's seq, session and local seq and taking an
  id. A commit of more than `_PART` (128) documents keeps its entries sorted by
  document number: the first 128 in its row, the rest in `log_part` rows of at most
  128, keyed by (seq, the part's first document), so no row holds more than 128
  entries. A conflict check walks a document's revisions back from its head's seq,
  entry by entry (one primary-key lookup and one row of at most 128 entries decoded
  per revision newer than the read's basis, plus one index lookup and part when the
  entry is in a part; none when the document was not written since: the usual case).
- `head` holds what a commit updates, in place: the value, the last revision's seq,
  and what a commit needs to decide about history without a query (the kept
  revision count, the floor, the seq of the newest revision its next pruning
  deletes). The key lives in `document` (written once per document, numbered: `doc`),
  so a 100-document commit's heads fill one page.
- The writer remembers the head rows it last committed (`_known`), valid while no
  other connection has committed since (then the max seq is known too): a commit
  rewriting them reads none, and the usual one (a field of each document, each once)
  is staged in one loop (`_stage_known`; of one document, `_commit_one`), and a read
  of a document whose remembered head is no newer than the read's basis is checked
  without a query (`_known_revisions_since`). That no other connection committed is
  told by the commit's own head update, which changes nothing if a log row at or
  above its seq exists (`_NO_NEWER`); then the commit goes the general way.
- A commit's heads go in one statement (multi-row VALUES of at most `_MAX_ROWS` rows,
  padded to a multiple of 8 with rows of NULLs that match nothing, so only a few
  statement texts are ever prepared), its log row in another: a one-document commit
  steps four statements (BEGIN, its head, its log row, COMMIT), a 100-document one as
  many. Documents due for pruning are pruned together: their
  revisions to delete are found by one read of the stretch of log rows they lie in
  when it is mostly theirs (documents written by the same commits) and holds no large
  commit's parts (each row's documents as the writer remembers them, `_written`, if it
  committed the row), else walked back entry by entry (each row and part read once per
  pruning: O(entries pruned), at most 2 * 128 entries decoded per one deleted); each
  log row (and part) loses that many from its `live` count, the rows and parts left
  with none are deleted, and the documents are given their floors. The verdict names
  the state each document was applied on (`base_seqs`): the committing replica
  adopts its own layers instead of re-folding the documents.

Bounded history (the cap `MemoryStore` also applies; it prunes further by its
sessions' low-water marks, which processes sharing a file do not report here)
- Each document keeps its newest `REVISIONS_KEPT` revisions: when it has more
  than twice that many, the older ones are deleted and its head's `floor` records
  the newest deleted seq. A read whose basis is older than its document's floor
  conflicts (re-run), which over-approximates as conflict checks may.
- A log row goes once every entry in it and its parts was pruned (its `live` count,
  which counts its parts' entries too, reaches 0; a part goes when its own does; an
  entry of a row that stays is dead once at or below its document's floor); the row
  of a commit that wrote no document is kept (its claims name it), and the newest row
  (the seq counter) is never deleted: its entries are newest revisions. A `session` row
  is kept for each session that ever committed (one per connection, not per commit).
- Which commits of a session have a verdict (for dependency checks) is kept in
  memory, per store object: a session key is unique to one store object, so no
  other process ever asks. Nothing per rejected commit is written.
- Other writers' commits are delivered from the heads (`_changes_after`): every
  document written since the last delivered seq, at its newest revision, so a
  poller that fell far behind still catches up on every document's current value.
So under churn on a fixed set of documents the file stays flat.

Durability
- A verdict is posted only after `COMMIT` returned. With the default
  `synchronous="FULL"` (WAL journal) an acknowledged commit survives kill -9
  and power loss; `"NORMAL"` still survives a crashed process but may lose the
  last commits on power loss.
- Opening never modifies a file that is not a cellweave store: a non-SQLite
  file, a SQLite database without the cellweave format marker, or a store of a
  newer format version raises `CorruptStoreError` and leaves the bytes alone.
  A missing or empty file (or a SQLite database with no schema) is initialized.

Threading
- Commits are queued FIFO (`_submit_evaluation`) and evaluated one at a time, in
  order, under `_write_lock`, which also serializes every fan-out (so each mailbox
  hears commits in seq order). A thread blocked in `Pending.wait()` evaluates the
  queued commits itself (`WriterStore._help`), however many writes they have: a
  synchronous commit costs no hand-over to another thread and back. The writer thread
  evaluates the rest: at once what a thread running an event loop submits (the loop
  must not block on the file), within 50 ms (`_sql._LAZY_WAKE_S`) what nobody waits
  for. An interrupt (only a waiting thread runs signal
  handlers) is answered as the commit ended, applied or not (`_interrupted`). A test
  gate's `accept()` evaluates on the caller's thread: it first waits for the queue to
  drain (per-session FIFO), then shares the one writer connection.
- Reads use a second connection under `_read_lock` (WAL lets them run while a
  write is in progress); both connections are usable from any thread.
- Loads are batched per session: the first `load` a session asks for posts one
  step on its mailbox, and the loads asked for until that step runs are read
  there in one statement per `_CHUNK` documents and answered in the order
  asked (one query per document was a fifth of a restart's CPU). A load so
  reads the file when its answer is handed over, not when it was asked for:
  any state at least as new as the request, as a store may answer.
- Other writers' commits (another process, another `SQLiteStore` on the same
  file) reach this store's sessions as foreign changes: `poll()` checks
  `PRAGMA data_version`, and a daemon thread calls it every `poll_interval`
  seconds while a session is connected (`poll_interval=0`: only explicit
  `poll()`). The writer also catches up on them before answering its own
  commit, so fan-out is in seq order.
- `close()` evaluates and answers every commit already queued (they are
  durable when it returns), answers commits still held by a verdict gate with
  a `LivenessError` (cause: `StoreError`), fails held loads, then closes both
  connections. Commits submitted after `close()` raise `StoreError`.

Invariants (checked by `_check`)
- every log row names a session that has a row, and its entries are a JSON array
  of at most `_PART`, with its parts' at most one entry per document, each naming a
  document, a previous seq below its own and paths; a row with no entry counts none
  live and a claim names its seq; a row's `live` is its and its parts' number of
  entries above their documents' floors, and only the newest row may have none left
  of the entries it had; every part has a log row, at most `_PART` entries, a `live`
  that is its number of entries above their floors and not 0, and each of its
  entries is in the part a walk looks in (the greatest `first` at or below its
  document); no head's seq is above the max seq; no commit is both accepted and
  rejected;
- every document has one head row and every head row a document;
- a document keeps at most 2 * REVISIONS_KEPT revisions (entries above its floor),
  and at least REVISIONS_KEPT once it has a floor; its head counts them, and its
  `next_floor` is the seq of its (REVISIONS_KEPT + 1)-th oldest (NULL while it has
  fewer);
- each kept revision's `prev` is the seq of its document's previous kept revision,
  or for the oldest 0 (or, once pruned, a seq at or below the floor);
- every head's seq is its document's last revision's;
- what the writer remembers of head rows (`_known`) is what the file holds,
  whenever the file's max seq is still the one it was remembered at;
- this store has delivered every seq up to `_delivered`, which never exceeds the
  max seq.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import math
import operator
import os
import pathlib
import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Final, TypeVar

import msgspec

from .._address import DocKey, Path
from .._args import bad_arg
from .._store import (
    NO_STATE,
    CommitRequest,
    DocState,
    Revision,
    SessionListener,
    Verdict,
    Write,
    revision_path,
    validate_commit,
)
from .._values import MISSING, Value, set_path, value_equal
from ..errors import (
    CommitRejected,
    ConflictError,
    CorruptStoreError,
    InternalError,
    InvalidValueError,
    LivenessError,
    StoreError,
    TerminalCommitError,
)
from ._claims_sql import SQLClaimTable
from ._claims_sql import schema as claims_schema
from ._sql import (
    KEY_COLUMNS,
    PLAIN_FIELDS,
    Acceptance,
    SessionVerdicts,
    WriterStore,
    decode_value,
    encode_value,
    key_from_row,
    key_params,
    plain_dict,
    pruned_revision,
)
from .memory import REVISIONS_KEPT

T = TypeVar("T")

FORMAT: Final = "cellweave-store"
VERSION: Final = 7
"""The store format version this module writes (and reads, with every older one).

2: history is pruned (per document, a floor); an older cellweave must not write such a
file, as its conflict checks would take pruned revisions for none.
3: history is stored by commit (`revision` keyed by seq, then the document's number),
so one commit's history rows are contiguous; each revision names its document's previous
one, and the head row carries the document's revision count and floor.
4: `revision` is a rowid table, its ids given in commit order (a commit's rows are
appended at the end of the tree: about 2 fewer pages per 100-document commit); a revision
names its document's previous one by id, the head its last one (`rev`), and each
`commit_log` row the id of its first revision (`first`).
5: there is no `commit_log`: each `revision` row names its commit's seq, session (a
number: `session`) and local seq, a commit that wrote no document has one row naming
none, and the newest row holds the max seq; a one-document commit dirties two pages where
version 4 dirtied three.
6: a commit's revisions are one `log` row keyed by its seq (an entry per document,
naming its previous revision by seq), with a count of entries not yet pruned; heads name
their next floor by seq. A 100-document commit writes one row where version 5 wrote 100
(about 1.5 log pages where it wrote 3.6). A commit of more than 128 documents keeps its
entries past the first 128 (by document number) in `log_part` rows of at most 128 each.
7: an entry's paths may be `0`, standing for `[["value"]]` (one write of a cell's whole
value: the usual entry, 10 bytes shorter, so a 100-document commit's log row takes about
1.2 KB where it took 2.5 and three rows share a page); entries written by version 6 keep
their paths as they are. An older cellweave refuses a version 7 file (a newer format);
one of version 6 still holding a file open when it is upgraded fails a commit whose
conflict check meets a `0` (its decoder expects a list): it never misreads one.
Opening a version 1 to 6 file upgrades it in one transaction (`_upgrade`; from version 6,
only the version number changes)."""

_SQLITE_HEADER: Final = b"SQLite format 3\x00"
_BUSY_TIMEOUT_S: Final = 5.0
_SYNCHRONOUS: Final = ("OFF", "NORMAL", "FULL", "EXTRA")
_NO_ORIGIN: Final = ""
"""`_broadcast` origin for foreign commits: `connect` never hands out an empty session id."""

_KEY_COLS: Final = ", ".join(KEY_COLUMNS)
_KEY_MATCH: Final = "space = ? AND doc_id = ? AND scope = ? AND principal = ? AND session = ?"
_HEAD_OF_KEY: Final = (
    "document d JOIN head h ON h.doc = d.doc WHERE d.space = ? AND d.doc_id = ?"
    " AND d.scope = ? AND d.principal = ? AND d.session = ?"
)
"""`FROM` this: the head (`h`) and key (`d`) of the document whose key is bound."""
_HEADS_OF_KEYS: Final = (
    "k JOIN document d ON d.space = k.space AND d.doc_id = k.doc_id AND d.scope = k.scope"
    " AND d.principal = k.principal AND d.session = k.session JOIN head h ON h.doc = d.doc"
)
"""`FROM` this: the heads (`h`) of the keys listed in `k`."""

# Version 3 (what `_upgrade_2_to_3` makes and `_UPGRADE_3_TO_4` takes on). A commit
# writes one `commit_log` row, one `revision` row per document (all under its seq, so
# next to each other) and updates each document's `head` row in place.
_SCHEMA_3: Final = (
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID",
    """CREATE TABLE commit_log (
        seq INTEGER PRIMARY KEY,
        session_id TEXT NOT NULL,
        local_seq INTEGER NOT NULL
    )""",
    # Commits rejected after (or without) evaluation. No longer written (verdicts are
    # kept in memory, `SessionVerdicts`); kept so older files keep their meaning.
    """CREATE TABLE rejection (
        session_id TEXT NOT NULL,
        local_seq INTEGER NOT NULL,
        PRIMARY KEY (session_id, local_seq)
    ) WITHOUT ROWID""",
    # A head row exists for every document ever written; value NULL means deleted, and
    # the row still counts as "ever written" for create-only. `doc` is the document's
    # number (its revisions name it); `seq` its last revision, `revisions` how many of
    # its revisions are kept, `floor` the newest pruned one's seq (NULL: none pruned),
    # `next_floor` the floor its next pruning sets: its (REVISIONS_KEPT + 1)-th oldest
    # kept revision (NULL while it keeps fewer), so pruning walks only what it deletes.
    f"""CREATE TABLE head (
        doc INTEGER PRIMARY KEY,
        space TEXT NOT NULL, doc_id TEXT NOT NULL, scope TEXT NOT NULL,
        principal TEXT NOT NULL, session TEXT NOT NULL,
        seq INTEGER NOT NULL,
        revisions INTEGER NOT NULL,
        floor INTEGER,
        next_floor INTEGER,
        value TEXT,
        UNIQUE ({_KEY_COLS})
    )""",
    # Seq first: a commit's rows are contiguous, and pruning below a seq is one range.
    # `prev` is the document's previous revision's seq (0: none); the conflict check
    # walks it back from the head instead of an index by document, which every write
    # would have to update at a page of its own.
    """CREATE TABLE revision (
        seq INTEGER NOT NULL,
        doc INTEGER NOT NULL,
        prev INTEGER NOT NULL,
        paths TEXT NOT NULL,
        PRIMARY KEY (seq, doc)
    ) WITHOUT ROWID""",
    # Create-only keys of accepted commits, written or not (MemoryStore: its heads and `_claimed`).
    f"""CREATE TABLE claimed (
        space TEXT NOT NULL, doc_id TEXT NOT NULL, scope TEXT NOT NULL,
        principal TEXT NOT NULL, session TEXT NOT NULL,
        seq INTEGER NOT NULL,
        PRIMARY KEY ({_KEY_COLS})
    ) WITHOUT ROWID""",
    # Pruning deletes a commit_log row only once no claim names its seq.
    "CREATE INDEX claimed_by_seq ON claimed (seq)",
)
# Version 4 (what `_UPGRADE_3_TO_4` makes and `_UPGRADE_4_TO_5` takes on). A commit
# writes one `commit_log` row, one `revision` row per document (all with ids after every
# earlier commit's, so appended at the end of the table) and updates each document's
# `head` row in place.
_SCHEMA_4: Final = (
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID",
    # `first`: the id the commit's first revision got (the next id, for a commit that
    # wrote none): a commit's revisions are the ids from its `first` up to the next
    # commit's, so finding them by seq needs no index on `revision`. No default: a
    # cellweave of format 3 still holding an upgraded file open fails to commit (its
    # commit_log insert names no `first`) instead of writing rows version 4 misreads.
    """CREATE TABLE commit_log (
        seq INTEGER PRIMARY KEY,
        session_id TEXT NOT NULL,
        local_seq INTEGER NOT NULL,
        first INTEGER NOT NULL
    )""",
    # Commits rejected after (or without) evaluation. No longer written (verdicts are
    # kept in memory, `SessionVerdicts`); kept so older files keep their meaning.
    """CREATE TABLE rejection (
        session_id TEXT NOT NULL,
        local_seq INTEGER NOT NULL,
        PRIMARY KEY (session_id, local_seq)
    ) WITHOUT ROWID""",
    # A head row exists for every document ever written; value NULL means deleted, and
    # the row still counts as "ever written" for create-only. `doc` is the document's
    # number (its revisions name it); `seq` its last revision's seq and `rev` that
    # revision's id, `revisions` how many of its revisions are kept, `floor` the newest
    # pruned one's seq (NULL: none pruned), `next_floor` the id of the newest revision its
    # next pruning deletes (whose seq becomes the floor): its (REVISIONS_KEPT + 1)-th
    # oldest kept revision (NULL while it keeps fewer), so pruning walks only what it
    # deletes.
    f"""CREATE TABLE head (
        doc INTEGER PRIMARY KEY,
        space TEXT NOT NULL, doc_id TEXT NOT NULL, scope TEXT NOT NULL,
        principal TEXT NOT NULL, session TEXT NOT NULL,
        seq INTEGER NOT NULL,
        revisions INTEGER NOT NULL,
        floor INTEGER,
        next_floor INTEGER,
        value TEXT,
        rev INTEGER NOT NULL DEFAULT 0,
        UNIQUE ({_KEY_COLS})
    )""",
    # A rowid table, ids given in commit order: a commit's rows are appended at the end
    # of the tree, which SQLite does without rebalancing its last pages (a tree keyed
    # by (seq, document), version 3, rebalanced them: about 2 more pages per 100 rows).
    # `prev` is the id of the document's previous revision (0: none; for the oldest
    # kept one, the newest pruned one's, which is gone, or 0): the conflict check walks
    # it back from the head's `rev`.
    """CREATE TABLE revision (
        id INTEGER PRIMARY KEY,
        seq INTEGER NOT NULL,
        doc INTEGER NOT NULL,
        prev INTEGER NOT NULL,
        paths TEXT NOT NULL
    )""",
    # Create-only keys of accepted commits, written or not (MemoryStore: its heads and `_claimed`).
    f"""CREATE TABLE claimed (
        space TEXT NOT NULL, doc_id TEXT NOT NULL, scope TEXT NOT NULL,
        principal TEXT NOT NULL, session TEXT NOT NULL,
        seq INTEGER NOT NULL,
        PRIMARY KEY ({_KEY_COLS})
    ) WITHOUT ROWID""",
    # Pruning deletes a commit_log row only once no claim names its seq.
    "CREATE INDEX claimed_by_seq ON claimed (seq)",
)
# Version 5 (what `_UPGRADE_4_TO_5` makes and `_UPGRADE_5_TO_6` takes on). A commit
# writes one `revision` row per document (its seq, session and local seq on each: there is
# no commit table), all with ids after every earlier commit's (so appended at the end of
# the table), and updates each document's `head` row in place.
_SCHEMA_5: Final = (
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID",
    # Commits rejected after (or without) evaluation. No longer written (verdicts are
    # kept in memory, `SessionVerdicts`); kept so older files keep their meaning.
    """CREATE TABLE rejection (
        session_id TEXT NOT NULL,
        local_seq INTEGER NOT NULL,
        PRIMARY KEY (session_id, local_seq)
    ) WITHOUT ROWID""",
    # The session keys that committed, numbered (a revision names its commit's session
    # by number: a few bytes, where the key is about 40). A row is added at a session's
    # first accepted commit and kept (one per session ever, not per commit).
    "CREATE TABLE session (id INTEGER PRIMARY KEY, key TEXT NOT NULL UNIQUE)",
    # Every document ever written has a number (`doc`, which its head and revisions
    # name) and a head row; its key is looked up here once per commit (or remembered),
    # and the hot head rows carry no key (about a third of the bytes: a 100-document
    # commit's heads fill one page or two, not three).
    f"""CREATE TABLE document (
        doc INTEGER PRIMARY KEY,
        space TEXT NOT NULL, doc_id TEXT NOT NULL, scope TEXT NOT NULL,
        principal TEXT NOT NULL, session TEXT NOT NULL,
        UNIQUE ({_KEY_COLS})
    )""",
    # A head row: value NULL means deleted, and the row still counts as "ever written"
    # for create-only. `seq` is its last revision's seq and `rev` that revision's id,
    # `revisions` how many of its revisions are kept, `floor` the newest pruned one's
    # seq (NULL: none pruned), `next_floor` the id of the newest revision its next
    # pruning deletes (whose seq becomes the floor): its (REVISIONS_KEPT + 1)-th oldest
    # kept revision (NULL while it keeps fewer), so pruning walks only what it deletes.
    """CREATE TABLE head (
        doc INTEGER PRIMARY KEY,
        seq INTEGER NOT NULL,
        revisions INTEGER NOT NULL,
        floor INTEGER,
        next_floor INTEGER,
        rev INTEGER NOT NULL DEFAULT 0,
        value TEXT
    )""",
    # The log: a rowid table, ids given in commit order, so a commit's rows are appended
    # at the end of the tree (which SQLite does without rebalancing its last pages) and
    # the newest row holds the max seq. A commit's rows are the ids from its first to the
    # next commit's: one per document it wrote (`doc`, `prev`: the id of the document's
    # previous revision, 0 for none or, for the oldest kept one, the pruned one's id;
    # `paths`: what it wrote, for conflict checks), or for a commit that wrote none (its
    # create-only claims) one row with `doc` and `paths` NULL, never pruned. Each row
    # names its commit's session (by number) and local seq. The newest row is never
    # pruned (it is its document's newest revision, or a claim's row), so ids are never
    # reused and the max seq never goes back.
    """CREATE TABLE revision (
        id INTEGER PRIMARY KEY,
        seq INTEGER NOT NULL,
        doc INTEGER,
        prev INTEGER NOT NULL,
        paths TEXT,
        session INTEGER NOT NULL,
        local_seq INTEGER NOT NULL
    )""",
    # Create-only keys of accepted commits, written or not (MemoryStore: its heads and `_claimed`).
    f"""CREATE TABLE claimed (
        space TEXT NOT NULL, doc_id TEXT NOT NULL, scope TEXT NOT NULL,
        principal TEXT NOT NULL, session TEXT NOT NULL,
        seq INTEGER NOT NULL,
        PRIMARY KEY ({_KEY_COLS})
    ) WITHOUT ROWID""",
)
# Version 6. A commit writes one `log` row (keyed by its seq: appended at the end of the
# tree) holding every written document's revision entry, and updates each document's
# `head` row in place: a 100-document commit writes one row to the log where version 5
# wrote 100 (their ids, seqs, sessions and local seqs repeated on each).
_SCHEMA: Final = (
    *(s for s in _SCHEMA_5 if not s.startswith(("CREATE TABLE head", "CREATE TABLE revision"))),
    # A head row: value NULL means deleted, and the row still counts as "ever written"
    # for create-only. `seq` is its last revision's seq, `revisions` how many of its
    # revisions are kept, `floor` the newest pruned one's seq (NULL: none pruned),
    # `next_floor` the seq of the newest revision its next pruning deletes (which becomes
    # the floor): its (REVISIONS_KEPT + 1)-th oldest kept revision (NULL while it keeps
    # fewer), so pruning walks only what it deletes.
    """CREATE TABLE head (
        doc INTEGER PRIMARY KEY,
        seq INTEGER NOT NULL,
        revisions INTEGER NOT NULL,
        floor INTEGER,
        next_floor INTEGER,
        value TEXT
    )""",
    # The log: a row per accepted commit, keyed by its seq (appended at the end of the
    # tree; the newest row holds the max seq), naming its session (by number) and local
    # seq. `entries` is a JSON array with an entry [doc, prev, paths] per document the
    # commit wrote: `prev` the seq of the document's previous revision (0: none; for the
    # oldest kept one, at or below the document's floor), `paths` what it wrote (for
    # conflict checks; `0`: `[["value"]]`, `_VALUE_ONLY`); a commit that wrote none (its
    # create-only claims) has `[]`. `live` counts the entries not yet pruned (seq above
    # their document's floor): a row is deleted when pruning takes it to 0; a row that
    # never had one (a claim's) and the newest row are never deleted, so the max seq
    # never goes back.
    """CREATE TABLE log (
        seq INTEGER PRIMARY KEY,
        session INTEGER NOT NULL,
        local_seq INTEGER NOT NULL,
        live INTEGER NOT NULL,
        entries TEXT NOT NULL
    )""",
    # The rest of a commit of more than `_PART` documents: its entries sorted by document
    # number, the first `_PART` in its `log` row (whose `live` counts the commit's
    # entries in every part, so it goes last), the others in parts of at most `_PART`,
    # keyed by (seq, the part's first document): the part holding a document's entry is
    # the one with the greatest `first` at or below it, one index lookup. A walk step
    # so decodes at most `_PART` entries, however large the commit. `live` counts the
    # part's entries not yet pruned; a part is deleted when pruning takes it to 0.
    """CREATE TABLE log_part (
        seq INTEGER NOT NULL,
        first INTEGER NOT NULL,
        live INTEGER NOT NULL,
        entries TEXT NOT NULL,
        PRIMARY KEY (seq, first)
    )""",
)
_TABLES: Final = frozenset(
    {"meta", "session", "rejection", "log", "log_part", "document", "head", "claimed"}
)
_TABLES_5: Final = frozenset(
    {"meta", "session", "rejection", "revision", "document", "head", "claimed"}
)
_TABLES_4: Final = frozenset({"meta", "commit_log", "rejection", "revision", "head", "claimed"})
_TABLES_BEFORE: Final = {
    1: _TABLES_4,
    2: _TABLES_4 | {"revision_floor"},
    3: _TABLES_4,
    4: _TABLES_4,
    5: _TABLES_5,
}

_UPGRADE_1_TO_2: Final = (
    f"""CREATE TABLE revision_floor (
        space TEXT NOT NULL, doc_id TEXT NOT NULL, scope TEXT NOT NULL,
        principal TEXT NOT NULL, session TEXT NOT NULL,
        seq INTEGER NOT NULL,
        PRIMARY KEY ({_KEY_COLS})
    ) WITHOUT ROWID""",
)
_V2_JOIN: Final = " AND ".join(f"{{a}}.{c} = {{b}}.{c}" for c in KEY_COLUMNS)


def _upgrade_2_to_3(kept: int) -> tuple[str, ...]:
    """Version 2 to 3 (`kept`: REVISIONS_KEPT, for each document's `next_floor`)."""
    key_h = ", ".join(f"h.{c}" for c in KEY_COLUMNS)
    r_h, f_h = _V2_JOIN.format(a="r", b="h"), _V2_JOIN.format(a="f", b="h")
    return (
        # The version 2 tables step aside (their foreign keys and indexes go with them) ...
        "ALTER TABLE commit_log RENAME TO commit_log_2",
        "ALTER TABLE revision RENAME TO revision_2",
        "ALTER TABLE head RENAME TO head_2",
        "ALTER TABLE claimed RENAME TO claimed_2",
        "DROP INDEX IF EXISTS revision_by_seq",
        "DROP INDEX IF EXISTS head_by_seq",
        "DROP INDEX IF EXISTS claimed_by_seq",
        # ... the version 3 ones are made (meta and rejection stay) ...
        *(
            s
            for s in _SCHEMA_3
            if not s.startswith(("CREATE TABLE meta", "CREATE TABLE rejection"))
        ),
        # ... and filled: the same commits, documents, revisions, floors and claims.
        "INSERT INTO commit_log (seq, session_id, local_seq)"
        " SELECT seq, session_id, local_seq FROM commit_log_2",
        f"INSERT INTO head ({_KEY_COLS}, seq, revisions, floor, next_floor, value)"
        f" SELECT {key_h}, h.seq, (SELECT COUNT(*) FROM revision_2 r WHERE {r_h}), f.seq,"
        f" (SELECT r.seq FROM revision_2 r WHERE {r_h} ORDER BY r.seq LIMIT 1 OFFSET {kept}),"
        f" h.value FROM head_2 h LEFT JOIN revision_floor f ON {f_h} ORDER BY {key_h}",
        # A document's oldest kept revision follows its newest pruned one: the floor.
        "INSERT INTO revision (seq, doc, prev, paths)"
        " SELECT r.seq, h.doc, COALESCE(LAG(r.seq) OVER"
        f" (PARTITION BY h.doc ORDER BY r.seq), h.floor, 0), r.paths"
        f" FROM revision_2 r JOIN head h ON {r_h}",
        f"INSERT INTO claimed ({_KEY_COLS}, seq) SELECT {_KEY_COLS}, seq FROM claimed_2",
        # Children first: dropping commit_log_2 checks the foreign keys that named it.
        "DROP TABLE revision_2",
        "DROP TABLE head_2",
        "DROP TABLE claimed_2",
        "DROP TABLE revision_floor",
        "DROP TABLE commit_log_2",
    )


_UPGRADE_3_TO_4: Final = (
    # Revisions get ids in (seq, document) order, so ids keep commit order; each names
    # its document's previous one by id (the oldest kept one: 0, its pruned
    # predecessor having no id).
    "ALTER TABLE revision RENAME TO revision_3",
    next(s for s in _SCHEMA_4 if s.startswith("CREATE TABLE revision")),
    "INSERT INTO revision (id, seq, doc, prev, paths)"
    " SELECT id, seq, doc, COALESCE(LAG(id) OVER (PARTITION BY doc ORDER BY seq), 0), paths"
    " FROM (SELECT ROW_NUMBER() OVER (ORDER BY seq, doc) AS id, seq, doc, paths"
    " FROM revision_3)",
    "DROP TABLE revision_3",
    # (Lookups by document and by seq, for the upgrade only.)
    "CREATE INDEX revision_upgrade_doc ON revision (doc, seq)",
    "CREATE INDEX revision_upgrade_seq ON revision (seq, id)",
    "ALTER TABLE head ADD COLUMN rev INTEGER NOT NULL DEFAULT 0",
    "UPDATE head SET rev = COALESCE((SELECT r.id FROM revision r"
    " WHERE r.doc = head.doc AND r.seq = head.seq), 0), next_floor = (SELECT r.id"
    " FROM revision r WHERE r.doc = head.doc AND r.seq = head.next_floor)",
    # (Made again, not altered: a column added by ALTER TABLE needs a default, and
    # `first` must have none.)
    "ALTER TABLE commit_log RENAME TO commit_log_3",
    next(s for s in _SCHEMA_4 if s.startswith("CREATE TABLE commit_log")),
    "INSERT INTO commit_log (seq, session_id, local_seq, first)"
    " SELECT c.seq, c.session_id, c.local_seq, COALESCE((SELECT MIN(r.id) FROM revision r"
    " WHERE r.seq >= c.seq), (SELECT COALESCE(MAX(id), 0) + 1 FROM revision))"
    " FROM commit_log_3 c",
    "DROP TABLE commit_log_3",
    "DROP INDEX revision_upgrade_doc",
    "DROP INDEX revision_upgrade_seq",
)

_UPGRADE_4_TO_5: Final = (
    # Sessions get numbers in the order of their first commit.
    next(s for s in _SCHEMA_5 if s.startswith("CREATE TABLE session")),
    "INSERT INTO session (key) SELECT session_id FROM commit_log GROUP BY session_id"
    " ORDER BY MIN(seq)",
    # Ids are given again, in commit order, to the revisions and to a row for each
    # commit that kept none (its claims name it), whose seq has no other row to hold it.
    "CREATE INDEX revision_upgrade_seq ON revision (seq)",
    "CREATE TABLE upgrade_ids (id INTEGER PRIMARY KEY, old INTEGER, seq INTEGER NOT NULL)",
    "INSERT INTO upgrade_ids (id, old, seq) SELECT ROW_NUMBER() OVER (ORDER BY seq, old),"
    " old, seq FROM (SELECT id AS old, seq FROM revision UNION ALL SELECT NULL, c.seq"
    " FROM commit_log c WHERE NOT EXISTS (SELECT 1 FROM revision r WHERE r.seq = c.seq))",
    "CREATE INDEX upgrade_ids_old ON upgrade_ids (old)",
    "ALTER TABLE revision RENAME TO revision_4",
    next(s for s in _SCHEMA_5 if s.startswith("CREATE TABLE revision")),
    # (A `prev` naming a pruned revision has no new id: 0, as for the oldest kept one.)
    "INSERT INTO revision (id, seq, doc, prev, paths, session, local_seq)"
    " SELECT u.id, u.seq, r.doc, COALESCE((SELECT p.id FROM upgrade_ids p"
    " WHERE p.old = r.prev), 0), r.paths, s.id, c.local_seq FROM upgrade_ids u"
    " LEFT JOIN revision_4 r ON r.id = u.old JOIN commit_log c ON c.seq = u.seq"
    " JOIN session s ON s.key = c.session_id ORDER BY u.id",
    # Keys move to `document`; heads keep the rest, naming revisions by their new ids.
    "ALTER TABLE head RENAME TO head_4",
    next(s for s in _SCHEMA_5 if s.startswith("CREATE TABLE document")),
    next(s for s in _SCHEMA_5 if s.startswith("CREATE TABLE head")),
    f"INSERT INTO document (doc, {_KEY_COLS}) SELECT doc, {_KEY_COLS} FROM head_4",
    "INSERT INTO head (doc, seq, revisions, floor, next_floor, rev, value)"
    " SELECT h.doc, h.seq, h.revisions, h.floor,"
    " (SELECT u.id FROM upgrade_ids u WHERE u.old = h.next_floor),"
    " COALESCE((SELECT u.id FROM upgrade_ids u WHERE u.old = h.rev), 0), h.value"
    " FROM head_4 h",
    "DROP TABLE head_4",
    "DROP TABLE revision_4",
    "DROP TABLE upgrade_ids",
    "DROP TABLE commit_log",
    # (Only pruning commit_log rows used it.)
    "DROP INDEX claimed_by_seq",
)

_PART: Final = 128
"""Entries per log row at most (`log`, then `log_part`): what one walk step decodes."""


def _upgrade_5_to_6(part: int) -> tuple[str, ...]:
    # A commit's revision rows become one log row: its seq, session and local seq, and an
    # entry [doc, the previous revision's seq, paths] per document (a `prev` naming a
    # pruned revision has no seq: 0, at or below the document's floor, as for the oldest
    # kept one); a commit that wrote none (its claims) keeps its row, with no entry. A
    # commit of more than `part` documents keeps its first `part` (by document number)
    # there and the others in parts of `part` (`log_part`), as `_apply` writes them.
    numbered = (
        "(SELECT r.seq, r.session, r.local_seq, r.doc, json_array(r.doc, COALESCE(p.seq, 0),"
        " json(r.paths)) AS entry, ROW_NUMBER() OVER (PARTITION BY r.seq ORDER BY r.doc) - 1"
        " AS n FROM revision r LEFT JOIN revision p ON p.id = r.prev)"
    )
    return (
        next(s for s in _SCHEMA if s.startswith("CREATE TABLE log (")),
        next(s for s in _SCHEMA if s.startswith("CREATE TABLE log_part")),
        "INSERT INTO log (seq, session, local_seq, live, entries) SELECT seq, MIN(session),"
        " MIN(local_seq), COUNT(doc), json_group_array(json(entry))"
        f" FILTER (WHERE doc IS NOT NULL AND n < {part}) FROM {numbered}"
        " GROUP BY seq ORDER BY seq",
        "INSERT INTO log_part (seq, first, live, entries) SELECT seq, MIN(doc), COUNT(*),"
        f" json_group_array(json(entry)) FROM {numbered} WHERE doc IS NOT NULL"
        f" AND n >= {part} GROUP BY seq, n / {part} ORDER BY seq, n / {part}",
        # Heads name their next floor by seq, and no longer their last revision's id.
        "ALTER TABLE head RENAME TO head_5",
        next(s for s in _SCHEMA if s.startswith("CREATE TABLE head")),
        "INSERT INTO head (doc, seq, revisions, floor, next_floor, value)"
        " SELECT h.doc, h.seq, h.revisions, h.floor,"
        " (SELECT r.seq FROM revision r WHERE r.id = h.next_floor), h.value FROM head_5 h",
        "DROP TABLE head_5",
        "DROP TABLE revision",
    )


_Change = tuple[int, dict[DocKey, Value]]
_Head = tuple[int, int, int, "str | None"]
"""A head row as a commit needs it: (doc number, last revision's seq, kept revisions,
value)."""
_Known = tuple[int, int, int, Value, bool]
"""A head row as the writer remembers it (`SQLiteStore._known`): (doc number, seq, kept
revisions, decoded value, True only if that value is a `plain_dict`: its stored text is
`msgspec`'s encoding of it, and setting a plain field keeps it so; False may be stale, as
when the only field that was not plain is removed)."""
_Entry = tuple[int, int, "list[Path] | tuple[Path] | int"]
"""A log row's entry for one document: (doc number, previous revision's seq, paths, or
`_VALUE_ONLY` for `[["value"]]`)."""
_Staged = tuple[
    list[Value],
    list[int],
    dict[DocKey, _Known],
    list[_Entry],
    list[object],
    list[int],
]
"""What a commit writes, ready for its statements: each document's new value and the seq
of the state it applies on (0: never written), in the order of their first writes (an
`Acceptance`'s lists), its head row as the commit leaves it (before
pruning), the log row's entries, the head updates (doc number, stored value; flat) and
the documents due for pruning."""
_CHUNK: Final = 150
"""Documents per statement that reads many at once (at most 6 parameters each: under
the 999 an older SQLite allows)."""

# One commit's head updates, one statement (`_execute_rows`). They name the commit's seq
# ?1 and REVISIONS_KEPT ?2 before their rows (bound, not written into the text: tests
# shrink the window); the write that makes a document's kept revisions REVISIONS_KEPT + 1
# is the newest its next pruning deletes.
_NO_NEWER: Final = " AND NOT EXISTS (SELECT 1 FROM log WHERE seq >= ?1)"
"""No log row has the commit's seq or a newer one: no other writer committed since the max
seq the commit's writer knows (seqs are gap-free and the newest row is never deleted). The
head updates say so (`SQLiteStore._apply`), so the usual commit reads neither the max seq
nor `PRAGMA data_version` (a statement of its own: about 1 us)."""
_UPDATE_HEADS: Final = (
    "INSERT INTO head (doc, seq, revisions, value) SELECT v.column1, ?1, ?2, v.column2"
    " FROM (VALUES {rows}) AS v WHERE v.column1 IS NOT NULL ON CONFLICT (doc) DO UPDATE"
    " SET next_floor = CASE revisions WHEN ?2 THEN ?1 ELSE next_floor END, seq = ?1,"
    " revisions = revisions + 1, value = excluded.value WHERE true" + _NO_NEWER
)
"""The heads of a commit of several documents, as an upsert whose every row conflicts
(a head row is made before any commit names its document, `_rows`, and never deleted):
SQLite reads its VALUES as they are consumed, where `UPDATE head ... FROM (VALUES ...)`
copied them to a temporary table first (100 rows: the statement about 43 against 58 us
in the store; BEGIN to COMMIT in a micro benchmark 55 to 60 against 87 to 100). The
padding rows (NULLs) are skipped. (`?1` and `?2` are named before the rows, so that the
rows' parameters are numbered after them.)"""
_UPDATE_HEAD: Final = (
    "UPDATE head SET next_floor = CASE revisions WHEN ?2 THEN ?1 ELSE next_floor END,"
    " seq = ?1, revisions = revisions + 1, value = ?4 WHERE doc = ?3" + _NO_NEWER
)
_INSERT_LOG: Final = (
    "INSERT INTO log (seq, session, local_seq, live, entries) VALUES (?, ?, ?, ?, ?)"
)
_INSERT_LOG_PART: Final = "INSERT INTO log_part (seq, first, live, entries) VALUES (?, ?, ?, ?)"
_by_doc = operator.itemgetter(0)
_PART_OF: Final = (
    "SELECT first, live, entries FROM log_part WHERE seq = ? AND first <= ?"
    " ORDER BY first DESC LIMIT 1"
)
"""The part of the commit at seq ?1 holding document ?2's entry, if not its `log` row."""
_PRUNED_HEADS: Final = (
    "SELECT doc, seq, revisions, floor, next_floor FROM head WHERE doc IN ({rows})"
)
# A pruned document's kept count and floor (each document's own values).
_SET_FLOORS: Final = (
    "UPDATE head SET revisions = v.column2, floor = v.column3, next_floor = NULL"
    " FROM (VALUES {rows}) AS v WHERE head.doc = v.column1"
)
# Log rows pruning left some entries live (seq, entries still live), and those it left
# none (seq).
_SET_LIVE: Final = (
    "UPDATE log SET live = v.column2 FROM (VALUES {rows}) AS v WHERE log.seq = v.column1"
)
_SET_PART_LIVE: Final = (
    "UPDATE log_part SET live = v.column3 FROM (VALUES {rows}) AS v"
    " WHERE log_part.seq = v.column1 AND log_part.first = v.column2"
)
_DELETE_PARTS: Final = "DELETE FROM log_part WHERE (seq, first) IN (VALUES {rows})"
_DELETE_LOG_RANGE: Final = "DELETE FROM log WHERE seq BETWEEN ? AND ?"
_DELETE_LOG_ROWS: Final = "DELETE FROM log WHERE seq IN (SELECT column1 FROM (VALUES {rows}))"
_k = key_params

_KNOWN_KEPT: Final = 1024
"""Documents whose head row the writer keeps (`SQLiteStore._known`)."""
_WRITTEN_KEPT: Final = 1 << 15
"""Entries (and rows) of the writer's own newest log rows whose documents it keeps
(`SQLiteStore._written`): 324 commits of 100 documents, past the 2 * REVISIONS_KEPT + 1
a document written by every commit prunes back to; 8 bytes each, or less when
consecutive commits write the same documents (then they share one list)."""
_WRITTEN_FROM: Final = 8
"""Log rows of at least this many entries have their documents kept (`_written`): a
smaller one is decoded in less than keeping it costs every commit."""

_MAX_ROWS: Final = 128
"""Rows per multi-row statement (`_execute_rows`): at most 4 parameters a row and 3
shared (515), under the 999 an older SQLite allows."""


@functools.cache
def _rows_sql(template: str, row: str, n: int) -> str:
    """`template` with `{rows}` replaced by `n` copies of `row` (the texts are few: `n` is
    a power of two, so each template prepares at most log2(_MAX_ROWS) + 1 statements, or
    for the heads' update a multiple of 8: at most 23)."""
    return template.format(rows=", ".join([row] * n))


def _execute_rows(
    conn: sqlite3.Connection,
    template: str,
    row: str,
    params: list[object],
    *,
    width: int,
    first: tuple[object, ...] = (),
    fine: bool = False,
) -> list[Any]:
    """`template` (its `{rows}` a list of `row`s) once per chunk of at most `_MAX_ROWS` of
    the rows in `params` (flat, `width` parameters a row): one statement for up to
    `_MAX_ROWS` rows where `executemany` steps one statement per row. SQLite does the
    same row work; the cost of binding, stepping and resetting from Python per row goes.
    A chunk is padded to a power of two with rows of NULLs, so only a few statement texts
    are ever prepared: every template is written so that a NULL row matches, writes and
    returns nothing (a NULL key equals nothing; `_INSERT_REVISIONS` skips a NULL id).
    Padding costs binding the NULLs; splitting 100 rows into 64 + 32 + 4 cost two more
    statements. `fine` pads past 8 rows to a multiple of 8 instead (at most 23 texts,
    for the heads every commit updates: a padding row of its `UPDATE ... FROM` cost
    about 0.6 us, 16 us of a 100-document commit padded to 128). `first` binds `?1`...
    once per statement, before the rows (the commit's seq). Returns what the statements
    return."""
    n = len(params) // width
    out: list[Any] = []
    start = 0
    while n:
        take = min(_MAX_ROWS, n)
        size = (take + 7) & ~7 if fine and take > 8 else 1 << (take - 1).bit_length()
        end = start + take * width
        chunk = params if start == 0 and end == len(params) else params[start:end]
        if size != take or first:
            chunk = [*first, *chunk, *_NULLS[: (size - take) * width]]
        out += conn.execute(_rows_sql(template, row, size), chunk)
        start, n = end, n - take
    return out


_NULLS: Final = (None,) * (_MAX_ROWS * 4)
"""Padding for `_execute_rows` (a chunk pads fewer than `_MAX_ROWS` rows of at most 4)."""


_decode_stubs = msgspec.json.Decoder(list[tuple[int, int, msgspec.Raw]]).decode
"""A log row's entries with their paths left undecoded."""
_decode_paths = msgspec.json.Decoder(list[list[str | int]] | int).decode
_VALUE_ONLY: Final = 0
"""An entry's paths when they are `[["value"]]` (one write of a cell's whole value, path
`_VALUE_PATH`: the usual entry; format 7)."""
_VALUE_PATH: Final = ("value",)


def _paths_of(raw: msgspec.Raw) -> tuple[Path, ...]:
    """The paths of an entry (`_decode_stubs` leaves them undecoded), as a `Revision`
    names them."""
    paths = _decode_paths(raw)
    if isinstance(paths, int):
        if paths != _VALUE_ONLY:
            raise CorruptStoreError(f"a log entry's paths are {paths!r}, not a list of paths")
        return (_VALUE_PATH,)
    return tuple(tuple(p) for p in paths)


_encode = msgspec.json.Encoder().encode

_Logged = tuple[str, int, dict[int, tuple[int, msgspec.Raw]]]
"""A log row as a conflict check reads it: (session key, local seq, each document's
(previous revision's seq, undecoded paths))."""
_LOGGED_KEPT: Final = 1 << 14
"""Entries of large log rows a store keeps decoded (`SQLiteStore._logged`): about 210 bytes
each (measured with `tracemalloc`), so at most about 3.4 MB; two setups of 8,000
documents fit. Past it, a walk step decodes one row or part again: at most `_PART`."""
_LOGGED_FROM: Final = 64
"""Log rows and parts of at least this many entries are kept decoded once read."""


def _errorname(exc: sqlite3.Error) -> str:
    return str(getattr(exc, "sqlite_errorname", ""))


def _is_corruption(exc: sqlite3.Error) -> bool:
    return _errorname(exc).startswith(("SQLITE_NOTADB", "SQLITE_CORRUPT"))


def _is_read_only(exc: sqlite3.Error) -> bool:
    return _errorname(exc).startswith("SQLITE_READONLY")


_TRANSIENT: Final = (
    "SQLITE_BUSY",
    "SQLITE_LOCKED",
    "SQLITE_IOERR",
    "SQLITE_FULL",
    "SQLITE_NOMEM",
    "SQLITE_INTERRUPT",
    "SQLITE_PROTOCOL",
)
"""SQLite errors a later attempt can get past (another writer's lock, a full disk freed):
a commit failing with one is LIVENESS. Every other error (corruption, a read-only file,
anything unknown) is TERMINAL: `edit_with_retry` must not retry what fails again."""


def _is_transient(exc: sqlite3.Error) -> bool:
    return _errorname(exc).startswith(_TRANSIENT)


def _read_only_error(file: str, exc: sqlite3.Error) -> StoreError:
    return StoreError(
        f"{file} is read-only here ({exc}): SQLiteStore writes to its file and creates"
        f" {os.path.basename(file)}-wal and -shm beside it; open a writable copy"
    )


def _inspect(file: str) -> int:
    """Check `file` before anything writes to it: its format version, 0 if new. Read-only."""
    try:
        size = os.path.getsize(file)
    except FileNotFoundError:
        return 0
    except OSError as exc:
        raise StoreError(f"cannot open store {file}: {exc}") from exc
    if size == 0:
        return 0
    try:
        with open(file, "rb") as f:
            header = f.read(len(_SQLITE_HEADER))
    except OSError as exc:
        raise StoreError(f"cannot open store {file}: {exc}") from exc
    if header != _SQLITE_HEADER:
        raise CorruptStoreError(
            f"{file} is not a cellweave store: it is not a SQLite database (it starts with"
            f" {header!r}); the file was left untouched"
        )
    # Read-only: a foreign database is never journaled, converted to WAL or checkpointed.
    uri = pathlib.Path(file).as_uri() + "?mode=ro"
    try:
        conn = sqlite3.connect(uri, uri=True, isolation_level=None, timeout=_BUSY_TIMEOUT_S)
    except sqlite3.Error as exc:
        raise StoreError(f"cannot open store {file}: {exc}") from exc
    try:
        return _validate(conn, file)
    except sqlite3.Error as exc:
        if _is_corruption(exc):
            raise CorruptStoreError(
                f"{file} is not a usable SQLite database ({exc}); the file was left untouched"
            ) from exc
        if _is_read_only(exc):
            raise _read_only_error(file, exc) from exc
        raise StoreError(f"cannot read store {file}: {exc}") from exc
    finally:
        conn.close()


def _validate(conn: sqlite3.Connection, file: str) -> int:
    """0 for a database without any schema, our format version for ours; raises otherwise."""
    names = [row[0] for row in conn.execute("SELECT name FROM sqlite_master")]
    if not names:
        return 0
    tables = frozenset(
        row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
    )
    not_ours = (
        f"{file} is a SQLite database but not a cellweave store (no {FORMAT!r} format marker;"
        f" it has {', '.join(sorted(names)[:8])}); the file was left untouched"
    )
    if "meta" not in tables:
        raise CorruptStoreError(not_ours)
    try:
        meta = {str(k): v for k, v in conn.execute("SELECT key, value FROM meta")}
    except sqlite3.OperationalError as exc:  # someone else's table called meta
        raise CorruptStoreError(not_ours) from exc
    if meta.get("format") != FORMAT:
        raise CorruptStoreError(not_ours)
    raw = meta.get("version")
    try:
        version = int(raw)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise CorruptStoreError(
            f"{file}: cellweave store with an unreadable format version {raw!r};"
            " the file was left untouched"
        ) from None
    if version > VERSION:
        raise CorruptStoreError(
            f"{file} was written by a newer cellweave (store format version {version}; this"
            f" version reads {VERSION}); the file was left untouched"
        )
    if version < 1:
        raise CorruptStoreError(
            f"{file}: invalid store format version {version}; the file was left untouched"
        )
    missing = _TABLES_BEFORE.get(version, _TABLES) - tables
    if missing:
        raise CorruptStoreError(
            f"{file}: cellweave store is damaged: missing tables {sorted(missing)};"
            " the file was left untouched"
        )
    return version


def _rollback(conn: sqlite3.Connection) -> None:
    """Roll back if a transaction is open; a damaged file may refuse even that, and the
    error that made us roll back is the one to report."""
    if conn.in_transaction:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")


def _answer_loads(
    listener: SessionListener,
    answers: list[tuple[DocKey, DocState | None, BaseException | None]],
) -> None:
    """Hand `answers` to `listener` in order; if one raises, the rest go first in its
    mailbox (as separate deliveries would have run) and the error propagates."""
    for i, (key, state, error) in enumerate(answers):
        try:
            listener.on_loaded(key, state, error)
        except BaseException:
            rest = answers[i + 1 :]
            if rest:
                listener.mailbox.post_front(functools.partial(_answer_loads, listener, rest))
            raise


class SQLiteStore(WriterStore):
    """A durable store in one SQLite file; several store objects and processes may share it.

    `SQLiteStore(path, synchronous="FULL", poll_interval=0.05)`. `poll_interval`
    is how often (seconds) other writers' commits are looked for while a
    session is connected; 0 disables the polling thread (call `poll()`).
    """

    helps_waiters = True

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        synchronous: str = "FULL",
        poll_interval: float = 0.05,
    ) -> None:
        super().__init__()
        where = "SQLiteStore()"
        if not isinstance(path, (str, os.PathLike)):
            raise bad_arg(path, where=where, name="path", accepts="a file path (str or Path)")
        modes = f"one of {', '.join(map(repr, _SYNCHRONOUS))}"
        if not isinstance(synchronous, str):
            raise bad_arg(synchronous, where=where, name="synchronous", accepts=modes)
        if synchronous.upper() not in _SYNCHRONOUS:
            raise bad_arg(synchronous, where=where, name="synchronous", accepts=modes, kind="value")
        mode = synchronous.upper()
        seconds = "a finite number of seconds >= 0"
        if isinstance(poll_interval, bool) or not isinstance(poll_interval, (int, float)):
            raise bad_arg(poll_interval, where=where, name="poll_interval", accepts=seconds)
        if not math.isfinite(poll_interval) or poll_interval < 0:
            raise bad_arg(
                poll_interval, where=where, name="poll_interval", accepts=seconds, kind="value"
            )
        if not isinstance(os.fspath(path), str):
            raise bad_arg(path, where=where, name="path", accepts="a file path (str or Path)")
        if os.fspath(path) in ("", ":memory:"):
            raise bad_arg(
                path,
                where=where,
                name="path",
                accepts="a file path (for memory, use MemoryStore)",
                kind="value",
            )
        self.path = pathlib.Path(path)
        self.synchronous = mode
        self.poll_interval = float(poll_interval)
        self.last_poll_error: BaseException | None = None
        """The last error the polling thread hit (it keeps polling; `poll()` raises directly)."""
        self._file = os.path.abspath(self.path)

        self._read_lock = threading.RLock()
        self._load_batches: dict[int, tuple[SessionListener, list[DocKey]]] = {}
        """Per session (by `id`): the loads asked for whose batch has not run (under
        `_read_lock`)."""
        self._poller: threading.Thread | None = None
        self._stop = threading.Event()
        self._sessions = SessionVerdicts()
        """Per session: its key in the file, and which of its commits have a verdict."""
        self._known: dict[DocKey, _Known] = {}
        """The head rows this store's writer last committed, of up to `_KNOWN_KEPT`
        documents (`_Known`; those first remembered longest ago go first), true of the
        file while its max seq is `_known_top` (no other writer has committed since: any
        commit raises it). A commit writing those documents then reads nor decodes no
        head row. Entries are made only once COMMIT returned; values are never changed
        in place.
        Under `_write_lock`."""
        self._known_top = -1
        self._known_version = -1
        """The writer connection's `PRAGMA data_version` when `_known_top` was last true:
        while it reads the same, no other connection has committed (this one's own
        commits do not change it), so `_known` and `_known_top` still hold."""
        self._session_numbers: dict[str, int] = {}
        """Session key: its number in the `session` table (once a commit that made the
        row returned from COMMIT). Under `_write_lock`."""
        self._logged: dict[tuple[int, int], _Logged] = {}
        """Large log rows and parts, decoded, by (seq, part's first document; 0 for the
        `log` row) (`_logged_row`; at most about `_LOGGED_KEPT` entries, the oldest read
        first out). Under `_lock`."""
        self._logged_entries = 0
        self._written: dict[int, list[Any]] = {}
        """The documents (numbers) of the log rows of at least `_WRITTEN_FROM` entries
        this store's writer committed, by seq (`_remember`; the newest, at most
        `_WRITTEN_KEPT` entries; a commit writing the same documents as the one before
        shares its list): what the usual pruning counts in a stretch of rows without
        decoding their entries. A row never changes what it says (a seq is never
        reused), so what is kept stays true while the row exists. Under `_write_lock`."""
        self._written_entries = 0
        self._written_last: list[Any] = []
        self._committing: tuple[int, str, Acceptance] | None = None
        """(seq, session key, acceptance) of the commit whose COMMIT is being run, from
        just before it; for `_interrupted` to tell whether it was applied. Under
        `_write_lock`."""

        _inspect(self._file)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._wconn: sqlite3.Connection | None = None
        self._rconn: sqlite3.Connection | None = None
        try:
            self._wconn = self._open_connection()
            self._wcur = self._wconn.cursor()
            """The writer connection's cursor for a commit's own statements (`_evaluate`,
            `_commit_one`): one `execute` on it costs about 0.15 us less than on the
            connection, which makes a cursor each time."""
            try:
                journal = self._wconn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            except sqlite3.Error as exc:
                raise self._wrap(exc, "cannot enable WAL") from exc
            if str(journal).lower() != "wal":
                raise StoreError(
                    f"{self._file}: SQLite refused WAL journal mode (got {journal!r});"
                    " SQLiteStore needs a local file system"
                )
            self._init_schema(self._wconn)
            self.claims: SQLClaimTable = SQLClaimTable(
                "claims", "document", self._in_write, postgres=False
            )
            """The page claims (`cells.ClaimTable`): which process runs each open page."""
            self._rconn = self._open_connection()
            try:
                # data_version before max(seq): a commit landing in between is both
                # counted as seen and noticed by the next poll(), never lost.
                self._data_version = self._rconn.execute("PRAGMA data_version").fetchone()[0]
                self._delivered = self._max_seq(self._rconn)
                """Every seq up to `_delivered` was fanned out to this store's sessions (or
                predates it)."""
            except sqlite3.Error as exc:
                raise self._wrap(exc, "cannot read the store") from exc
        except BaseException:
            for conn in (self._wconn, self._rconn):
                if conn is not None:
                    conn.close()
            raise

    # ------------------------------------------------------------------ plumbing
    def __repr__(self) -> str:
        state = " closed" if self.closed else ""
        return f"<SQLiteStore {str(self.path)!r} seq={self._delivered}{state}>"

    def __enter__(self) -> SQLiteStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _open_connection(self) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(
                self._file,
                timeout=_BUSY_TIMEOUT_S,
                isolation_level=None,  # we issue BEGIN / COMMIT ourselves
                check_same_thread=False,  # every use is under _write_lock or _read_lock
            )
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open store {self._file}: {exc}") from exc
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(_BUSY_TIMEOUT_S * 1000)}")
            conn.execute("PRAGMA foreign_keys = ON")
            conn.execute(f"PRAGMA synchronous = {self.synchronous}")
        except BaseException as exc:
            conn.close()
            if isinstance(exc, sqlite3.Error):
                raise self._wrap(exc, "cannot open the store") from exc
            raise
        return conn

    def _wrap(self, exc: sqlite3.Error, what: str) -> StoreError:
        """The cellweave error for a `sqlite3` error: none of those reaches a caller raw."""
        if _is_corruption(exc):
            return CorruptStoreError(f"{self._file}: {what}: the file is damaged ({exc})")
        if _is_read_only(exc):
            return _read_only_error(self._file, exc)
        return StoreError(f"{self._file}: {what}: {exc}")

    def _init_schema(self, conn: sqlite3.Connection) -> None:
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                # Again, under the write lock: another process may have
                # initialized (or claimed) the file since `_inspect`.
                version = _validate(conn, self._file)
                if version == 0:
                    for stmt in _SCHEMA:
                        conn.execute(stmt)
                    conn.executemany(
                        "INSERT INTO meta (key, value) VALUES (?, ?)",
                        [("format", FORMAT), ("version", str(VERSION))],
                    )
                elif version < VERSION:
                    self._upgrade(conn, version)
                else:
                    # A write that changes nothing: a file this process may read but not
                    # write is refused here, at open, rather than failing every commit.
                    conn.execute("UPDATE meta SET value = value WHERE key = 'format'")
                # The page claims (any version: an older file gains the table).
                for stmt in claims_schema("claims", postgres=False):
                    conn.execute(stmt)
                conn.execute("COMMIT")
            except BaseException:
                _rollback(conn)
                raise
        except sqlite3.Error as exc:
            raise self._wrap(exc, "cannot initialize the store") from exc

    def _upgrade(self, conn: sqlite3.Connection, version: int) -> None:
        """Bring a version 1 to 6 file to `VERSION`, inside the caller's transaction (so an
        interrupted upgrade leaves the old file as it was). Every commit, document,
        revision, floor and claim is kept; only the layout changes."""
        steps = {
            1: _UPGRADE_1_TO_2,
            2: _upgrade_2_to_3(REVISIONS_KEPT),
            3: _UPGRADE_3_TO_4,
            4: _UPGRADE_4_TO_5,
            5: _upgrade_5_to_6(_PART),
            6: (),  # (version 7 reads version 6's entries as they are)
        }
        for step in range(version, VERSION):
            for stmt in steps[step]:
                conn.execute(stmt)
        conn.execute("UPDATE meta SET value = ? WHERE key = 'version'", (str(VERSION),))

    def _in_write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """`fn(conn)` in a write transaction of its own (the claims' statements)."""
        with self._write_lock:
            conn = self._writer_conn()
            try:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    out = fn(conn)
                    conn.execute("COMMIT")
                except BaseException:
                    _rollback(conn)
                    raise
            except sqlite3.Error as exc:
                raise self._wrap(exc, "claims statement failed") from exc
            return out

    @staticmethod
    def _max_seq(conn: sqlite3.Connection) -> int:
        """The newest log row's seq, which is never pruned. O(log n)."""
        row = conn.execute("SELECT seq FROM log ORDER BY seq DESC LIMIT 1").fetchone()
        return 0 if row is None else int(row[0])

    def _writer_conn(self) -> sqlite3.Connection:
        if self._wconn is None:
            raise StoreError(f"SQLiteStore {self._file} is closed")
        return self._wconn

    def _reader_conn(self) -> sqlite3.Connection:
        if self._rconn is None:
            raise StoreError(f"SQLiteStore {self._file} is closed")
        return self._rconn

    def _decode(self, raw: str | None, key: DocKey) -> Value:
        return decode_value(self._file, raw, key)

    def _key_of(self, space: str, doc_id: str, scope: str, principal: str, session: str) -> DocKey:
        return key_from_row(self._file, space, doc_id, scope, principal, session)

    @property
    def seq(self) -> int:
        """The highest accepted sequence number in the file (any writer).  O(1)."""
        with self._read_lock:
            try:
                return self._max_seq(self._reader_conn())
            except sqlite3.Error as exc:
                raise self._wrap(exc, "cannot read the last seq") from exc

    # ------------------------------------------------------------------ sessions
    def connect(self, listener: SessionListener, session_id: str | None = None) -> str:
        sid = super().connect(listener, session_id)
        with self._lock:
            # Session ids repeat across processes (and on reconnect); what the file
            # records is qualified per connection, so resolutions never mix.
            self._sessions.new_key(sid)
            if self.poll_interval > 0 and self._poller is None and not self.closed:
                self._poller = threading.Thread(
                    target=self._poll_loop, name=f"cellweave-sqlite-poll {self._file}", daemon=True
                )
                self._poller.start()
        return sid

    def _session_key(self, session_id: str) -> str:
        return self._sessions.key(session_id)

    # ------------------------------------------------------------------ reads
    def _read(self, key: DocKey) -> DocState:
        row = self._read_row(key)
        if row is None:
            return NO_STATE
        return DocState(row[0], self._decode(row[1], key))

    def _deliver_load(self, listener: SessionListener, key: DocKey) -> None:
        """Queue `key` in `listener`'s batch; the first of a batch posts the step that
        reads them all (`_load_batch`)."""
        with self._read_lock:
            batch = self._load_batches.get(id(listener))
            if batch is not None:
                batch[1].append(key)
                return
            self._load_batches[id(listener)] = (listener, [key])
        listener.mailbox.post(lambda: self._load_batch(listener))

    def _load_batch(self, listener: SessionListener) -> None:
        """On `listener`'s mailbox: read every load of its batch (one statement per chunk)
        and answer each, in the order asked. A failed read answers the documents it
        was for with the error; one unreadable value fails its own document only."""
        with self._read_lock:
            keys = self._load_batches.pop(id(listener))[1]
        answers: list[tuple[DocKey, DocState | None, BaseException | None]] = []
        for start in range(0, len(keys), _CHUNK):
            chunk = keys[start : start + _CHUNK]
            try:
                rows = self._rows_of(chunk)
            except StoreError as exc:
                answers.extend((key, None, exc) for key in chunk)
                continue
            for key in chunk:
                row = rows.get(key)
                if row is None:
                    answers.append((key, NO_STATE, None))
                    continue
                try:
                    answers.append((key, DocState(row[0], self._decode(row[1], key)), None))
                except Exception as exc:  # a corrupt value reaches its waiter
                    answers.append((key, None, exc))
        _answer_loads(listener, answers)

    def _rows_of(self, keys: list[DocKey]) -> dict[DocKey, tuple[int, str | None]]:
        """(seq, stored text) of each of `keys` that has a head row, in one statement."""
        if len(keys) == 1:
            state = self._read_row(keys[0])
            return {} if state is None else {keys[0]: state}
        values = ", ".join(["(?, ?, ?, ?, ?, ?)"] * len(keys))
        with self._read_lock:
            try:
                rows = (
                    self._reader_conn()
                    .execute(
                        f"WITH k (n, {_KEY_COLS}) AS (VALUES {values})"
                        f" SELECT k.n, h.seq, h.value FROM {_HEADS_OF_KEYS}",
                        [p for n, key in enumerate(keys) for p in (n, *_k(key))],
                    )
                    .fetchall()
                )
            except sqlite3.Error as exc:
                raise self._wrap(exc, f"cannot read {len(keys)} documents") from exc
        return {keys[n]: (int(seq), raw) for n, seq, raw in rows}

    def _read_row(self, key: DocKey) -> tuple[int, str | None] | None:
        with self._read_lock:
            try:
                row = (
                    self._reader_conn()
                    .execute(f"SELECT h.seq, h.value FROM {_HEAD_OF_KEY}", _k(key))
                    .fetchone()
                )
            except sqlite3.Error as exc:
                raise self._wrap(exc, f"cannot read {key}") from exc
        return None if row is None else (int(row[0]), row[1])

    # ------------------------------------------------------------------ validation callbacks
    def _known_revisions_since(
        self, conn: sqlite3.Connection, session_id: str, session_key: str, key: DocKey, seq: int
    ) -> list[Revision]:
        """`_revisions_since`, answered without a query for a document whose head row this
        writer remembers at a seq no newer than the basis (the usual read: of a document
        this writer committed and nobody wrote since). Only inside `_evaluate`, after it
        checked that no other writer committed since `_known` was remembered."""
        got = self._known.get(key)
        if got is not None and got[1] <= seq:
            return []
        return self._revisions_since(conn, session_id, session_key, key, seq)

    def _validate(
        self, conn: sqlite3.Connection, request: CommitRequest, session_key: str
    ) -> CommitRejected | None:
        """`request`'s fence check, then `validate_commit` answered from the file (and from
        `_known`, which `_evaluate` checked still holds)."""
        if request.fence is not None:
            fenced = self.claims.fence_error(conn, request.fence)
            if fenced is not None:
                return fenced
        return validate_commit(
            request,
            revisions_since=functools.partial(
                self._known_revisions_since, conn, request.session_id, session_key
            ),
            resolution=lambda _sid, local_seq: self._resolution(session_key, local_seq),
            ever_written=functools.partial(self._ever_written, conn),
        )

    def _plainly_valid(self, request: CommitRequest) -> bool:
        """Whether `validate_commit` surely finds nothing against `request`, told without
        calling it: no fence, dependency or create-only key, and every read of a document
        whose head row this writer remembers at a seq no newer than the read's basis
        (`_known_revisions_since` would answer no revision for each). The usual commit of
        a file's only writer; any other goes through `validate_commit`. Only inside
        `_evaluate`, after it checked that `_known` still holds, or before the commit's
        head update checks it (`_NO_NEWER`: if it no longer holds, nothing is written
        and the commit is validated again the general way)."""
        if request.deps or request.create_only or request.fence is not None:
            return False
        known = self._known
        for claim in request.reads:
            got = known.get(claim.key)
            if got is None or got[1] > claim.basis_seq:
                return False
        return True

    def _revisions_since(
        self, conn: sqlite3.Connection, session_id: str, session_key: str, key: DocKey, seq: int
    ) -> list[Revision]:
        head = conn.execute(f"SELECT h.doc, h.seq, h.floor FROM {_HEAD_OF_KEY}", _k(key)).fetchone()
        if head is None or head[1] <= seq:
            return []  # not written since the basis (the usual case): one index lookup
        doc, last, floor = head
        if floor is not None and seq < floor:
            return [pruned_revision(int(floor))]
        # The revisions after the basis, walked back from the head's: each log row's
        # entry names the document's revision before it (one primary-key lookup per
        # revision, whatever else was committed). All are above the floor: kept.
        out: list[Revision] = []
        at = int(last)
        while at > seq:
            logged = self._logged_row(conn, at, doc)
            entry = None if logged is None else logged[2].get(doc)
            if logged is None or entry is None:
                raise InternalError(
                    f"document {doc}'s revision at seq {at} (above its floor {floor}) has no"
                    " log entry (this is a bug)"
                )
            sess, local_seq, _ = logged
            # Only the request's own session may match `request.session_id`.
            own = session_id if sess == session_key else sess
            paths = _paths_of(entry[1])
            out.append(Revision(at, own, local_seq, paths))
            at = entry[0]
        out.reverse()
        return out

    def _logged_row(self, conn: sqlite3.Connection, seq: int, doc: int) -> _Logged | None:
        """The log row at `seq`, with the entries of its part holding `doc`'s entry (the
        row's own, or a `log_part` row's: at most `_PART`; None: there is no row at
        `seq`). A large one is kept decoded once read (a conflict walk through a large
        commit, such as a setup, would decode a part's entries at every step): a row
        never changes what it says (a seq is never reused; pruning only counts its
        entries down or deletes it), so what is kept stays true."""
        logged = self._logged.get((seq, 0))
        if logged is None:
            row = conn.execute(
                "SELECT s.key, l.local_seq, l.entries FROM log l"
                " JOIN session s ON s.id = l.session WHERE l.seq = ?",
                (seq,),
            ).fetchone()
            if row is None:
                return None
            logged = self._keep_logged((seq, 0), str(row[0]), int(row[1]), row[2])
        if doc in logged[2]:
            return logged
        part = conn.execute(_PART_OF, (seq, doc)).fetchone()
        if part is None:
            return logged  # (no entry: the caller says so)
        key = (seq, int(part[0]))
        return self._logged.get(key) or self._keep_logged(key, logged[0], logged[1], part[2])

    def _keep_logged(
        self, key: tuple[int, int], session: str, local_seq: int, text: str
    ) -> _Logged:
        """A log row's (or part's) decoded entries, kept when large (at most about
        `_LOGGED_KEPT` entries, the oldest read first out)."""
        entries = {doc: (prev, paths) for doc, prev, paths in _decode_stubs(text)}
        logged = (session, local_seq, entries)
        if len(entries) >= _LOGGED_FROM:
            with self._lock:
                kept = self._logged
                kept[key] = logged
                self._logged_entries += len(entries)
                while self._logged_entries > _LOGGED_KEPT and len(kept) > 1:
                    self._logged_entries -= len(kept.pop(next(iter(kept)))[2])
        return logged

    def _resolution(self, session_key: str, local_seq: int) -> int | bool | None:
        # Only this store object evaluates commits of its session keys, so its memory
        # knows every verdict they got (the file need not keep a row per commit).
        return self._sessions.resolution(session_key, local_seq)

    def _resolve(self, session_key: str, local_seq: int, *, rejected: bool) -> None:
        """Remember a verdict (once it is durable). Under `_write_lock`."""
        self._sessions.resolve(session_key, local_seq, rejected=rejected)

    @staticmethod
    def _ever_written(conn: sqlite3.Connection, key: DocKey) -> bool:
        row = conn.execute(
            f"SELECT EXISTS (SELECT 1 FROM document WHERE {_KEY_MATCH})"
            f" OR EXISTS (SELECT 1 FROM claimed WHERE {_KEY_MATCH})",
            _k(key) * 2,
        ).fetchone()
        return bool(row[0])

    # ------------------------------------------------------------------ commits
    def _writer_name(self) -> str:
        return f"cellweave-sqlite-writer {self._file}"

    def _closed_message(self) -> str:
        return f"SQLiteStore {self._file} is closed"

    def _unevaluated(
        self, request: CommitRequest, cause: BaseException
    ) -> LivenessError | TerminalCommitError:
        """The rejection of a commit whose evaluation failed: LIVENESS when a later
        attempt can succeed (the store closed, a lock or I/O error), TERMINAL when it
        fails again (a damaged or read-only file, data the file cannot hold)."""
        transient = self.closed or self._wconn is None
        if isinstance(cause, sqlite3.Error):
            transient = transient or _is_transient(cause)
            wrapped = self._wrap(cause, "commit failed")
            wrapped.__cause__ = cause
            cause = wrapped
        reason = "the store is closed" if self._wconn is None else f"{cause}"
        message = f"commit {request.session_id}#{request.local_seq} was not applied: {reason}"
        err = LivenessError(message) if transient else TerminalCommitError(message)
        err.__cause__ = cause
        return err

    def _evaluate(self, request: CommitRequest) -> Verdict:
        """Validate and apply `request` in one transaction; returns after COMMIT
        (`_evaluate_lists`, its acceptance as a `Verdict`)."""
        verdict = self._evaluate_lists(request)
        return verdict.verdict(request) if isinstance(verdict, Acceptance) else verdict

    _lists_of = _evaluate

    def _evaluate_lists(self, request: CommitRequest) -> Verdict | Acceptance:
        """Validate and apply `request` in one transaction; returns after COMMIT, an
        accepted commit as an `Acceptance`.

        Also fans out other writers' commits this store had not delivered yet
        (they precede this one's seq). Safe from any thread.

        The usual commit of the file's only writer (`_plainly_valid`, staged from
        `_known` by `_stage_known`, its session numbered) is first tried as if no other
        connection had committed since this one's last commit: its heads are updated
        only if no log row is newer than `_known_top` (`_NO_NEWER`: seqs are gap-free and
        the newest row is never deleted, so one is exactly when another writer
        committed), in the statement that updates them: four statements, where asking
        `PRAGMA data_version` first made five. If one is newer, nothing was written and
        the commit goes the general way in the same transaction: the version read, the
        commits not yet delivered and what `_known` says read again, then validated and
        staged.
        """
        with self._write_lock:
            conn = self._writer_conn()
            cur = self._wcur
            session_key = self._sessions.key(request.session_id)
            self._committing = None
            cur.execute("BEGIN IMMEDIATE")
            try:
                top = self._known_top
                behind: list[_Change] = []  # (not `list[_Change]()`: that call costs 10 times more)
                number = self._session_numbers.get(session_key)
                staged: _Staged | None = None
                if top >= 0 and number is not None and self._plainly_valid(request):
                    if len(request.writes) == 1:
                        one = self._commit_one(conn, cur, request, session_key, number)
                        if one is not None:
                            self._sessions.resolve(session_key, request.local_seq, rejected=False)
                            self._delivered = top + 1
                            return one
                    else:
                        staged = self._stage_known(request.writes, top + 1)
                        if staged is not None and not self._apply(
                            conn, request, number, top + 1, staged, checked=False
                        ):
                            staged = None  # (another writer committed: nothing was written)
                            self._known_version = -1
                if staged is None:
                    top, behind, staged, error = self._evaluate_read(conn, request, session_key)
                    if staged is not None:
                        if number is None:  # (the session's first commit in this file)
                            number = self._session_number(conn, session_key)
                        self._apply(conn, request, number, top + 1, staged)
                seq = top + 1
                rows: dict[DocKey, _Known] = {}
                written: list[Any] | None = None
                verdict: Verdict | Acceptance
                if staged is None:  # (rejected: nothing written)
                    verdict = Verdict(None, error=error)
                    cur.execute("ROLLBACK")
                else:
                    rows = staged[2]
                    written = staged[4][::2]  # (the log row's documents)
                    verdict = Acceptance(seq, staged[0], staged[1])
                    self._committing = (seq, session_key, verdict)
                    cur.execute("COMMIT")
            except BaseException:
                _rollback(conn)
                self._known.clear()
                self._known_top = -1
                raise
            # Durable from here on.
            accepted = staged is not None
            if accepted and number is not None:
                self._session_numbers[session_key] = number
                self._remember(seq, rows, written)
            self._sessions.resolve(session_key, request.local_seq, rejected=not accepted)
            if behind:
                self._deliver(behind)
            self._delivered = max(self._delivered, seq if accepted else top)
            return verdict

    def _commit_one(
        self,
        conn: sqlite3.Connection,
        cur: sqlite3.Cursor,
        request: CommitRequest,
        session_key: str,
        number: int,
    ) -> Acceptance | None:
        """`_evaluate`'s usual commit (`_plainly_valid`, its session `number`ed) when it
        writes one document, staged by `_stage_known` and written by its two statements
        (`_apply`'s general steps and `_evaluate`'s bookkeeping left out: bench.opcodes
        --row "SQLiteStore commit", 2,566 bytecodes a commit at 29260fd, about 2,400
        with this path), committed and remembered inside `_evaluate`'s transaction;
        None, with nothing written, if `_known` cannot stage it or another writer
        committed since `_known_top` (the general way then decides it)."""
        seq = self._known_top + 1
        staged = self._stage_known(request.writes, seq)
        if staged is None:
            return None
        values, base_seqs, rows, entries, updates, due = staged
        if not cur.execute(_UPDATE_HEAD, (seq, REVISIONS_KEPT, *updates)).rowcount:
            self._known_version = -1
            return None  # (another writer committed since `_known_top`: nothing was written)
        cur.execute(_INSERT_LOG, (seq, number, request.local_seq, 1, _encode(entries).decode()))
        if due:
            gone = self._prune(conn, due)
            ((key, (doc, _, count, value, plain)),) = rows.items()
            rows[key] = (doc, seq, count - gone[doc], value, plain)
        verdict = Acceptance(seq, values, base_seqs)
        self._committing = (seq, session_key, verdict)
        cur.execute("COMMIT")
        self._remember(seq, rows)  # (its row's one entry is decoded in no time: not kept)
        return verdict

    def _evaluate_read(
        self, conn: sqlite3.Connection, request: CommitRequest, session_key: str
    ) -> tuple[int, list[_Change], _Staged | None, CommitRejected | None]:
        """`_evaluate`'s general way, inside its transaction, nothing written yet: (the max
        seq, the commits not yet delivered, what the commit writes or None, the
        rejection). What `_known` says is checked first: it holds while no other
        connection has committed since this one's last commit (its data_version reads
        the same, which this connection's own commits do not change); else the max seq
        and the commits not yet delivered are read, and `_known` is forgotten if the max
        seq moved."""
        version = conn.execute("PRAGMA data_version").fetchone()[0]
        top = self._known_top
        behind: list[_Change] = []
        if top < 0 or version != self._known_version:
            known_top = top
            top, behind = self._changes_after(conn, self._delivered)
            if top != known_top:  # another writer committed: it may have changed any
                self._known.clear()
                self._known_top = top
            self._known_version = version
        error: CommitRejected | None = None
        if not self._plainly_valid(request):
            error = self._validate(conn, request, session_key)
        seq = top + 1
        staged: _Staged | None = None
        if error is None:
            staged = self._stage_known(request.writes, seq)
            if staged is None:
                try:
                    docs, paths, heads = self._stage(conn, request.writes)
                except InvalidValueError as exc:
                    # A blind write below something another writer has since
                    # replaced: re-running against the fresh value can succeed.
                    error = ConflictError(
                        f"commit {request.session_id}#{request.local_seq} no longer applies: {exc}"
                    )
                else:
                    staged = self._rows(conn, seq, docs, paths, heads)
        return top, behind, staged, error

    @staticmethod
    def _session_number(conn: sqlite3.Connection, session_key: str) -> int:
        """`session_key`'s number in the file, its row made if it has none (inside the
        commit's transaction: it is kept only if the commit is)."""
        conn.execute("INSERT OR IGNORE INTO session (key) VALUES (?)", (session_key,))
        return int(
            conn.execute("SELECT id FROM session WHERE key = ?", (session_key,)).fetchone()[0]
        )

    def _interrupted(self, listener: SessionListener, request: CommitRequest) -> None:
        """`request`'s evaluation or answer was interrupted (`WriterStore._interrupted`):
        roll back what is still open, then answer it as it ended. It was applied exactly
        when the log row at its seq names its session and local seq (nothing else can
        have taken that seq: this store's writers hold `_write_lock`, and another
        process' commit would name another session). A
        second verdict or fan-out of the same commit, if the first got out before the
        interrupt, is ignored by the replica (`on_verdict` pops the commit once;
        `on_foreign` skips a seq it has)."""
        committing, self._committing = self._committing, None
        self._known.clear()  # (the interrupt may have come between COMMIT and `_remember`)
        self._known_top = -1
        conn = self._wconn
        if conn is None:
            return
        session_key = self._session_key(request.session_id)
        verdict: Verdict | None = None
        try:
            _rollback(conn)
            if committing is not None and committing[1] == session_key:
                row = conn.execute(
                    "SELECT s.key, l.local_seq FROM log l JOIN session s ON s.id = l.session"
                    " WHERE l.seq = ?",
                    (committing[0],),
                ).fetchone()
                if row is not None and tuple(row) == (session_key, request.local_seq):
                    verdict = committing[2].verdict(request)
        except sqlite3.Error:
            return  # cannot tell whether it was applied: no verdict rather than a wrong one
        if verdict is None:
            verdict = Verdict(
                None,
                error=LivenessError(
                    f"commit {request.session_id}#{request.local_seq} was not applied: its"
                    f" evaluation on {self._file} was interrupted"
                ),
            )
        self._resolve(session_key, request.local_seq, rejected=verdict.seq is None)
        self._answer(listener, request, verdict)
        if verdict.seq is not None:
            self._broadcast(request.session_id, verdict.seq, verdict.docs)

    def _stage_known(self, writes: tuple[Write, ...], seq: int) -> _Staged | None:
        """`_stage` and `_rows` in one loop, for the usual commit of a store that is its
        file's only writer: every write sets one top-level field of a dict document whose
        head row this writer remembers, each document once. None (nothing read or
        changed) for any other commit, which `_stage` and `_rows` then take. A document
        whose remembered value is a `plain_dict` stays one when a plain field is set (or
        any removed), and is encoded by `msgspec` alone (no check of its fields)."""
        known = self._known
        over = 2 * REVISIONS_KEPT
        values: list[Value] = []
        base_seqs: list[int] = []
        add_value, add_base = values.append, base_seqs.append  # (bound: a bytecode less each)
        rows: dict[DocKey, _Known] = {}
        entries: list[_Entry] = []
        add_entry = entries.append
        updates: list[object] = []
        due: list[int] = []
        paths: tuple[Path] | int
        for w in writes:
            key, path = w.key, w.path
            got = known.get(key)
            if got is None:
                return None
            if path == _VALUE_PATH:  # (a cell's whole value: the usual write, format 7's 0)
                field, paths = "value", _VALUE_ONLY
            elif len(path) == 1 and type(path[0]) is str:
                field, paths = path[0], (path,)
            else:
                return None
            doc, last, count, current, plain = got
            if type(current) is not dict:
                return None
            value = w.value
            new = current.copy()  # (`{**current, field: value}` costs twice as much)
            if value is MISSING:
                new.pop(field, None)
            else:
                new[field] = value
                plain = plain and type(value) in PLAIN_FIELDS and field != "/"
            add_value(new)
            add_base(last)
            rows[key] = (doc, seq, count + 1, new, plain)
            add_entry((doc, last, paths))
            updates += (doc, _encode(new).decode() if plain else encode_value(new))
            if count >= over:
                due.append(doc)
        if len(rows) != len(writes):
            return None  # (a document written twice: `_stage` applies the writes in turn)
        return values, base_seqs, rows, entries, updates, due

    def _stage(
        self, conn: sqlite3.Connection, writes: tuple[Write, ...]
    ) -> tuple[dict[DocKey, Value], dict[DocKey, list[Path]], dict[DocKey, _Head]]:
        """What `writes` make: each written document's new value, the paths its revision
        records, and the head rows they apply on (`_written_heads`; absent: never
        written). Raises `InvalidValueError` for a write that cannot apply."""
        heads = self._written_heads(conn, writes)
        known = self._known
        docs: dict[DocKey, Value] = {}
        paths: dict[DocKey, list[Path]] = {}
        for w in writes:
            key, path, value = w.key, w.path, w.value
            if key in docs:
                current = docs[key]
            elif not path:
                current = MISSING  # (a whole-document write reads nothing)
            elif (head := heads.get(key)) is None:
                current = MISSING
            elif (got := known.get(key)) is not None and got[1] == head[1]:
                current = got[3]  # (the value this writer committed: nothing to decode)
            else:
                current = self._decode(head[3], key)
            rpath: Path
            if len(path) == 1 and type(current) is dict and type(field := path[0]) is str:
                # One field of a dict (a cell's write): `set_path`'s copy, inlined; the
                # revision records the path itself (`revision_path` of it).
                new = current.copy()
                if value is MISSING:
                    new.pop(field, None)
                else:
                    new[field] = value
                rpath = path
            else:
                new = set_path(current, path, value, where="commit")
                rpath = revision_path(current, path)
            docs[key] = new
            recorded = paths.get(key)
            if recorded is None:
                paths[key] = [rpath]
            else:
                recorded.append(rpath)
        return docs, paths, heads

    def _written_heads(
        self, conn: sqlite3.Connection, writes: tuple[Write, ...]
    ) -> dict[DocKey, _Head]:
        """The head row of each document `writes` write that has one: from `_known` (the
        usual case for a store that is the file's only writer), the others in one
        statement per chunk (one query per document was most of a large commit's CPU)."""
        known = self._known
        heads: dict[DocKey, _Head] = {}
        missing: list[DocKey] = []
        for w in writes:
            key = w.key
            got = known.get(key)
            if got is not None:
                heads[key] = (got[0], got[1], got[2], None)
            else:
                missing.append(key)
        if missing:
            heads.update(self._heads(conn, missing))
        return heads

    def _remember(
        self, seq: int, rows: dict[DocKey, _Known], docs: list[Any] | None = None
    ) -> None:
        """After COMMIT: the head rows the commit at `seq` left, and the documents its log
        row names (`docs`, numbers: `_written`; None, not known). The documents first
        remembered longest ago go first (a document written again keeps its place: moving
        it to the end cost a `pop` per document, about 6 us of a 100-document commit; a
        document that goes while still written is read once more, by `_heads`)."""
        known = self._known
        known.update(rows)
        excess = len(known) - _KNOWN_KEPT
        if excess > 0:
            # In one pass: deleting `next(iter(known))` in a loop steps over every slot
            # deleted before it, O(excess^2) for a large commit (0.4 s for 50,000 rows).
            for old in list(itertools.islice(known, excess)):
                del known[old]
        self._known_top = seq
        if docs is not None and _WRITTEN_FROM <= len(docs) <= _PART:  # (past it: parts)
            written = self._written
            last = self._written_last
            if last == docs:
                docs = last  # (the same documents as the commit before: one list)
            written[seq] = self._written_last = docs
            self._written_entries += len(docs) + 1
            if self._written_entries > _WRITTEN_KEPT:
                # The oldest quarter, in one pass (deleting `next(iter(...))` in a loop
                # steps over every slot deleted before it).
                for gone in list(itertools.islice(written, len(written) // 4 + 1)):
                    self._written_entries -= len(written.pop(gone)) + 1

    @staticmethod
    def _heads(conn: sqlite3.Connection, keys: list[DocKey]) -> dict[DocKey, _Head]:
        """The head row of each of `keys` that has one (never written: absent)."""
        unique = list(dict.fromkeys(keys))
        out: dict[DocKey, _Head] = {}
        for start in range(0, len(unique), _CHUNK):
            chunk = unique[start : start + _CHUNK]
            if len(chunk) == 1:
                key = chunk[0]
                row = conn.execute(
                    f"SELECT h.doc, h.seq, h.revisions, h.value FROM {_HEAD_OF_KEY}", _k(key)
                ).fetchone()
                if row is not None:
                    out[key] = row
                continue
            values = ", ".join(["(?, ?, ?, ?, ?, ?)"] * len(chunk))
            rows = conn.execute(
                f"WITH k (n, {_KEY_COLS}) AS (VALUES {values})"
                f" SELECT k.n, h.doc, h.seq, h.revisions, h.value FROM {_HEADS_OF_KEYS}",
                [p for n, key in enumerate(chunk) for p in (n, *_k(key))],
            ).fetchall()
            for n, doc, seq, revisions, raw in rows:
                out[chunk[n]] = (doc, seq, revisions, raw)
        return out

    @staticmethod
    def _rows(
        conn: sqlite3.Connection,
        seq: int,
        docs: dict[DocKey, Value],
        paths: dict[DocKey, list[Path]],
        heads: dict[DocKey, _Head],
    ) -> _Staged:
        """What `_stage`'s documents write (`_Staged`), after making a head row for each
        document written for the first time (its number is what its entry names)."""
        new = [key for key in docs if key not in heads]
        if new:  # first writes: a number, a key row and a head row each
            top = conn.execute("SELECT COALESCE(MAX(doc), 0) FROM document").fetchone()[0]
            numbers = range(top + 1, top + 1 + len(new))
            conn.executemany(
                f"INSERT INTO document (doc, {_KEY_COLS}) VALUES (?, ?, ?, ?, ?, ?)",
                [(doc, *_k(key)) for doc, key in zip(numbers, new, strict=True)],
            )
            conn.executemany(
                "INSERT INTO head (doc, seq, revisions) VALUES (?, ?, 0)",
                [(doc, seq) for doc in numbers],
            )
            heads = {
                **heads,
                **{key: (doc, 0, 0, None) for doc, key in zip(numbers, new, strict=True)},
            }
        base_seqs: list[int] = []
        rows: dict[DocKey, _Known] = {}
        entries: list[_Entry] = []
        updates: list[object] = []
        due: list[int] = []
        over = 2 * REVISIONS_KEPT
        for key, value in docs.items():
            doc, last, count, _ = heads[key]
            base_seqs.append(last)
            rows[key] = (doc, seq, count + 1, value, plain_dict(value))
            written = paths[key]
            whole = len(written) == 1 and written[0] == _VALUE_PATH
            entries.append((doc, last, _VALUE_ONLY if whole else written))
            updates += (doc, encode_value(value))
            if count >= over:
                due.append(doc)
        return list(docs.values()), base_seqs, rows, entries, updates, due

    def _apply(
        self,
        conn: sqlite3.Connection,
        request: CommitRequest,
        session: int,
        seq: int,
        staged: _Staged,
        *,
        checked: bool = True,
    ) -> bool:
        """Write the commit: each document's head, updated in place (one statement per
        power-of-two chunk of rows, `_execute_rows`), its `log` row (keyed by its seq:
        appended; naming its `session` number and local seq, with an entry per document it
        wrote, or none), then the pruning of the documents past 2 * REVISIONS_KEPT
        revisions (`_prune`), which corrects the kept revision counts in `staged`'s head
        rows. The head updates change nothing if a log row at `seq` or newer exists
        (another writer committed since the max seq this writer knew): then, with
        `checked` False (`seq` not read in this transaction), nothing is written and the
        answer is False; with `checked` (`seq` read), that is a bug."""
        _, _, rows, entries, updates, due = staged
        changes = conn.total_changes
        if len(rows) == 1:  # (one document: the plain statement costs less)
            conn.execute(_UPDATE_HEAD, (seq, REVISIONS_KEPT, *updates))
        elif rows:
            _execute_rows(
                conn,
                _UPDATE_HEADS,
                "(?, ?)",
                updates,
                width=2,
                first=(seq, REVISIONS_KEPT),
                fine=True,
            )
        changed = conn.total_changes - changes
        if changed != len(rows):
            if changed == 0 and rows and not checked:
                return False
            raise InternalError(
                f"a commit at seq {seq} updated {changed} of its {len(rows)} documents' heads"
                " (this is a bug)"
            )
        first = entries
        if len(entries) > _PART:  # (parts: sorted by document, `_PART` entries each)
            entries = sorted(entries, key=_by_doc)
            first = entries[:_PART]
            conn.executemany(
                _INSERT_LOG_PART,
                [
                    (seq, part[0][0], len(part), _encode(part).decode())
                    for part in (
                        entries[start : start + _PART]
                        for start in range(_PART, len(entries), _PART)
                    )
                ],
            )
        conn.execute(
            _INSERT_LOG, (seq, session, request.local_seq, len(entries), _encode(first).decode())
        )
        if request.create_only:
            conn.executemany(
                f"INSERT OR IGNORE INTO claimed ({_KEY_COLS}, seq) VALUES (?, ?, ?, ?, ?, ?)",
                [(*_k(key), seq) for key in request.create_only],
            )
        if due:
            gone = self._prune(conn, due)
            for key, (doc, _, count, value, plain) in rows.items():
                if doc in gone:
                    rows[key] = (doc, seq, count - gone[doc], value, plain)
        return True

    def _prune(self, conn: sqlite3.Connection, docs: list[int]) -> dict[int, int]:
        """Keep the newest `REVISIONS_KEPT` revisions of each of `docs` (document numbers)
        that has more than twice that many (as `MemoryStore` does); returns how many
        revisions of each document were deleted.

        Runs after the commit's head update and log insert. The head row counts the
        document's kept revisions, so a commit decides which of its documents to prune
        without a query, and names the floor this pruning sets (`next_floor`): the
        revisions to delete are that one and those before it down to the old floor,
        REVISIONS_KEPT + 1 of them. Usually (documents written by the same commits, each
        just past 2 * REVISIONS_KEPT) they lie in a stretch of log rows mostly theirs,
        read in one statement, each row's documents as this writer remembers them if it
        committed the row (`_written`), else decoded; otherwise each document's are
        walked back entry by entry. Each row is read and decoded at most once per
        pruning. A row left with no live entry is deleted, the others get their new
        `live` count. Deletes happen once per REVISIONS_KEPT commits of a document, so
        the amortized cost per commit is O(1) entries. A head whose count or
        `next_floor` does not fit (a file upgraded from version 1, which never pruned)
        is pruned by walking all its revisions from the newest. A count that does not
        fit, or a walk that misses a revision above the floor, raises `InternalError`
        (rolling the commit back).
        """
        kept = REVISIONS_KEPT
        fewer: dict[int, int] = {}  # log row's seq: entries it loses
        live_of: dict[int, int] = {}  # log row's seq: its live entries before
        gone: dict[int, int] = {}
        floors: list[object] = []  # (doc, kept revisions, floor) per document, flat
        heads = [
            row
            for row in _execute_rows(conn, _PRUNED_HEADS, "?", list(docs), width=1)
            if row[2] > 2 * kept
        ]
        # The usual pruning: documents just past 2 * kept whose revisions to delete, from
        # their floor to their next floor, lie in a stretch of rows at most about half
        # others' (documents written by the same commits): one scan of that stretch.
        usual = {
            row[0]: (row[3] or 0, row[4])
            for row in heads
            if row[4] is not None and row[2] == 2 * kept + 1
        }
        if usual:
            low = min(bound for bound, _ in usual.values())
            high = max(next_floor for _, next_floor in usual.values())
            if (
                high - low > 2 * (kept + 1) * len(usual)
                or conn.execute(
                    "SELECT 1 FROM log_part WHERE seq > ? AND seq <= ? LIMIT 1", (low, high)
                ).fetchone()
            ):
                usual = {}  # (sparse, or holding a large commit's parts: walked)
            else:
                deleted = dict.fromkeys(usual, 0)
                # Each row's documents: as this writer remembers them (`_written`), else
                # read and decoded. When every pruned document's stretch is the whole
                # one (the usual batch: documents written by the same commits), every
                # row in it is inside each of their stretches, and the rows that name
                # the same documents (one list) are counted once for all of them.
                written = self._written
                whole = len(set(usual.values())) == 1
                lists: dict[int, tuple[list[Any], list[Any], int]] = {}
                docs_at: Iterable[Any] | None
                for at, live, text in conn.execute(
                    "SELECT seq, live, entries FROM log WHERE seq > ? AND seq <= ?", (low, high)
                ):
                    live_of[at] = live
                    docs_at = written.get(at) if written else None
                    if docs_at is None:
                        docs_at = map(_by_doc, _decode_stubs(text))
                    elif whole:
                        counted = lists.get(id(docs_at))
                        if counted is None:
                            mine = [doc for doc in docs_at if doc in usual]
                            counted = (docs_at, mine, 0)
                        lists[id(docs_at)] = (docs_at, counted[1], counted[2] + 1)
                        if counted[1]:
                            fewer[at] = len(counted[1])
                        continue
                    n = 0
                    for doc in docs_at:
                        window = usual.get(doc)
                        if window is not None and window[0] < at <= window[1]:
                            deleted[doc] += 1
                            n += 1
                    if n:
                        fewer[at] = n
                for _, mine, times in lists.values():
                    for doc in mine:
                        deleted[doc] += times
                for doc, (_, next_floor) in usual.items():
                    if deleted[doc] != kept + 1:
                        raise InternalError(
                            f"pruning document {doc} deleted {deleted[doc]} revisions, not"
                            f" {kept + 1}: its next_floor is not its (REVISIONS_KEPT + 1)-th"
                            " oldest kept revision (this is a bug)"
                        )
                    gone[doc] = kept + 1
                    floors += (doc, kept, next_floor)
        # (seq, part's first document; 0: the log row): {doc: previous revision's seq}
        decoded: dict[tuple[int, int], dict[int, int]] = {}
        part_live: dict[tuple[int, int], int] = {}  # a part's live entries before
        holder: dict[tuple[int, int], int] = {}  # (seq, doc): the part holding its entry

        def prev_of(at: int, doc: int) -> int:
            got = decoded.get((at, 0))
            if got is None:
                row = conn.execute("SELECT live, entries FROM log WHERE seq = ?", (at,)).fetchone()
                got = decoded[at, 0] = (
                    {} if row is None else {e[0]: e[1] for e in _decode_stubs(row[1])}
                )
                if row is not None:
                    live_of[at] = row[0]
            prev = got.get(doc)
            if prev is None and at in live_of:
                # In a part of a large commit: that part alone is read (at most `_PART`
                # entries), so a walk costs O(entries walked), however large the commit.
                part = conn.execute(_PART_OF, (at, doc)).fetchone()
                if part is not None:
                    key = (at, int(part[0]))
                    got = decoded.get(key)
                    if got is None:
                        got = decoded[key] = {e[0]: e[1] for e in _decode_stubs(part[2])}
                        part_live[key] = part[1]
                    prev = got.get(doc)
                    holder[at, doc] = key[1]
            if prev is None:
                raise InternalError(
                    f"pruning document {doc}: its revision at seq {at} has no log entry"
                    " (this is a bug)"
                )
            return prev

        # The others are walked back, entry by entry (each row and part read once).
        fewer_parts: dict[tuple[int, int], int] = {}
        for doc, last, count, floor, next_floor in heads:
            if doc in usual:
                continue
            bound = floor or 0
            start, steps = next_floor, count - kept
            if next_floor is None or count != 2 * kept + 1:  # (a file upgraded from version 1)
                start = last
                for _ in range(kept):
                    start = prev_of(start, doc)
            dead = [start]
            while len(dead) < steps and dead[-1] > bound:
                dead.append(prev_of(dead[-1], doc))
            if dead[-1] <= bound or prev_of(dead[-1], doc) > bound:
                raise InternalError(
                    f"pruning document {doc}: it does not keep the {count} revisions its"
                    " head counts (this is a bug)"
                )
            for at in dead:
                fewer[at] = fewer.get(at, 0) + 1  # (the log row counts every part's)
                first = holder.get((at, doc))
                if first is not None:
                    fewer_parts[at, first] = fewer_parts.get((at, first), 0) + 1
            gone[doc] = steps
            floors += (doc, kept, start)
        # A part left with no live entry is deleted, the others get their new counts.
        parts_left: list[object] = []
        parts_emptied: list[object] = []
        for (at, first), n in fewer_parts.items():
            live = part_live[at, first] - n
            if live < 0:
                raise InternalError(
                    f"pruning deleted {n} entries of the log part at seq {at} from document"
                    f" {first}, which counts {part_live[at, first]} live (this is a bug)"
                )
            if live:
                parts_left += (at, first, live)
            else:
                parts_emptied += (at, first)
        _execute_rows(conn, _SET_PART_LIVE, "(?, ?, ?)", parts_left, width=3)
        _execute_rows(conn, _DELETE_PARTS, "(?, ?)", parts_emptied, width=2)
        # A row left with no live entry is deleted (not updated first); the others are
        # given their new counts.
        emptied: list[int] = []
        left: list[object] = []
        for at, n in fewer.items():
            live = live_of[at] - n
            if live < 0:
                raise InternalError(
                    f"pruning deleted {n} entries of the log row at seq {at}, which counts"
                    f" {live_of[at]} live (this is a bug)"
                )
            if live:
                left += (at, live)
            else:
                emptied.append(at)
        _execute_rows(conn, _SET_LIVE, "(?, ?)", left, width=2)
        emptied.sort()
        if emptied and emptied[-1] - emptied[0] == len(emptied) - 1:
            # (Every seq from the first to the last: a range, the usual stretch of one
            # document written alone, deletes in a third of the time of the list.)
            conn.execute(_DELETE_LOG_RANGE, (emptied[0], emptied[-1]))
        else:
            _execute_rows(conn, _DELETE_LOG_ROWS, "(?)", [*emptied], width=1)
        _execute_rows(conn, _SET_FLOORS, "(?, ?, ?)", floors, width=3)
        return gone

    def _record_rejection(self, request: CommitRequest) -> None:
        with self._write_lock:
            self._resolve(self._session_key(request.session_id), request.local_seq, rejected=True)

    # ------------------------------------------------------------------ foreign commits
    def _changes_after(self, conn: sqlite3.Connection, after: int) -> tuple[int, list[_Change]]:
        """(max seq, commits after `after` with the documents whose head they still are).

        A document written again later is delivered only with its latest seq,
        so every (seq, value) delivered is the document's true state at seq.
        Run inside a transaction (one snapshot).  O(documents written since `after`):
        the log rows after `after` (a document written since has its newest revision
        there, never pruned), then those documents' heads.
        """
        top = self._max_seq(conn)
        if top <= after:
            return top, []
        with self._lock:
            if not self._listeners:
                return top, []  # nobody to tell; a later session loads fresh state
        written: dict[int, None] = {}
        for (entries,) in conn.execute(
            "SELECT entries FROM log WHERE seq > ?1"
            " UNION ALL SELECT entries FROM log_part WHERE seq > ?1",
            (after,),
        ):
            for entry in _decode_stubs(entries):
                written[entry[0]] = None
        out: dict[int, dict[DocKey, Value]] = {}
        heads = []
        docs = list(written)
        for start in range(0, len(docs), _CHUNK):
            chunk = docs[start : start + _CHUNK]
            heads += conn.execute(
                "SELECT h.seq, d.space, d.doc_id, d.scope, d.principal, d.session, h.value"
                " FROM head h JOIN document d ON d.doc = h.doc"
                f" WHERE h.doc IN ({', '.join(['?'] * len(chunk))})",
                chunk,
            ).fetchall()
        heads.sort(key=lambda row: int(row[0]))
        for seq, space, doc_id, scope, principal, session, raw in heads:
            key = self._key_of(space, doc_id, scope, principal, session)
            out.setdefault(int(seq), {})[key] = self._decode(raw, key)
        return top, list(out.items())

    def _deliver(self, changes: list[_Change]) -> None:
        for seq, docs in changes:
            self._broadcast(_NO_ORIGIN, seq, docs)

    def poll(self) -> int:
        """Deliver commits other writers made since the last look; returns how many.

        Other processes and other `SQLiteStore` objects on the same file count;
        this store's own commits were delivered when made. Safe from any
        thread.  O(1) when nothing changed.
        """
        if self.closed:
            return 0
        with self._read_lock:
            if self._rconn is None:
                return 0
            try:
                version = self._rconn.execute("PRAGMA data_version").fetchone()[0]
            except sqlite3.Error as exc:
                raise self._wrap(exc, "poll failed") from exc
            if version == self._data_version:
                return 0
            self._data_version = version
        # The write lock orders this fan-out against the writer's own.
        with self._write_lock, self._read_lock:
            conn = self._rconn
            if conn is None:
                return 0
            try:
                conn.execute("BEGIN")
                try:
                    top, changes = self._changes_after(conn, self._delivered)
                finally:
                    _rollback(conn)  # a read-only snapshot: nothing to commit
            except BaseException as exc:
                # Not delivered: the next poll retries from the same place.
                self._data_version = -1
                if isinstance(exc, sqlite3.Error):
                    raise self._wrap(exc, "poll failed") from exc
                raise
            self._deliver(changes)
            self._delivered = max(self._delivered, top)
        return len(changes)

    def _poll_loop(self) -> None:
        while not self._stop.wait(self.poll_interval):
            with self._lock:
                if self.closed or not self._listeners:
                    self._poller = None  # connect() starts a new one when needed
                    return
            try:
                self.poll()
            except Exception as exc:  # keep polling: the file may be busy for a while
                self.last_poll_error = exc

    # ------------------------------------------------------------------ closing
    def close(self) -> None:
        """Answer queued commits (durably), fail held ones, stop threads, close the file."""
        closing, writer = self._start_closing()
        if not closing:
            return
        with self._lock:
            poller = self._poller
        self._stop.set()
        me = threading.current_thread()
        for thread in (writer, poller):
            if thread is not None and thread is not me:
                thread.join()
        self._fail_held(StoreError(f"SQLiteStore {self._file} was closed"))
        with self._write_lock:
            if self._wconn is not None:
                self._wconn.close()
                self._wconn = None
        with self._read_lock:
            if self._rconn is not None:
                self._rconn.close()
                self._rconn = None

    # ------------------------------------------------------------------ invariants
    def _check(self) -> None:
        super()._check()
        with self._read_lock:
            conn = self._reader_conn()
            conn.execute("BEGIN")
            try:
                for sql, what in self._checks():
                    assert not conn.execute(sql).fetchone()[0], f"{self._file}: {what}"
                top = self._max_seq(conn)
                most = conn.execute("SELECT COALESCE(MAX(seq), 0) FROM head").fetchone()[0]
                assert most <= top, f"a head's seq {most} is above the max seq {top}"
                assert self._delivered <= top, (self._delivered, top)
            finally:
                conn.execute("COMMIT")
        with self._write_lock:
            self._sessions.check()
            self._check_known()

    def _check_known(self) -> None:
        """What the writer knows of head rows is what the file says (if still current).
        Under `_write_lock` (taken before `_read_lock`, as `poll` does)."""
        with self._read_lock:
            conn = self._reader_conn()
            conn.execute("BEGIN")
            try:
                if self._known_top != self._max_seq(conn):
                    return
                for key, (doc, seq, revisions, value, plain) in self._known.items():
                    row = conn.execute(
                        f"SELECT h.doc, h.seq, h.revisions, h.value FROM {_HEAD_OF_KEY}",
                        _k(key),
                    ).fetchone()
                    assert row is not None, key
                    assert (doc, seq, revisions) == tuple(row[:3]), (key, row)
                    assert value_equal(value, self._decode(row[3], key)), key
                    assert not plain or plain_dict(value), key
            finally:
                conn.execute("COMMIT")

    @staticmethod
    def _checks() -> Iterator[tuple[str, str]]:
        fields = (
            "json_extract(e.value, '$[0]') AS doc, json_extract(e.value, '$[1]') AS prev,"
            " json_extract(e.value, '$[2]') AS paths, json_type(e.value, '$[2]') AS kind"
        )
        # Every entry, with its part (0: the log row's own).
        entries = (
            f"(SELECT l.seq, 0 AS part, {fields} FROM log l, json_each(CAST(l.entries AS TEXT)) e"
            f" UNION ALL SELECT p.seq, p.first AS part, {fields}"
            " FROM log_part p, json_each(CAST(p.entries AS TEXT)) e)"
        )
        # The entries not pruned: above their document's floor.
        kept = (
            f"(SELECT x.seq, x.part, x.doc, x.prev FROM {entries} x JOIN head h"
            " ON h.doc = x.doc WHERE x.seq > COALESCE(h.floor, 0))"
        )
        per_doc = f"(SELECT doc, COUNT(*) AS n, MAX(seq) AS last FROM {kept} GROUP BY doc)"
        yield (
            "SELECT COUNT(*) FROM rejection x JOIN session s ON s.key = x.session_id"
            " JOIN log l ON l.session = s.id AND l.local_seq = x.local_seq",
            "a commit is recorded as both accepted and rejected",
        )
        yield (
            "SELECT COUNT(*) FROM log l WHERE NOT EXISTS"
            " (SELECT 1 FROM session s WHERE s.id = l.session)",
            "a log row names no session",
        )
        yield (
            "SELECT COUNT(*) FROM log l WHERE json_valid(CAST(l.entries AS TEXT)) = 0"
            " OR json_type(CAST(l.entries AS TEXT)) != 'array'",
            "a log row's entries are not a JSON array",
        )
        yield (
            # A commit that wrote no document has a row with no entry, and a claim.
            "SELECT COUNT(*) FROM log l WHERE json_array_length(CAST(l.entries AS TEXT)) = 0"
            " AND (l.live != 0 OR NOT EXISTS (SELECT 1 FROM claimed c WHERE c.seq = l.seq))",
            "a log row naming no document counts a live entry, or names no claim",
        )
        yield (
            f"SELECT COUNT(*) FROM log l WHERE l.live != (SELECT COUNT(*) FROM {kept} k"
            " WHERE k.seq = l.seq)",
            "a log row's live count is not its number of entries above their floors",
        )
        yield (
            f"SELECT COUNT(*) FROM log_part p WHERE p.live != (SELECT COUNT(*) FROM {kept} k"
            " WHERE k.seq = p.seq AND k.part = p.first) OR p.live = 0",
            "a log part's live count is not its number of entries above their floors, or 0",
        )
        yield (
            "SELECT COUNT(*) FROM log_part p WHERE NOT EXISTS"
            " (SELECT 1 FROM log l WHERE l.seq = p.seq)",
            "a log part has no log row",
        )
        yield (
            "SELECT (SELECT COUNT(*) FROM log"
            f" WHERE json_array_length(CAST(entries AS TEXT)) > {_PART})"
            " + (SELECT COUNT(*) FROM log_part WHERE json_valid(CAST(entries AS TEXT)) = 0"
            " OR json_type(CAST(entries AS TEXT)) != 'array'"
            f" OR json_array_length(CAST(entries AS TEXT)) > {_PART})",
            f"a log row or part holds more than {_PART} entries, or not a JSON array",
        )
        yield (
            # Each entry of a part is where a walk looks for it: the part with the
            # greatest first document at or below it.
            f"SELECT COUNT(*) FROM {entries} x WHERE x.part != 0 AND x.part IS NOT"
            " (SELECT MAX(p.first) FROM log_part p WHERE p.seq = x.seq AND p.first <= x.doc)",
            "a log part's entry is not in the part a walk looks in",
        )
        yield (
            "SELECT COUNT(*) FROM log l WHERE l.live = 0"
            " AND json_array_length(CAST(l.entries AS TEXT)) > 0"
            " AND l.seq != (SELECT MAX(seq) FROM log)",
            "a log row whose entries were all pruned was kept",
        )
        yield (
            f"SELECT COUNT(*) FROM (SELECT seq, doc FROM {entries} GROUP BY seq, doc"
            " HAVING COUNT(*) > 1)",
            "a log row has two entries for one document",
        )
        yield (
            f"SELECT COUNT(*) FROM {entries} x WHERE x.doc IS NULL OR x.prev IS NULL"
            " OR x.paths IS NULL OR x.prev >= x.seq OR NOT EXISTS"
            " (SELECT 1 FROM head h WHERE h.doc = x.doc)"
            f" OR (x.kind != 'array' AND x.paths IS NOT {_VALUE_ONLY})",
            "an entry names no document, previous revision or paths (a list, or 0)",
        )
        yield (
            "SELECT (SELECT COUNT(*) FROM document d WHERE NOT EXISTS (SELECT 1 FROM head h"
            " WHERE h.doc = d.doc)) + (SELECT COUNT(*) FROM head h WHERE NOT EXISTS"
            " (SELECT 1 FROM document d WHERE d.doc = h.doc))",
            "a document has no head row, or a head row no document",
        )
        yield (
            f"SELECT COUNT(*) FROM head h LEFT JOIN {per_doc} c ON c.doc = h.doc"
            " WHERE h.revisions IS NOT COALESCE(c.n, 0)",
            "a head's revision count is not its document's number of kept revisions",
        )
        yield (
            "SELECT COUNT(*) FROM head h LEFT JOIN (SELECT doc, seq FROM (SELECT doc, seq,"
            f" ROW_NUMBER() OVER (PARTITION BY doc ORDER BY seq) AS i FROM {kept})"
            f" WHERE i = {REVISIONS_KEPT + 1}) n ON n.doc = h.doc"
            " WHERE h.next_floor IS NOT n.seq",
            "a head's next floor is not its (REVISIONS_KEPT + 1)-th oldest kept revision",
        )
        yield (
            "SELECT COUNT(*) FROM head h WHERE h.floor IS NOT NULL"
            f" AND h.revisions < {REVISIONS_KEPT}",
            f"a pruned document keeps fewer than {REVISIONS_KEPT} revisions",
        )
        yield (
            f"SELECT COUNT(*) FROM head h WHERE h.revisions > {2 * REVISIONS_KEPT}",
            f"a document keeps more than {2 * REVISIONS_KEPT} revisions",
        )
        yield (
            f"SELECT COUNT(*) FROM head h LEFT JOIN {per_doc} c ON c.doc = h.doc"
            " WHERE c.n IS NOT NULL AND h.seq IS NOT c.last",
            "a head's seq is not its document's last revision's",
        )
        yield (
            # Each kept revision names the document's one before it by seq; the oldest
            # kept one 0, or once pruned a seq at or below the floor.
            "SELECT COUNT(*) FROM (SELECT k.seq, k.prev, LAG(k.seq) OVER"
            f" (PARTITION BY k.doc ORDER BY k.seq) AS before, h.floor FROM {kept} k"
            " JOIN head h ON h.doc = k.doc) WHERE CASE WHEN before IS NOT NULL"
            " THEN prev IS NOT before WHEN floor IS NULL THEN prev != 0"
            " ELSE prev > floor END",
            "a revision does not name its document's previous revision",
        )
