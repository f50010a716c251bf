"""Errors the scheduler raises (all `cells.CellweaveError`)."""

from __future__ import annotations

from cells import CellweaveError


class NodeError(CellweaveError, RuntimeError):
    """A node's function raised. `node` names it; the original error is the cause."""

    def __init__(self, message: str, *, node: object) -> None:
        super().__init__(message)
        self.node = node


class CallbackError(CellweaveError, RuntimeError):
    """A function the application gave the runtime raised (`on_navigate`, an
    observer's `on_error` / `on_completed`). It was contained and recorded; the
    original error is the cause."""
