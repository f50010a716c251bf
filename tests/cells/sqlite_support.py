"""What the SQLiteStore test modules share: opening stores that are checked and closed
at teardown."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path as FsPath
from typing import Any

from cells import SQLiteStore

Make = Callable[..., SQLiteStore]


@contextmanager
def open_stores(**defaults: Any) -> Iterator[Make]:
    """A `make(path, **kwargs)` that opens SQLiteStores with polling off and `defaults`
    (a keyword of a call wins); at the end each store still open is `_check`ed, then
    every store is closed."""
    opened: list[SQLiteStore] = []

    def make(path: FsPath, **kwargs: Any) -> SQLiteStore:
        kwargs.setdefault("poll_interval", 0)
        for name, value in defaults.items():
            kwargs.setdefault(name, value)
        store = SQLiteStore(path, **kwargs)
        opened.append(store)
        return store

    yield make
    for store in opened:
        if not store.closed:
            store._check()
        store.close()
