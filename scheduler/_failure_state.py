"""Failure state: which nodes are failing, and what a read of their outputs finds.

A node whose run raised is failing (`fail`): its error is kept on the node,
its declared outputs are written away (absent) in its own transaction, so
nothing reads a value computed from inputs that no longer hold, and reading
them finds the failure (`failure`). It recovers when a later run completes
(`recovered`). When a settle ends, each node that raised in it and is still
failing is recorded once in the error log, and the observations fed by a
failing computation end with `on_error` (`report`).

Invariants
- a node is in `raised` only between its failing run and the end of that
  settle (or of its async run).
- the failing index holds a registered node with declared outputs iff its
  last run raised (`FailingIndex._check`).
Not here: the error records themselves (`_failures`), or when nodes run.
"""

from __future__ import annotations

import attrs

from cells import MISSING, Cell, CellweaveError, Transaction, read_value

from ._failures import FailingIndex
from ._host import Host
from ._node import Node
from ._observe import Observations
from .errors import NodeError


@attrs.define(slots=True, eq=False, weakref_slot=False)
class Failures:
    """The failing nodes of one scheduler, and where their errors go."""

    _host: Host
    observations: Observations
    index: FailingIndex = attrs.field(factory=FailingIndex, init=False)
    raised: dict[Node, NodeError] = attrs.field(factory=dict, init=False)
    """Nodes that raised in this settle; reported when it ends if still failing."""

    def fail(self, node: Node, exc: Exception) -> None:
        """`node` raised: it is failing until it runs again (an input changes). Its
        declared outputs are made absent, so nothing reads a value computed from inputs
        that no longer hold; reading them finds this failure (`failure`)."""
        node.error = exc
        err = NodeError(f"{node!r} raised {type(exc).__name__}: {exc}", node=node)
        err.__cause__ = exc
        self.raised[node] = err
        if not node.outputs or not node.registered:
            return
        self.index.add(node)
        host = self._host
        # Its own commit: never invalidates the node itself (source), only readers.
        away = Transaction(host.replica, node.identity, source=node)
        try:
            for key, path in node.outputs:
                away.write(key, path, MISSING)
        except CellweaveError:
            away.abort(f"{node.label}: its outputs could not be cleared")
            return
        host.stats.commits += 1
        away.commit_detached(on_failure=host._on_node_failed)

    def recovered(self, node: Node) -> None:
        """`node`'s run completed: its outputs are its own again."""
        gates = node._gates
        if gates is not None and gates.error is not None:
            gates.error = None
            self.index.discard(node)

    def report(self) -> None:
        """The settle ended: record the nodes still failing, end the observations a
        failing computation feeds."""
        # Only nodes still failing at the end: a node that raised on a transient
        # input (a first-run cascade reading a not-yet-computed value) and then
        # succeeded in the same settle is not an error.
        raised, self.raised = self.raised, {}
        log = self._host.errors_log
        for node, err in raised.items():
            if node.error is not None and node.registered:
                log.add(
                    "effect" if node.kind == "effect" else "computation",
                    node.label,
                    _output_name(node),
                    err,
                )
        observations = self.observations
        observations.suspect = False
        if raised or observations.table:
            observations.report()

    def failure(self, cell: Cell) -> NodeError | None:
        """See `Scheduler.failure`. O(1) when nothing fails."""
        if not self.index:
            return None
        probe = Transaction(self._host.replica, cell.identity)
        try:
            read_value(probe, cell.link())
            node = self.index.seen_by(probe.reads)
        finally:
            probe.abort("failure probe")
        if node is None:
            return None
        cause = node.error
        err = NodeError(
            f"{cell!r} is absent: the computation {node.label!r} feeding it failed with"
            f" {type(cause).__name__}: {cause}",
            node=node,
        )
        err.__cause__ = cause
        return err

    def _check(self) -> None:
        self.index._check()
        self.observations._check()


def _output_name(node: Node) -> str | None:
    """The cell a node writes, for error records (its first declared output)."""
    if not node.outputs:
        return None
    key, path = node.outputs[0]
    return f"{key}{list(path[1:])}" if len(path) > 1 else str(key)
