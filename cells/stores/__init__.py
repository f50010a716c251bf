"""Store backends: `MemoryStore` (default, in-process), `SQLiteStore` (embedded, durable)
and `PostgresStore` (a PostgreSQL server, several processes and hosts).

`SQLiteStore` and `PostgresStore` are imported on first use, so a program that keeps
to `MemoryStore` does not load `sqlite3` or the SQL machinery; `PostgresStore` also
needs the extra `cellweave[postgres]` (psycopg 3), which the other stores do not.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .memory import MemoryStore as MemoryStore

if TYPE_CHECKING:
    from .postgres import PostgresStore as PostgresStore
    from .sqlite import SQLiteStore as SQLiteStore

__all__ = ["MemoryStore", "PostgresStore", "SQLiteStore"]


def __getattr__(name: str) -> Any:
    if name == "SQLiteStore":
        from .sqlite import SQLiteStore

        return SQLiteStore
    if name == "PostgresStore":
        from .postgres import PostgresStore

        return PostgresStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
