"""Compare benchmark rows between two versions of the code, in the same run.

``python -m bench.compare REV [SELECTOR ...]`` runs the chosen rows on the
commit ``REV`` (extracted with ``git archive`` into a temporary directory) and
on the working tree, and prints, per row, both medians, their ratio and
whether both versions counted the same work. It answers the question issue 14
item 7 asks of every row ("within 5 % of before, or faster, with the same
counted work") without trusting figures measured on another day under
another load.

A selector is a group (``"pages memory"``) or one row (``"pages memory/await
rt.open_page"``); without one, every row of every group runs (slow).
``--against REV2`` compares with another commit instead of the working tree.

Method
------
Each sample runs in a fresh interpreter (``python -c``, with ``PYTHONPATH``
set to the version's tree), so the two versions never share a process, an
import or a warm cache. The two versions alternate, and the order flips every
round (A B, B A, A B, ...), so a drift in machine speed hits both alike. One
child runs ``--per-child`` samples (default 1) through the harness's own
sample function (setup untimed, ``gc.collect()``, the timed ``run()``, the
untimed finish), on the clock ``BENCH_CLOCK`` names; every other ``BENCH_*``
variable reaches the children unchanged (``BENCH_LIST_SIZES=100`` and so on).

Reported per row: the median time per op of each version, ``b/a`` (the ratio
of those medians), the median of the per-round ratios with their range (a
round's two samples ran next to each other, so their ratio cancels most of
the machine's drift), and ``counts``: ``same`` when the median counted work
per op is equal for both, else the counts that differ. A faster row that
counted less work did not do the same thing faster.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable, Sequence

import attrs

from bench.harness import BenchError, _fmt_time

CHILD = r"""
import json, sys
from bench import harness
harness.discover()
group, name, samples = sys.argv[1], sys.argv[2], int(sys.argv[3])
found = [b for b in harness.REGISTRY.group(group) if b.name == name]
if not found:
    sys.exit(f"no benchmark {group}/{name} in this version")
(benchmark,) = found
for i in range(samples):
    ns, counts = harness._sample(benchmark, i)
    print("SAMPLE " + json.dumps({"ns": ns, "ops": benchmark.ops, "counts": dict(counts)}))
# An editable install can fill in a module this tree does not have from another
# checkout: a sample that ran such code measured neither version.
import os
tree = os.path.realpath(os.getcwd())
strays = sorted(
    name for name, m in list(sys.modules.items())
    if name.split(".")[0] in ("cells", "scheduler", "runner", "cellweave", "bench")
    and getattr(m, "__file__", None)
    and not os.path.realpath(m.__file__).startswith(tree + os.sep)
)
if strays:
    sys.exit(f"modules loaded from outside {tree}: {strays}")
"""
"""One child: runs `samples` samples of one row with its version's harness and prints
each as a JSON line (the harness's `_sample`, present in every version since the
first bench commit); fails if any of the project's modules came from elsewhere."""

LIST_ROWS = r"""
import json
from bench import harness
harness.discover()
reg = harness.REGISTRY
print(json.dumps([[g, b.name] for g in reg.groups() for b in reg.group(g)]))
"""


@attrs.frozen
class Sample:
    """One timed sample: nanoseconds on the harness's clock, ops, and the counted work."""

    ns: int
    ops: int
    counts: dict[str, int]

    @property
    def ns_per_op(self) -> float:
        return self.ns / self.ops


@attrs.frozen
class Comparison:
    """One row measured on both versions: `a[i]` and `b[i]` ran next to each other in round i."""

    group: str
    name: str
    a: tuple[Sample, ...]
    b: tuple[Sample, ...]

    @property
    def a_median(self) -> float:
        return statistics.median(s.ns_per_op for s in self.a)

    @property
    def b_median(self) -> float:
        return statistics.median(s.ns_per_op for s in self.b)

    @property
    def ratio(self) -> float:
        """b / a of the medians (below 1: b is faster)."""
        return self.b_median / self.a_median if self.a_median > 0 else float("inf")

    def paired(self) -> list[float]:
        """Per round, b / a of the samples taken next to each other."""
        return [
            (sb.ns_per_op / sa.ns_per_op) if sa.ns > 0 else float("inf")
            for sa, sb in zip(self.a, self.b, strict=True)
        ]

    def counts(self) -> tuple[dict[str, float], dict[str, float]]:
        """The median counted work per op of each version (a key missing counts as 0)."""
        return median_counts(self.a), median_counts(self.b)

    def count_difference(self) -> dict[str, tuple[float, float]]:
        """The counted quantities whose median per op differs: key -> (a, b)."""
        a, b = self.counts()
        keys = list(dict.fromkeys([*a, *b]))
        return {k: (a.get(k, 0.0), b.get(k, 0.0)) for k in keys if a.get(k, 0.0) != b.get(k, 0.0)}


def median_counts(samples: Sequence[Sample]) -> dict[str, float]:
    keys = list(dict.fromkeys(k for s in samples for k in s.counts))
    return {k: statistics.median(s.counts.get(k, 0) / s.ops for s in samples) for k in keys}


def order(round_index: int) -> tuple[str, str]:
    """Which version runs first in a round: a first in even rounds, b first in odd ones."""
    return ("a", "b") if round_index % 2 == 0 else ("b", "a")


def parse_samples(output: str) -> list[Sample]:
    """The samples a child printed (lines starting with ``SAMPLE ``)."""
    out: list[Sample] = []
    for line in output.splitlines():
        if line.startswith("SAMPLE "):
            raw = json.loads(line[len("SAMPLE ") :])
            out.append(Sample(int(raw["ns"]), int(raw["ops"]), dict(raw["counts"])))
    return out


def select(rows: Sequence[tuple[str, str]], selectors: Sequence[str]) -> list[tuple[str, str]]:
    """The rows the selectors name (a group, or ``group/name``), in registry order.
    Raises `BenchError` naming a selector that matches nothing."""
    if not selectors:
        return list(rows)
    chosen: dict[tuple[str, str], None] = {}
    for sel in selectors:
        hits = [r for r in rows if r[0] == sel or f"{r[0]}/{r[1]}" == sel]
        if not hits:
            raise BenchError(f"bench.compare: {sel!r} names no group or group/row of both versions")
        chosen.update(dict.fromkeys(hits))
    return [r for r in rows if r in chosen]


def format_comparisons(results: Sequence[Comparison], a_label: str, b_label: str) -> str:
    header = ("row", f"a ({a_label})", f"b ({b_label})", "b/a", "paired b/a [min-max]", "counts")
    rows = [header]
    for c in results:
        paired = c.paired()
        diff = c.count_difference()
        counts = (
            "same"
            if not diff
            else "DIFFER " + " ".join(f"{k}={a:g}->{b:g}" for k, (a, b) in diff.items())
        )
        rows.append(
            (
                f"{c.group}/{c.name}",
                _fmt_time(c.a_median),
                _fmt_time(c.b_median),
                f"{c.ratio:.3f}",
                f"{statistics.median(paired):.3f} [{min(paired):.2f}-{max(paired):.2f}]",
                counts,
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines.append("")
    lines.append("a, b: median time per op over the samples (one interpreter per sample).")
    lines.append("b/a: ratio of the medians; paired: median and range of b/a within each round.")
    lines.append("counts: 'same' when both versions counted the same median work per op.")
    return "\n".join(lines)


# ---------------------------------------------------------------------------- processes

Runner = Callable[[str, str, str, int], list[Sample]]


def run_child(tree: str, group: str, name: str, samples: int) -> list[Sample]:
    """Run `samples` samples of one row in a fresh interpreter on `tree`'s code."""
    env = dict(os.environ, PYTHONPATH=tree)
    done = subprocess.run(
        [sys.executable, "-c", CHILD, group, name, str(samples)],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    got = parse_samples(done.stdout)
    if done.returncode != 0 or len(got) != samples:
        raise BenchError(
            f"bench.compare: {group}/{name} on {tree} failed (exit {done.returncode}):\n"
            f"{done.stderr.strip()[-2000:]}"
        )
    return got


def list_rows(tree: str) -> list[tuple[str, str]]:
    env = dict(os.environ, PYTHONPATH=tree)
    done = subprocess.run(
        [sys.executable, "-c", LIST_ROWS],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise BenchError(f"bench.compare: listing rows on {tree} failed:\n{done.stderr[-2000:]}")
    return [(g, n) for g, n in json.loads(done.stdout.strip().splitlines()[-1])]


def compare(
    trees: dict[str, str],
    rows: Sequence[tuple[str, str]],
    rounds: int,
    per_child: int,
    runner: Runner = run_child,
    progress: Callable[[str], None] | None = None,
) -> list[Comparison]:
    """Measure each row on both trees (`trees["a"]`, `trees["b"]`), alternating and
    flipping the order every round."""
    if rounds < 1 or per_child < 1:
        raise BenchError(
            f"bench.compare: rounds and per-child must be >= 1, got {rounds}, {per_child}"
        )
    results: list[Comparison] = []
    for group, name in rows:
        got: dict[str, list[Sample]] = {"a": [], "b": []}
        for i in range(rounds):
            for side in order(i):
                if progress is not None:
                    progress(f"{group}/{name}: round {i + 1}/{rounds}, {side}")
                samples = runner(trees[side], group, name, per_child)
                # One child's samples count as one: its median (a round pairs two children).
                middle = sorted(samples, key=lambda s: s.ns_per_op)[len(samples) // 2]
                got[side].append(middle)
        results.append(Comparison(group, name, tuple(got["a"]), tuple(got["b"])))
    return results


def extract(repo: str, rev: str, into: str) -> str:
    """`git archive` of `rev` unpacked into a new directory under `into`; returns it."""
    archived = subprocess.run(
        ["git", "-C", repo, "archive", "--format=tar", rev], capture_output=True, check=False
    )
    if archived.returncode != 0:
        raise BenchError(f"bench.compare: git archive {rev}: {archived.stderr.decode().strip()}")
    # A revision may be a branch name with slashes ("origin/main"): not a file name.
    tag = "".join(c if c.isalnum() else "-" for c in rev[:20])
    target = tempfile.mkdtemp(prefix=f"bench-compare-{tag}-", dir=into)
    with tarfile.open(fileobj=io.BytesIO(archived.stdout), mode="r:") as tar:
        tar.extractall(target, filter="data")
    return target


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.compare", description=__doc__)
    parser.add_argument("rev", help="the commit to compare against (a)")
    parser.add_argument("selectors", nargs="*", metavar="SELECTOR", help="GROUP or GROUP/ROW")
    parser.add_argument(
        "--against", metavar="REV2", help="b: this commit instead of the working tree"
    )
    parser.add_argument("--rounds", type=int, default=7, help="rounds (one sample of each)")
    parser.add_argument("--per-child", type=int, default=1, help="samples per interpreter")
    args = parser.parse_args(argv)
    repo = subprocess.run(
        ["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True, check=True
    ).stdout.strip()
    scratch = tempfile.mkdtemp(prefix="bench-compare-")
    try:
        a = extract(repo, args.rev, scratch)
        b = extract(repo, args.against, scratch) if args.against else repo
        rows_a, rows_b = list_rows(a), list_rows(b)
        both = [r for r in rows_b if r in set(rows_a)]
        rows = select(both, args.selectors)

        def progress(message: str) -> None:
            print(message, file=sys.stderr, flush=True)

        results = compare({"a": a, "b": b}, rows, args.rounds, args.per_child, progress=progress)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    clock = "CPU time" if os.environ.get("BENCH_CLOCK") == "cpu" else "wall time"
    print(f"{args.rounds} rounds x {args.per_child} sample(s) per version, {clock}")
    print(format_comparisons(results, args.rev, args.against or "working tree"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
