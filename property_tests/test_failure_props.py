"""Failing computations (issue 13 item 9): a chain of computations, some of which
raise on some inputs, under random writes to its source.

After every settle, for each computation, in order along the chain:
- if its function raises on the value its input holds now (or the input is
  failing, so it reads None), it is failing: its output is absent and
  `pull_now` raises `NodeError` naming it (the first failing node a read sees);
- otherwise its output is what the function computes, and it is not failing;
- an observer of it has had exactly one `on_error` once it ever failed;
- each run that raised was recorded once: one record per node whose input
  value changed and which raised, and the scheduler's invariants hold.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import cells
from cells import MISSING, Space
from scheduler import ManualClock, NodeError, Scheduler

CHAIN = 4


@pytest.fixture(autouse=True, scope="module")
def quiet() -> Iterator[None]:
    log = logging.getLogger("cellweave")
    level = log.level
    log.setLevel(logging.CRITICAL)
    yield
    log.setLevel(level)


def step(limit: int, v: Any) -> int:
    """The chain's function: raises on a value over `limit` or on an absent input."""
    if v is None:
        raise LookupError("absent input")
    if v > limit:
        raise ValueError(f"{v} is over {limit}")
    return int(v) + 1


def expected(limits: list[int], source: int) -> list[int | None]:
    """What each output holds after a settle (None: failing, so absent)."""
    out: list[int | None] = []
    value: int | None = source
    for limit in limits:
        value = None if value is None or value > limit else value + 1
        out.append(value)
    return out


@given(
    limits=st.lists(st.integers(0, 6), min_size=CHAIN, max_size=CHAIN),
    writes=st.lists(st.integers(0, 8), min_size=1, max_size=8),
    observed=st.integers(0, CHAIN - 1),
)
def test_failing_outputs_are_absent_and_their_reads_find_the_failure(
    limits: list[int], writes: list[int], observed: int
) -> None:
    sp = Space(cells.MemoryStore(), "p")
    sch = Scheduler(sp.replica, clock=ManualClock())
    source = sp.cell("source")
    source.set(writes[0])
    outs = [sp.cell(f"out{i}") for i in range(CHAIN)]
    nodes = []
    for i, limit in enumerate(limits):
        inp = source if i == 0 else outs[i - 1]
        nodes.append(
            sch.derive(outs[i], [inp], lambda v, limit=limit: step(limit, v), label=f"step{i}")
        )
    sch.sink(outs[-1], lambda _v: None)  # the whole chain is live: every node runs once
    want = expected(limits, writes[0])
    records = sum(1 for w in want if w is None)
    errors: list[BaseException] = []
    sch.observe(outs[observed]).subscribe(lambda _v: None, errors.append)
    ever_failed = want[observed] is None
    assert (1 if ever_failed else 0) == len(errors)
    assert records == len(sch.errors())
    previous = writes[0]
    for value in writes[1:]:
        before = want
        source.set(value)
        sch.settle()
        want = expected(limits, value)
        # A node runs again only when the value it reads changed; each run that raises
        # is one record.
        prev_in = [previous, *before[:-1]]
        now_in = [value, *want[:-1]]
        records += sum(1 for i in range(CHAIN) if now_in[i] != prev_in[i] and want[i] is None)
        previous = value
        for i, out in enumerate(outs):
            if want[i] is None:
                assert MISSING == out.get(), (i, want)
                assert nodes[i] in sch.failing()
                with pytest.raises(NodeError) as info:
                    sch.pull_now(out)
                assert info.value.node is nodes[i]
            else:
                assert want[i] == out.get(), (i, want)
                assert nodes[i] not in sch.failing()
                assert want[i] == sch.pull_now(out)
        ever_failed = ever_failed or want[observed] is None
        assert (1 if ever_failed else 0) == len(errors)
        assert records == len(sch.errors())
        sch._check()
