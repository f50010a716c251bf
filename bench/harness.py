"""Benchmark harness: register, run round-robin, report medians against a baseline.

Adding a benchmark
------------------
Create a module ``bench/bench_<topic>.py``; ``python -m bench`` imports every
such module. In it, decorate a *setup* function::

    from bench.harness import Counts, Run, bench

    @bench(group="cells", name="memory commit", ops=1000)
    def memory_commit() -> Run:
        store = build_something()           # untimed

        def run() -> Counts:                # timed: one sample's work
            for i in range(1000):
                ...
            return {"commits": 1000, "notifications": 1000}

        return run

- ``setup()`` is called once per sample and is not timed, so every sample
  starts from the same state and one sample's leftovers never slow the next.
- ``run()`` is called exactly once per setup. It performs ``ops`` operations
  and returns the work it counted (commits, runs, notifications, ...). The
  table divides the counts by ``ops``; they show whether rows compared by
  time really did the same work (a faster row that skipped notifications is
  not faster).
- Checks and diagnostics that are not part of the work (``inspect()``,
  ``statistics()``, walking the result to assert it) do not belong in the
  timed region: ``run()`` may instead return a zero-argument *finish*
  function, which the harness calls after stopping the clock and which
  returns the counts (and raises if the result is wrong).
- Work done in another process (the time `import runner` takes in a fresh
  interpreter) is not on this process's clock: such a ``run()`` returns
  ``Measured(ns, counts)``, the time the child measured on the same kind of
  clock (``CLOCK``), and the harness records that instead of its own.
- Count what happened, where it happened (inside the functions each side
  runs, or from the library's own counters), not a formula of what should
  have happened, and assert the counts a correct run must produce.
- Mark one benchmark per group ``baseline=True`` (say, the same workload on
  another library, or the simplest way to do it). Every row of the group is
  then also reported as a multiple of the baseline's time per op, measured in
  the same run, so machine speed cancels out.

Method
------
The benchmarks of a group run interleaved, A, B, C, A, B, C, ..., so a drift
in machine speed (another process, thermal throttling) hits all of them alike
instead of whichever ran last. Before each timed region ``gc.collect()`` runs,
so one sample does not pay for another's garbage; the collector stays enabled
while timing, because allocation cost is part of what is measured. Times come
from ``time.perf_counter_ns``; the median over samples is reported, with the
spread (max - min over the median) to show how far it can be trusted. With
``BENCH_CLOCK=cpu`` they come from ``time.process_time_ns`` instead: the
process's CPU time, which a machine shared with other work does not inflate
(wall time there charges whatever ran when the process lost its core).
"""

from __future__ import annotations

import gc
import importlib
import os
import pkgutil
import statistics
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TypeAlias

import attrs

Counts: TypeAlias = Mapping[str, int]
Finish: TypeAlias = Callable[[], Counts]
"""Called untimed after ``run()``: checks the result and returns the counts."""


@attrs.frozen
class Measured:
    """What a ``run()`` returns when its work ran in a child process: the time the
    child measured (nanoseconds, on ``CLOCK``'s kind of clock) and the counts."""

    ns: int
    counts: Counts


Run: TypeAlias = Callable[[], Counts | Finish | Measured]
Setup: TypeAlias = Callable[[], Run]

CLOCK = os.environ.get("BENCH_CLOCK", "wall")
"""`wall` (`time.perf_counter_ns`, the default) or `cpu` (`time.process_time_ns`)."""
_clock = time.process_time_ns if CLOCK == "cpu" else time.perf_counter_ns

DEFAULT_SAMPLES = 7
QUICK_SAMPLES = 3


class BenchError(Exception):
    """A benchmark is declared or behaves wrongly (the message names it)."""


@attrs.frozen
class Benchmark:
    """One registered benchmark: ``setup()`` builds state and returns ``run``."""

    name: str
    group: str
    setup: Setup
    ops: int
    baseline: bool = False

    @property
    def label(self) -> str:
        return f"{self.group}/{self.name}"


@attrs.frozen
class Result:
    """What one benchmark measured in one run of its group."""

    benchmark: Benchmark
    sample_ns: tuple[int, ...]
    """Wall time of each sample's ``run()``, in nanoseconds, in run order."""
    counts: tuple[Counts, ...]
    """What each sample's ``run()`` returned, in run order."""
    x_baseline: float | None
    """Median time per op over the baseline's; None when the group has none."""

    @property
    def ns_per_op(self) -> float:
        """Median over samples of time per op."""
        return statistics.median(t / self.benchmark.ops for t in self.sample_ns)

    @property
    def ops_per_s(self) -> float:
        return 1e9 / self.ns_per_op if self.ns_per_op > 0 else float("inf")

    @property
    def spread(self) -> float:
        """(slowest - fastest sample) / median sample; 0.0 means perfectly steady."""
        median = statistics.median(self.sample_ns)
        return (max(self.sample_ns) - min(self.sample_ns)) / median if median > 0 else 0.0

    @property
    def work_per_op(self) -> dict[str, float]:
        """Median over samples of each counted quantity, divided by ops.

        Keys keep the order the benchmark first reported them in; a key missing
        from some sample counts as 0 there.
        """
        keys = list(dict.fromkeys(k for c in self.counts for k in c))
        ops = self.benchmark.ops
        return {k: statistics.median(c.get(k, 0) for c in self.counts) / ops for k in keys}

    def to_json(self) -> dict[str, object]:
        b = self.benchmark
        return {
            "group": b.group,
            "name": b.name,
            "ops": b.ops,
            "baseline": b.baseline,
            "samples_ns": list(self.sample_ns),
            "counts": [dict(c) for c in self.counts],
            "median_ns_per_op": self.ns_per_op,
            "ops_per_s": self.ops_per_s,
            "spread": self.spread,
            "x_baseline": self.x_baseline,
            "work_per_op": self.work_per_op,
        }


@attrs.define(slots=True)
class Registry:
    """Benchmarks by group, each group in registration order.

    Invariants
    - (group, name) is unique.
    - A group has at most one baseline.
    """

    _groups: dict[str, list[Benchmark]] = attrs.field(factory=dict)

    def add(self, benchmark: Benchmark) -> None:
        group = self._groups.setdefault(benchmark.group, [])
        for other in group:
            if other.name == benchmark.name:
                raise BenchError(f"benchmark {benchmark.label!r} is registered twice")
            if other.baseline and benchmark.baseline:
                raise BenchError(
                    f"group {benchmark.group!r} has two baselines: "
                    f"{other.name!r} and {benchmark.name!r}"
                )
        group.append(benchmark)

    def groups(self) -> list[str]:
        """Group names, sorted."""
        return sorted(self._groups)

    def group(self, name: str) -> list[Benchmark]:
        return list(self._groups[name])

    def __len__(self) -> int:
        return sum(len(g) for g in self._groups.values())

    def _check(self) -> None:
        for name, group in self._groups.items():
            assert all(b.group == name for b in group)
            assert len({b.name for b in group}) == len(group)
            assert sum(b.baseline for b in group) <= 1


REGISTRY = Registry()


def bench(
    *, group: str, name: str, ops: int, baseline: bool = False, registry: Registry | None = None
) -> Callable[[Setup], Setup]:
    """Register the decorated setup function as a benchmark; returns it unchanged."""
    if isinstance(ops, bool) or not isinstance(ops, int) or ops < 1:
        raise BenchError(f"benchmark {group}/{name}: ops must be a positive int, got {ops!r}")
    target = REGISTRY if registry is None else registry

    def register(setup: Setup) -> Setup:
        target.add(Benchmark(name=name, group=group, setup=setup, ops=ops, baseline=baseline))
        return setup

    return register


def discover(package: str = "bench") -> list[str]:
    """Import every ``bench_*`` module of ``package`` (which registers its benchmarks).

    Import errors propagate: a broken benchmark module must fail the run, not
    silently drop its rows.
    """
    pkg = importlib.import_module(package)
    names = sorted(
        m.name for m in pkgutil.iter_modules(pkg.__path__) if m.name.startswith("bench_")
    )
    for name in names:
        importlib.import_module(f"{package}.{name}")
    return names


def _checked_counts(benchmark: Benchmark, counts: object) -> Counts:
    if not isinstance(counts, Mapping) or not all(
        isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool)
        for k, v in counts.items()
    ):
        raise BenchError(
            f"benchmark {benchmark.label!r}: run() must return a dict of str to int "
            f"(the work it counted), got {counts!r}"
        )
    return dict(counts)


def _sample(benchmark: Benchmark, index: int) -> tuple[int, Counts]:
    try:
        run = benchmark.setup()
        gc.collect()
        start = _clock()
        counts = run()
        elapsed = _clock() - start
        if isinstance(counts, Measured):  # timed in a child process, by the child
            elapsed, counts = counts.ns, counts.counts
        elif callable(counts):  # a finish function: checks and diagnostics, untimed
            counts = counts()
    except Exception as exc:
        exc.add_note(f"in benchmark {benchmark.label!r}, sample {index + 1}")
        raise
    return elapsed, _checked_counts(benchmark, counts)


def run_group(
    benchmarks: Sequence[Benchmark],
    samples: int,
    progress: Callable[[str], None] | None = None,
) -> list[Result]:
    """Run ``benchmarks`` round-robin for ``samples`` rounds; results in input order."""
    if samples < 1:
        raise BenchError(f"samples must be at least 1, got {samples}")
    times: list[list[int]] = [[] for _ in benchmarks]
    counts: list[list[Counts]] = [[] for _ in benchmarks]
    for i in range(samples):
        for j, benchmark in enumerate(benchmarks):
            if progress is not None:
                progress(f"{benchmark.label}: sample {i + 1}/{samples}")
            elapsed, counted = _sample(benchmark, i)
            times[j].append(elapsed)
            counts[j].append(counted)

    per_op = [
        statistics.median(t / b.ops for t in ts) for b, ts in zip(benchmarks, times, strict=True)
    ]
    base = next((p for b, p in zip(benchmarks, per_op, strict=True) if b.baseline), None)
    return [
        Result(b, tuple(ts), tuple(cs), None if base is None or base <= 0 else p / base)
        for b, ts, cs, p in zip(benchmarks, times, counts, per_op, strict=True)
    ]


def _fmt_time(ns: float) -> str:
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if ns >= scale:
            return f"{ns / scale:.3g} {unit}"
    return f"{ns:.3g} ns"


def _fmt_ratio(x: float) -> str:
    # Two decimals hide a small ratio as 0.00; below 0.1 keep two significant digits.
    return f"{x:.2f}" if x >= 0.1 else f"{x:.2g}"


def _fmt_number(x: float) -> str:
    return str(int(x)) if x == int(x) else f"{x:.3g}"


def format_table(results: Iterable[Result]) -> str:
    """One aligned text table: a row per benchmark, groups in the order given."""
    header = ("group", "benchmark", "time/op", "ops/s", "x baseline", "spread", "work/op")
    right_aligned = {2, 3, 4, 5}
    rows = [header]
    for r in results:
        x = "-" if r.x_baseline is None else _fmt_ratio(r.x_baseline)
        if r.benchmark.baseline:
            x += " (base)"
        work = " ".join(f"{k}={_fmt_number(v)}" for k, v in r.work_per_op.items())
        rows.append(
            (
                r.benchmark.group,
                r.benchmark.name,
                _fmt_time(r.ns_per_op),
                f"{r.ops_per_s:,.0f}",
                x,
                f"{r.spread:.0%}",
                work or "-",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = []
    for n, row in enumerate(rows):
        cells = [
            cell.rjust(w) if i in right_aligned else cell.ljust(w)
            for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    lines.append("")
    lines.append("time/op, ops/s: median over samples.  spread: (max - min) / median sample.")
    lines.append("x baseline: time/op over the group baseline's in this run (lower is faster).")
    lines.append("work/op: the work run() counted, divided by ops.")
    return "\n".join(lines)
