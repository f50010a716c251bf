"""cellweave: the product layer over the engine (`runner`, `scheduler`, `cells`).

What it is: one import for the everyday API (`Runtime`, `pattern`, `lift`,
`handler`, `navigate_to`, the stores, the errors), the live view widget for
notebooks (`cellweave.view(cell)`), the web shell that serves a pattern to
browsers (`cellweave serve MODULE:PATTERN`), and the `cellweave` command.
What it is not: the engine; nothing below imports it.

    >>> from cellweave import Runtime, pattern, lift
"""

from __future__ import annotations

from cells import Cell as Cell
from cells import CellweaveError as CellweaveError
from cells import CommitRejected as CommitRejected
from cells import ConflictError as ConflictError
from cells import InvalidValueError as InvalidValueError
from cells import LinkCycleError as LinkCycleError
from cells import MemoryStore as MemoryStore
from cells import SQLiteStore as SQLiteStore
from runner import OwnershipError as OwnershipError
from runner import Pattern as Pattern
from runner import PatternCycleError as PatternCycleError
from runner import PatternError as PatternError
from runner import Ref as Ref
from runner import Runtime as Runtime
from runner import Session as Session
from runner import handler as handler
from runner import lift as lift
from runner import navigate_to as navigate_to
from runner import pattern as pattern

from ._widget import inspector as inspector
from ._widget import view as view

__all__ = [
    "Cell",
    "CellweaveError",
    "CommitRejected",
    "ConflictError",
    "InvalidValueError",
    "LinkCycleError",
    "MemoryStore",
    "OwnershipError",
    "Pattern",
    "PatternCycleError",
    "PatternError",
    "Ref",
    "Runtime",
    "SQLiteStore",
    "Session",
    "handler",
    "inspector",
    "lift",
    "navigate_to",
    "pattern",
    "view",
]
