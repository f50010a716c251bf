"""Node records: all per-node state in one place.

A node is a *computation* (idempotent; may run any number of times; writes
its declared outputs), or an *effect* (a demand source: a sink, a pull, a
view). Identity is the object itself, never a string.

Invariants
- `status` is "never-ran" until the first completed run; a run sets "clean"
  before it starts (its own commit never re-invalidates it; foreign changes
  during the run do).
- `outputs` (the static write surface) never changes after registration.
- `height` is above the height of every writer of the node (except around
  cycles, where it is capped), so ordering by (height, ordinal) is topological.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, TypeAlias

import attrs

from cells import DocKey, Identity, Path, Transaction

NodeKind: TypeAlias = Literal["computation", "effect"]
Status: TypeAlias = Literal["never-ran", "clean", "invalid"]
ReadSet: TypeAlias = dict[DocKey, tuple[tuple[Path, ...], tuple[Path, ...]]]
"""Per document: (deep paths, shallow paths), compacted."""


@attrs.define(eq=False, slots=True, repr=False)
class Node:
    fn: Callable[[Transaction], object]
    kind: NodeKind
    ordinal: int
    identity: Identity
    outputs: tuple[tuple[DocKey, Path], ...]
    label: str
    parent: Node | None = None
    status: Status = "never-ran"
    reads: ReadSet = attrs.field(factory=dict)
    raw_reads: list[tuple[DocKey, Path, bool]] | None = None
    """The last run's read log as logged: an identical log skips re-deriving `reads`."""
    live_refs: int = 0
    demand: int = 0
    """Explicit demand holders (pulls, event preflight); a root while > 0."""
    provisional: bool = False
    registered: bool = True
    height: int = 0
    pass_runs: int = 0
    runs: int = 0
    eligible_at: float = 0.0
    """max(debounce_ready_at, throttle_ready_at, backoff_until): the one time gate."""
    debounce: float = 0.0
    throttle: float = 0.0
    debounce_ready_at: float = 0.0
    throttle_ready_at: float = 0.0
    backoff_until: float = 0.0
    backoff_streak: int = 0
    retries: int = 0
    error: BaseException | None = None
    children: list[Node] = attrs.field(factory=list)

    def __repr__(self) -> str:
        return f"<Node {self.kind} {self.label!r} #{self.ordinal} {self.status}>"

    def update_gate(self) -> None:
        self.eligible_at = max(self.debounce_ready_at, self.throttle_ready_at, self.backoff_until)

    @property
    def is_root(self) -> bool:
        return self.kind == "effect" or self.provisional or self.demand > 0

    @property
    def is_live(self) -> bool:
        # live_refs first: most live nodes are computations read by a live node.
        return self.registered and (
            self.live_refs > 0 or self.kind == "effect" or self.provisional or self.demand > 0
        )
