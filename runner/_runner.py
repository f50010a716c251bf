"""The runner: setup, start, stop and release of pattern runs, and who may end each.

`Runner` owns one runtime's registrations (`_registrations`), start attempts
and pending starts (`_ownership`), independent lifetimes and the lifecycle
trace. It turns a traced `PatternGraph` into scheduler nodes
(`_instantiate`) and applies the two authorities of the spec:

- `stop(key)` is authoritative over the result: it ends whatever registration
  it finds, drops the lifetime, cancels every pending start for the key, and
  tombstones start attempts that have not discovered the key yet;
- `release(key, token)` is authoritative over the registration its launch
  installed: it declines on a token mismatch, on an independent lifetime, and
  while a start attempt is in flight (and remembers that last decline, so the
  release applies if the start then claims nothing: no zombie); with nothing
  registered it cancels the pending starts held for the key; it never
  tombstones an unresolved start.

The start cascade (`start`) is a generator of `Pending` stages — root sync,
each link hop, the pattern load, the dependency pre-sync — driven by store
answers, so it works with or without a running event loop, a held load holds
it at exactly that stage, and the lifetime claim always happens in a later
mailbox step, never inside the `start` call.

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

Invariants (checked by `_check`)
- every registration runs for at least one identity, and each of its
  identities selects its key (a user-scoped key's principal, a
  session-scoped key's principal and session);
- a list coordinator reconciles for exactly its registration's identities;
- a lifetime exists only for a registered key;
- every remembered declined release names the current registration of its key;
- the registrations, attempts, pending starts and trace pass their own checks.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any, Final

from cells import (
    MAX_HOPS,
    MISSING,
    CommitResult,
    Identity,
    Link,
    LinkCycleError,
    Outcome,
    Pending,
    Transaction,
    describe,
    first_link,
    instance_key,
    resolve,
)

from . import _docs as docs
from ._builder import Pattern, find_pattern
from ._cancel import CancelGroup
from ._ownership import Attempts, PendingStart, PendingStarts, StartAttempt
from ._registrations import Key, Registration, Registrations
from ._state import stage_state
from ._trace import LifecycleTrace
from .errors import PatternCycleError, PatternError, PatternLoadError

if TYPE_CHECKING:
    from ._lists import Coordinator
    from ._runtime import Runtime

MAX_NESTING: Final = 64
"""Deepest chain of results launching results before `PatternCycleError`."""

MAX_START_REISSUES: Final = 5
"""Times a start re-issues its nested children's setup writes after stale-basis rejections."""

Token = Registration | PendingStart | None


class Runner:
    def __init__(self, runtime: Runtime) -> None:
        self.rt = runtime
        self.replica = runtime.replica
        self.scheduler = runtime.scheduler
        self.trace = LifecycleTrace()
        self.registrations = Registrations(on_end=self._on_end)
        self.attempts = Attempts()
        self.pending = PendingStarts()
        self.lifetimes: set[Key] = set()
        self.claimants: dict[Key, set[str | None]] = {}
        """Whose starts claimed each lifetime (principals; None: the runtime's own), so
        a session letting go of a shared run gives up only its own principal's claim."""
        self._declined: dict[Key, Registration] = {}
        """Releases that declined only because a start was in flight (DESIGN §4.3 item 4)."""
        self._idle_waiters: list[Callable[[], None]] = []
        self.coordinators: set[Coordinator] = set()
        """Live list coordinators (for `_check` and diagnostics)."""
        self.list_coordinators: dict[tuple[Registration, int], Coordinator] = {}
        """The coordinator of each (registration, list node index): a joining identity adds
        its reconcile node to it."""

    # ------------------------------------------------------------------ setup
    def stage_setup(
        self, tx: Transaction, pattern: Pattern, argument: Any, result: Link, where: str
    ) -> None:
        """Stage a run's setup writes in `tx`: argument, pattern identity, result projection.

        Equal values are elided by the transaction, so staging again is cheap.
        """
        graph = pattern.graph
        identity = tx.identity
        key = result.key(identity)
        arg = docs.argument_link(result)
        tx.write(arg.key(identity), (docs.VALUE,), argument)
        tx.write(key, (docs.PATTERN,), pattern.identity)
        tx.write(key, (docs.ARGUMENT,), arg)
        tx.write(key, (docs.VALUE,), docs.bind(graph.result, result))
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
        old = reg.group
        reg.identities = {}  # the old instances leave first: their children are let go
        reg.group = CancelGroup(f"{key}#{reg.generation}")
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
        return lambda _tx, res: self._start_settled(key, pattern, result, identity, res)

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
        key = result.key(identity)
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
                if self._declined.get(key) is existing:
                    # This launch now holds the running result: a release that an earlier
                    # launch deferred behind a start in flight must not end it later ...
                    del self._declined[key]
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
        reg = self.start_core(tx, pattern, result, launch=launch, chain=chain)
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
    ) -> Registration:
        """Install the registration, then instantiate every node; undo both if that throws."""
        identity = tx.identity
        key = result.key(identity)
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
        from ._instantiate import instantiate

        identity = tx.identity
        # Every instance has a group of its own, the first one too: a session's stop of a
        # run other principals also launched ends its own instances only (`let_go`), and
        # its principal may have installed the first.
        # (Labelled by identity only: the registration's own group names the key, and
        # formatting a key for every run costs a microsecond the churn benchmark sees.)
        group = CancelGroup(_who(identity))
        reg.group.add(lambda: self._drop_instance(reg, identity, group))
        reg.identities[identity] = group
        instantiate(self, reg, pattern, result, tx, group)

    def _drop_instance(self, reg: Registration, identity: Identity, group: CancelGroup) -> None:
        # The identity leaves first: its cleanups then see which identities still hold a
        # child they share (`release_for`). A later instance's drop runs before an earlier
        # one's (the registration's group runs newest first), so the first releases last.
        if reg.identities.get(identity) is group:
            del reg.identities[identity]
        group.cancel()

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
                self._drop_instance(reg, identity, group)
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
            self._drop_instance(reg, identity, group)

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

    # ------------------------------------------------------------------ ending
    def _on_end(self, reg: Registration) -> None:
        # No orphaned lifetime: the record goes whenever its registration goes.
        self.lifetimes.discard(reg.key)
        self.claimants.pop(reg.key, None)
        # Its observers complete: the run producing what they observe ended.
        self.scheduler.end_observations(reg.key)
        if self._declined.get(reg.key) is reg:
            del self._declined[reg.key]

    def _cancel_pending(self, pending: PendingStart) -> None:
        self.trace.record("tombstone", pending.key, launch=pending.label)
        reg = pending.installed
        if reg is not None and self.registrations.get(pending.key) is reg:
            self.registrations.end(pending.key, token=reg)

    def stop(
        self,
        key: Key,
        *,
        generation: int | None = None,
        why: str = "stop",
        principal: str | None = None,
    ) -> None:
        """The authoritative end (see the module docstring). A session's stop passes its
        `principal`: the tombstones it leaves reach only that principal's start attempts
        (another principal's start through a link to `key` is not its to end)."""
        if generation is not None:
            reg = self.registrations.get(key)
            if reg is None or reg.generation != generation:
                self.trace.record("decline", key, reason="stale generation", op="stop")
                return
        if self.attempts.tombstone_undiscovered(key, principal):
            self.trace.record("tombstone", key, reason="unresolved start attempts")
        self.stop_result(key, why=why)

    def stop_result(self, key: Key, *, why: str) -> None:
        self.lifetimes.discard(key)
        self.pending.cancel_key(key, self._cancel_pending)
        self.attempts.bump(key)
        if self.registrations.end(key) is not None:
            self.trace.record("stop", key, reason=why)

    def release(self, key: Key, token: Registration | None = None, *, why: str = "release") -> bool:
        """The launch-scoped end; returns True if it ended a registration."""
        reg = self.registrations.get(key)
        if token is not None and reg is not None and token is not reg:
            self.trace.record("decline", key, reason="token mismatch", op=why)
            return False
        if key in self.lifetimes:
            self.trace.record("decline", key, reason="independent lifetime", op=why)
            return False
        if self.attempts.in_flight(key):
            self.trace.record("decline", key, reason="start in flight", op=why)
            if reg is not None:
                self._declined[key] = reg  # applied if that start claims nothing
            return False
        if reg is None:
            if self.pending.cancel_key(key, self._cancel_pending):
                self.trace.record("release", key, reason=f"{why}: cancelled pending starts")
            return False
        self.lifetimes.discard(key)
        self.pending.cancel_key(key, self._cancel_pending)
        self.attempts.bump(key)
        self.registrations.end(key, token=reg)
        self.trace.record("release", key, reason=why)
        return True

    def holders(self, key: Key) -> set[str | None]:
        """Who launched or started what a stop or release of `key` would end: the
        principals its registration runs for, else those of its pending starts and start
        attempts in flight (None: the runtime's own internal work). O(instances)."""
        reg = self.registrations.get(key)
        if reg is not None:
            return {identity.principal for identity in reg.identities}
        return self.pending.principals(key) | self.attempts.principals(key)

    def declines_release(self, key: Key, token: Registration | None, why: str) -> bool:
        """Whether a release of `key` with `token` declines for the reasons a release
        does when a registration is there (a replacement, a lifetime, a start in flight)."""
        reg = self.registrations.get(key)
        if token is not None and reg is not None and token is not reg:
            self.trace.record("decline", key, reason="token mismatch", op=why)
            return True
        if key in self.lifetimes:
            self.trace.record("decline", key, reason="independent lifetime", op=why)
            return True
        if self.attempts.in_flight(key):
            self.trace.record("decline", key, reason="start in flight", op=why)
            return True
        return False

    def let_go(self, key: Key, principal: str, *, why: str) -> None:
        """End `principal`'s instances of the registration under `key` and its claim on
        the independent lifetime, and leave the others' running: a session's stop of a
        run other principals launched too ends only its own part. The lifetime stays
        while another principal's start claimed it too; otherwise the others' launches
        hold the run now, and end it as they end. When no instance is left, this is a
        full stop. O(instances)."""
        reg = self.registrations.get(key)
        claimants = self.claimants.get(key)
        if claimants is not None:
            claimants.discard(principal)
            if not claimants:
                del self.claimants[key]
                self.lifetimes.discard(key)
        if reg is None:
            return
        for identity, group in list(reg.identities.items()):
            if identity.principal == principal:
                self._drop_instance(reg, identity, group)
        self.trace.record("let-go", key, principal=principal, reason=why)
        if not reg.identities and self.registrations.get(key) is reg:
            self.stop_result(key, why=f"{why}: its last instance left")

    def stop_if_current(self, key: Key, reg: Registration, why: str) -> None:
        """Deferred ownership after installation: stop only the exact registration."""
        if self.registrations.get(key) is reg:
            self.stop_result(key, why=why)

    def stop_all(self) -> None:
        self.attempts.invalidate_all()
        self.pending.cancel_all(self._cancel_pending)
        self.lifetimes.clear()
        self.claimants.clear()
        self._declined.clear()
        ended = self.registrations.end_all()
        self.trace.record("stop-all", "*", ended=len(ended))

    # ------------------------------------------------------------------ start cascade
    def start(
        self,
        link: Link,
        identity: Identity,
        *,
        label: str = "start",
        on_claim: Callable[[Key], None] | None = None,
    ) -> Pending[bool]:
        """Start the result `link` names (following links). See the module docstring.

        `on_claim(key)` runs when this start claims a lifetime for the result `key`.
        """
        attempt = self.attempts.begin(label, identity)
        attempt.on_claim = on_claim
        self.attempts.track(attempt, docs.root(link).key(identity))
        result: Pending[bool] = Pending(self.replica.mailbox)
        gen = self._cascade(attempt, link, identity)
        self._step(gen, attempt, result, None, None)
        return result

    def _step(
        self,
        gen: Generator[Pending[Any], Any, bool],
        attempt: StartAttempt,
        result: Pending[bool],
        value: Any,
        error: BaseException | None,
    ) -> None:
        try:
            stage = gen.send(value) if error is None else gen.throw(error)
        except StopIteration as stop:
            running = bool(stop.value)
            # The claim runs in a later step: code after `start(...)` (a stop, a re-run)
            # must be able to supersede it first.
            self.replica.mailbox.post(lambda: self._settle_attempt(attempt, running, result, None))
            return
        except Exception as exc:
            failure = exc
            self.replica.mailbox.post(lambda: self._settle_attempt(attempt, False, result, failure))
            return

        def next_stage(p: Pending[Any]) -> None:
            try:
                got = p.result()
            except Exception as exc:
                self._step(gen, attempt, result, None, exc)
            else:
                self._step(gen, attempt, result, got, None)

        stage.add_done_callback(next_stage)

    def _settle_attempt(
        self,
        attempt: StartAttempt,
        running: bool,
        result: Pending[bool],
        error: BaseException | None,
    ) -> None:
        target = attempt.target
        claimed = (
            error is None
            and running
            and target is not None
            and self.attempts.current_for(attempt, target)
            and target in self.registrations
        )
        if claimed:
            assert target is not None
            if target not in self.lifetimes:
                self.claimants.pop(target, None)  # claims of a lifetime since dropped
            self.lifetimes.add(target)
            claimant = attempt.identity.principal if attempt.identity is not None else None
            self.claimants.setdefault(target, set()).add(claimant)
            self.trace.record("claim", target, attempt=attempt.number)
            if attempt.on_claim is not None:
                attempt.on_claim(target)
        elif target is not None:
            self.trace.record("no-claim", target, attempt=attempt.number, failed=error is not None)
        keys = list(attempt.generations)
        self.attempts.finish(attempt)
        for key in keys:
            reg = self._declined.get(key)
            if reg is not None and not self.attempts.in_flight(key):
                del self._declined[key]
                self.release(key, reg, why="release that waited for a start")
        self._wake_idle()
        if error is not None:
            result._fail(error)
        else:
            result._resolve(claimed)

    def _current(self, attempt: StartAttempt, key: Key, stage: str) -> bool:
        if self.attempts.current(attempt):
            return True
        self.trace.record("superseded", key, attempt=attempt.number, stage=stage)
        return False

    def _cascade(
        self, attempt: StartAttempt, link: Link, identity: Identity
    ) -> Generator[Pending[Any], Any, bool]:
        given = link
        for _ in range(MAX_HOPS + 1):
            key = docs.root(link).key(identity)
            self.attempts.track(attempt, key)
            yield self.replica.sync([key])
            if not self._current(attempt, key, "root sync" if link is given else "link hop"):
                return False
            doc = self.replica.visible(key)
            if type(doc) is dict and docs.PATTERN in doc:
                break
            found = first_link(doc.get(docs.VALUE) if type(doc) is dict else None, link.path)
            if found is None:
                raise PatternError(
                    f"cannot start {describe(given)}: {describe(key)} holds no pattern run (set"
                    " one up with rt.setup or rt.run first) and no link to follow"
                )
            at, hop = found
            link = hop.child(*link.path[at:])
        else:
            raise LinkCycleError(f"cannot start {describe(given)}: more than {MAX_HOPS} link hops")
        target = docs.root(link)
        attempt.target = key
        running = self.registrations.get(key)
        if running is not None and identity in running.identities:
            return True
        identity_name = doc[docs.PATTERN]
        if not isinstance(identity_name, str):
            raise PatternLoadError(
                f"cannot start {describe(key)}: its pattern identity is {identity_name!r},"
                " not a str",
                identity=str(identity_name),
            )
        yield self.replica.sync([docs.pattern_link(key.space, identity_name).key(identity)])
        if not self._current(attempt, key, "pattern load"):
            return False
        pattern = find_pattern(identity_name)
        yield self.replica.sync(run_keys(pattern, target, identity))
        if not self._current(attempt, key, "dependency pre-sync"):
            return False
        if _list_nodes(pattern, target):
            # Lists: their input documents, then every element child they hold now,
            # derived exactly as the coordinators derive them on first setup.
            yield self.replica.sync(list_input_keys(self, pattern, target, identity))
            if not self._current(attempt, key, "list pre-sync"):
                return False
            yield self.replica.sync(element_run_keys(self, pattern, target, identity))
            if not self._current(attempt, key, "element pre-sync"):
                return False
        running = self.registrations.get(key)
        if running is not None and (
            identity in running.identities or running.pattern != pattern.identity
        ):
            return True
        tx = self.replica.edit(identity)
        if running is not None:
            # Running for other identities: this start is a new demander, and joins it.
            self.join(tx, running, pattern, target, launch="start", rollback=False)
        else:
            self.start_core(tx, pattern, target, launch="start", chain=())
        tx.add_settle_callback(
            lambda _tx, res: self._start_settled(key, pattern, target, identity, res)
        )
        tx.commit_detached()
        return True

    def _start_settled(
        self,
        key: Key,
        pattern: Pattern,
        target: Link,
        identity: Identity,
        res: CommitResult,
        reissues: int = 0,
    ) -> None:
        """A start's own transaction (its nested children's setups) did not land: those
        writes are owed; issue them again while the run is still registered. The
        re-issue is watched the same way (a re-issue that goes stale too is owed
        again), up to `MAX_START_REISSUES` times."""
        if res.ok or key not in self.registrations:
            return
        self.trace.record("debt", key, launch="start", outcome=res.outcome.name)
        if res.outcome is not Outcome.STALE_BASIS:
            return  # not retryable: the nested children read what did land
        if reissues >= MAX_START_REISSUES:
            self.trace.record("debt-abandoned", key, reissues=reissues)
            return
        tx = self.replica.edit(identity)
        stage_tree(self, tx, pattern, target, depth=0)
        tx.add_settle_callback(
            lambda _tx, again: self._start_settled(
                key, pattern, target, identity, again, reissues + 1
            )
        )
        tx.commit_detached()

    # ------------------------------------------------------------------ waiting
    def busy(self) -> bool:
        return bool(self.attempts.active)

    def add_idle_waiter(self, fn: Callable[[], None]) -> None:
        self._idle_waiters.append(fn)

    def _wake_idle(self) -> None:
        waiters, self._idle_waiters = self._idle_waiters, []
        for fn in waiters:
            fn()

    # ------------------------------------------------------------------ diagnostics
    def _check(self) -> None:
        self.registrations._check()
        self.attempts._check()
        self.pending._check()
        self.trace._check()
        assert self.lifetimes <= self.registrations.keys(), self.lifetimes
        assert self.claimants.keys() <= self.registrations.keys(), self.claimants
        for key, reg in self._declined.items():
            assert self.registrations.get(key) is reg, (key, reg)
        for reg in self.registrations:
            assert reg.identities, reg
            for identity in reg.identities:
                key = reg.key
                assert instance_key(key.space, key.id, key.scope, identity) == key, (reg, identity)
        for coordinator in self.coordinators:
            assert not coordinator.reg.ended, coordinator
            assert set(coordinator.nodes) == set(coordinator.reg.identities), coordinator
            assert self.list_coordinators[coordinator.reg, coordinator.index] is coordinator
            coordinator._check()
        assert len(self.list_coordinators) == len(self.coordinators)


def _who(identity: Identity) -> str:
    return f"{identity.principal}/{identity.session}"


def run_keys(pattern: Pattern, result: Link, identity: Identity, depth: int = 0) -> list[Any]:
    """Every document a run of `pattern` at `result` owns, nested children included,
    derived exactly as setup derives them (the cold-resume pre-sync reads these)."""
    graph = pattern.graph
    keys = [docs.argument_link(result).key(identity)]
    for node in graph.nodes:
        out = docs.internal_link(result, node.index)
        keys.append(out.key(identity))
        if node.kind == "pattern" and depth < MAX_NESTING:
            try:
                child = find_pattern(node.target)
            except PatternLoadError:
                continue  # instantiation reports it with the node's place
            keys.extend(run_keys(child, out, identity, depth + 1))
    return keys


def _list_nodes(
    pattern: Pattern, result: Link, depth: int = 0
) -> list[tuple[Any, Link, Pattern, str, Link]]:
    """(node, bound list link, op, kind, container) for every list node of a run's tree."""
    from ._builder import LIST_KINDS

    out: list[tuple[Any, Link, Pattern, str, Link]] = []
    for node in pattern.graph.nodes:
        if node.kind in LIST_KINDS:
            bound = docs.bind(node.inputs, result)["list"]
            try:
                op = find_pattern(node.target)
            except PatternLoadError:
                continue
            out.append((node, bound, op, node.kind, docs.internal_link(result, node.index)))
        elif node.kind == "pattern" and depth < MAX_NESTING:
            try:
                child = find_pattern(node.target)
            except PatternLoadError:
                continue
            out.extend(_list_nodes(child, docs.internal_link(result, node.index), depth + 1))
    return out


def list_input_keys(
    runner: Runner, pattern: Pattern, result: Link, identity: Identity
) -> list[Any]:
    """The documents the run's lists live in (read through the synced argument links)."""
    tx = runner.replica.edit(identity)
    try:
        return [resolve(tx, bound).key(identity) for _n, bound, *_ in _list_nodes(pattern, result)]
    finally:
        tx.abort("pre-sync probe")


def element_run_keys(
    runner: Runner, pattern: Pattern, result: Link, identity: Identity
) -> list[Any]:
    """Every document of every element child the run's lists hold now, derived exactly as
    the coordinators derive them (container, element key, scope)."""
    from ._lists import base_container, child_link, element_keys

    keys: list[Any] = []
    tx = runner.replica.edit(identity)
    try:
        for _node, bound, op, kind, container in _list_nodes(pattern, result):
            place = resolve(tx, bound)
            items = tx.peek(place.key(identity), (docs.VALUE, *place.path))
            if type(items) is not list:
                continue
            base = base_container(container, place.scope)
            for key in element_keys(items):
                child = child_link(kind, base, key)
                keys.append(child.key(identity))
                keys.extend(run_keys(op, child, identity))
    finally:
        tx.abort("pre-sync probe")
    return keys


def stage_tree(
    runner: Runner, tx: Transaction, pattern: Pattern, result: Link, depth: int
) -> list[Registration]:
    """Re-issue the setup writes of every nested child of a run (the owed debt); returns
    the nested children's registrations whose debt this cleared."""
    paid: list[Registration] = []
    for node in pattern.graph.nodes:
        if node.kind != "pattern" or depth >= MAX_NESTING:
            continue
        child = find_pattern(node.target)
        out = docs.internal_link(result, node.index)
        runner.stage_setup(tx, child, docs.bind(node.inputs, result), out, f"node {node.index}")
        reg = runner.registrations.get(out.key(tx.identity))
        if reg is not None and reg.owed:
            reg.owed = False
            paid.append(reg)
        paid.extend(stage_tree(runner, tx, child, out, depth + 1))
    return paid
