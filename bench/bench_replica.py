"""Benchmarks of the replica and the memory store at scale: cost that grows only with the work.

Groups
------
``wide commit``
    One op is one document read in one commit: a transaction reads N
    documents that each still hold an unconfirmed local write (N commits
    sent, their verdicts not yet delivered), writes one more, and commits; the
    store evaluates it inside the timed region, and the finish (untimed)
    delivers every verdict and checks the commit was accepted. N = 1,000
    (the baseline), 10,000 and 50,000: the time per document should stay
    flat (the deps of the read documents used to be merged and looked up in
    a tuple, O(N^2)).
``shared store``
    One op is one commit of one runtime's own document on a `MemoryStore`
    shared by r replicas (r = 1, the baseline, 10 and 50), its verdict
    processed; after the last commit every other replica is pumped once,
    taking all it was handed (inside the timed region). Each other replica
    holds a document of its own, none holds the committed one, except in the
    last row, where one other replica has loaded it too (it must receive the
    commit). Counted: commits, and the
    foreign deliveries the other replicas drained; the time should not grow
    with r (a commit used to be handed to every replica, reader or not).

Both groups count what happened from the replicas' own counters and
mailboxes and assert it.
"""

from __future__ import annotations

from bench.harness import BenchError, Counts, Finish, Run, bench
from cells import DocKey, Identity, MemoryStore, Replica

ME = Identity("local", "local")
WIDE_SIZES = (1_000, 10_000, 50_000)
SHARED_SIZES = (1, 10, 50)
SHARED_COMMITS = 2_000


def _key(name: str, i: int) -> DocKey:
    return DocKey("bench", f"{name}-{i}")


# ---------------------------------------------------------------------------- wide commit


def _wide(n: int) -> None:
    @bench(
        group="wide commit", name=f"read {n:,} docs with pending writes", ops=n, baseline=n == 1000
    )
    def wide() -> Run:
        replica = Replica(MemoryStore())
        keys = [_key("in", i) for i in range(n)]
        for i, key in enumerate(keys):  # one commit each, verdicts left undelivered
            tx = replica.edit(ME)
            tx.write(key, ("value",), i)
            tx.commit()
        if replica.in_flight() != n:
            raise BenchError(f"wide commit {n}: {replica.in_flight()} commits in flight, not {n}")
        out = _key("out", 0)
        sent = replica.stats.commits_sent

        def run() -> Finish:
            tx = replica.edit(ME)
            total = 0
            for key in keys:
                total += tx.read(key, ("value",))
            tx.write(out, ("value",), total)
            pending = tx.commit()

            def finish() -> Counts:
                replica.pump()
                result = pending.result()
                if not result.ok:
                    raise BenchError(f"wide commit {n}: not accepted: {result!r}")
                if replica.visible(out) != {"value": n * (n - 1) // 2}:
                    raise BenchError(f"wide commit {n}: wrong sum {replica.visible(out)!r}")
                return {"docs_read": n, "commits": replica.stats.commits_sent - sent}

            return finish

        return run


for _n in WIDE_SIZES:
    _wide(_n)


# ---------------------------------------------------------------------------- shared store


def _shared(r: int, *, reader: bool = False) -> None:
    name = f"commit, {r} replica{'s' if r > 1 else ''}" + (" (1 other reads it)" if reader else "")

    @bench(group="shared store", name=name, ops=SHARED_COMMITS, baseline=r == 1)
    def shared() -> Run:
        store = MemoryStore()
        replicas = [Replica(store) for _ in range(r)]
        writer, others = replicas[0], replicas[1:]
        doc = _key("doc", 0)
        tx = writer.edit(ME)
        tx.write(doc, ("value",), -1)
        tx.commit().wait()
        for i, other in enumerate(others):  # each holds a document of its own
            tx = other.edit(ME)
            tx.write(_key("own", i), ("value",), 0)
            tx.commit().wait()
        if reader:
            others[0].visible(doc)
        for replica in replicas:
            replica.pump()
        start = writer.stats.accepted

        def run() -> Counts:
            for i in range(SHARED_COMMITS):
                tx = writer.edit(ME)
                tx.write(doc, ("value",), i)
                tx.commit()
                writer.pump()
            # Every other replica then takes what the commits left it (what its own
            # loop would do, once, in its next turn).
            delivered = sum(other.pump() for other in others)
            accepted = writer.stats.accepted - start
            expected = SHARED_COMMITS if reader else 0
            if accepted != SHARED_COMMITS or delivered != expected:
                raise BenchError(
                    f"shared store r={r}: {accepted} accepted, {delivered} foreign deliveries;"
                    f" expected {SHARED_COMMITS} and {expected}"
                )
            if reader and others[0].visible(doc) != {"value": SHARED_COMMITS - 1}:
                raise BenchError(f"shared store r={r}: the reader did not integrate the commits")
            return {"commits": accepted, "foreign": delivered}

        return run


for _r in SHARED_SIZES:
    _shared(_r)
_shared(SHARED_SIZES[-1], reader=True)
