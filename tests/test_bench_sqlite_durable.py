"""`python -m bench.sqlite_durable`: both sides commit in turns and are reported."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from bench import bench_cells, sqlite_durable


@pytest.mark.parametrize("documents", [1, 3])
def test_both_sides_run_every_round_and_are_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], documents: int
) -> None:
    sqlite_durable.measure(3, 4, documents, str(tmp_path), "OFF")
    out = capsys.readouterr().out
    assert f"3 rounds of 4 commits per side, {documents} document(s) a commit" in out
    for side in ("raw sqlite3", "SQLiteStore"):
        assert side in out
    assert "store rate / raw rate, wall: median" in out
    assert "store rate / raw rate, cpu : median" in out
    # Pages by table: raw updates rows of `kv` only; the store a head and the log's end.
    by_table = [line.split(": ")[1] for line in out.splitlines() if "pages per commit by" in line]
    assert "kv 1.00" == by_table[0]
    assert {"head", "log"} <= {part.split()[0] for part in by_table[1].split(", ")}
    assert [] == list(tmp_path.iterdir())  # files removed


def test_one_side_alone_commits_what_it_is_asked(tmp_path: Path) -> None:
    # (What `--fsyncs` runs under strace; the file is removed after, so check the work
    # through a side kept open.)
    side = sqlite_durable._raw(str(tmp_path), "OFF", 3)
    for n in range(5):
        side.commit(n)
    con = sqlite3.connect(tmp_path / "raw.db")
    try:
        assert [('{"value": 4}',)] * 3 == con.execute(
            "SELECT value FROM kv WHERE key LIKE 'k%'"
        ).fetchall()
    finally:
        con.close()
    bench_cells._clean_up()  # (the leftovers sqlite_durable registers there)
