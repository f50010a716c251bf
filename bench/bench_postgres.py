"""Benchmarks of PostgresStore against raw psycopg on the same throwaway server.

Group ``postgres commit``: one op is one durable commit that reads one cell and
writes another, waiting for the verdict.

- Baseline ``raw psycopg (same statements)``: one psycopg connection issuing, per op,
  exactly the statements PostgresStore's writer issues for that commit, in one
  transaction: lock the counter row, the read's floor and revisions, the written
  document's head, the revision insert, the head upsert, the prune check, the counter
  update with its notification, COMMIT. What the ratio measures is therefore
  PostgresStore's own cost (replica, transaction, validation in Python, the writer
  thread and the verdict's way back), not the SQL.
- ``PostgresStore commit``: the same through a `Space` (poll_interval 0: nothing else
  runs).

The server comes from bench/pg_cluster.py (started once per process, stopped at exit),
with fsync off: both rows pay the same server, and a disk flush would only add the
same constant to each. Each sample gets a fresh schema.
"""

from __future__ import annotations

import atexit
import uuid
from typing import Any

import psycopg

from bench._counting import Commits
from bench.harness import BenchError, Counts, Run, bench
from bench.pg_cluster import Cluster
from cells import PostgresStore, Space
from cells.stores._sql import KEY_COLUMNS

OPS = 300

_cluster: list[Cluster] = []
_leftovers: list[Any] = []


def _dsn() -> str:
    if not _cluster:
        server = Cluster()
        _cluster.append(server)
        atexit.register(server.stop)
        atexit.register(_clean_up)
    return _cluster[0].dsn


def _clean_up() -> None:
    while _leftovers:
        _leftovers.pop()()


def _store(schema: str) -> PostgresStore:
    store = PostgresStore(_dsn(), schema=schema, poll_interval=0)
    _leftovers.append(store.drop_schema)
    return store


_COLS = ", ".join(KEY_COLUMNS)
_MATCH = " AND ".join(f"{c} = %s" for c in KEY_COLUMNS)
_R_MATCH = " AND ".join(f"r.{c} = %s" for c in KEY_COLUMNS)


@bench(group="postgres commit", name="raw psycopg (same statements)", ops=OPS, baseline=True)
def raw_psycopg_commit() -> Run:
    _clean_up()
    schema = f"bench_raw_{uuid.uuid4().hex}"
    _store(schema).close()  # the same tables, created by the store, then closed
    conn = psycopg.connect(_dsn(), autocommit=True)
    _leftovers.append(conn.close)
    s = schema
    a = ("bench", "a", "space", "", "")
    b = ("bench", "b", "space", "", "")
    with conn.transaction():
        conn.execute(
            f"INSERT INTO {s}.revision ({_COLS}, seq, session_id, local_seq, paths)"
            " VALUES (%s, %s, %s, %s, %s, 1, 'setup', 1, '[[\"value\"]]')",
            a,
        )
        conn.execute(
            f"INSERT INTO {s}.head ({_COLS}, seq, value)"
            """ VALUES (%s, %s, %s, %s, %s, 1, '{"value": 1}')""",
            a,
        )
        conn.execute(f"UPDATE {s}.counter SET seq = 1")

    def run() -> Counts:
        committed = 0
        for i in range(OPS):
            with conn.transaction():
                top = conn.execute(f"SELECT seq FROM {s}.counter WHERE id = 1 FOR UPDATE")
                row = top.fetchone()
                if row is None:
                    raise BenchError("raw psycopg: the counter row is missing")
                seq = int(row[0]) + 1
                conn.execute(f"SELECT seq FROM {s}.revision_floor WHERE {_MATCH}", a).fetchone()
                conn.execute(
                    f"SELECT r.seq, r.session_id, r.local_seq, r.paths FROM {s}.revision r"
                    f" WHERE {_R_MATCH} AND r.seq > %s"
                    " ORDER BY r.seq",
                    (*a, 1),
                ).fetchall()
                conn.execute(f"SELECT value FROM {s}.head WHERE {_MATCH}", b).fetchone()
                conn.execute(
                    f"INSERT INTO {s}.revision ({_COLS}, seq, session_id, local_seq, paths)"
                    " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
                    (*b, seq, "raw", i + 1, '[["value"]]'),
                )
                conn.execute(
                    f"INSERT INTO {s}.head ({_COLS}, seq, value)"
                    " VALUES (%s, %s, %s, %s, %s, %s, %s)"
                    f" ON CONFLICT ({_COLS}) DO UPDATE SET seq = excluded.seq,"
                    " value = excluded.value",
                    (*b, seq, f'{{"value": {i + 1}}}'),
                )
                conn.execute(f"SELECT MIN(seq) FROM {s}.revision WHERE {_MATCH}", b).fetchone()
                conn.execute(
                    f"WITH u AS (UPDATE {s}.counter SET seq = %s WHERE id = 1 RETURNING seq)"
                    " SELECT pg_notify(%s, seq::text) FROM u",
                    (seq, f"cellweave_{s}"),
                )
            committed += 1  # the `with` block committed without raising
        return {"commits": committed, "reads": OPS, "writes": OPS}

    return run


@bench(group="postgres commit", name="PostgresStore commit", ops=OPS)
def postgres_store_commit() -> Run:
    _clean_up()
    store = _store(f"bench_store_{uuid.uuid4().hex}")
    space = Space(store, "bench")
    _leftovers.append(space.replica.close)
    a, b = space.cell("a"), space.cell("b")
    if not a.set(1).wait(30).ok:
        raise BenchError("PostgresStore: the setup write failed")
    b.get()

    def run() -> Counts:
        commits = Commits(space.replica)
        accepted = 0
        for i in range(OPS):
            tx = space.edit()
            v = a.with_tx(tx).get()
            b.with_tx(tx).set(v + i)
            result = tx.commit().wait(30)  # durable when this returns
            if not result.ok:
                raise BenchError(f"PostgresStore commit failed: {result}")
            accepted += 1
        counts = commits.counts()
        if counts != {"sent": OPS, "elided": 0}:
            raise BenchError(f"PostgresStore: {OPS} commits, but the replica counted {counts}")
        return {"commits": counts["sent"], "accepted": accepted, "reads": OPS, "writes": OPS}

    return run
