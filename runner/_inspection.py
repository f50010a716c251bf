"""Inspection: what runs, who launched it, and what keeps it alive, as plain data.

`rt.inspect()` is a JSON-serialisable snapshot of the whole runtime:
registrations (each with its parent, state cells and what keeps it running),
pending starts, lifetimes, pages, node counts, starts in flight, the recent
lifecycle trace, errors and failing nodes. `session.inspect()` is what one
principal may see of it: the runs with an instance of that principal and the
runs they descend from (so the tree has its roots). `rt.inspect_run(key)` is
one run's pattern graph with how often each of its nodes ran.

Diagnostics observe and never decide: nothing here changes a registration,
except that each first sets up the element children a restart left dormant
(`Runner.wake_dormant`), which is what a run without dormancy would show.
Not here: the bookkeeping itself (`_core`, `_pages`), or the checks on the way
in (`_operations`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from cells import Cell, Identity, Link, describe_id, mimebundle

from . import _docs as docs
from ._builder import load_pattern
from ._operations import Operations
from ._registrations import Key, Registration
from ._runner import Runner
from ._state import describe as describe_state
from .errors import OwnershipError, PatternError


class Inspection(dict[str, Any]):
    """What `rt.inspect()` returns: a plain dict (JSON-serialisable) that also
    displays itself in notebooks."""

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        ident = self.get("identity") or {}
        title = f"inspect() as {ident.get('principal')}/{ident.get('session')}"
        return mimebundle(title, dict(self))


def has_instance(reg: Registration, principal: str) -> bool:
    """Whether `reg` runs for an identity of `principal`."""
    return any(i.principal == principal for i in reg.identities)


def run_entries(
    runner: Runner, regs: Iterable[Registration], pages: list[Cell]
) -> list[dict[str, Any]]:
    """One entry per registration: what runs, who launched it, what keeps it alive."""
    page_keys = {docs.root(c.link()).key(c.identity) for c in pages}
    lifetimes = runner.lifetimes
    return [
        {
            "key": str(reg.key),
            "cause": describe_id(reg.key.id),
            "generation": reg.generation,
            "pattern": reg.pattern,
            "launch": reg.launch,
            "depth": len(reg.chain),
            "parent": str(reg.chain[-1]) if reg.chain else None,
            "state": describe_state(runner.replica, reg),
            "principals": sorted({i.principal for i in reg.identities}),
            # What keeps it running: its launch (a parent's node, or a run call),
            # an independent lifetime (a start), a page (a lifetime someone opened).
            "kept_by": [
                *(["page"] if reg.key in page_keys else []),
                *(["lifetime"] if reg.key in lifetimes else []),
                *(["launch"] if reg.chain or reg.key not in lifetimes else []),
            ],
        }
        for reg in regs
    ]


def visible_runs(runner: Runner, principal: str) -> dict[str, Registration]:
    """The runs `principal` may inspect, by key: those with an instance of theirs
    and the runs each descends from. O(registrations + depth per run)."""
    regs = {r.key: r for r in runner.registrations}
    keep: set[Key] = set()
    for reg in regs.values():
        if has_instance(reg, principal):
            keep.add(reg.key)
            keep.update(k for k in reg.chain if k in regs)
    return {str(r.key): r for r in regs.values() if r.key in keep}


def inspect_run(ops: Operations, key: str, principal: str | None) -> dict[str, Any]:
    """`rt.inspect_run`: the pattern graph of the run registered under `key`, with
    each node's instances and runs, and the run's children."""
    ops.require_open()
    ops.runner.wake_dormant()
    runner = ops.runner
    if not isinstance(key, str):
        raise PatternError(f"rt.inspect_run: key must be a str from inspect(), got {key!r}")
    if principal is None:
        reg = next((r for r in runner.registrations if str(r.key) == key), None)
    else:
        reg = visible_runs(runner, principal).get(key)
    if reg is None:
        raise OwnershipError(f"rt.inspect_run: no run {key!r} that {principal!r} may inspect")
    graph = load_pattern(reg.pattern).graph.to_json()
    for node in graph["nodes"]:
        tracked = reg.tracked(node["index"])
        node["instances"] = len(tracked)
        node["runs"] = sum(getattr(n, "runs", 0) for n in tracked)
    children = [str(r.key) for r in runner.registrations if r.chain[-1:] == (reg.key,)]
    return {"key": key, "pattern": reg.pattern, "graph": graph, "children": children}


def inspect_runtime(ops: Operations, principal: str | None) -> Inspection:
    """`rt.inspect()`: the whole runtime's snapshot (pages: `principal`'s, default the
    runtime's own; another principal's raise `OwnershipError`)."""
    ops.require_open()
    ops.runner.wake_dormant()
    runner = ops.runner
    identity = ops.identity
    pages = ops.pages(identity, principal)
    pending = runner.pending.keys()
    named = [
        *(reg.key.id for reg in runner.registrations),
        *(k.id for k in pending),
        *(k.id for k in runner.lifetimes),
        *(c.id for c in pages),
    ]
    causes = {eid: text for eid in named if (text := describe_id(eid)) is not None}
    scheduler = ops.scheduler
    return Inspection(
        {
            "identity": {"principal": identity.principal, "session": identity.session},
            "registrations": run_entries(runner, runner.registrations, pages),
            "pending_starts": sorted(map(str, pending)),
            "lifetimes": sorted(str(k) for k in runner.lifetimes),
            "starts_in_flight": len(runner.attempts),
            "pages": [str(c.link()) for c in pages],
            "causes": causes,
            "pages_stop_failed": [
                {"page": str(rec.link), "error": repr(rec.stop_error)}
                for (owner, _pid), rec in ops.pages_book.stop_failed.items()
                if owner == (principal or identity.principal)
            ],
            "nodes": {
                k: v
                for k, v in scheduler.statistics().items()
                if k in ("nodes", "live", "invalid", "deferred", "events_queued", "passes", "runs")
            },
            "trace": runner.trace.snapshot(),
            "errors": [record.as_dict() for record in scheduler.errors()],
            "failing": [
                {"node": n.label, "error": f"{type(n.error).__name__}: {n.error}"}
                for n in scheduler.failing()
            ],
        }
    )


def inspect_session(ops: Operations, identity: Identity) -> dict[str, Any]:
    """`session.inspect()`: what `identity`'s principal may see (module docstring)."""
    ops.require_open()
    ops.runner.wake_dormant()
    runner = ops.runner
    principal = identity.principal
    visible = visible_runs(runner, principal)
    pending = runner.pending.keys()
    pages = ops.pages(identity, principal)
    entries = run_entries(runner, visible.values(), pages)
    for entry, reg in zip(entries, visible.values(), strict=True):
        entry["mine"] = has_instance(reg, principal)
    trace = runner.trace.snapshot()
    trace["entries"] = [e for e in trace["entries"] if str(e.get("key")) in visible]
    return {
        "identity": {"principal": principal, "session": identity.session},
        "registrations": entries,
        # (PendingStarts iterates its starts; `keys()` gives their keys.)
        "pending_starts": sorted(str(k) for k in pending if k.principal in ("", principal)),
        "lifetimes": sorted(k for k in map(str, runner.lifetimes) if k in visible),
        "pages": [str(c.link()) for c in pages],
        "trace": trace,
    }


def run_cell(ops: Operations, identity: Identity, key: str) -> Cell:
    """`session.run_cell`: the result cell of the run `inspect()` names by `key`, as
    `identity` sees it; a run with no instance of its principal is refused."""
    ops.require_open()
    if not isinstance(key, str):
        raise PatternError(f"session.run_cell: key must be a str from inspect(), got {key!r}")
    principal = identity.principal
    reg = visible_runs(ops.runner, principal).get(key)
    if reg is None or not has_instance(reg, principal):
        raise OwnershipError(
            f"session.run_cell: no run {key!r} that {principal!r} launched or opened"
        )
    k = reg.key
    link = Link(k.space, k.id, k.scope)
    return Cell(ops.replica, identity, link, host=ops.host)
