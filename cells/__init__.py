"""cells: durable JSON-like documents, links, replicas, transactions and stores.

What it is: values and their equality, deterministic ids, scoped addresses,
links, the replica (confirmed state plus pending local commits), transactions
with read logs and basis checks, bound to what their identity resolves to
(`reaches`; internal documents need the replica's `Authority`), the one
change channel (value-bearing notifications), settle outcomes, and the stores
(`MemoryStore`, `SQLiteStore`).
What it is not: scheduling (see `scheduler`) or patterns (see `runner`);
nothing here imports them.
"""

from typing import TYPE_CHECKING, Any

from ._access import INTERNAL_PREFIX as INTERNAL_PREFIX
from ._access import Authority as Authority
from ._access import internal_id as internal_id
from ._access import is_internal as is_internal
from ._access import reaches as reaches
from ._address import SCOPES as SCOPES
from ._address import DocKey as DocKey
from ._address import Identity as Identity
from ._address import Link as Link
from ._address import Linkable as Linkable
from ._address import Path as Path
from ._address import Place as Place
from ._address import Scope as Scope
from ._address import as_link as as_link
from ._address import check_scope as check_scope
from ._address import instance_key as instance_key
from ._args import check_arg as check_arg
from ._cell import Cell as Cell
from ._cell import CellHost as CellHost
from ._cell import Space as Space
from ._cell import check_same_store as check_same_store
from ._claims import ClaimRow as ClaimRow
from ._claims import ClaimTable as ClaimTable
from ._claims import Fence as Fence
from ._claims import Owner as Owner
from ._codec import canonical_bytes as canonical_bytes
from ._codec import cause_of as cause_of
from ._codec import decode_json as decode_json
from ._codec import describe as describe
from ._codec import describe_id as describe_id
from ._codec import encode_json as encode_json
from ._codec import entity_id as entity_id
from ._display import mimebundle as mimebundle
from ._links import MAX_HOPS as MAX_HOPS
from ._links import Materializer as Materializer
from ._links import first_link as first_link
from ._links import read_value as read_value
from ._links import resolve as resolve
from ._links import walk_path as walk_path
from ._outcome import RETRYABLE as RETRYABLE
from ._outcome import CommitResult as CommitResult
from ._outcome import Outcome as Outcome
from ._outcome import classify as classify
from ._patch import patch_ops as patch_ops
from ._patch import patch_ops_at as patch_ops_at
from ._pending import Pending as Pending
from ._pending import running_loop as running_loop
from ._replica import RUN_DONE as RUN_DONE
from ._replica import RUN_NONE as RUN_NONE
from ._replica import Change as Change
from ._replica import FieldPlan as FieldPlan
from ._replica import Notification as Notification
from ._replica import Replica as Replica
from ._replica import RunComputed as RunComputed
from ._retry import edit_with_retry as edit_with_retry
from ._store import CommitRequest as CommitRequest
from ._store import LoadGate as LoadGate
from ._store import StoreBase as StoreBase
from ._store import VerdictGate as VerdictGate
from ._transaction import Transaction as Transaction
from ._values import ELEMENT_IDS as ELEMENT_IDS
from ._values import ELEMENT_KINDS as ELEMENT_KINDS
from ._values import MAX_DEPTH as MAX_DEPTH
from ._values import MISSING as MISSING
from ._values import element_id_at as element_id_at
from ._values import element_ids as element_ids
from ._values import element_position as element_position
from ._values import element_types as element_types
from ._values import get_path as get_path
from ._values import ids_key as ids_key
from ._values import normalize as normalize
from ._values import same_value as same_value
from ._values import set_path as set_path
from ._values import splice_ends as splice_ends
from ._values import thaw as thaw
from ._values import value_equal as value_equal
from .errors import ArgumentTypeError as ArgumentTypeError
from .errors import CellweaveError as CellweaveError
from .errors import CommitRejected as CommitRejected
from .errors import ConflictError as ConflictError
from .errors import CorruptStoreError as CorruptStoreError
from .errors import FencedError as FencedError
from .errors import InternalError as InternalError
from .errors import InvalidArgumentError as InvalidArgumentError
from .errors import InvalidValueError as InvalidValueError
from .errors import LinkCycleError as LinkCycleError
from .errors import OwnershipError as OwnershipError
from .errors import PreconditionFailedError as PreconditionFailedError
from .errors import StoreError as StoreError
from .errors import TransactionAborted as TransactionAborted
from .errors import TransactionError as TransactionError
from .stores import MemoryStore as MemoryStore

if TYPE_CHECKING:
    from .stores import PostgresStore as PostgresStore
    from .stores import SQLiteStore as SQLiteStore

__all__ = [
    "ELEMENT_IDS",
    "ELEMENT_KINDS",
    "INTERNAL_PREFIX",
    "MAX_DEPTH",
    "MAX_HOPS",
    "MISSING",
    "RETRYABLE",
    "RUN_DONE",
    "RUN_NONE",
    "SCOPES",
    "ArgumentTypeError",
    "Authority",
    "Cell",
    "CellHost",
    "CellweaveError",
    "Change",
    "ClaimRow",
    "ClaimTable",
    "CommitRejected",
    "CommitRequest",
    "CommitResult",
    "ConflictError",
    "CorruptStoreError",
    "DocKey",
    "Fence",
    "FencedError",
    "FieldPlan",
    "Identity",
    "InternalError",
    "InvalidArgumentError",
    "InvalidValueError",
    "Link",
    "LinkCycleError",
    "Linkable",
    "LoadGate",
    "Materializer",
    "MemoryStore",
    "Notification",
    "Outcome",
    "Owner",
    "OwnershipError",
    "Path",
    "Pending",
    "Place",
    "PostgresStore",
    "PreconditionFailedError",
    "Replica",
    "RunComputed",
    "SQLiteStore",
    "Scope",
    "Space",
    "StoreBase",
    "StoreError",
    "Transaction",
    "TransactionAborted",
    "TransactionError",
    "VerdictGate",
    "as_link",
    "canonical_bytes",
    "cause_of",
    "check_arg",
    "check_same_store",
    "check_scope",
    "classify",
    "decode_json",
    "describe",
    "describe_id",
    "edit_with_retry",
    "element_id_at",
    "element_ids",
    "element_position",
    "element_types",
    "encode_json",
    "entity_id",
    "first_link",
    "get_path",
    "ids_key",
    "instance_key",
    "internal_id",
    "is_internal",
    "mimebundle",
    "normalize",
    "patch_ops",
    "patch_ops_at",
    "reaches",
    "read_value",
    "resolve",
    "running_loop",
    "same_value",
    "set_path",
    "splice_ends",
    "thaw",
    "value_equal",
    "walk_path",
]


def __getattr__(name: str) -> Any:
    # The SQL stores are imported on first use: `import cells` (and `import runner`)
    # must not pay for sqlite3 and the SQL machinery in a program that never opens
    # one; PostgresStore also needs psycopg (the extra `cellweave[postgres]`).
    if name == "SQLiteStore":
        from .stores.sqlite import SQLiteStore

        return SQLiteStore
    if name == "PostgresStore":
        from .stores.postgres import PostgresStore

        return PostgresStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
