"""The example programs run, from a scratch directory, and print what the docs say they do.

Each runs in a subprocess, as `make demo` runs it, with the repository on
PYTHONPATH and a temporary directory as the working directory (the programs
write under `.cellweave/` there, never in the checkout).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_example(module: str, cwd: Path, timeout: float = 60) -> str:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    # -X faulthandler: a hang is killed with SIGABRT, which prints every thread's stack.
    proc = subprocess.Popen(
        [sys.executable, "-X", "faulthandler", "-m", module],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)
        out, err = proc.communicate()
        raise AssertionError(f"{module} hung for {timeout}s\n{out}\n{err}") from None
    assert 0 == proc.returncode, err
    assert "" == err
    return out


def test_notes_demo_shows_pages_handlers_and_a_resume(tmp_path: Path) -> None:
    out = run_example("examples.demo", tmp_path)
    lines = out.splitlines()
    assert (tmp_path / ".cellweave" / "notes.db").exists()
    expected_in_order = [
        '  -> the app opens notebook "Ada\'s notes"',
        "  |   (no notes yet)",
        "  | Notebook: Ada's notes  (3 notes)",
        "  |   2. Ideas (4 words)",
        '  -> the app opens note "Ideas"',
        "  | Ideas  (10 words)",
        "  |   with pages that survive a restart",
        "  |   2. Ideas (10 words)",
        '  open pages: notebook "Ada\'s notes", note "Ideas"',
        "  running: Index, Note, Notebook",
        "  running before resume: 0 patterns",
        "  resumed 2 pages",
        "  |   4. Weekend (1 word)",
        "  |   (edited after the restart)",
        '  open pages: notebook "Ada\'s notes"',
        '  after another restart, resume() brings back: notebook "Ada\'s notes"',
    ]
    positions = [lines.index(line) for line in expected_in_order]
    assert sorted(positions) == positions
    # A fresh file on every run: the second run prints exactly the same.
    assert out == run_example("examples.demo", tmp_path)


def test_cells_demo_keeps_counting_runs_on_its_file(tmp_path: Path) -> None:
    first = run_example("examples.cells_demo", tmp_path)
    assert "this demo has run 1 time (on this data file)" in first
    assert "B's basis was stale: A wrote what B had read. B's write was dropped." in first
    second = run_example("examples.cells_demo", tmp_path)
    assert "this demo has run 2 times (on this data file)" in second


def test_cells_basics_runs(tmp_path: Path) -> None:
    out = run_example("examples.cells_basics", tmp_path)
    assert "items: ['milk']" in out
    assert "after commit: ['milk', 'bread']" in out
