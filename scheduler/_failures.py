"""Failures: where an error of a computation, handler or callback goes.

Every error gets a home, and only one log line. A node that raised is
*failing*: its declared outputs are made absent (the scheduler writes them
away) and it stays failing until something it read changes and it runs
again. The pull of a value that reads a failing output raises a `NodeError`
naming the node and the cell pulled; an observation of it gets the error in
`on_error`. Independently, each failure that outlived its settle (a node
still failing when the settle ends, a handler that raised, a callback that
raised) is recorded once here and logged once on the `cellweave.scheduler`
logger.

Invariants (checked by `_check`)
- the log never holds more than `MAX_ERRORS` records, oldest dropped first;
- a node with declared outputs is in the failing index iff it is registered and
  its last run raised (`node.error is not None`), under each output's document.
Not here: when nodes run (the scheduler) or who ends what (the runner).
"""

from __future__ import annotations

import collections
import time
from collections.abc import Iterable
from typing import Any, Final, Literal

import attrs

from cells import DocKey, Path

from ._node import Node

MAX_ERRORS: Final = 100
"""How many error records `ErrorLog` keeps; older ones are dropped (they were logged)."""

ErrorKind = Literal["computation", "effect", "handler", "send", "callback"]

LOGGER: Final = "cellweave.scheduler"
"""Every recorded error is logged on this logger once, at ERROR level, with its
traceback. (`logging` is imported by the first error: `import scheduler` stays cheap.)"""


@attrs.frozen
class ErrorRecord:
    """One error that reached the runtime: what failed, where, when and why.

    `kind` is "computation" or "effect" (a node's function raised), "handler"
    (a handler raised, or its commit never converged), "send" (an event that
    waited for its result to start was dropped: the start failed, or bound no
    handler there) or "callback" (a function
    the application gave the runtime raised: `on_navigate`, an observer's
    `on_error` / `on_completed`). `source` names the node, handler or callback;
    `cell` the cell it writes or serves (None if it has none); `error` is the
    exception (a cellweave error; the original is its `__cause__`).
    """

    time: float
    """Wall-clock time it was recorded (`time.time()`, seconds since the epoch)."""
    kind: ErrorKind
    source: str
    cell: str | None
    message: str
    error: BaseException = attrs.field(repr=False, eq=False)

    def as_dict(self) -> dict[str, Any]:
        """JSON-serialisable form (as `inspect()` shows it); the exception as its type name."""
        return {
            "time": self.time,
            "kind": self.kind,
            "source": self.source,
            "cell": self.cell,
            "message": self.message,
            "error": type(self.error).__name__,
            "cause": None if self.error.__cause__ is None else type(self.error.__cause__).__name__,
        }


class ErrorLog:
    """The recent errors of one scheduler, newest last, at most `MAX_ERRORS`."""

    def __init__(self, limit: int = MAX_ERRORS) -> None:
        self._records: collections.deque[ErrorRecord] = collections.deque(maxlen=limit)
        self.total = 0
        """How many were ever recorded (the deque forgets; this does not)."""

    def __len__(self) -> int:
        return len(self._records)

    def add(
        self, kind: ErrorKind, source: str, cell: str | None, error: BaseException
    ) -> ErrorRecord:
        """Record `error` and log it once (ERROR, with its traceback)."""
        record = ErrorRecord(time.time(), kind, source, cell, str(error), error)
        self._records.append(record)
        self.total += 1
        import logging

        logging.getLogger(LOGGER).error(
            "%s %s failed%s: %s",
            kind,
            source,
            "" if cell is None else f" (cell {cell})",
            record.message,
            exc_info=error,
        )
        return record

    def records(self) -> list[ErrorRecord]:
        return list(self._records)

    def _check(self) -> None:
        maxlen = self._records.maxlen
        assert maxlen is not None and len(self._records) <= maxlen


@attrs.define(slots=True, eq=False, weakref_slot=False)
class FailingIndex:
    """Failing nodes by the documents they write: which failure does a read see?"""

    _by_doc: dict[DocKey, dict[Node, None]] = attrs.field(factory=dict, init=False)

    def __bool__(self) -> bool:
        return bool(self._by_doc)

    def add(self, node: Node) -> None:
        for key, _path in node.outputs:
            self._by_doc.setdefault(key, {})[node] = None

    def discard(self, node: Node) -> None:
        for key, _path in node.outputs:
            nodes = self._by_doc.get(key)
            if nodes is not None:
                nodes.pop(node, None)
                if not nodes:
                    del self._by_doc[key]

    def seen_by(self, reads: Iterable[tuple[DocKey, Path, bool]]) -> Node | None:
        """The first failing node whose output one of `reads` overlaps (either path a
        prefix of the other: a read of a container sees an absent field in it)."""
        by_doc = self._by_doc
        for key, path, _shallow in reads:
            nodes = by_doc.get(key)
            if not nodes:
                continue
            for node in nodes:
                for out_key, out_path in node.outputs:
                    if out_key != key:
                        continue
                    n = min(len(path), len(out_path))
                    if path[:n] == out_path[:n]:
                        return node
        return None

    def nodes(self) -> list[Node]:
        return list({n: None for nodes in self._by_doc.values() for n in nodes})

    def _check(self) -> None:
        for key, nodes in self._by_doc.items():
            assert nodes, key
            for node in nodes:
                assert node.registered and node.error is not None, node
                assert any(k == key for k, _ in node.outputs), (node, key)
