"""Store backends: `MemoryStore` (default, in-process), `SQLiteStore` (embedded, durable)
and `PostgresStore` (a PostgreSQL server, several processes and hosts).

`PostgresStore` is imported on first use: it needs the extra `cellweave[postgres]`
(psycopg 3), which the other stores do not.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .memory import MemoryStore as MemoryStore
from .sqlite import SQLiteStore as SQLiteStore

if TYPE_CHECKING:
    from .postgres import PostgresStore as PostgresStore

__all__ = ["MemoryStore", "PostgresStore", "SQLiteStore"]


def __getattr__(name: str) -> Any:
    if name == "PostgresStore":
        from .postgres import PostgresStore

        return PostgresStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
