"""Command line: ``python -m bench [GROUP ...] [--quick] [--json PATH]``.

Samples per benchmark: ``BENCH_SAMPLES`` (default 7), or 3 with ``--quick``.
Clock: ``BENCH_CLOCK=cpu`` times CPU time instead of wall time.
The table goes to stdout, progress to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from collections.abc import Sequence

from bench.harness import (
    CLOCK,
    DEFAULT_SAMPLES,
    QUICK_SAMPLES,
    REGISTRY,
    Result,
    discover,
    format_table,
    run_group,
)


def _samples(quick: bool, parser: argparse.ArgumentParser) -> int:
    if quick:
        return QUICK_SAMPLES
    raw = os.environ.get("BENCH_SAMPLES", "")
    if not raw:
        return DEFAULT_SAMPLES
    try:
        samples = int(raw)
    except ValueError:
        samples = 0
    if samples < 1:
        parser.error(f"BENCH_SAMPLES must be a positive integer, got {raw!r}")
    return samples


def _progress(message: str) -> None:
    # Per-sample progress only on a terminal, rewriting one line; a log gets one
    # line per group (printed by main) instead of one per sample.
    if sys.stderr.isatty():
        print(f"\r\033[K{message}", end="", file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("groups", nargs="*", metavar="GROUP", help="groups to run (default: all)")
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_SAMPLES} samples each")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON to PATH")
    args = parser.parse_args(argv)
    samples = _samples(args.quick, parser)
    if CLOCK not in ("wall", "cpu"):
        parser.error(f"BENCH_CLOCK must be 'wall' or 'cpu', got {CLOCK!r}")

    modules = discover()
    known = REGISTRY.groups()
    unknown = [g for g in args.groups if g not in known]
    if unknown:
        parser.error(f"unknown group(s) {', '.join(unknown)}; known: {', '.join(known) or 'none'}")
    if not known:
        print("no benchmarks found (add a bench/bench_*.py module; see bench/harness.py)")
        return 0

    results: list[Result] = []
    for group in dict.fromkeys(args.groups or known):
        benchmarks = REGISTRY.group(group)
        print(f"running group {group!r}: {len(benchmarks)} x {samples} samples", file=sys.stderr)
        results.extend(run_group(benchmarks, samples, progress=_progress))
    if sys.stderr.isatty():
        print("\r\033[K", end="", file=sys.stderr)

    clock = "CPU time" if CLOCK == "cpu" else "wall time"
    print(f"{samples} samples per benchmark, round-robin within each group, {clock}")
    print(format_table(results))
    if args.json:
        report = {
            "samples": samples,
            "python": platform.python_version(),
            "implementation": platform.python_implementation(),
            "machine": platform.machine(),
            "modules": modules,
            "results": [r.to_json() for r in results],
        }
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=2)
            f.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
