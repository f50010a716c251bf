"""The page claims of the SQL stores (SQLite, PostgreSQL): one table, one statement each.

The table (`claims` in the store's file or schema) holds a row per page ever
claimed; see `cells._claims` for the protocol. Each operation is one SQL
statement that decides on the row as the database holds it (an upsert or an
update with the expected values in its WHERE clause), run in a transaction
of its own by the store's `run` (SQLite: its write lock and BEGIN IMMEDIATE;
PostgreSQL: a pooled connection). The fence check of a commit runs on the
commit's own connection, inside its transaction (`fence_error`), after the
transaction took the store's counter row lock: every commit of every process
is checked and applied inside that one critical section, so a takeover lands
either before a commit's check (the commit is rejected) or after it (and then
before any commit of the new owner, which needs the lock too). In seq order a
page's accepted commits never go back to an older fence. The claim row itself
is not locked: a heartbeat or a takeover never waits for a commit.

Rows of closed pages are deleted by `sweep_closed` once they have been closed for
a while; a special row (principal and page '') per space keeps the fence floor,
the highest fence a deleted row had, and a page claimed afresh starts above it,
so no fence is ever issued twice for a page. `forget` deletes, under the same
floor, the rows a serving process found no open page for (released, or expired,
and the page's record gone without a stop).

SQL is written with `?` placeholders; the PostgreSQL dialect swaps them for `%s`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final, TypeVar

from .._claims import CLOSED_AT, ClaimRow, ClaimTable, Fence, Owner, PageRef, fenced_message
from ..errors import FencedError

T = TypeVar("T")

BATCH: Final = 200
"""Pages per claim statement (the statement's parameters stay well under every limit)."""


def schema(table: str, *, postgres: bool) -> tuple[str, ...]:
    real = "double precision" if postgres else "REAL"
    return (
        f"""CREATE TABLE IF NOT EXISTS {table} (
            space TEXT NOT NULL, principal TEXT NOT NULL, page TEXT NOT NULL,
            fence BIGINT NOT NULL,
            host TEXT, pid BIGINT, nonce TEXT,
            heartbeat_at {real} NOT NULL, expires_at {real} NOT NULL,
            claimed_at {real} NOT NULL,
            taken_from TEXT, taken_reason TEXT, takeovers BIGINT NOT NULL DEFAULT 0,
            PRIMARY KEY (space, principal, page)
        )""",
        # (An index lives in its table's schema: its name takes no schema.)
        f"CREATE INDEX IF NOT EXISTS claims_by_expiry ON {table} (space, expires_at)",
        f"CREATE INDEX IF NOT EXISTS claims_by_owner ON {table} (nonce)",
    )


_COLS: Final = (
    "space, principal, page, fence, host, pid, nonce, heartbeat_at, expires_at, claimed_at,"
    " taken_from, taken_reason, takeovers"
)


def _row(r: Sequence[Any]) -> ClaimRow:
    owner = None if r[6] is None else Owner(str(r[4]), int(r[5]), str(r[6]))
    return ClaimRow(
        str(r[0]),
        str(r[1]),
        str(r[2]),
        int(r[3]),
        owner,
        float(r[7]),
        float(r[8]),
        float(r[9]),
        None if r[10] is None else str(r[10]),
        None if r[11] is None else str(r[11]),
        int(r[12]),
    )


class SQLClaimTable(ClaimTable):
    """Claims in table `table`; `run(fn)` calls `fn(conn)` in a write transaction."""

    def __init__(
        self,
        table: str,
        head: str,
        run: Callable[[Callable[[Any], Any]], Any],
        *,
        postgres: bool,
    ) -> None:
        self._t = table
        self._head = head
        self._run = run
        self._postgres = postgres

    def _sql(self, sql: str) -> str:
        return sql.replace("?", "%s") if self._postgres else sql

    def _exec(self, sql: str, params: Sequence[Any], *, lock: str | None = None) -> list[Any]:
        """One statement. `lock` (a space): on PostgreSQL, under that space's claims lock
        (a transaction-scoped advisory lock), which the claims of new rows and the sweep
        of closed ones take: a claim's read of the fence floor then never misses a
        deletion that committed while it waited (SQLite serialises every write anyway)."""
        text = self._sql(sql)
        self.statements += 1

        def go(conn: Any) -> list[Any]:
            if lock is None or not self._postgres:
                return list(conn.execute(text, tuple(params)).fetchall())
            with conn.transaction():
                self._lock(conn, lock)
                return list(conn.execute(text, tuple(params)).fetchall())

        rows: list[Any] = self._run(go)
        return rows

    @staticmethod
    def _lock(conn: Any, space: str) -> None:
        """PostgreSQL, inside a transaction: take `space`'s claims lock (see `_exec`)."""
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"cellweave claims {space}",))

    def _delete_raising_floor(
        self, space: str, where: str, params: Sequence[Any], delete: str, deleting: Sequence[Any]
    ) -> int:
        """Raise the space's fence floor (its row with no principal) to the highest fence
        of the rows `where` (with `params`) matches, then run `delete` (with `deleting`,
        returning one row per deleted claim), in one transaction under the space's claims
        lock: a page claimed again later gets a fence above every deleted one. How many
        claims were deleted."""
        floor = (
            f"INSERT INTO {self._t} AS c (space, principal, page, fence, heartbeat_at,"
            " expires_at, claimed_at) SELECT ?, '', '', m, 0, ?, 0 FROM (SELECT MAX(fence)"
            f" AS m FROM {self._t} WHERE {where}) AS top WHERE m IS NOT NULL"
            " ON CONFLICT (space, principal, page) DO UPDATE SET fence ="
            f" {'GREATEST' if self._postgres else 'MAX'}(c.fence, excluded.fence)"
        )
        floor_sql, delete_sql = self._sql(floor), self._sql(delete)
        floor_params, delete_params = (space, CLOSED_AT, *params), tuple(deleting)
        self.statements += 1

        def both(conn: Any) -> int:
            conn.execute(floor_sql, floor_params)
            return len(conn.execute(delete_sql, delete_params).fetchall())

        def go(conn: Any) -> int:
            if self._postgres:
                with conn.transaction():
                    self._lock(conn, space)
                    return both(conn)
            return both(conn)

        n: int = self._run(go)
        return n

    def fence_error(self, conn: Any, fence: Fence) -> FencedError | None:
        """Inside the commit's transaction on `conn`."""
        row = conn.execute(
            self._sql(
                f"SELECT fence, nonce FROM {self._t} WHERE space = ? AND principal = ? AND page = ?"
            ),
            (fence.space, fence.principal, fence.page),
        ).fetchone()
        if row is not None and int(row[0]) == fence.generation and row[1] is not None:
            return None
        return FencedError(
            fenced_message(fence, None if row is None else int(row[0]), row is not None)
        )

    def claim(
        self, space: str, owner: Owner, pages: Sequence[PageRef], now: float, lease: float
    ) -> dict[PageRef, int]:
        out: dict[PageRef, int] = {}
        # In one order for every process: two claims of overlapping pages then wait for
        # each other's row locks in the same order, never in a circle (a deadlock).
        pages = sorted(pages)
        for start in range(0, len(pages), BATCH):
            chunk = pages[start : start + BATCH]
            # A page with no row starts above the space's fence floor: the highest fence
            # of a row the sweep deleted, so a fence is never issued twice for a page.
            floor = (
                f"(SELECT COALESCE(MAX(fence), 0) + 1 FROM {self._t}"
                " WHERE space = ? AND principal = '' AND page = '')"
            )
            values = ", ".join([f"(?, ?, ?, {floor}, ?, ?, ?, ?, ?, ?, 0)"] * len(chunk))
            params: list[Any] = []
            for principal, page in chunk:
                params += [space, principal, page, space, owner.host, owner.pid, owner.nonce]
                params += [now, now + lease, now]
            rows = self._exec(
                f"INSERT INTO {self._t} AS c (space, principal, page, fence, host, pid, nonce,"
                f" heartbeat_at, expires_at, claimed_at, takeovers) VALUES {values}"
                " ON CONFLICT (space, principal, page) DO UPDATE SET fence = c.fence + 1,"
                " host = excluded.host, pid = excluded.pid, nonce = excluded.nonce,"
                " heartbeat_at = excluded.heartbeat_at, expires_at = excluded.expires_at,"
                " claimed_at = excluded.claimed_at WHERE c.nonce IS NULL AND c.expires_at < ?"
                " RETURNING principal, page, fence",
                [*params, CLOSED_AT],
                lock=space,
            )
            for principal, page, fence in rows:
                out[(str(principal), str(page))] = int(fence)
        return out

    def steal(
        self, row: ClaimRow, owner: Owner, now: float, lease: float, reason: str
    ) -> int | None:
        old = row.owner
        same_owner = (
            "nonce IS NULL"
            if old is None
            else "host = ? AND pid = ? AND nonce = ?"  # the exact owner the caller saw
        )
        params: list[Any] = [owner.host, owner.pid, owner.nonce, now, now + lease, now]
        params += [reason, row.space, row.principal, row.page, row.fence, row.heartbeat_at]
        if old is not None:
            params += [old.host, old.pid, old.nonce]
        expired = ""
        if reason == "lease-expired":
            expired = " AND expires_at < ?"
            params.append(now)
        rows = self._exec(
            f"UPDATE {self._t} SET taken_from = CASE WHEN nonce IS NULL THEN NULL ELSE"
            " host || ':' || CAST(pid AS TEXT) || ':' || SUBSTR(nonce, 1, 8) END,"
            " host = ?, pid = ?, nonce = ?, heartbeat_at = ?, expires_at = ?, claimed_at = ?,"
            " taken_reason = ?, takeovers = takeovers + 1, fence = fence + 1"
            " WHERE space = ? AND principal = ? AND page = ? AND fence = ? AND heartbeat_at = ?"
            f" AND {same_owner}{expired} RETURNING fence",
            params,
        )
        return int(rows[0][0]) if rows else None

    def steal_many(
        self, taken: Sequence[tuple[ClaimRow, str]], owner: Owner, now: float, lease: float
    ) -> dict[PageRef, int]:
        out: dict[PageRef, int] = {}
        owned = sorted(
            ((row, reason) for row, reason in taken if row.owner is not None),
            key=lambda t: t[0].ref,
        )
        for start in range(0, len(owned), BATCH):
            chunk = owned[start : start + BATCH]
            if self._postgres:
                out.update(self._steal_locked(chunk, owner, now, lease))
                continue
            # Per row: the exact snapshot the taker saw, and whether the lease must
            # have expired (v.column9 = 1) for this takeover.
            values = ", ".join(["(?, ?, ?, ?, ?, ?, ?, ?, ?)"] * len(chunk))
            params: list[Any] = [owner.host, owner.pid, owner.nonce, now, now + lease, now]
            for row, reason in chunk:
                old = row.owner
                assert old is not None
                params += [row.principal, row.page, row.fence, row.heartbeat_at]
                params += [old.host, old.pid, old.nonce, reason]
                params.append(1 if reason == "lease-expired" else 0)
            params += [row.space if chunk else "", now]
            rows = self._exec(
                f"UPDATE {self._t} AS c SET taken_from = c.host || ':' || CAST(c.pid AS TEXT)"
                " || ':' || SUBSTR(c.nonce, 1, 8), host = ?, pid = ?, nonce = ?,"
                " heartbeat_at = ?, expires_at = ?, claimed_at = ?, taken_reason = v.column8,"
                " takeovers = c.takeovers + 1, fence = c.fence + 1"
                f" FROM (VALUES {values}) AS v"
                " WHERE c.space = ? AND c.principal = v.column1 AND c.page = v.column2"
                " AND c.fence = v.column3 AND c.heartbeat_at = v.column4 AND c.host = v.column5"
                " AND c.pid = v.column6 AND c.nonce = v.column7"
                " AND (v.column9 = 0 OR c.expires_at < ?)"
                " RETURNING principal, page, fence",
                params,
            )
            for principal, page, fence in rows:
                out[(str(principal), str(page))] = int(fence)
        return out

    def _steal_locked(
        self, chunk: Sequence[tuple[ClaimRow, str]], owner: Owner, now: float, lease: float
    ) -> dict[PageRef, int]:
        """PostgreSQL: the steals of one chunk, taking only rows nobody else has locked
        (`FOR UPDATE SKIP LOCKED`, in page order). Two takers of one dead owner's pages
        locked rows in different orders and deadlocked: the server noticed after a
        second (`deadlock_timeout`) and failed one, a heartbeat lost. A row another
        statement holds (a taker, its owner's renewal) is being changed anyway; it is
        left out, as a row that moved is."""
        space = chunk[0][0].space
        values = ", ".join(["(?, ?, ?, ?, ?, ?, ?, ?, ?)"] * len(chunk))
        params: list[Any] = []
        for row, reason in chunk:
            old = row.owner
            assert old is not None
            params += [row.principal, row.page, row.fence, row.heartbeat_at]
            params += [old.host, old.pid, old.nonce, reason]
            params.append(1 if reason == "lease-expired" else 0)
        params += [space, owner.host, owner.pid, owner.nonce, now, now + lease, now, space, now]
        rows = self._exec(
            f"WITH v (principal, page, fence, hb, host, pid, nonce, reason, need) AS"
            f" (VALUES {values}), target AS (SELECT c.principal, c.page FROM {self._t} AS c"
            " JOIN v ON c.principal = v.principal AND c.page = v.page WHERE c.space = ?"
            " ORDER BY c.principal, c.page FOR UPDATE OF c SKIP LOCKED)"
            f" UPDATE {self._t} AS c SET taken_from = c.host || ':' || CAST(c.pid AS TEXT)"
            " || ':' || SUBSTR(c.nonce, 1, 8), host = ?, pid = ?, nonce = ?,"
            " heartbeat_at = ?, expires_at = ?, claimed_at = ?, taken_reason = v.reason,"
            " takeovers = c.takeovers + 1, fence = c.fence + 1 FROM v, target"
            " WHERE c.space = ? AND c.principal = target.principal AND c.page = target.page"
            " AND c.principal = v.principal AND c.page = v.page AND c.fence = v.fence"
            " AND c.heartbeat_at = v.hb AND c.host = v.host AND c.pid = v.pid"
            " AND c.nonce = v.nonce AND (v.need = 0 OR c.expires_at < ?)"
            " RETURNING c.principal, c.page, c.fence",
            params,
        )
        return {(str(p), str(g)): int(f) for p, g, f in rows}

    def renew(self, space: str, owner: Owner, now: float, lease: float) -> dict[PageRef, int]:
        rows = self._exec(
            f"UPDATE {self._t} SET heartbeat_at = ?, expires_at = ?"
            " WHERE nonce = ? AND space = ? AND host = ? AND pid = ?"
            " RETURNING principal, page, fence",
            [now, now + lease, owner.nonce, space, owner.host, owner.pid],
        )
        return {(str(p), str(g)): int(f) for p, g, f in rows}

    def release(
        self,
        space: str,
        owner: Owner,
        pages: Sequence[tuple[str, str, int]],
        now: float,
        *,
        closed: bool = False,
    ) -> int:
        if not pages:
            return 0
        until = CLOSED_AT if closed else now
        stamp = "heartbeat_at = ?," if closed else ""  # a closed row: when it closed
        n = 0
        for start in range(0, len(pages), BATCH):
            chunk = pages[start : start + BATCH]
            match = " OR ".join(["(principal = ? AND page = ? AND fence = ?)"] * len(chunk))
            params: list[Any] = [now] if closed else []
            params += [until, space, owner.nonce, owner.host, owner.pid]
            for principal, page, fence in chunk:
                params += [principal, page, fence]
            rows = self._exec(
                f"UPDATE {self._t} SET {stamp} host = NULL, pid = NULL, nonce = NULL,"
                " expires_at = ?"
                f" WHERE space = ? AND nonce = ? AND host = ? AND pid = ? AND ({match})"
                " RETURNING page",
                params,
            )
            n += len(rows)
        return n

    def close(self, space: str, principal: str, page: str, now: float) -> bool:
        rows = self._exec(
            f"UPDATE {self._t} SET host = NULL, pid = NULL, nonce = NULL, expires_at = ?,"
            " heartbeat_at = ?"
            " WHERE space = ? AND principal = ? AND page = ? AND expires_at < ?"
            " RETURNING page",
            [CLOSED_AT, now, space, principal, page, CLOSED_AT],
        )
        return bool(rows)

    def sweep_closed(self, space: str, before: float, limit: int) -> int:
        closed = (
            "space = ? AND principal <> '' AND nonce IS NULL AND expires_at >= ?"
            " AND heartbeat_at < ?"
        )
        params = [space, CLOSED_AT, before]
        # The fence floor over every row the deletion may take (a superset, as ties in
        # the order may pick others), then the deletion.
        delete = (
            f"DELETE FROM {self._t} WHERE (space, principal, page) IN (SELECT space, principal,"
            f" page FROM {self._t} WHERE {closed} ORDER BY heartbeat_at LIMIT ?)"
            " RETURNING page"
        )
        return self._delete_raising_floor(space, closed, params, delete, [*params, limit])

    def forget(self, space: str, rows: Sequence[ClaimRow], now: float) -> int:
        n = 0
        for start in range(0, len(rows), BATCH):
            n += self._forget(space, rows[start : start + BATCH], now)
        return n

    def _forget(self, space: str, rows: Sequence[ClaimRow], now: float) -> int:
        if not rows:
            return 0
        # Each row only as read (owner, fence, heartbeat): a row claimed, renewed or
        # taken since is left alone. Never a closed row (the closed sweep's), never one
        # whose owner's lease still runs.
        match: list[str] = []
        params: list[Any] = [space, CLOSED_AT, now]
        for row in rows:
            params += [row.principal, row.page, row.fence, row.heartbeat_at]
            if row.owner is None:
                match.append(
                    "(principal = ? AND page = ? AND fence = ? AND heartbeat_at = ?"
                    " AND nonce IS NULL)"
                )
            else:
                match.append(
                    "(principal = ? AND page = ? AND fence = ? AND heartbeat_at = ?"
                    " AND nonce = ? AND host = ? AND pid = ?)"
                )
                params += [row.owner.nonce, row.owner.host, row.owner.pid]
        where = (
            "space = ? AND principal <> '' AND expires_at < ?"
            f" AND (nonce IS NULL OR expires_at < ?) AND ({' OR '.join(match)})"
        )
        delete = f"DELETE FROM {self._t} WHERE {where} RETURNING page"
        return self._delete_raising_floor(space, where, params, delete, params)

    def reopen(self, space: str, principal: str, page: str) -> bool:
        rows = self._exec(
            f"UPDATE {self._t} SET expires_at = 0 WHERE space = ? AND principal = ? AND page = ?"
            " AND nonce IS NULL AND expires_at >= ? RETURNING page",
            [space, principal, page, CLOSED_AT],
        )
        return bool(rows)

    def release_all(self, space: str, owner: Owner, now: float) -> int:
        rows = self._exec(
            f"UPDATE {self._t} SET host = NULL, pid = NULL, nonce = NULL, expires_at = ?"
            " WHERE space = ? AND nonce = ? AND host = ? AND pid = ? RETURNING page",
            [now, space, owner.nonce, owner.host, owner.pid],
        )
        return len(rows)

    def stale(self, space: str, now: float, me: Owner, limit: int) -> list[ClaimRow]:
        rows = self._exec(
            f"SELECT {_COLS} FROM {self._t} WHERE space = ?"
            " AND (nonce IS NULL OR nonce <> ?)"
            " AND (expires_at < ? OR (nonce IS NULL AND expires_at <= ?)"
            " OR (nonce IS NOT NULL AND host = ?))"
            " ORDER BY expires_at, principal, page LIMIT ?",
            [space, me.nonce, now, now, me.host, limit],
        )
        return [_row(r) for r in rows]

    def page_docs(self, space: str, doc_id: str) -> list[str]:
        rows = self._exec(
            f"SELECT principal FROM {self._head} WHERE space = ? AND doc_id = ?"
            " AND scope = 'user' ORDER BY principal",
            [space, doc_id],
        )
        return [str(r[0]) for r in rows]

    def rows(self, space: str) -> list[ClaimRow]:
        rows = self._exec(
            f"SELECT {_COLS} FROM {self._t} WHERE space = ? AND principal <> ''"
            " ORDER BY principal, page",
            [space],
        )
        return [_row(r) for r in rows]
