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


def in_order(lines: list[str], expected: list[str]) -> None:
    """Every expected line is printed, in this order (other lines may come between)."""
    at = 0
    for line in expected:
        assert line in lines[at:], f"{line!r} not printed after line {at}"
        at = lines.index(line, at) + 1


def test_todo_demo_shows_lists_a_card_page_and_a_resume(tmp_path: Path) -> None:
    out = run_example("examples.demo", tmp_path)
    lines = out.splitlines()
    assert (tmp_path / ".cellweave" / "todo.db").exists()
    in_order(
        lines,
        [
            '  -> the app opens board "Home"',
            "  |   (no tasks yet)",
            # 2. add: map, filter and flat_map follow the list
            "  | Board: Home  (4 open, 0 done)",
            "  |   4. [ ] Water plants #home",
            "  |   open: Buy milk, Fix bike, Write report, Water plants",
            "  |   tags: #home 3, #outdoor 1, #work 1",
            "  card lines computed: 4 (Buy milk, Fix bike, Water plants, Write report)",
            # 3. toggles: the filtered views move; only the toggled cards re-run
            "  |   2. [x] Fix bike #home #outdoor",
            "  |   done: Fix bike, Write report",
            "  card lines computed: 2 (Fix bike, Write report)",
            # 4. a card opened as a page by a handler
            '  -> the app opens card "Fix bike"',
            "  | Card: [x] Fix bike #home #outdoor",
            # 5. removed from the list: the page stays, nothing else re-runs
            "  | Board: Home  (2 open, 1 done)",
            "  |   tags: #home 2, #work 1",
            "  card lines computed: 0",
            '  open pages: board "Home", card "Fix bike"',
            "  running: Board x1, Card x4, IsDone x3, IsOpen x3, Tags x3",
            # 6. the page is live off the board
            "  | Card: [ ] Fix bike #home #outdoor",
            "  the board's open view: Buy milk, Water plants",
            # 7. restart
            "  running before resume: 0 patterns",
            '  resumed 2 pages: board "Home", card "Fix bike"',
            # 8. live after the restart
            "  |   4. [ ] Call Bob #work #phone",
            "  |   tags: #home 2, #phone 1, #work 2",
            "  | Card: [x] Fix bike #home #outdoor",
            "  card lines computed: 2 (Call Bob, Fix bike)",
            # 9. stop closes the page for good
            '  open pages: board "Home"',
            '  after another restart, resume() brings back: board "Home"',
            # the one command that serves the board in a browser
            "  .venv/bin/cellweave serve examples.todo:board",
        ],
    )
    # A fresh file on every run: the second run prints exactly the same.
    assert out == run_example("examples.demo", tmp_path)


def test_notes_demo_shows_pages_handlers_and_a_resume(tmp_path: Path) -> None:
    out = run_example("examples.notes_demo", tmp_path)
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
    in_order(lines, expected_in_order)
    # A fresh file on every run: the second run prints exactly the same.
    assert out == run_example("examples.notes_demo", tmp_path)


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


def test_quotes_fetches_from_its_own_server_with_async_lifts_and_handlers(tmp_path: Path) -> None:
    out = run_example("examples.quotes", tmp_path)
    in_order(
        out.splitlines(),
        [
            "1. an async lift fetches the price",
            "  price: CORE 7.25",
            "2. the symbol changes while a fetch is in flight",
            "  fetched: CORE, ACME, BOLT",
            "  price: BOLT 42.0",
            "  did ACME's stale answer ever land? no",
            "3. an async handler adds quotes, in the order they were sent",
            "  fetched: BOLT, ACME, CORE",
            "  |  BOLT     42.00",
            "  |  ACME     12.50",
            "  |  CORE      7.25",
        ],
    )
