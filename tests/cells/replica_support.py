"""What the replica's fast-path test modules share: a spy on which commits a shortcut took."""

from __future__ import annotations

from typing import Any

import pytest

from cells import Replica


def taken_by(monkeypatch: pytest.MonkeyPatch, shortcut: str) -> list[bool]:
    """Wrap `Replica.<shortcut>` (a fast path that returns whether it took the commit) for
    the test's length; the list it returns gets each call's answer, in order."""
    taken: list[bool] = []
    fast = getattr(Replica, shortcut)

    def recording(self: Replica, *args: Any) -> bool:
        took: bool = fast(self, *args)
        taken.append(took)
        return took

    monkeypatch.setattr(Replica, shortcut, recording)
    return taken
