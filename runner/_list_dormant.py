"""Dormant element children: a restart that does not rebuild what nothing needs yet.

When a map's reconcile places a new element (a restart, a second runtime over
the same store), the element's child may already be in the store exactly as a
setup would leave it, with every computation's output vouched for by its inputs
record (`_reuse`): the child would install its run, and each of its lifts would
keep its stored output without calling its function. Such a child is left
*dormant* instead: its entry counts as set up, but no registration, node or
run is installed. A pull reads its stored result as it reads any document.

The child's run is installed (it *wakes*, through the coordinator's reconcile,
as an owed setup) when anything needs more than its stored value:

- an input changes: one effect node per coordinator identity (`Watch`) reads
  every place the dormant children's records list, tracks which documents
  changed (`Scheduler.take_changes`), and wakes exactly the children whose
  inputs now read differently (what each read sees, compared as the record's
  digest compares it); their lifts then run as a restarted lift does, so a
  changed input re-runs only the elements it reaches;
- the coordinator places the entry again (a moved element of an op that reads
  `index`, a repointed inline list, a setup debt): the normal path;
- inspection asks (`Coordinator.wake_all`, before `rt.inspect()`,
  `rt.inspect_run()` and `session.inspect()`), so it shows every run.

Only ops made of lift nodes alone (no handler, so no event can arrive; no
nested pattern, list, `when` or navigation; untyped) with a code key on every
lift can sleep, and only when the child's result and argument documents hold
exactly what this setup would write. Releasing a dormant child is releasing a
child that installed nothing: the entry goes, no registration ends.

Cost: a dormant child costs its record's check (one digest over what it read),
a `Sleeper` (its reads and what each saw) and its reads in the watch node's read
set. A change to a document dormant children read costs the watch O(children
that read it): an edit inside a list of inline elements compares every dormant
element of that list (one peek each), the first and every later edit, until
the elements it reaches woke.

Not here: the records and their digest (`_reuse`), placing and setup (`_lists`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cells import MISSING, DocKey, Identity, Link, Transaction, value_equal
from scheduler import Node, Scheduler

from . import _docs as docs
from ._builder import Pattern
from ._list_state import Entry, Sleeper, State
from ._reuse import Reads, node_code_key, seen_now, vouched

__all__ = ["Sleeper", "Watch", "asleep", "sleepable"]

_VALUE_PATH = (docs.VALUE,)


def sleepable(op: Pattern) -> list[tuple[int, str]] | None:
    """(index, code key) of each node of `op` when a child of it may sleep: only lift
    nodes, each with a code key, and an untyped signature; else None."""
    if op.signature.typed:
        return None
    lifts: list[tuple[int, str]] = []
    for spec in op.graph.nodes:
        if spec.kind != "lift":
            return None
        code = node_code_key(op, spec, op.function(spec.target))
        if code is None:
            return None
        lifts.append((spec.index, code))
    return lifts or None


def asleep(
    tx: Transaction,
    op: Pattern,
    lifts: list[tuple[int, str]],
    entry: Entry,
    argument: dict[str, Any],
    key: DocKey,
    fold: bool = False,
) -> Sleeper | None:
    """A `Sleeper` for `entry` when its child (result document `key`) can stay dormant in
    `tx`: that document holds `op`'s setup for `argument` and every lift's record vouches
    for its stored output (see the module docstring); else None (set it up as always).
    Peeks only: nothing is logged or written. A child with no document yet (every
    element of a first setup) costs one peek."""
    doc = tx.peek(key)
    if type(doc) is not dict or doc.get(docs.PATTERN, MISSING) != op.identity:
        return None
    child = entry.child
    identity = tx.identity
    if fold:
        # Kept in the result document (`docs.folds_argument`).
        if not value_equal(doc.get(docs.ARGUMENT, MISSING), argument):
            return None
    else:
        arg = docs.argument_link(child)
        if doc.get(docs.ARGUMENT, MISSING) != arg:
            return None
        if not value_equal(tx.peek(arg.key(identity), _VALUE_PATH), argument):
            return None
    folded = argument if fold else None
    if not value_equal(doc.get(docs.VALUE, MISSING), docs.bind(op.graph.result, child, folded)):
        return None
    reads: Reads = []
    seen: list[Any] = []
    for index, code in lifts:
        out_key = docs.internal_link(child, index).key(identity)
        found = vouched(tx, out_key, _VALUE_PATH, code)
        if found is None:
            return None
        reads += found[0]
        seen += found[1]
    element = argument["element"]
    assert type(element) is Link
    return Sleeper(entry, element, reads, seen)


class Watch:
    """The dormant children of one coordinator identity, and the effect node that reads
    what they read and wakes those whose inputs changed (`wake`, with the sleepers)."""

    __slots__ = ("dirty", "index", "node", "scheduler", "state", "wake")

    def __init__(
        self,
        scheduler: Scheduler,
        state: State,
        identity: Identity,
        label: str,
        wake: Callable[[State, list[Sleeper]], None],
        sleepers: list[Sleeper],
    ) -> None:
        """Watch `sleepers`, made by the reconcile running now: their reads are the node's
        declared reads from now on, and it counts the changes to them from now on (no
        commit lands between that reconcile's check and this)."""
        self.scheduler = scheduler
        self.state = state
        self.wake = wake
        self.index: dict[DocKey, list[Sleeper]] = {}
        """The sleepers that read each document (woken or released ones linger until the
        next time the read set is rebuilt; `alive` tells them apart)."""
        self._index(sleepers)
        self.dirty = False
        """Sleepers were added later: the next run compares and logs every live one."""
        self.node: Node = scheduler.register(
            self,
            identity=identity,
            kind="effect",
            label=f"{label} dormant children",
            reads=[read for sleeper in sleepers for read in sleeper.reads],
        )
        scheduler.track_changes(self.node)
        scheduler.take_changes(self.node)  # count from now on

    def __repr__(self) -> str:
        return f"<Watch {self.node.label}>"

    def alive(self, sleeper: Sleeper) -> bool:
        """Whether `sleeper` is still dormant (not woken, placed again or released)."""
        entry = sleeper.entry
        return (
            entry.sleeper is sleeper
            and not entry.owed
            and self.state.entries.get(entry.key) is entry
        )

    def sleepers(self) -> list[Sleeper]:
        """Every live sleeper, once each."""
        out = dict.fromkeys(s for held in self.index.values() for s in held)
        return [s for s in out if self.alive(s)]

    def add(self, sleepers: list[Sleeper]) -> None:
        """Watch `sleepers` too (their reads join the node's read set at its next run,
        which compares everything first: a change meanwhile is not missed)."""
        self._index(sleepers)
        self.dirty = True
        self.scheduler.invalidate(self.node)

    def _index(self, sleepers: list[Sleeper]) -> None:
        index = self.index
        for sleeper in sleepers:
            for key in {key for key, _path, _shallow in sleeper.reads}:
                held = index.get(key)
                if held is None:
                    index[key] = [sleeper]
                else:
                    held.append(sleeper)

    def __call__(self, tx: Transaction) -> None:
        """The node's run: wake the sleepers whose reads see something else now (all of
        them are compared when what changed is not known), then keep or rebuild the read
        set. O(sleepers reading the changed documents), O(sleepers) to rebuild."""
        scheduler = self.scheduler
        changes = scheduler.take_changes(self.node)
        if changes is None:
            candidates = self.sleepers()
        else:
            index = self.index
            candidates = [
                s
                for s in dict.fromkeys(s for k in changes for s in index.get(k, ()))
                if self.alive(s)
            ]
        woken = [s for s in candidates if seen_now(tx, s.reads) != s.seen]
        if woken:
            self.wake(self.state, woken)
        if not (self.dirty or changes is None):
            scheduler.keep_reads(self.node)  # (woken sleepers' reads linger: harmless)
            return
        self.dirty = False
        live = self.sleepers()
        self.index = {}
        read = tx.read
        index = self.index
        for sleeper in live:
            for key, path, shallow in sleeper.reads:
                read(key, path, shallow=shallow)
                held = index.get(key)
                if held is None:
                    index[key] = [sleeper]
                elif held[-1] is not sleeper:
                    held.append(sleeper)

    def close(self) -> None:
        """Stop watching (the coordinator's identity went)."""
        self.scheduler.remove(self.node)
