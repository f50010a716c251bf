"""placeholder"""

from .._store import StoreBase


class SQLiteStore(StoreBase):
    pass
