"""The narrow interface the scheduler's parts use of the scheduler itself.

The scheduler is one object (`Scheduler`) made of parts, one concept per
module: passes and the drain (`_passes`), time gates and the wake timer
(`_timers`), failure state (`_failing`), sinks, derive and pull
(`_sinks`), observations (`_observe`), event dispatch (`_dispatch`), and
async runs (`_async`). A part sees the scheduler only through `Host`,
declared here, below every part: so no part imports the module of the
class it belongs to, and the modules form no import circle.

`Statistics` (counted work) lives here too: every part counts into it.
Not here: any behaviour. `Host` only names what the parts share.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Final, Protocol

import attrs

from cells import Authority, Cell, DocKey, Identity, Path, Replica, Transaction

from ._async import AsyncWork
from ._clock import Clock
from ._events import EventLane, Lineage
from ._failures import ErrorLog
from ._graph import Graph
from ._node import Node, NodeKind
from .errors import NodeError

MAX_PASSES_PER_SETTLE: Final = 10_000
"""Passes per settle (and per event preflight) before it gives up for now."""


@attrs.define
class Statistics:
    """Counted work. Observes, never decides. Exact between drains: a drain adds its
    direct runs (`runs_computation`, `commits`, `direct_commits`) when it ends."""

    passes: int = 0
    drains: int = 0
    runs_computation: int = 0
    runs_effect: int = 0
    invalidations: int = 0
    deferrals: int = 0
    heap_pushes: int = 0
    max_work_set: int = 0
    last_work_set: int = 0
    commits: int = 0
    stale_reruns: int = 0
    direct_commits: int = 0
    """Node runs committed with no transaction (`Replica.run_field`), sent or elided."""

    @property
    def runs(self) -> int:
        return self.runs_computation + self.runs_effect


class Delivery(Protocol):
    """A sink waiting to call its function once the pass has ended: a sink is its own
    node, so `registered` is its node's, and `node` the node itself."""

    registered: bool

    @property
    def node(self) -> Node: ...

    def deliver(self) -> None: ...


class Host(Protocol):
    """What a part of the scheduler may use of the scheduler (see the module doc)."""

    replica: Replica
    clock: Clock
    stats: Statistics
    graph: Graph
    events: EventLane
    lineage: Lineage
    work: AsyncWork
    errors_log: ErrorLog
    _authority: Authority
    _candidates: dict[Node, None]
    _deliveries: dict[Delivery, None]
    _current_tx: Transaction | None
    _closed: bool

    def register(
        self,
        fn: Callable[[Transaction], object],
        *,
        identity: Identity,
        kind: NodeKind = ...,
        outputs: Iterable[tuple[DocKey, Path]] = ...,
        label: str | None = ...,
        parent: Node | None = ...,
        reads: Iterable[tuple[DocKey, Path, bool]] = ...,
        make: Callable[..., Node] = ...,
    ) -> Node: ...

    def remove(self, node: Node) -> None: ...

    def settle(self) -> None: ...

    async def idle(self) -> None: ...

    def busy(self) -> bool: ...

    def runnable(self) -> list[Node]: ...

    def _pass(self, seeds: list[Node]) -> None: ...

    def _request_pass(self) -> None: ...

    def _kick(self) -> None: ...

    def _commit_run(self, node: Node, tx: Transaction) -> None: ...

    def _fail(self, node: Node, exc: Exception) -> None: ...

    def _report_failures(self) -> None: ...

    def _recovered(self, node: Node) -> None: ...

    def _on_node_failed(self, tx: Transaction, result: Any) -> None: ...

    def failure(self, cell: Cell) -> NodeError | None: ...

    def sink(self, cell: Cell, fn: Callable[[Any], None]) -> Callable[[], None]: ...
