"""Benchmarks of import time: what a program pays before its first line runs.

Group ``imports``: one op is importing one package in a fresh interpreter. The
child times only its ``import`` statement (on the harness's clock: wall time, or
CPU time with ``BENCH_CLOCK=cpu``), so the interpreter's own start-up, the same
for every row, is left out. Baseline: ``import reaktiv``, the peer a reactive
program would otherwise import.

Both sides import from compiled bytecode, as an installed package does: the
children write and read ``.pyc`` files under a private cache directory
(``PYTHONPYCACHEPREFIX``), filled by one untimed import before the first sample,
even where the environment sets ``PYTHONDONTWRITEBYTECODE``. Without a cache
every import compiles the project's sources again, which no installed copy does;
that cost is the row ``import runner (no bytecode cache)`` (a checkout run with
``PYTHONDONTWRITEBYTECODE=1``: the project's modules compile, the rest load the
bytecode their installer wrote).

Counted work: ``modules``, how many modules the import added to ``sys.modules``
(what it loaded, its own and its dependencies').

See docs/performance.md ("Import time") for numbers.
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile

from bench.harness import CLOCK, BenchError, Measured, Run, bench

_CLOCK_FN = "process_time_ns" if CLOCK == "cpu" else "perf_counter_ns"
_cache_dir: str | None = None


def _env(cached: bool) -> dict[str, str]:
    global _cache_dir
    unset = ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")
    env = {k: v for k, v in os.environ.items() if k not in unset}
    if not cached:
        # The project's sources compile on every import (a source checkout with no
        # __pycache__); the standard library and dependencies still load their own
        # installed bytecode.
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        return env
    if _cache_dir is None:
        _cache_dir = tempfile.mkdtemp(prefix="bench-pycache-")
        atexit.register(shutil.rmtree, _cache_dir, True)
    env["PYTHONPYCACHEPREFIX"] = _cache_dir
    return env


def _import(module: str, *, cached: bool = True) -> Run:
    code = (
        "import sys, time\n"
        "before = len(sys.modules)\n"
        f"start = time.{_CLOCK_FN}()\n"
        f"import {module}\n"
        f"elapsed = time.{_CLOCK_FN}() - start\n"
        "print(elapsed, len(sys.modules) - before)\n"
    )
    env = _env(cached)
    if cached:  # fill the bytecode cache, untimed (a no-op once it is full)
        subprocess.run([sys.executable, "-c", f"import {module}"], check=True, env=env)

    def run() -> Measured:
        out = subprocess.run(
            [sys.executable, "-c", code], check=True, env=env, capture_output=True, text=True
        )
        try:
            elapsed, modules = (int(x) for x in out.stdout.split())
        except ValueError:
            raise BenchError(f"import {module}: the child printed {out.stdout!r}") from None
        return Measured(elapsed, {"modules": modules})

    return run


@bench(group="imports", name="import reaktiv (peer)", ops=1, baseline=True)
def import_reaktiv() -> Run:
    return _import("reaktiv")


@bench(group="imports", name="import cells", ops=1)
def import_cells() -> Run:
    return _import("cells")


@bench(group="imports", name="import runner", ops=1)
def import_runner() -> Run:
    return _import("runner")


@bench(group="imports", name="import cellweave", ops=1)
def import_cellweave() -> Run:
    return _import("cellweave")


@bench(group="imports", name="import runner (no bytecode cache)", ops=1)
def import_runner_uncached() -> Run:
    return _import("runner", cached=False)
