"""scheduler: demand-driven, glitch-free, transactional execution of nodes.

What it is: node records, the reader index (who read what, value-accurate
triggering), edges and demand (liveness), passes ordered topologically with
bounded work and backoff, time gates on an injectable clock, and `settle()` /
`idle()` / `pull()` / `sink()` / `observe()`.
What it is not: patterns, pieces or ownership (see `runner`). It depends only
on `cells`, and subscribes to the replica's one change channel.
"""

from ._clock import Clock as Clock
from ._clock import ManualClock as ManualClock
from ._clock import SystemClock as SystemClock
from ._graph import Graph as Graph
from ._node import Node as Node
from ._readers import ReaderIndex as ReaderIndex
from ._readers import changed_at as changed_at
from ._scheduler import BACKOFF_BASE as BACKOFF_BASE
from ._scheduler import BACKOFF_CAP as BACKOFF_CAP
from ._scheduler import MAX_ITERS as MAX_ITERS
from ._scheduler import PASS_RUN_BUDGET as PASS_RUN_BUDGET
from ._scheduler import Scheduler as Scheduler
from ._scheduler import Statistics as Statistics
from .errors import NodeError as NodeError

__all__ = [
    "BACKOFF_BASE",
    "BACKOFF_CAP",
    "MAX_ITERS",
    "PASS_RUN_BUDGET",
    "Clock",
    "Graph",
    "ManualClock",
    "Node",
    "NodeError",
    "ReaderIndex",
    "Scheduler",
    "Statistics",
    "SystemClock",
    "changed_at",
]
