"""Page claims: which process runs each open page, with a lease and a fence.

A store keeps one claim row per page that a serving process ever claimed:
the page (space, principal, page id), its `fence` (a generation that grows by
one with every claim of the page, never reused), the owner (`Owner`: host,
process id, per-start nonce) or none once released, the last heartbeat and
the time the lease expires, and the last takeover (from whom, and why).

Every operation is one statement in one store transaction, decided by the
store on the row it holds (compare-and-set), never on a value a caller read
earlier:

- `claim` takes pages nobody owns (no row, or released), in one statement;
- `renew` stamps every claim of an owner at once (the heartbeat: one
  statement however many pages it holds) and returns the ones still its own;
- `steal` takes a page from another owner only if the row is exactly the one
  the caller saw (same owner, fence and heartbeat) and, for the reason
  "lease-expired", only if the lease has expired at the time the caller gives;
- `release` gives pages up (the row stays, with its fence, ownerless): for
  another process to take at once (a shutdown), or `closed` (the page was
  stopped: nobody takes it until it is open again and claimed afresh).
- `sweep_closed` deletes rows of pages closed a while ago (bounded per call), so
  the table holds the pages open now and those stopped recently, not every page
  ever served; the space's fence floor remembers the highest fence deleted;
- `forget` deletes rows a serving process found no open page for (the page's
  record vanished without a stop: its row was released, or its owner's lease
  ran out), each only if still exactly as read, under the same fence floor.

A commit that carries a `Fence` is accepted only while that fence is the
page's claim and it has an owner: the store checks it in the transaction that
applies the commit (`fence_error`), so a process that lost a page (paused past
its lease, partitioned) can never write for it after the takeover.

Times are seconds on the callers' clocks (wall time in production, a test
clock in tests): processes on different hosts must keep their clocks in step
to well within a lease.
"""

from __future__ import annotations

import abc
import threading
from collections.abc import Callable, Iterable, Sequence

import msgspec

from ._address import DocKey
from .errors import FencedError


class Fence(msgspec.Struct, frozen=True, gc=False):
    """A page's claim, as a commit carries it: the page and the claim's generation."""

    space: str
    principal: str
    page: str
    generation: int


PageRef = tuple[str, str]
"""(principal, page id): a page within a space."""


class Owner(msgspec.Struct, frozen=True, gc=False):
    """Who holds a claim: a process on a host, in one start of it.

    Two owners are the same only if all three match: a restarted process gets a new
    nonce, so it never takes an old claim of its pid for its own."""

    host: str
    pid: int
    nonce: str

    def __str__(self) -> str:
        return f"{self.host}:{self.pid}:{self.nonce[:8]}"


class ClaimRow(msgspec.Struct, frozen=True, gc=False):
    """One page's claim as the store holds it."""

    space: str
    principal: str
    page: str
    fence: int
    owner: Owner | None
    heartbeat_at: float
    expires_at: float
    claimed_at: float
    taken_from: str | None = None
    """The owner the last takeover took the page from (`str(Owner)`), if any."""
    taken_reason: str | None = None
    """Why: "lease-expired" or "owner-gone" (a probe found the owner's process gone)."""
    takeovers: int = 0

    @property
    def ref(self) -> PageRef:
        return (self.principal, self.page)

    def as_dict(self) -> dict[str, object]:
        return {
            "principal": self.principal,
            "page": self.page,
            "owner": None if self.owner is None else str(self.owner),
            "fence": self.fence,
            "heartbeat_at": self.heartbeat_at,
            "expires_at": self.expires_at,
            "takeovers": self.takeovers,
            "taken_from": self.taken_from,
            "taken_reason": self.taken_reason,
        }


STEAL_REASONS = ("lease-expired", "owner-gone")

CLOSED_AT = 1e18
"""`expires_at` of a claim released because its page was stopped: never stale."""


def fenced_message(fence: Fence, current: int | None, owned: bool) -> str:
    where = f"page {fence.page} of {fence.principal!r} in space {fence.space!r}"
    if current is None:
        why = "the page has no claim"
    elif current != fence.generation:
        why = f"the page's claim is now fence {current}"
    else:
        why = "the claim was released"
    return (
        f"commit fenced out: it was made under fence {fence.generation} of {where}, but"
        f" {why}; another process owns the page now (or nobody does), so this one may no"
        " longer write for it"
    )


class ClaimTable(abc.ABC):
    """A store's claim rows (`store.claims`). Every method is one store transaction."""

    @abc.abstractmethod
    def claim(
        self, space: str, owner: Owner, pages: Sequence[PageRef], now: float, lease: float
    ) -> dict[PageRef, int]:
        """Claim those of `pages` nobody owns (and not closed by a stop since their last
        open); returns the ones claimed, with their fence."""

    @abc.abstractmethod
    def steal(
        self, row: ClaimRow, owner: Owner, now: float, lease: float, reason: str
    ) -> int | None:
        """Take `row`'s page if the row is unchanged (owner, fence, heartbeat) and, for
        "lease-expired", its lease expired before `now`. The new fence, or None."""

    @abc.abstractmethod
    def steal_many(
        self, taken: Sequence[tuple[ClaimRow, str]], owner: Owner, now: float, lease: float
    ) -> dict[PageRef, int]:
        """`steal` for each (row, reason), in one statement; returns the pages taken,
        with their new fences (a row that moved is left out)."""

    @abc.abstractmethod
    def renew(self, space: str, owner: Owner, now: float, lease: float) -> dict[PageRef, int]:
        """Extend every claim `owner` holds in `space` (one statement); returns them."""

    @abc.abstractmethod
    def release(
        self,
        space: str,
        owner: Owner,
        pages: Sequence[tuple[str, str, int]],
        now: float,
        *,
        closed: bool = False,
    ) -> int:
        """Give up the claims (principal, page, fence) that are still `owner`'s; how many.
        `closed`: the pages were stopped, so `stale` does not offer them to anyone."""

    @abc.abstractmethod
    def close(self, space: str, principal: str, page: str, now: float) -> bool:
        """A stop of the page (from any process) at `now`: its claim, whoever holds it,
        ends as closed, so the owner's commits for it are rejected from now on and
        nobody takes it over. A released claim (nobody held the page) is closed too:
        left released, the sweep for stale claims would offer it at every heartbeat,
        oldest first, ahead of the claims that need taking over. Whether a claim that
        was not closed yet is closed now."""

    @abc.abstractmethod
    def sweep_closed(self, space: str, before: float, limit: int) -> int:
        """Delete at most `limit` rows of pages closed (stopped) before `before`, oldest
        first, raising the space's fence floor to cover them (a page claimed afresh
        starts above it, so a fence is never issued twice); how many."""

    @abc.abstractmethod
    def forget(self, space: str, rows: Sequence[ClaimRow], now: float) -> int:
        """Delete those of `rows` (read from `stale`) that are still exactly as read (owner,
        fence, heartbeat), not closed, and ownerless or expired at `now`, raising the
        space's fence floor to cover them, in one transaction; how many. For rows of
        pages whose record vanished without a stop: nobody would ever claim or close
        them, and `stale` would offer them ahead of the claims that need taking over."""

    @abc.abstractmethod
    def reopen(self, space: str, principal: str, page: str) -> bool:
        """The page was opened again (its record is durable): a claim closed by an
        earlier stop becomes claimable. Until then `claim` does not take it, so a
        process whose view of the pages still shows the stopped page open cannot
        bring it back. Whether a closed claim was reopened."""

    @abc.abstractmethod
    def release_all(self, space: str, owner: Owner, now: float) -> int:
        """Give up every claim `owner` holds in `space` (shutdown); how many."""

    @abc.abstractmethod
    def stale(self, space: str, now: float, me: Owner, limit: int) -> list[ClaimRow]:
        """Rows `me` might take, oldest lease first, at most `limit`: released (not
        closed) and expired ones, and, for a liveness probe, the others of `me`'s host."""

    @abc.abstractmethod
    def rows(self, space: str) -> list[ClaimRow]:
        """Every claim row of `space` (for inspection)."""

    @abc.abstractmethod
    def page_docs(self, space: str, doc_id: str) -> list[str]:
        """The principals that have a user-scoped document `doc_id` in `space` (a serving
        process finds every principal's pages document with it). One statement."""

    statements = 0
    """Statements run so far (for benchmarks: the heartbeat's cost)."""


class MemoryClaimTable(ClaimTable):
    """`MemoryStore`'s claims, under the store's lock (one process: for tests)."""

    def __init__(self, lock: threading.RLock, keys: Callable[[], Iterable[DocKey]]) -> None:
        self._lock = lock
        self._keys = keys
        self._rows: dict[tuple[str, str, str], ClaimRow] = {}
        self._floor: dict[str, int] = {}
        """Per space: the highest fence of a deleted row (a new row starts above it)."""

    def fence_error(self, fence: Fence) -> FencedError | None:
        """Call with the store's lock held, in the commit's evaluation."""
        row = self._rows.get((fence.space, fence.principal, fence.page))
        if row is not None and row.fence == fence.generation and row.owner is not None:
            return None
        return FencedError(
            fenced_message(fence, None if row is None else row.fence, row is not None)
        )

    def claim(
        self, space: str, owner: Owner, pages: Sequence[PageRef], now: float, lease: float
    ) -> dict[PageRef, int]:
        out: dict[PageRef, int] = {}
        with self._lock:
            self.statements += 1
            for principal, page in pages:
                k = (space, principal, page)
                row = self._rows.get(k)
                if row is not None and (row.owner is not None or row.expires_at >= CLOSED_AT):
                    continue
                fence = self._floor.get(space, 0) + 1 if row is None else row.fence + 1
                self._rows[k] = ClaimRow(
                    space,
                    principal,
                    page,
                    fence,
                    owner,
                    now,
                    now + lease,
                    now,
                    None if row is None else row.taken_from,
                    None if row is None else row.taken_reason,
                    0 if row is None else row.takeovers,
                )
                out[(principal, page)] = fence
        return out

    def steal(
        self, row: ClaimRow, owner: Owner, now: float, lease: float, reason: str
    ) -> int | None:
        with self._lock:
            self.statements += 1
            k = (row.space, row.principal, row.page)
            cur = self._rows.get(k)
            if (
                cur is None
                or cur.owner != row.owner
                or cur.fence != row.fence
                or cur.heartbeat_at != row.heartbeat_at
                or (reason == "lease-expired" and not cur.expires_at < now)
            ):
                return None
            fence = cur.fence + 1
            self._rows[k] = ClaimRow(
                row.space,
                row.principal,
                row.page,
                fence,
                owner,
                now,
                now + lease,
                now,
                None if cur.owner is None else str(cur.owner),
                reason,
                cur.takeovers + 1,
            )
            return fence

    def steal_many(
        self, taken: Sequence[tuple[ClaimRow, str]], owner: Owner, now: float, lease: float
    ) -> dict[PageRef, int]:
        out: dict[PageRef, int] = {}
        with self._lock:
            for row, reason in taken:
                fence = self.steal(row, owner, now, lease, reason)
                if fence is not None:
                    out[row.ref] = fence
            self.statements -= max(0, len(taken) - 1)  # one statement, as in SQL
        return out

    def renew(self, space: str, owner: Owner, now: float, lease: float) -> dict[PageRef, int]:
        out: dict[PageRef, int] = {}
        with self._lock:
            self.statements += 1
            for k, row in self._rows.items():
                if k[0] == space and row.owner == owner:
                    self._rows[k] = msgspec.structs.replace(
                        row, heartbeat_at=now, expires_at=now + lease
                    )
                    out[row.ref] = row.fence
        return out

    def release(
        self,
        space: str,
        owner: Owner,
        pages: Sequence[tuple[str, str, int]],
        now: float,
        *,
        closed: bool = False,
    ) -> int:
        n = 0
        until = CLOSED_AT if closed else now
        with self._lock:
            self.statements += 1
            for principal, page, fence in pages:
                k = (space, principal, page)
                row = self._rows.get(k)
                if row is not None and row.owner == owner and row.fence == fence:
                    stamp = now if closed else row.heartbeat_at  # a closed row: when
                    self._rows[k] = msgspec.structs.replace(
                        row, owner=None, expires_at=until, heartbeat_at=stamp
                    )
                    n += 1
        return n

    def close(self, space: str, principal: str, page: str, now: float) -> bool:
        with self._lock:
            self.statements += 1
            row = self._rows.get((space, principal, page))
            if row is None or row.expires_at >= CLOSED_AT:
                return False
            self._rows[(space, principal, page)] = msgspec.structs.replace(
                row, owner=None, expires_at=CLOSED_AT, heartbeat_at=now
            )
            return True

    def sweep_closed(self, space: str, before: float, limit: int) -> int:
        with self._lock:
            self.statements += 1
            closed = sorted(
                (
                    r
                    for r in self._rows.values()
                    if r.space == space
                    and r.owner is None
                    and r.expires_at >= CLOSED_AT
                    and r.heartbeat_at < before
                ),
                key=lambda r: r.heartbeat_at,
            )[:limit]
            for r in closed:
                del self._rows[(space, r.principal, r.page)]
                self._floor[space] = max(self._floor.get(space, 0), r.fence)
            return len(closed)

    def forget(self, space: str, rows: Sequence[ClaimRow], now: float) -> int:
        n = 0
        with self._lock:
            self.statements += 1
            for row in rows:
                k = (space, row.principal, row.page)
                cur = self._rows.get(k)
                if (
                    cur is not None
                    and cur.owner == row.owner
                    and cur.fence == row.fence
                    and cur.heartbeat_at == row.heartbeat_at
                    and cur.expires_at < CLOSED_AT
                    and (cur.owner is None or cur.expires_at < now)
                ):
                    del self._rows[k]
                    self._floor[space] = max(self._floor.get(space, 0), cur.fence)
                    n += 1
        return n

    def reopen(self, space: str, principal: str, page: str) -> bool:
        with self._lock:
            self.statements += 1
            row = self._rows.get((space, principal, page))
            if row is None or row.owner is not None or row.expires_at < CLOSED_AT:
                return False
            self._rows[(space, principal, page)] = msgspec.structs.replace(row, expires_at=0.0)
            return True

    def release_all(self, space: str, owner: Owner, now: float) -> int:
        with self._lock:
            mine = [(r.principal, r.page, r.fence) for r in self.rows(space) if r.owner == owner]
            self.statements -= 1  # `rows` is not a statement of its own here
            return self.release(space, owner, mine, now)

    def stale(self, space: str, now: float, me: Owner, limit: int) -> list[ClaimRow]:
        with self._lock:
            self.statements += 1
            found = [
                r
                for r in self._rows.values()
                if r.space == space
                and r.owner != me
                and (
                    r.expires_at < now
                    or (r.owner is None and r.expires_at <= now)
                    or (r.owner is not None and r.owner.host == me.host)
                )
            ]
        found.sort(key=lambda r: (r.expires_at, r.principal, r.page))
        return found[:limit]

    def page_docs(self, space: str, doc_id: str) -> list[str]:
        with self._lock:
            self.statements += 1
            return sorted(
                k.principal
                for k in self._keys()
                if k.space == space and k.id == doc_id and k.scope == "user"
            )

    def rows(self, space: str) -> list[ClaimRow]:
        with self._lock:
            self.statements += 1
            return sorted(
                (r for r in self._rows.values() if r.space == space),
                key=lambda r: (r.principal, r.page),
            )
