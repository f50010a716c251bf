"""What the nodes of a run share: reading bound inputs, and children a computation launches.

- `materialize` reads a bound tree (links followed) as plain values, the way a
  lift, a `when` condition and a function list op see their inputs;
- `computed_child` launches the child a computation returned (a lift
  returning a pattern instance, a `when` node's chosen branch) in the
  computation's own transaction. If that transaction fails for good, the
  child of the latest run is released (its setup writes never landed) and the
  computation runs again, up to `MAX_OWED_RERUNS` times; on a stale basis the
  scheduler re-runs it, which stages the setup again.

Not here: which node launches what (`_instantiate`, `_when`), or the
authority that ends a child (the runner's core, seen through `Launcher`).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Final

from cells import (
    MISSING,
    CellweaveError,
    CommitResult,
    DocKey,
    Identity,
    Link,
    Outcome,
    Transaction,
    read_value,
    running_loop,
    thaw,
)
from scheduler import Node

from . import _docs as docs
from ._builder import NodeSpec, Pattern, PatternInstance

if TYPE_CHECKING:
    from ._core import Launcher

MAX_OWED_RERUNS: Final = 5
"""Re-runs of a lift whose child setup keeps failing for good, before it waits for new input."""


def declared_reads(tree: Any, identity: Identity) -> list[tuple[DocKey, tuple[Any, ...], bool]]:
    """The reads a node over the bound `tree` declares up front (each link, deep)."""
    return [(ln.key(identity), docs.value_path(ln.path), False) for ln in docs.links_in(tree)]


def node_label(pattern: Pattern, spec: NodeSpec) -> str:
    """How traces, errors and `inspect()` name a node of a pattern (one string shared
    by every instance of that node: formatting one per instance cost about 90 bytes
    per node)."""
    return _label(pattern.__qualname__, spec.index, spec.kind, spec.target)


@functools.lru_cache(maxsize=1 << 12)
def _label(qualname: str, index: int, kind: str, target: str) -> str:
    return f"{qualname}.n{index} {kind} {target}"


def materialize(tx: Transaction, tree: Any) -> Any:
    """A bound tree as plain values: every link read (and followed) through `tx`; an
    absent value reads as None (functions never see the MISSING sentinel)."""
    t = type(tree)
    if t is Link:
        value = read_value(tx, tree)
        t = type(value)
        if t is dict or t is list:
            return thaw(value)  # the function's own copy, which it may mutate
        return None if value is MISSING else value  # (a scalar: no `thaw` call)
    if t is dict:
        return {k: materialize(tx, v) for k, v in tree.items()}
    if t is list:
        return [materialize(tx, v) for v in tree]
    return tree


def materialize_all(tx: Transaction, trees: tuple[Any, ...]) -> list[Any]:
    """`materialize` of each of `trees` (a lift's positional inputs). A link, the usual
    input, is read here without a `materialize` call per input: a card of three lifts
    made seven such calls per edit. O(what they read)."""
    values: list[Any] = []
    append = values.append
    for tree in trees:
        if type(tree) is Link:
            value = read_value(tx, tree)
            t = type(value)
            if t is dict or t is list:
                append(thaw(value))
            else:
                append(None if value is MISSING else value)
        else:
            append(materialize(tx, tree))
    return values


def need_loop(label: str) -> None:
    """An async function runs only on a running event loop: fail before calling it
    (a coroutine made and never awaited would be lost, and warn)."""
    if running_loop() is None:
        raise CellweaveError(
            f"{label} is async: it runs only while an event loop runs (await rt.idle(),"
            " pull() or a send's handle instead of settle())"
        )


class ComputedLaunches:
    """Which run of a lift last launched its child (only the latest may roll it back),
    and the children of a list or dict it returned, by result key."""

    __slots__ = ("failures", "latest", "many")

    def __init__(self) -> None:
        self.latest = 0
        self.failures = 0
        self.many: dict[DocKey, tuple[Link, ComputedLaunches]] = {}


def computed_child(
    runner: Launcher,
    tx: Transaction,
    inst: PatternInstance,
    out: Link,
    chain: tuple[DocKey, ...],
    label: str,
    launches: ComputedLaunches,
    node: Node,
) -> None:
    """Set up and launch `inst` on `out` in the computation `node`'s transaction `tx`
    (see the module docstring for what a failed transaction does)."""
    runner.stage_setup(tx, inst.pattern, inst.argument, out, label)
    runner.launch(
        tx,
        inst.pattern,
        out,
        launch=f"computed by {label}",
        chain=chain,
        gated=False,
        rollback=False,
    )
    launches.latest += 1
    mine = launches.latest
    key = out.key(tx.identity)

    def settled(_tx: Transaction, res: CommitResult) -> None:
        if res.ok:
            launches.failures = 0
            return
        if res.outcome is Outcome.STALE_BASIS:
            return  # the scheduler re-runs the lift, which stages the setup again
        # Everything this run staged is gone, and a later run may have skipped writing
        # equal values on top of it: those writes are owed, so the lift runs again.
        runner.trace.record("debt", key, launch=f"computed by {label}")
        if launches.latest == mine:
            # The latest run failed for good: its child runs against writes that never
            # landed. Let it go (a later run of the lift materializes it again).
            runner.trace.record("rollback", key, launch=f"computed by {label}")
            runner.release(key, None, why=f"rollback of a run of {label}")
        launches.failures += 1
        if launches.failures <= MAX_OWED_RERUNS:
            runner.scheduler.invalidate(node)

    tx.add_settle_callback(settled)
