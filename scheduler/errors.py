"""Errors the scheduler raises (all `cells.CellweaveError`)."""

from __future__ import annotations

from cells import CellweaveError


class NodeError(CellweaveError, RuntimeError):
    """A node's function raised. `node` names it; the original error is the cause."""

    def __init__(self, message: str, *, node: object) -> None:
        super().__init__(message)
        self.node = node
