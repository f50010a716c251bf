"""scheduler: demand-driven, glitch-free, transactional execution of nodes.

What it is: node records, the reader index (who read what, value-accurate
triggering), edges and demand (liveness), passes ordered topologically with
bounded work and backoff, time gates on an injectable clock, events (FIFO
handlers, receipts, retries, lineage), and `settle()` / `idle()` / `pull()` /
`sink()` / `observe()` (a reactivex Observable sharing one node per cell), and
where failures go: a failing node's outputs are absent and its pulls raise,
`errors()` keeps the recent errors (`MAX_ERRORS`), each logged once on the
`cellweave.scheduler` logger.
What it is not: patterns, pieces or ownership (see `runner`). It depends only
on `cells`, and subscribes to the replica's one change channel.
"""

from ._clock import Clock as Clock
from ._clock import ManualClock as ManualClock
from ._clock import SystemClock as SystemClock
from ._direct import ValueFunction as ValueFunction
from ._events import CommitConvergenceError as CommitConvergenceError
from ._events import Handler as Handler
from ._events import HandlerError as HandlerError
from ._events import Lineage as Lineage
from ._events import OriginFailedError as OriginFailedError
from ._events import QueuedEvent as QueuedEvent
from ._failures import MAX_ERRORS as MAX_ERRORS
from ._failures import ErrorRecord as ErrorRecord
from ._graph import Graph as Graph
from ._host import Statistics as Statistics
from ._node import FunctionNode as FunctionNode
from ._node import Node as Node
from ._passes import MAX_ITERS as MAX_ITERS
from ._passes import PASS_RUN_BUDGET as PASS_RUN_BUDGET
from ._readers import ReaderIndex as ReaderIndex
from ._readers import changed_at as changed_at
from ._readers import common_ends as common_ends
from ._scheduler import Scheduler as Scheduler
from ._timers import BACKOFF_BASE as BACKOFF_BASE
from ._timers import BACKOFF_CAP as BACKOFF_CAP
from .errors import CallbackError as CallbackError
from .errors import NodeError as NodeError

__all__ = [
    "BACKOFF_BASE",
    "BACKOFF_CAP",
    "MAX_ERRORS",
    "MAX_ITERS",
    "PASS_RUN_BUDGET",
    "CallbackError",
    "Clock",
    "CommitConvergenceError",
    "ErrorRecord",
    "FunctionNode",
    "Graph",
    "Handler",
    "HandlerError",
    "Lineage",
    "ManualClock",
    "Node",
    "NodeError",
    "OriginFailedError",
    "QueuedEvent",
    "ReaderIndex",
    "Scheduler",
    "Statistics",
    "SystemClock",
    "ValueFunction",
    "changed_at",
    "common_ends",
]
