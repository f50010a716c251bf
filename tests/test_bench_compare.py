"""bench.compare: rows measured on two versions, alternating, with their counted work."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from bench import compare
from bench.compare import Comparison, Sample
from bench.harness import BenchError

BENCH_DIR = Path(compare.__file__).parent


def _s(ns: int, ops: int = 1, **counts: int) -> Sample:
    return Sample(ns, ops, dict(counts))


def test_rounds_alternate_which_version_runs_first() -> None:
    calls: list[str] = []

    def runner(tree: str, group: str, name: str, samples: int) -> list[Sample]:
        calls.append(tree)
        return [_s(10 if tree == "A" else 20, runs=1)] * samples

    (result,) = compare.compare(
        {"a": "A", "b": "B"}, [("g", "r")], rounds=3, per_child=1, runner=runner
    )
    assert ["A", "B", "B", "A", "A", "B"] == calls
    assert (10.0, 20.0, 2.0) == (result.a_median, result.b_median, result.ratio)
    assert [2.0, 2.0, 2.0] == result.paired()
    assert {} == result.count_difference()


def test_a_child_counts_as_its_median_sample() -> None:
    def runner(tree: str, group: str, name: str, samples: int) -> list[Sample]:
        return [_s(30), _s(10), _s(20)]

    (result,) = compare.compare(
        {"a": "A", "b": "B"}, [("g", "r")], rounds=1, per_child=3, runner=runner
    )
    assert (_s(20),) == result.a == result.b


def test_counted_work_that_differs_is_reported_per_op() -> None:
    c = Comparison(
        "g",
        "r",
        a=(_s(100, 10, sent=20, runs=10), _s(100, 10, sent=20, runs=10)),
        b=(_s(90, 10, sent=20, runs=30), _s(90, 10, sent=20, runs=30, extra=10)),
    )
    assert {"runs": (1.0, 3.0), "extra": (0.0, 0.5)} == c.count_difference()
    table = compare.format_comparisons([c], "old", "new")
    assert "DIFFER runs=1->3 extra=0->0.5" in table
    assert "0.900" in table  # b/a of the medians


def test_selectors_name_groups_or_rows_and_unknown_ones_are_refused() -> None:
    rows = [("pages memory", "open"), ("pages memory", "stop"), ("lists edit", "x")]
    assert rows == compare.select(rows, [])
    assert rows[:2] == compare.select(rows, ["pages memory"])
    assert [rows[0], rows[2]] == compare.select(rows, ["lists edit/x", "pages memory/open"])
    with pytest.raises(BenchError, match="'pages sqlite'"):
        compare.select(rows, ["pages sqlite"])


def test_rounds_below_one_are_refused() -> None:
    with pytest.raises(BenchError, match="rounds"):
        compare.compare({"a": "A", "b": "B"}, [("g", "r")], rounds=0, per_child=1)


TINY = """
from bench.harness import bench

@bench(group="tiny", name="count to ten", ops=10)
def tiny():
    def run():
        return {"steps": sum(1 for _ in range(10))}
    return run
"""


def _tree(root: Path) -> Path:
    """A source tree with the real harness and one tiny benchmark module."""
    (root / "bench").mkdir(parents=True)
    for name in ("__init__.py", "harness.py"):
        shutil.copy(BENCH_DIR / name, root / "bench" / name)
    (root / "bench" / "bench_tiny.py").write_text(TINY)
    return root


def test_a_child_runs_the_row_with_its_own_trees_harness(tmp_path: Path) -> None:
    tree = str(_tree(tmp_path / "tree"))
    assert [("tiny", "count to ten")] == compare.list_rows(tree)
    (result,) = compare.compare({"a": tree, "b": tree}, [("tiny", "count to ten")], 2, 2)
    assert 2 == len(result.a) == len(result.b)
    assert ({"steps": 1.0}, {"steps": 1.0}) == result.counts()
    with pytest.raises(BenchError, match="no benchmark tiny/missing"):
        compare.run_child(tree, "tiny", "missing", 1)


def test_extract_unpacks_a_commit(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()

    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)

    git("init", "-q")
    (repo / "f.txt").write_text("first")
    git("add", "f.txt")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "one")
    (repo / "f.txt").write_text("second")
    git("branch", "team/one")
    for rev in ("HEAD", "team/one"):
        out = Path(compare.extract(str(repo), rev, str(tmp_path)))
        assert tmp_path == out.parent
        assert "first" == (out / "f.txt").read_text()
    with pytest.raises(BenchError, match="git archive nope"):
        compare.extract(str(repo), "nope", str(tmp_path))


def test_a_child_that_ran_another_checkouts_modules_fails(tmp_path: Path) -> None:
    tree = _tree(tmp_path / "tree")
    # This tree has no `cells`: the editable install supplies the working tree's.
    (tree / "bench" / "bench_tiny.py").write_text("import cells\n" + TINY)
    with pytest.raises(BenchError, match=r"modules loaded from outside .*'cells'"):
        compare.run_child(str(tree), "tiny", "count to ten", 1)
