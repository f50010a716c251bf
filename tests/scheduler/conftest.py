"""Fixtures the scheduler tests share: a space on a fresh `MemoryStore`, and a scheduler
over its replica on a manual clock whose invariants (`_check`) hold after each test.
A test module that needs another setup defines its own `sp` / `sch`, which pytest
prefers to these."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import cells
from cells import Space
from scheduler import ManualClock, Scheduler


@pytest.fixture
def sp() -> Space:
    return Space(cells.MemoryStore(), "d")


@pytest.fixture
def sch(sp: Space) -> Iterator[Scheduler]:
    s = Scheduler(sp.replica, clock=ManualClock())
    yield s
    s._check()
    sp.replica._check()
