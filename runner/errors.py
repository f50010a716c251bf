"""Errors the runner raises (all `cells.CellweaveError`)."""

from __future__ import annotations

from cells import CellweaveError


class PatternError(CellweaveError, TypeError):
    """A pattern, lift or handler was defined or called in a way that cannot work.

    The message names the pattern, the parameter or node, and the value.
    """


class PatternLoadError(CellweaveError, ImportError):
    """A pattern identity (`module:qualname`) could not be loaded."""

    def __init__(self, message: str, *, identity: str) -> None:
        super().__init__(message)
        self.identity = identity


class PatternCycleError(CellweaveError, RecursionError):
    """A result appears in its own parent chain, or nesting passed the depth limit.

    `chain` lists the results (or patterns) from the outermost in.
    """

    def __init__(self, message: str, *, chain: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.chain = chain


class OwnershipError(CellweaveError, PermissionError):
    """Acting on another principal's page, or without an identity."""
