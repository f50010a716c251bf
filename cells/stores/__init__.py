"""Store backends: `MemoryStore` (default, in-process) and `SQLiteStore` (embedded, durable)."""

from .memory import MemoryStore as MemoryStore
from .sqlite import SQLiteStore as SQLiteStore

__all__ = ["MemoryStore", "SQLiteStore"]
