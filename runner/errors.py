"""Errors the runner raises (all `cells.CellweaveError`)."""

from __future__ import annotations

from cells import ArgumentTypeError, CellweaveError
from cells import OwnershipError as OwnershipError  # one class: cells raises it too


class PatternError(CellweaveError, TypeError):
    """A pattern, lift or handler was defined or called in a way that cannot work.

    The message names the pattern, the parameter or node, and the value.
    """


class ArgumentError(PatternError, ArgumentTypeError):
    """A `Runtime` or `Session` call got an argument it does not accept.

    The message names the call, the argument, what it accepts and what it got. A
    `PatternError` and a `cells.ArgumentTypeError` (so a `TypeError`, and an
    `InvalidArgumentError` / `ValueError`): code catching any of them catches it.
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


class PageError(CellweaveError, RuntimeError):
    """A page could not be opened (its record did not become durable)."""


class ResumeError(CellweaveError, RuntimeError):
    """Some pages recorded open could not be resumed; the others were.

    `resumed` lists the pages now running; `failures` maps each page that could
    not start (its recorded link) to the error.
    """

    def __init__(self, message: str, *, resumed: list[object], failures: dict[str, BaseException]):
        super().__init__(message)
        self.resumed = resumed
        self.failures = failures
