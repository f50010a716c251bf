"""`python -m bench "lists setup"` and `"lists edit"` at a small N: every row passes the
counts it checks (a row that fails them aborts the whole bench command)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _bench_rows(group: str, samples: int, row: str) -> list[str]:
    """Run `python -m bench GROUP` at N = 10 with `samples` samples (CPU clock); assert
    it exits 0 (a row failing its own counts aborts it); the output lines naming `row`."""
    env = {
        **os.environ,
        "BENCH_SAMPLES": str(samples),
        "BENCH_LIST_SIZES": "10",
        "BENCH_CLOCK": "cpu",
    }
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, "-m", "bench", group],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert 0 == done.returncode, done.stderr[-2000:]
    return [line for line in done.stdout.splitlines() if row in line]


def test_cold_resume_rows_pass_their_counts_in_every_sample() -> None:
    # Two samples: each one resumes the board as its runtime closed it, and the
    # reopened SQLite file's row edits one element after the resume and pulls.
    rows = _bench_rows("lists setup", 2, "cold resume N=10 ")
    assert 2 == len(rows), rows
    for row in rows:
        assert "calls=0 " in row and "registrations=0.1 " in row, row


def test_edit_rows_pass_their_counts_when_n_is_smaller_than_the_edits() -> None:
    # N = 10 < EDITS (20): each sample edits every element twice, so each edit must write
    # a title of its own on both sides (the same title twice is elided, not computed).
    rows = _bench_rows("lists edit", 1, "N=10 ")
    assert len(rows) >= 8, rows
    edits = [row for row in rows if "cellweave scalar" in row or "cellweave path" in row]
    assert 3 == len(edits), rows
    for row in edits:
        assert "computations=3 " in row and "calls=3 " in row, row
