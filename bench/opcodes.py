"""Bytecodes executed per operation: a deterministic proxy for the per-update cost.

``python -m bench.opcodes [SHAPE ...]`` runs one timed ``run()`` of each shape under
``sys.settrace`` with opcode events on, and prints the Python bytecodes executed
and the Python function calls made, per node update (per commit for ``memory
commit``). With ``--top N`` it also lists the N functions that executed the most.

Why: on the shared 2-core machine the CPU clock of one update moves by 20 to 40 %
between runs, more than most single changes to the per-update path are worth. A
bytecode count does not move with the load, so a change can be judged before it
is timed. It is only a proxy: it does not see time spent in C (dict copies, struct
construction, the collector), and one bytecode is not one unit of time. Timed
figures (against reaktiv in the same run) still come from ``python -m bench``.

With ``--collections N`` it runs ``run()`` N more times untraced instead, and prints
the cyclic collector's collections per ``run()`` by generation (deterministic for a
given version: they follow the objects the per-update path keeps alive, not the
load) and the share of the CPU time they took (``gc.callbacks``; this one moves
with the load).

Shapes: ``chain`` (chain 1000, 20 writes), ``broad`` (broad 1000, 10 writes),
``diamond`` (diamond 5), ``cellx`` and ``cellx-ends`` (cellx 1000, a sink per
node / on the 4 ends), each also built with ``Scheduler.derive`` (``chain-derive``,
``broad-derive``, ``diamond-derive``, ``cellx-derive``, ``cellx-ends-derive``),
``memory-commit`` (the Cell API commit), and ``edit-scalars``,
``edit-dicts``, ``edit-links`` (the ``lists edit`` rows at N = 100: one element edited
then its label pulled; per edit; ``BENCH_OPCODES_N`` picks another N). The bench rows'
own ``run()`` is measured, after one untraced run (caches warm, first runs done).
``--row NAME`` (or ``--row "GROUP/NAME"``) measures a registered bench row instead,
per op (``BENCH_LIST_SIZES`` picks the list rows' sizes).
"""

from __future__ import annotations

import argparse
import collections
import gc
import sys
import time
from collections.abc import Callable, Sequence
from types import FrameType
from typing import Any

from bench import bench_cells, bench_scheduler, bench_shapes
from bench.harness import REGISTRY, BenchError, Run


def _list_edit(row: str) -> Callable[[], Run]:
    """The setup of the `lists edit` row `row` at N = `BENCH_OPCODES_N` (default 100),
    imported when asked for (its module builds nothing until the setup runs)."""

    def setup() -> Run:
        import os

        n = os.environ.get("BENCH_OPCODES_N", "100")
        os.environ.setdefault("BENCH_LIST_SIZES", n)
        from bench import bench_lists

        name = row.format(n=n)
        for benchmark in REGISTRY.group("lists edit"):
            if benchmark.name == name:
                # Warm (the world is built, 20 edits made), then a fresh sample: the
                # row's own run() edits new titles per setup, not per call.
                benchmark.setup()()
                return benchmark.setup()
        raise BenchError(f"no 'lists edit' row {name!r} (BENCH_LIST_SIZES={bench_lists.SIZES})")

    return setup


# shape -> (setup, node updates (or commits) per run(), whether run() may be repeated)
SHAPES: dict[str, tuple[Callable[[], Run], int, bool]] = {
    "chain": (
        bench_scheduler.chain_cellweave,
        bench_scheduler.CHAIN * bench_scheduler.CHAIN_WRITES,
        True,
    ),
    "broad": (
        bench_scheduler.broad_cellweave,
        bench_scheduler.BROAD * bench_scheduler.BROAD_WRITES,
        True,
    ),
    "diamond": (bench_scheduler.diamond_cellweave, 6 * bench_scheduler.DIAMOND_WRITES, True),
    "cellx": (
        bench_shapes.cellx_cellweave,
        4 * bench_shapes.CELLX_LAYERS * bench_shapes.CELLX_OPS,
        True,
    ),
    "cellx-ends": (
        bench_shapes.cellx_cellweave_ends,
        4 * bench_shapes.CELLX_LAYERS * bench_shapes.CELLX_OPS,
        True,
    ),
    "chain-derive": (
        bench_scheduler.chain_cellweave_derive,
        bench_scheduler.CHAIN * bench_scheduler.CHAIN_WRITES,
        True,
    ),
    "broad-derive": (
        bench_scheduler.broad_cellweave_derive,
        bench_scheduler.BROAD * bench_scheduler.BROAD_WRITES,
        True,
    ),
    "diamond-derive": (
        bench_scheduler.diamond_cellweave_derive,
        6 * bench_scheduler.DIAMOND_WRITES,
        True,
    ),
    "cellx-derive": (
        bench_shapes.cellx_cellweave_derive,
        4 * bench_shapes.CELLX_LAYERS * bench_shapes.CELLX_OPS,
        True,
    ),
    "cellx-ends-derive": (
        bench_shapes.cellx_cellweave_derive_ends,
        4 * bench_shapes.CELLX_LAYERS * bench_shapes.CELLX_OPS,
        True,
    ),
    "memory-commit": (bench_cells.memory_commit, bench_cells.MEMORY_OPS, False),
    "edit-scalars": (
        _list_edit("cellweave scalar write N={n} (inline scalars)"),
        20,  # (bench_lists.EDITS)
        False,
    ),
    "edit-dicts": (_list_edit("cellweave path write N={n} (inline dicts)"), 20, False),
    "edit-links": (_list_edit("cellweave path write N={n} (links)"), 20, False),
}


def _tracer() -> tuple[list[int], collections.Counter[str], Callable[..., Any]]:
    """A `sys.settrace` function counting bytecodes and calls into `[bytecodes, calls]`,
    and bytecodes per function (file:name) into the counter; returns all three."""
    opcodes = [0, 0]
    by: collections.Counter[str] = collections.Counter()

    def local(frame: FrameType, event: str, arg: Any) -> Any:
        if event == "opcode":
            opcodes[0] += 1
            code = frame.f_code
            by[f"{'/'.join(code.co_filename.split('/')[-2:])}:{code.co_name}"] += 1
        return local

    def called(frame: FrameType, event: str, arg: Any) -> Any:
        opcodes[1] += 1
        frame.f_trace_opcodes = True
        return local

    return opcodes, by, called


def count(shape: str) -> tuple[float, float, collections.Counter[str]]:
    """(bytecodes, calls) per update of one traced `run()` of `shape`, and bytecodes
    per function (file:name)."""
    setup, per, repeatable = SHAPES[shape]
    run = setup()
    if repeatable:
        run()  # warm: the first run() after setup may do one-time work
    else:
        run = setup()
    opcodes, by, called = _tracer()

    sys.settrace(called)
    try:
        run()
    finally:
        sys.settrace(None)
    return opcodes[0] / per, opcodes[1] / per, by


def count_row(name: str) -> tuple[float, float, collections.Counter[str]]:
    """(bytecodes, calls) per op of one traced `run()` of the registered bench row
    `name` (`--row`: say, a list row, whose world is built by its first, untraced
    sample), and bytecodes per function per op. A finish function the run returns (checks,
    undoing the change) runs untraced."""
    from bench import bench_lists  # noqa: F401  (registers the list rows)
    from bench.harness import REGISTRY

    found = [
        b
        for g in REGISTRY.groups()
        for b in REGISTRY.group(g)
        if b.name == name or f"{g}/{b.name}" == name  # (a row, or "group/row")
    ]
    if len(found) != 1:
        raise SystemExit(f"--row {name!r}: {len(found)} registered rows have that name")
    (row,) = found

    def once(traced: Callable[[Callable[[], object]], object]) -> None:
        done = traced(row.setup())
        if callable(done):
            done()

    once(lambda run: run())  # warm: builds the shared world, first runs done
    opcodes, by, called = _tracer()

    def traced(run: Callable[[], object]) -> object:
        sys.settrace(called)
        try:
            return run()
        finally:
            sys.settrace(None)

    once(traced)
    per_op: collections.Counter[str] = collections.Counter(
        {fn: n // row.ops for fn, n in by.items()}
    )
    return opcodes[0] / row.ops, opcodes[1] / row.ops, per_op


def collections_per_run(shape: str, runs: int) -> tuple[list[float], float]:
    """Collections per `run()` of `shape` by generation (young, middle, full), over
    `runs` untraced runs after one warm run, and the share of CPU time they took."""
    setup, _, repeatable = SHAPES[shape]
    run = setup()
    if repeatable:
        run()
    counts = [0, 0, 0]
    spent = [0.0]
    started = [0.0]

    def observe(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            started[0] = time.process_time()
        else:
            counts[info["generation"]] += 1
            spent[0] += time.process_time() - started[0]

    gc.callbacks.append(observe)
    try:
        begin = time.process_time()
        for _ in range(runs if repeatable else 1):
            run()
        total = time.process_time() - begin
    finally:
        gc.callbacks.remove(observe)
    done = runs if repeatable else 1
    return [c / done for c in counts], spent[0] / total if total else 0.0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.opcodes", description=__doc__)
    parser.add_argument("shapes", nargs="*", metavar="SHAPE", help=", ".join(SHAPES))
    parser.add_argument("--top", type=int, default=0, help="list the N costliest functions")
    parser.add_argument(
        "--collections",
        type=int,
        default=0,
        metavar="N",
        help="instead: the collector's collections per run() over N untraced runs",
    )
    parser.add_argument(
        "--row",
        action="append",
        default=[],
        metavar="NAME",
        help="instead of shapes: a registered bench row by its exact name (per op)",
    )
    args = parser.parse_args(argv)
    for name in args.row:
        bytecodes, calls, by = count_row(name)
        print(f"{name}: {bytecodes:8.0f} bytecodes {calls:7.1f} calls per op")
        for fn, n in by.most_common(args.top):
            print(f"    {n:10d}  {fn}")
    if args.row:
        return 0
    unknown = [s for s in args.shapes if s not in SHAPES]
    if unknown:
        parser.error(f"unknown shape(s) {', '.join(unknown)}; known: {', '.join(SHAPES)}")
    for shape in args.shapes or SHAPES:
        if args.collections:
            per_run, share = collections_per_run(shape, args.collections)
            young, middle, full = per_run
            print(
                f"{shape:14} collections per run: {young:6.1f} young {middle:5.1f} middle"
                f" {full:5.2f} full, {share:5.1%} of the CPU time"
            )
            continue
        per = SHAPES[shape][1]
        bytecodes, calls, by = count(shape)
        print(f"{shape:14} {bytecodes:7.0f} bytecodes {calls:6.1f} calls per update")
        for name, n in by.most_common(args.top):
            print(f"    {n / per:8.1f}  {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
