"""The bench harness: a run's finish function is called after the clock stops."""

from __future__ import annotations

import pytest

from bench import harness
from bench.harness import Benchmark, Counts, Finish, Run, run_group


def test_finish_runs_after_the_clock_stops_and_gives_the_counts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    events: list[str] = []
    ticks = iter(range(0, 1000, 10))

    def clock() -> int:
        events.append("clock")
        return next(ticks)

    def setup() -> Run:
        def finish() -> Counts:
            events.append("finish")
            return {"checked": 3}

        def run() -> Finish:
            events.append("run")
            return finish

        return run

    monkeypatch.setattr(harness, "_clock", clock)
    (result,) = run_group([Benchmark(name="b", group="g", setup=setup, ops=1)], samples=1)
    assert ["clock", "run", "clock", "finish"] == events
    assert ({"checked": 3},) == result.counts
    assert (10,) == result.sample_ns


def test_a_finish_that_raises_fails_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    def setup() -> Run:
        def finish() -> Counts:
            raise AssertionError("wrong result")

        return lambda: finish

    with pytest.raises(AssertionError, match="wrong result") as info:
        run_group([Benchmark(name="b", group="g", setup=setup, ops=1)], samples=1)
    assert any("g/b" in note for note in info.value.__notes__)
