"""Claims crash trials on PostgreSQL: ``python -m bench.crash_trials_pg [--kills 100]``.

`make crash-trials-pg` runs this (minutes; not part of `make test`). It starts a
throwaway cluster (bench/pg_cluster.py), opens `--pages` pages for one principal
(each doubles the value of its own input cell, so its run writes on every input
change), and starts three serving processes (`--workers`), each a
`rt.serve_pages(lease, heartbeat)`. The lease and heartbeat are the trial's own
options (`--lease`, default 1 s; `--heartbeat`, default a fifth of the lease), far
shorter than the product's defaults (10 s, 2 s) so that 100 kills take minutes;
they are printed with the machine's load average at the start, every ten kills and
at the end (a takeover needs CPU: on a loaded machine the tail is starvation).

While a writer in this process keeps changing inputs (each change counted once its
commit was acknowledged) and now and then stops a page (counted once the stop
resolved), one serving process at a time is killed with SIGKILL at a random moment,
`--kills` times, and started again. Each serving process writes, for every commit of
a claimed page's run whose verdict it received, one line with the page, the fence
and the verdict (seq or rejection) to its stdout pipe (one `os.write`, which
outlives a kill). Then one process is paused with SIGSTOP past its lease, its pages
are taken over, inputs of those pages change, and it is resumed with SIGCONT.

Checked at the end (exit status 1 if any check fails):

- fences: per page, the accepted commits ordered by seq carry non-decreasing fences
  (a commit under an older claim is never accepted after one under a newer claim:
  at most one owner's commits are accepted for a page at any moment);
- takeover: every page a killed process held has a new owner within two lease
  windows of the kill (the distribution is printed, and the reasons);
- no acknowledged write lost: every input holds its last acknowledged value, and
  every open page's output is twice it (the served pages were kept computed);
- no stopped page resumes: a stopped page's input is changed after the stop was
  acknowledged, and its output never follows;
- SIGSTOP: the paused process's commits after the takeover were all rejected
  (fenced), none accepted;
- clean shutdown (SIGTERM) releases every claim.

What is not checked: commits whose verdict a process did not receive before it was
killed are not in its log (the store has no per-commit fence history); the outputs
and the fences of everything logged are.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import itertools
import os
import random
import signal
import statistics
import subprocess
import sys
import threading
import time
from typing import Any, ClassVar

import psycopg

from bench.pg_cluster import Cluster
from cells import Cell, CommitRequest, Link, entity_id
from runner import Runtime, lift, pattern

SPACE = "default"
SCHEMA = "crash"


def double(v: Any) -> Any:
    return None if v is None else v * 2


@pattern
def Doubler(value):  # type: ignore[no-untyped-def]
    return {"doubled": lift(double)(value)}


def page_id(link: Link) -> str:
    """The id a claim row names a page by (the runner derives it from the page's link)."""
    return entity_id([link.space, link.id, link.scope, list(link.path)])


# ---------------------------------------------------------------------------- serving child


def _line(text: str) -> None:
    data = (text + "\n").encode()
    while data:
        data = data[os.write(1, data) :]


async def _child(dsn: str, lease: float, heartbeat: float) -> None:
    from cells import PostgresStore

    store = PostgresStore(dsn, schema=SCHEMA, poll_interval=0.2)
    rt = Runtime(store, principal="worker")
    replica = rt.replica
    on_verdict = replica.on_verdict
    on_accepted = replica.on_accepted

    def logged_verdict(request: CommitRequest, verdict: Any) -> None:
        fence = request.fence
        if fence is not None:
            if verdict.seq is not None:
                _line(f"C {fence.page} {fence.generation} {verdict.seq}")
            else:
                _line(f"R {fence.page} {fence.generation} {type(verdict.error).__name__}")
        on_verdict(request, verdict)

    def logged_accepted(request: CommitRequest, seq: int, base_seq: int, value: Any) -> None:
        fence = request.fence
        if fence is not None:
            _line(f"C {fence.page} {fence.generation} {seq}")
        on_accepted(request, seq, base_seq, value)

    replica.on_verdict = logged_verdict  # type: ignore[method-assign]
    replica.on_accepted = logged_accepted  # type: ignore[method-assign]
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    async with rt:
        server = await rt.serve_pages(lease=lease, heartbeat=heartbeat)
        _line(f"READY {server.owner.nonce}")
        await stop.wait()
        await server.stop()
        _line("STOPPED")
    store.close()


# ---------------------------------------------------------------------------- the parent


class Child:
    started: ClassVar[list[Child]] = []

    def __init__(self, dsn: str, lease: float, heartbeat: float) -> None:
        Child.started.append(self)
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "bench.crash_trials_pg",
                "--child",
                dsn,
                str(lease),
                str(heartbeat),
            ],
            stdout=subprocess.PIPE,
        )
        self.lines: list[str] = []
        self.ready = threading.Event()
        self.nonce = ""
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            line = raw.decode().strip()
            if line.startswith("READY "):
                self.nonce = line.split()[1]
                self.ready.set()
            self.lines.append(line)

    def kill(self, sig: int = signal.SIGKILL) -> None:
        self.proc.send_signal(sig)
        if sig in (signal.SIGKILL, signal.SIGTERM):
            self.proc.wait()  # reaped at once: a zombie would still answer the pid probe
            self.reader.join()


_observer: dict[str, psycopg.Connection[Any]] = {}


def _claims(dsn: str, pages: Any = None) -> dict[str, tuple[str | None, int]]:
    """page -> (owner nonce, fence); only `pages` if given (the takeover timing polls
    the pages still waiting, every 10 ms: reading every row each time was load the
    measurement itself put on the cores the serving processes share)."""
    # One connection for every look: a new connection each time had the server fork a
    # backend 100 times a second.
    conn = _observer.get(dsn)
    if conn is None or conn.closed:
        conn = _observer[dsn] = psycopg.connect(dsn, autocommit=True)
    sql = f"SELECT page, nonce, fence FROM {SCHEMA}.claims WHERE space = %s AND principal <> ''"
    params: tuple[Any, ...] = (SPACE,)
    if pages is not None:
        sql += " AND page = ANY(%s)"
        params += (list(pages),)
    return {
        str(page): (None if nonce is None else str(nonce), int(fence))
        for page, nonce, fence in conn.execute(sql, params)
    }


def _load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.1f} {five:.1f} {fifteen:.1f} ({os.cpu_count()} cores)"


def _reasons(dsn: str) -> collections.Counter[str]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return collections.Counter(
            str(r[0]) for r in conn.execute(f"SELECT taken_reason FROM {SCHEMA}.claims") if r[0]
        )


def _seq(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(f"SELECT seq FROM {SCHEMA}.counter WHERE id = 1").fetchone()
        assert row is not None
        return int(row[0])


def _wait_all_claimed(dsn: str, pages: set[str], alive: set[str], timeout: float) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        rows = _claims(dsn)
        if all(rows.get(p, (None, 0))[0] in alive for p in pages):
            return time.monotonic() - start
        time.sleep(0.01)
    raise SystemExit(f"pages were not all claimed by live owners within {timeout} s")


async def _trial(args: argparse.Namespace, dsn: str) -> int:
    from cells import PostgresStore

    rng = random.Random(args.seed)
    lease = args.lease
    heartbeat = args.heartbeat if args.heartbeat is not None else lease / 5
    print(
        f"lease {lease} s, heartbeat {heartbeat} s (the product's defaults: 10 s, 2 s);"
        f" {args.kills} kills, {args.pages} pages, {args.workers} processes; {_load()}",
        flush=True,
    )
    store = PostgresStore(dsn, schema=SCHEMA, poll_interval=0.2)
    ui = Runtime(store, principal="alice", pages="served")  # records; workers run them
    await ui.__aenter__()
    inputs: dict[str, Cell] = {}
    pages: dict[str, Cell] = {}
    for i in range(args.pages):
        inp = ui.get_cell(f"input{i}")
        page = ui.get_cell(f"page{i}")
        tx = ui.edit()
        inp.with_tx(tx).set(0)
        ui.setup(tx, Doubler, {"value": inp}, page)
        assert (await tx.commit()).ok
        pages[page.id] = page
        inputs[page.id] = inp
    for page in pages.values():
        assert await ui.open_page(page) is True
    await ui.idle()
    # The claim rows name pages by page id; map them to the result cells.
    pid_of = {page_id(p.link()): key for key, p in pages.items()}
    page_ids = set(pid_of)

    children = [Child(dsn, lease, heartbeat) for _ in range(args.workers)]
    dead: list[Child] = []
    for c in children:
        c.ready.wait(60)
    first = _wait_all_claimed(dsn, page_ids, {c.nonce for c in children}, 60)
    print(f"{args.pages} pages claimed by {args.workers} processes in {first:.2f} s")

    acked: dict[str, int] = {}
    stopped: dict[str, int] = {}
    writing = True

    async def writer() -> None:
        n = 0
        while writing:
            n += 1
            key = rng.choice(sorted(pages))
            if key in stopped:
                continue
            tx = ui.edit()
            inputs[key].with_tx(tx).set(n)
            if (await tx.commit()).ok:
                acked[key] = n
            if n % 400 == 0 and len(stopped) < args.stops:
                victim = rng.choice(sorted(set(pages) - set(stopped)))
                await ui.stop(pages[victim])
                # After the acknowledged stop: an input change nobody may follow.
                stopped[victim] = -n
                tx = ui.edit()
                inputs[victim].with_tx(tx).set(-n)
                assert (await tx.commit()).ok
            await asyncio.sleep(0.002)

    task = asyncio.get_running_loop().create_task(writer())
    latencies: list[float] = []
    for k in range(args.kills):
        await asyncio.sleep(rng.uniform(0.05, 1.5 * lease))
        i = rng.randrange(len(children))
        victim = children[i]
        held = {p for p, (nonce, _f) in _claims(dsn).items() if nonce == victim.nonce}
        victim.kill()
        t0 = time.monotonic()
        others = {c.nonce for j, c in enumerate(children) if j != i}
        pending = {p for p in held if pid_of.get(p) not in stopped}
        while pending:
            rows = _claims(dsn, pending)
            now = time.monotonic() - t0
            for p in list(pending):
                nonce = rows.get(p, (None, 0))[0]
                if nonce in others or pid_of.get(p) in stopped:
                    pending.discard(p)
                    latencies.append(now)
            if now > 10 * lease:
                print(f"kill {k}: {len(pending)} pages not taken over after {now:.1f} s")
                break
            await asyncio.sleep(0.01)
        dead.append(victim)
        children[i] = Child(dsn, lease, heartbeat)
        children[i].ready.wait(60)
        if k % 10 == 9:
            print(f"  {k + 1} kills; {len(latencies)} takeovers so far; {_load()}", flush=True)

    writing = False
    await task

    # SIGSTOP a process past its lease (right after a burst of input changes to its
    # pages, so commits of its runs are in flight); the others take its pages over;
    # more changes; SIGCONT. Whatever it commits after the takeover must be rejected.
    pauses: list[tuple[int, float, int, int]] = []
    value = 10**6
    for _round in range(args.pauses):
        rows = _claims(dsn)
        paused = max(children, key=lambda c: sum(1 for n, _f in rows.values() if n == c.nonce))
        held = {p for p, (nonce, _f) in rows.items() if nonce == paused.nonce}
        burst = []
        for p in sorted(held):
            value += 1
            tx = ui.edit()
            inputs[pid_of[p]].with_tx(tx).set(value)
            burst.append((pid_of[p], value, tx.commit()))
        await asyncio.sleep(0.01)
        paused.kill(signal.SIGSTOP)
        for key, v, done in burst:
            if (await done).ok:
                acked[key] = v
        await asyncio.sleep(0.2)  # what it wrote before the pause is read from the pipe
        before = len(paused.lines)
        others = {c.nonce for c in children if c is not paused}
        taken = _wait_all_claimed(dsn, {p for p in held if pid_of[p] not in stopped}, others, 30)
        seq_taken = _seq(dsn)
        for p in sorted(held):  # changes its runs would react to once resumed
            value += 1
            tx = ui.edit()
            inputs[pid_of[p]].with_tx(tx).set(value)
            if (await tx.commit()).ok:
                acked[pid_of[p]] = value
        await asyncio.sleep(lease)
        paused.kill(signal.SIGCONT)
        await asyncio.sleep(3 * lease)
        after = [ln.split() for ln in paused.lines[before:]]
        late_ok = sum(1 for ln in after if ln[0] == "C" and int(ln[3]) > seq_taken)
        late_no = sum(1 for ln in after if ln[0] == "R")
        pauses.append((len(held), taken, late_no, late_ok))
    await asyncio.sleep(4 * lease)  # the served pages catch up

    before_shutdown = _claims(dsn)
    # Clean shutdown: SIGTERM releases every claim.
    for c in children:
        c.kill(signal.SIGTERM)
    rows = _claims(dsn)
    held_after = [p for p, (nonce, _f) in rows.items() if nonce is not None]
    final_claims = before_shutdown

    failures: list[str] = []
    # Fences per page, in seq order.
    commits: dict[str, list[tuple[int, int]]] = collections.defaultdict(list)
    rejected = 0
    why: collections.Counter[str] = collections.Counter()
    for line in [line for c in children + dead for line in c.lines]:
        parts = line.split()
        if parts and parts[0] == "C":
            commits[parts[1]].append((int(parts[3]), int(parts[2])))
        elif parts and parts[0] == "R":
            rejected += 1
            why[parts[3]] += 1
    bad_fences = 0
    for seq_fences in commits.values():
        seq_fences.sort()
        fences = [f for _s, f in seq_fences]
        if any(b < a for a, b in itertools.pairwise(fences)):
            bad_fences += 1
    if bad_fences:
        failures.append(f"{bad_fences} pages had a commit under an older fence after a newer one")
    accepted = sum(len(v) for v in commits.values())
    print(f"fenced commits logged: {accepted} accepted, {rejected} rejected {dict(why)}")

    # Takeover latency.
    if latencies:
        latencies.sort()
        q = statistics.quantiles(latencies, n=100)
        print(
            f"takeovers after a kill: {len(latencies)}; seconds: min {latencies[0]:.3f},"
            f" median {statistics.median(latencies):.3f}, p95 {q[94]:.3f}, p99 {q[98]:.3f},"
            f" max {latencies[-1]:.3f} (lease {lease} s, heartbeat {heartbeat} s)"
        )
        late = [x for x in latencies if x > 2 * lease]
        print(
            f"over two leases ({2 * lease} s): {len(late)} of {len(latencies)}"
            f" ({100 * len(late) / len(latencies):.1f} %); at the end: {_load()}"
        )
        if late:
            failures.append(f"{len(late)} takeovers took longer than two leases")
    print(f"takeover reasons (last per page): {dict(_reasons(dsn))}")

    # Acknowledged writes and kept-computed pages.
    check = Runtime(store, principal="alice")
    lost = 0
    stale_out = 0
    resumed = 0
    for key, page in pages.items():
        value = store.read_durable(inputs[key].doc_key)
        want = stopped.get(key, acked.get(key, 0))
        got = value.get("value") if isinstance(value, dict) else None
        if got != want:
            lost += 1
        out = store.read_durable(page.doc_key)
        doubled = out.get("value", {}).get("doubled") if isinstance(out, dict) else None
        if doubled is not None and not isinstance(doubled, int):
            node = store.read_durable(doubled.key(ui.identity))
            doubled = node.get("value") if isinstance(node, dict) else None
        if key in stopped:
            if doubled == 2 * stopped[key]:
                resumed += 1
        elif doubled != 2 * want:
            stale_out += 1
            if stale_out <= 5:
                claim = final_claims.get(page_id(page.link()))
                print(f"  stale: {key} input {got} (acked {want}) doubled {doubled} claim {claim}")
    check.close()
    if lost:
        failures.append(f"{lost} acknowledged input writes lost")
    if stale_out:
        failures.append(f"{stale_out} open pages' outputs do not follow their input")
    if resumed:
        failures.append(f"{resumed} stopped pages ran again")
    print(
        f"inputs: the last acknowledged value of {len(acked)} pages checked, and their"
        f" outputs; {len(stopped)} pages stopped (none followed its input after the stop)"
    )

    # SIGSTOP.
    for held_n, taken, late_no, late_ok in pauses:
        print(
            f"SIGSTOP: {held_n} pages taken over {taken:.2f} s after the pause; after SIGCONT"
            f" the paused process had {late_no} commits rejected (fenced) and {late_ok}"
            " accepted after the takeover"
        )
        if late_ok:
            failures.append(f"a paused process had {late_ok} commits accepted after takeover")
    if held_after:
        failures.append(f"{len(held_after)} claims still held after every process shut down")
    else:
        print("clean shutdown: every claim released")
    await ui.aclose()
    store.close()
    for f in failures:
        print("FAILED:", f)
    print("crash trials:", "FAILED" if failures else "passed")
    return 1 if failures else 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--child"]:
        asyncio.run(_child(argv[1], float(argv[2]), float(argv[3])))
        return 0
    parser = argparse.ArgumentParser(prog="python -m bench.crash_trials_pg")
    parser.add_argument("--kills", type=int, default=100)
    parser.add_argument("--pages", type=int, default=200)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--stops", type=int, default=10)
    parser.add_argument("--pauses", type=int, default=3)
    parser.add_argument("--lease", type=float, default=1.0)
    parser.add_argument(
        "--heartbeat", type=float, default=None, help="seconds (default: a fifth of the lease)"
    )
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    cluster = Cluster()
    try:
        return asyncio.run(_trial(args, cluster.dsn))
    finally:
        for conn in _observer.values():
            conn.close()
        for child in Child.started:
            if child.proc.poll() is None:
                child.proc.kill()
                child.proc.wait()
        cluster.stop()


if __name__ == "__main__":
    raise SystemExit(main())
