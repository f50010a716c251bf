"""`python -m bench.sqlite_commit_cpu`: every part of a commit is timed and reported."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bench import sqlite_commit_cpu


@pytest.mark.parametrize("documents", [1, 3])
def test_the_store_and_the_caller_are_reported_per_commit(tmp_path: Path, documents: int) -> None:
    out = sqlite_commit_cpu.measure(str(tmp_path), 4, documents)
    assert out.startswith(f"{documents} document(s) a commit, 4 commits")
    # Four statements a commit (BEGIN, the heads, the log row, COMMIT), each timed
    # through the proxy (those on the store's kept cursor too); the evaluation
    # includes them.
    statements = re.search(r"SQL +([\d.]+) us \(([\d.]+) statements\)", out)
    evaluation = re.search(r"evaluation +([\d.]+) us", out)
    assert statements is not None and evaluation is not None, out
    assert 4.0 == float(statements[2])
    assert 0 < float(statements[1]) <= float(evaluation[1])
    for part in ("writes", "commit()", "wait and verdict", "total"):
        assert part in out
    assert [] == list(tmp_path.iterdir())  # files removed
