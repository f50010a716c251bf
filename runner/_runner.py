"""The runner: setting up, launching, joining and switching pattern runs.

`Runner` is the ownership core (`_core.Ownership`: registrations, attempts,
pending starts, lifetimes, stop and release) plus what installs runs into it:

- `stage_setup` writes a run's setup (argument, pattern identity, result
  projection) into a transaction;
- `launch` starts a result for a launch (a `rt.run`, a nested node, a list
  element, a computation's child) and registers its rollback: a non-stale
  failure of the launch's transaction releases what it installed
  (token-checked); a stale basis keeps it and owes the setup writes; a
  commit-gated launch holds a pending start until its commit;
- `start_core` installs the registration and instantiates the run's nodes
  (`_instantiate`), undoing both if that throws;
- `switch` runs another pattern in a running registration (`rt.setup` of a
  running result);
- `start` is the start cascade (`_start`).

Instances (S69): a registration runs for every identity that demanded it.
The first launch or start installs it and instantiates its nodes for its own
identity; a later launch or start for another identity of the same result
(a space-scoped root that alice and bob both start on one serving runtime)
*joins* it: the nodes are instantiated again for that identity, in a cancel
group of that instance, and the nested and list children that instance
launches join or install in turn, so every derivation under the root runs
once per demanding identity, as that identity, and never as the runtime's
own identity unless it demanded the result too. Stop and release stay per
registration: ending it ends every instance. A join whose transaction fails
for good is undone for that identity alone; a stale one owes its writes.

Instantiation, computed children and the list coordinators see this class
only through `_core.Launcher`, and the start cascade through `_core.Starter`.

Invariants (checked by `_check`)
- the core's (`Ownership._check`);
- a list coordinator reconciles for exactly its registration's identities.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cells import (
    MISSING,
    CommitResult,
    Identity,
    InternalError,
    Link,
    Outcome,
    Pending,
    Replica,
    Transaction,
    value_equal,
)
from scheduler import Scheduler

from . import _docs as docs
from ._builder import Pattern
from ._core import MAX_NESTING, OpenPage, Ownership, Token
from ._host import SchedulerHost
from ._instantiate import instantiate
from ._list_keys import ElementKey
from ._lists import Coordinator
from ._ownership import PendingStart
from ._registrations import InstanceGroup, Instances, Key, Registration
from ._reuse import Book
from ._start import stage_tree, start, start_settled
from ._state import stage_state
from .errors import PatternCycleError


def _no_pages(link: Link, identity: Identity, *, via: str, follow: bool = False) -> Pending[bool]:
    raise InternalError(f"navigation from {via} to {link}: no pages are attached to this runner")


class Runner(Ownership):
    def __init__(self, replica: Replica, scheduler: Scheduler, host: SchedulerHost) -> None:
        super().__init__(scheduler)
        self.replica = replica
        self.host = host
        """The host of the cells runs hand out (a handler's arguments, its stream)."""
        self.open_page: OpenPage = _no_pages
        """How a navigation opens its target as a page (the runtime attaches its pages)."""
        self.coordinators: set[Coordinator] = set()
        """Live list coordinators (for `_check` and diagnostics)."""
        self.list_coordinators: dict[tuple[Registration, int], Coordinator] = {}
        """The coordinator of each (registration, list node index): a joining identity adds
        its reconcile node to it."""
        self.reuse = True
        """Whether a lift's first run may keep the stored output its inputs record vouches
        for (`_reuse`); `Runtime(reuse=False)` turns it off."""
        self.reuse_book = Book()
        """The lifts that can leave an inputs record, written at `Runtime.aclose`."""
        self.presynced: dict[tuple[str, Link, ElementKey], Link] = {}
        """Children a cold resume's pre-sync derived, each taken by its coordinator's first
        placement of it (`_lists.presynced_child`)."""

    def wake_dormant(self) -> None:
        """Set up every dormant element child now (`_list_dormant`): what inspection does
        first, so that it shows every run."""
        for coordinator in list(self.coordinators):
            coordinator.wake_all()

    # ------------------------------------------------------------------ setup
    def stage_setup(
        self,
        tx: Transaction,
        pattern: Pattern,
        argument: Any,
        result: Link,
        where: str,
        *,
        fold: bool = False,
    ) -> None:
        """Stage a run's setup writes in `tx`: argument, pattern identity, result projection.

        `fold`: a list element's argument kept in the result document, with no argument
        document (`docs.folds_argument`; the coordinator decides). Equal values are
        elided by the transaction, so staging again is cheap.
        """
        graph = pattern.graph
        identity = tx.identity
        # The replica's key objects where it holds the documents (`Replica.held_key`):
        # the store and the nodes then keep the same one (56 bytes per copy).
        held = self.replica.held_key
        key = held(result.key(identity))
        before = tx.peek(key, (docs.ARGUMENT,))
        if fold:
            tx.write(key, (docs.PATTERN,), pattern.identity)
            if type(before) is dict and value_equal(before, argument):
                # The same argument: the one held stays (each instance binds its links,
                # `instantiate`: one set of them for every identity that joins, not a
                # copy of the element's link and path per identity).
                argument = before
            else:
                tx.write(key, (docs.ARGUMENT,), argument)
                if before is not MISSING:
                    self._rebind_on_commit(tx, pattern, result)
            tx.write(key, (docs.VALUE,), docs.bind(graph.result, result, argument))
        else:
            arg = docs.argument_link(result)
            tx.write(held(arg.key(identity)), (docs.VALUE,), argument)
            tx.write(key, (docs.PATTERN,), pattern.identity)
            tx.write(key, (docs.ARGUMENT,), arg)
            tx.write(key, (docs.VALUE,), docs.bind(graph.result, result))
            if type(before) is dict:
                self._rebind_on_commit(tx, pattern, result)
        for node in graph.nodes:
            if node.kind == "handler":
                # A stream holds no data (events queue in the scheduler); None reads
                # better than an absent value wherever the result shows it.
                stream = docs.internal_link(result, node.index).key(identity)
                if tx.peek(stream, (docs.VALUE,)) is MISSING:
                    tx.write(stream, (docs.VALUE,), None)
            elif node.kind == "state":
                stage_state(tx, node, result)
        plink = docs.pattern_link(result.space, pattern.identity)
        pkey = plink.key(identity)
        if tx.peek(pkey, (docs.VALUE, "identity")) != pattern.identity:
            tx.write(pkey, (docs.VALUE,), graph.to_json())

    def _rebind_on_commit(self, tx: Transaction, pattern: Pattern, result: Link) -> None:
        """A setup that changes a folded argument's form (or value): once `tx` commits, a
        registration running `result` here is instantiated again (`switch`), since its
        nodes took the old argument as constants (`docs.folds_argument`). Another
        runtime running it is not told, as for `switch_on_commit`'s pattern change."""
        key = result.key(tx.identity)

        def settled(_tx: Transaction, res: CommitResult) -> None:
            reg = self.registrations.get(key)
            if res.ok and reg is not None and reg.pattern == pattern.identity:
                self.switch(reg, pattern, result)

        tx.add_settle_callback(settled)

    def switch_on_commit(self, tx: Transaction, pattern: Pattern, result: Link) -> None:
        """`rt.setup` of `pattern` on `result`: once `tx` commits, a registration of the
        result running another pattern switches to this one (`switch`)."""
        key = result.key(tx.identity)

        def settled(_tx: Transaction, res: CommitResult) -> None:
            reg = self.registrations.get(key)
            if res.ok and reg is not None and reg.pattern != pattern.identity:
                self.switch(reg, pattern, result)

        tx.add_settle_callback(settled)

    def switch(self, reg: Registration, pattern: Pattern, result: Link) -> None:
        """Run `pattern` in the running registration `reg` instead of the one it runs.

        The registration stays (its token, generation, lifetime and pages): only its
        nodes change. The old nodes are torn down as a stop would tear them down, so
        the old pattern's children are *released* (one opened as a page survives);
        then the new pattern is instantiated for every identity the run served.
        """
        key = reg.key
        identities = list(reg.identities)
        self.trace.record("switch", key, old=reg.pattern, new=pattern.identity)
        old = reg.group.hand_over(reg)  # (the registration is its own group)
        reg.identities = Instances()  # the old instances leave first: their children are let go
        reg.pattern = pattern.identity
        reg.owed = False
        try:
            old.cancel()
        finally:
            for i, identity in enumerate(identities):
                tx = self.replica.edit(identity)
                try:
                    if i == 0:
                        self._add_instance(tx, reg, pattern, result)
                    else:
                        self.join(tx, reg, pattern, result, launch="switch", rollback=False)
                except BaseException as exc:
                    tx.abort("switch failed")
                    self.trace.record("switch-failed", key, error=type(exc).__name__)
                    if i == 0:
                        # Like a failed start: no registration left running nothing.
                        self.registrations.end(key, token=reg)
                    raise
                tx.add_settle_callback(self._switch_settled(key, pattern, result, identity))
                tx.commit_detached()

    def _switch_settled(
        self, key: Key, pattern: Pattern, result: Link, identity: Identity
    ) -> Callable[[Transaction, CommitResult], None]:
        # A switch's own transaction stages the new nested children's setups: owed on a
        # stale basis, as a start's are.
        return lambda _tx, res: start_settled(self, key, pattern, result, identity, res)

    # ------------------------------------------------------------------ launching
    def launch(
        self,
        tx: Transaction,
        pattern: Pattern,
        result: Link,
        *,
        launch: str,
        chain: tuple[Key, ...],
        gated: bool,
        rollback: bool = True,
    ) -> Token:
        """Start `result` (already staged in `tx`) for this launch; returns the launch's token.

        The token is the registration installed, a pending start (gated), or
        None when the result already ran the same pattern (only its argument
        was updated). A launch registers rollback on `tx`: a non-stale failure
        releases what it installed (token-checked); a stale basis keeps it and
        owes the setup writes (the re-run re-issues them).
        """
        identity = tx.identity
        key = self.replica.held_key(result.key(identity))  # (one key object: `stage_setup`)
        existing = self.registrations.get(key)
        if existing is not None:
            if existing.pattern == pattern.identity:
                if existing.owed:
                    self._repay(tx, existing, pattern, result)
                if identity not in existing.identities:
                    self.join(tx, existing, pattern, result, launch=launch)
                if chain and rollback:
                    # A parent's nested launch holds the running child from now on (its
                    # teardown releases it): the installing launch's rollback must not end
                    # it under this parent.
                    existing.adopted = True
                if self.take_over_declined(key, existing):
                    # This launch now holds the running result: a release that an earlier
                    # launch deferred behind a start in flight must not end it later ...
                    self.trace.record("adopt", key, launch=launch)

                    def adopted(_tx: Transaction, res: CommitResult) -> None:
                        # ... unless this launch's setup does not land either: then
                        # nothing holds the result, and the earlier release applies
                        # (declining, and deferred again, while a start is in flight).
                        if res.ok or res.outcome is Outcome.STALE_BASIS:
                            return
                        if self.registrations.get(key) is existing:
                            self.release(key, existing, why=f"{launch} did not land")

                    tx.add_settle_callback(adopted)
                return None
            self.trace.record("replace", key, old=existing.pattern, new=pattern.identity)
            self.stop_result(key, why="its pattern was replaced")
        if gated:
            return self._gate(tx, pattern, result, launch=launch, chain=chain)
        reg = self.start_core(tx, pattern, result, launch=launch, chain=chain, key=key)
        if rollback:
            tx.add_settle_callback(lambda _tx, res: self._rollback(key, reg, res, launch))
        return reg

    def _repay(self, tx: Transaction, reg: Registration, pattern: Pattern, result: Link) -> None:
        """Re-issue the owed setup writes of a kept run (its nested children's too)."""
        reg.owed = False
        self.trace.record("repay", reg.key, generation=reg.generation)
        paid = [reg, *stage_tree(self, tx, pattern, result, depth=0)]

        def settled(_tx: Transaction, res: CommitResult) -> None:
            if res.ok:
                return
            # Nothing was paid: every debt this cleared is owed again (nested children
            # included), for each registration that is still the one it cleared.
            for owed in paid:
                if self.registrations.get(owed.key) is owed:
                    owed.owed = True

        tx.add_settle_callback(settled)

    def _rollback(self, key: Key, reg: Registration, result: CommitResult, launch: str) -> None:
        if result.ok:
            return
        if result.outcome is Outcome.STALE_BASIS:
            # The writes are gone but the work is right: the re-run reuses the registration
            # and re-issues the setup writes (they are owed, not in place).
            if self.registrations.get(key) is reg:
                reg.owed = True
            self.trace.record("debt", key, launch=launch, generation=reg.generation)
            return
        if reg.adopted:
            self.trace.record("decline", key, reason="adopted by a later parent", op="rollback")
            return
        self.trace.record("rollback", key, launch=launch, outcome=result.outcome.name)
        self.release(key, reg, why=f"rollback of {launch}")

    def _gate(
        self,
        tx: Transaction,
        pattern: Pattern,
        result: Link,
        *,
        launch: str,
        chain: tuple[Key, ...],
    ) -> PendingStart:
        identity = tx.identity
        key = result.key(identity)
        pending = self.pending.add(key, launch, identity)
        self.trace.record("pending", key, launch=launch)

        def settled(_tx: Transaction, res: CommitResult) -> None:
            if pending.cancelled:
                return  # a stop tombstoned it or a release cancelled it: install nothing
            self.pending.settle(pending)
            if not res.ok:
                self.trace.record("pending-failed", key, launch=launch, outcome=res.outcome.name)
                return
            existing = self.registrations.get(key)
            if existing is not None:
                if identity not in existing.identities and existing.pattern == pattern.identity:
                    join_tx = self.replica.edit(identity)
                    self.join(join_tx, existing, pattern, result, launch=launch, rollback=False)
                    join_tx.commit_detached()
                return
            start_tx = self.replica.edit(identity)
            pending.installed = self.start_core(
                start_tx, pattern, result, launch=launch, chain=chain
            )
            start_tx.commit_detached()

        tx.add_settle_callback(settled)
        return pending

    def start_core(
        self,
        tx: Transaction,
        pattern: Pattern,
        result: Link,
        *,
        launch: str,
        chain: tuple[Key, ...],
        key: Key | None = None,
    ) -> Registration:
        """Install the registration, then instantiate every node; undo both if that throws.

        `key` is `result`'s key for `tx.identity` if the caller holds it already (the
        registration then keeps that object: one key object fewer per running result)."""
        identity = tx.identity
        # The replica's key object when it holds the document (`Replica.held_key`).
        key = self.replica.held_key(result.key(identity) if key is None else key)
        self._check_chain(key, chain, pattern)
        reg = self.registrations.install(key, launch, pattern=pattern.identity, chain=chain)
        self.trace.record("start", key, launch=launch, generation=reg.generation)
        try:
            self._add_instance(tx, reg, pattern, result)
        except BaseException as exc:
            # A failed start never leaves an "already running" registration behind.
            self.registrations.end(key, token=reg)
            self.trace.record("start-failed", key, launch=launch, error=type(exc).__name__)
            raise
        return reg

    def _add_instance(
        self, tx: Transaction, reg: Registration, pattern: Pattern, result: Link
    ) -> None:
        """Instantiate `reg`'s nodes for `tx.identity`, in a cancel group of that instance."""
        identity = tx.identity
        # Every instance has a group of its own, the first one too: a session's stop of a
        # run other principals also launched ends its own instances only (`let_go`), and
        # its principal may have installed the first.
        # (Labelled by identity only: the registration's own group names the key, and
        # formatting a key for every run costs a microsecond the churn benchmark sees.)
        group = InstanceGroup(reg, identity)
        reg.group.add(group)
        reg.identities[identity] = group
        instantiate(self, reg, pattern, result, tx, group)

    def join(
        self,
        tx: Transaction,
        reg: Registration,
        pattern: Pattern,
        result: Link,
        *,
        launch: str,
        rollback: bool = True,
    ) -> None:
        """Run the registered result `reg` for `tx.identity` too (see the module docstring).

        O(nodes of the pattern), plus what its children's joins cost. A join that
        throws is undone for this identity. A launch's join (`rollback`) whose
        transaction fails for good is undone for this identity when it settles (the
        launcher's own bookkeeping may have let go of the child while another
        identity's still holds it); a start's join is kept, as a start's own
        registration is. A stale basis keeps it and owes the setup writes.
        """
        identity = tx.identity
        if identity in reg.identities:
            return
        self.trace.record("join", reg.key, launch=launch, identity=_who(identity))
        try:
            self._add_instance(tx, reg, pattern, result)
        except BaseException as exc:
            group = reg.identities.get(identity)
            self.trace.record("join-failed", reg.key, launch=launch, error=type(exc).__name__)
            if group is not None:
                self.drop_instance(reg, identity, group)
            raise
        group = reg.identities[identity]

        def settled(_tx: Transaction, res: CommitResult) -> None:
            if res.ok or reg.identities.get(identity) is not group:
                return
            if res.outcome is Outcome.STALE_BASIS:
                reg.owed = True  # the next launch re-issues the setup writes
                self.trace.record("debt", reg.key, launch=launch, identity=_who(identity))
                return
            if not rollback:
                return
            self.trace.record("rollback", reg.key, launch=launch, identity=_who(identity))
            self.drop_instance(reg, identity, group)

        tx.add_settle_callback(settled)

    def release_for(
        self,
        reg: Registration,
        child: Link,
        identity: Identity,
        token: Registration | None,
        *,
        why: str,
    ) -> bool:
        """An instance of `reg` (acting for `identity`) lets go of its child at `child`:
        released, unless another of `reg`'s instances derives the same child key (a
        space-scoped child two identities share): that one still holds it. O(identities)."""
        key = child.key(identity)
        if any(child.key(other) == key for other in reg.identities if other != identity):
            return False
        return self.release(key, token, why=why)

    def _check_chain(self, key: Key, chain: tuple[Key, ...], pattern: Pattern) -> None:
        if key in chain or len(chain) >= MAX_NESTING:
            names = [self._describe(k) for k in (*chain, key)]
            if key in chain:
                why = f"result {key} appears in its own parent chain"
            else:
                why = f"nesting is deeper than {MAX_NESTING} levels"
            raise PatternCycleError(
                f"runaway nesting running {pattern.identity}: {why}: {' -> '.join(names)}",
                chain=tuple(names),
            )

    def _describe(self, key: Key) -> str:
        reg = self.registrations.get(key)
        return f"{reg.pattern}@{key.id[:10]}" if reg is not None else f"?@{key.id[:10]}"

    # ------------------------------------------------------------------ starting
    def start(
        self,
        link: Link,
        identity: Identity,
        *,
        label: str = "start",
        on_claim: Callable[[Key], None] | None = None,
    ) -> Pending[bool]:
        """Start the result `link` names, following links (the cascade: `_start`).

        `on_claim(key)` runs when this start claims a lifetime for the result `key`.
        """
        return start(self, link, identity, label=label, on_claim=on_claim)

    # ------------------------------------------------------------------ diagnostics
    def _check(self) -> None:
        super()._check()
        for coordinator in self.coordinators:
            assert not coordinator.reg.ended, coordinator
            assert set(coordinator.nodes) == set(coordinator.reg.identities), coordinator
            assert self.list_coordinators[coordinator.reg, coordinator.index] is coordinator
            coordinator._check()
        assert len(self.list_coordinators) == len(self.coordinators)


def _who(identity: Identity) -> str:
    return f"{identity.principal}/{identity.session}"
