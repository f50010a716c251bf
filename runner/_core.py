"""The ownership core: which results run, and the two authorities that end them.

`Ownership` holds one runtime's registrations (`_registrations`), start
attempts and pending starts (`_ownership`), independent lifetimes, the
releases deferred behind a start, and the lifecycle trace, and applies the
two authorities of the spec to them:

- `stop(key)` is authoritative over the result: it ends whatever registration
  it finds, drops the lifetime, cancels every pending start for the key, and
  tombstones start attempts that have not discovered the key yet;
- `release(key, token)` is authoritative over the registration its launch
  installed: it declines on a token mismatch, on an independent lifetime, and
  while a start attempt is in flight (and remembers that last decline, so the
  release applies if the start then claims nothing: no zombie); with nothing
  registered it cancels the pending starts held for the key; it never
  tombstones an unresolved start.

A start attempt claims its lifetime here (`settle_attempt`), in a later
mailbox step than the `start` call, and only while its target is current.

The modules that turn a pattern into nodes and children (`_instantiate`,
`_when`, `_computed`, `_checks`, the list coordinators) sit *below* the
runner that launches runs, and see it only through `Launcher`, the narrow
interface defined here; the start cascade (`_start`) sees it through
`Starter`. So imports point one way: the `Runtime` facade, then the runner,
then instantiation, then this core.

Invariants (checked by `_check`)
- a lifetime (and its claimants) exists only for a registered key;
- every remembered declined release names the current registration of its key;
- every registration runs for at least one identity, and each of its
  identities selects its key (a user-scoped key's principal, a
  session-scoped key's principal and session);
- the registrations, attempts, pending starts and trace pass their own checks.
Not here: how a run is set up, launched or started (`_runner`, `_start`), or
what its nodes are (`_instantiate`).
"""

from __future__ import annotations

from collections.abc import Callable, KeysView
from typing import Any, Final, Protocol

from cells import Identity, Link, Pending, Replica, Transaction, instance_key
from scheduler import Scheduler

from ._builder import Pattern
from ._cancel import CancelGroup
from ._host import SchedulerHost
from ._list_keys import ElementKey
from ._ownership import Attempts, PendingStart, PendingStarts, StartAttempt
from ._registrations import Key, Registration, Registrations, end_instance
from ._reuse import Book
from ._trace import LifecycleTrace

MAX_NESTING: Final = 64
"""Deepest chain of results launching results before `PatternCycleError`."""

Token = Registration | PendingStart | None
"""What a launch holds: the registration it installed, a pending start (gated), or
None (the result already ran the same pattern)."""


_FEW_CLAIMANTS = 8
"""Claimants of a lifetime kept in a tuple; more go into a set (O(1) per claim)."""


_LONE_CLAIMS = 4096
"""Shared one-claimant tuples kept at most (then the table starts over)."""


class Ownership:
    """Registrations, attempts, pending starts and lifetimes, and who may end them."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler
        self.trace = LifecycleTrace()
        self.registrations = Registrations(on_end=self._on_end)
        self.attempts = Attempts()
        self.pending = PendingStarts()
        self.claimants: dict[Key, tuple[str | None, ...] | set[str | None]] = {}
        """The independent lifetimes (its keys: see `lifetimes`), each with whose starts
        claimed it (principals; None: the runtime's own), so a session letting go of a
        shared run gives up only its own principal's claim. A tuple while there are few
        (a set costs 216 bytes per lifetime, and almost every lifetime has one claimant),
        a set beyond `_FEW_CLAIMANTS`."""
        self._lone_claims: dict[str | None, tuple[str | None]] = {}
        """One shared `(claimant,)` per principal, the claimants of nearly every lifetime
        (a tuple each cost 48 bytes per lifetime); bounded by `_LONE_CLAIMS`."""
        self._declined: dict[Key, Registration] = {}
        """Releases that declined only because a start was in flight (DESIGN §4.3 item 4)."""
        self._idle_waiters: list[Callable[[], None]] = []

    @property
    def lifetimes(self) -> KeysView[Key]:
        """The keys with an independent lifetime (a start claimed them): a live view.
        (The keys of `claimants`: a set of its own cost about 50 bytes per lifetime.)"""
        return self.claimants.keys()

    # ------------------------------------------------------------------ ending
    def _on_end(self, reg: Registration) -> None:
        # No orphaned lifetime: the record goes whenever its registration goes.
        self.claimants.pop(reg.key, None)
        # Its observers complete: the run producing what they observe ended.
        self.scheduler.end_observations(reg.key)
        if self._declined.get(reg.key) is reg:
            del self._declined[reg.key]

    def cancel_pending(self, pending: PendingStart) -> None:
        """What cancelling a pending start does (the callback `PendingStarts` takes): it
        is tombstoned, and a registration it already installed ends with it."""
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
        self.claimants.pop(key, None)  # the lifetime ends
        self.pending.cancel_key(key, self.cancel_pending)
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
            if self.pending.cancel_key(key, self.cancel_pending):
                self.trace.record("release", key, reason=f"{why}: cancelled pending starts")
            return False
        self.claimants.pop(key, None)  # the lifetime ends
        self.pending.cancel_key(key, self.cancel_pending)
        self.attempts.bump(key)
        self.registrations.end(key, token=reg)
        self.trace.record("release", key, reason=why)
        return True

    def take_over_declined(self, key: Key, reg: Registration) -> bool:
        """A launch now holds the running `reg`: forget a release an earlier launch
        deferred behind a start in flight (it must not end `reg` later). Returns whether
        there was one."""
        if self._declined.get(key) is not reg:
            return False
        del self._declined[key]
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

    def drop_instance(self, reg: Registration, identity: Identity, group: CancelGroup) -> None:
        """End `reg`'s instance for `identity` (its cancel group `group`)."""
        end_instance(reg, identity, group)

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
            if isinstance(claimants, tuple):
                claimants = self.claimants[key] = tuple(c for c in claimants if c != principal)
            else:
                claimants.discard(principal)
            if not claimants:
                del self.claimants[key]  # the lifetime ends
        if reg is None:
            return
        for identity, group in list(reg.identities.items()):
            if identity.principal == principal:
                self.drop_instance(reg, identity, group)
        self.trace.record("let-go", key, principal=principal, reason=why)
        if not reg.identities and self.registrations.get(key) is reg:
            self.stop_result(key, why=f"{why}: its last instance left")

    def stop_if_current(self, key: Key, reg: Registration, why: str) -> None:
        """Deferred ownership after installation: stop only the exact registration."""
        if self.registrations.get(key) is reg:
            self.stop_result(key, why=why)

    def stop_all(self) -> None:
        self.attempts.invalidate_all()
        self.pending.cancel_all(self.cancel_pending)
        self.claimants.clear()
        self._declined.clear()
        ended = self.registrations.end_all()
        self.trace.record("stop-all", "*", ended=len(ended))

    # ------------------------------------------------------------------ claims
    def settle_attempt(
        self, attempt: StartAttempt, running: bool, error: BaseException | None
    ) -> bool:
        """A start attempt ended (`running`: it left its target running; `error`: why it
        failed). It claims a lifetime for its target only if its target is still current
        and registered; then it leaves the attempts, and a release that was deferred
        behind it applies if nothing else is in flight. Returns whether it claimed."""
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
            claimant = attempt.identity.principal if attempt.identity is not None else None
            held = self.claimants.get(target, ())
            if isinstance(held, set):
                held.add(claimant)
            elif not held:
                self.claimants[target] = self._lone_claim(claimant)
            elif claimant not in held:
                more = (*held, claimant)
                self.claimants[target] = more if len(more) <= _FEW_CLAIMANTS else set(more)
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
        return claimed

    def _lone_claim(self, claimant: str | None) -> tuple[str | None]:
        lone = self._lone_claims.get(claimant)
        if lone is None:
            if len(self._lone_claims) >= _LONE_CLAIMS:
                self._lone_claims.clear()
            lone = self._lone_claims[claimant] = (claimant,)
        return lone

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
        assert self.claimants.keys() <= self.registrations.keys(), self.claimants
        assert all(self.claimants.values()), self.claimants
        for key, reg in self._declined.items():
            assert self.registrations.get(key) is reg, (key, reg)
        for reg in self.registrations:
            assert reg.identities, reg
            for identity in reg.identities:
                key = reg.key
                assert instance_key(key.space, key.id, key.scope, identity) == key, (reg, identity)


# --------------------------------------------------------------------------- narrow interfaces


class OpenPage(Protocol):
    """Opens `target` as a page of `identity`'s principal (the runtime's pages)."""

    def __call__(
        self, link: Link, identity: Identity, *, via: str, follow: bool = False
    ) -> Pending[bool]: ...


class Launcher(Protocol):
    """What instantiation, computed children and list coordinators see of the runner:
    the core's state and authority, and launching a child. (`Runner` implements it.)"""

    replica: Replica
    scheduler: Scheduler
    host: SchedulerHost
    """The host of the cells a run hands out (a handler's arguments)."""
    trace: LifecycleTrace
    registrations: Registrations
    pending: PendingStarts
    coordinators: set[Any]
    """The live list coordinators (`_lists.Coordinator`, for `_check` and diagnostics)."""
    list_coordinators: dict[tuple[Registration, int], Any]
    """The coordinator of each (registration, list node index)."""
    open_page: OpenPage
    """A navigation opens its target as a page through this."""
    reuse: bool
    """Whether a lift's first run may keep a stored output whose inputs did not change."""
    reuse_book: Book
    """The lifts that can leave an inputs record (`_reuse`)."""
    presynced: dict[tuple[str, Link, ElementKey], Link]
    """Element children a cold resume's pre-sync derived, for the first reconcile to take."""

    def stage_setup(
        self,
        tx: Transaction,
        pattern: Pattern,
        argument: Any,
        result: Link,
        where: str,
        *,
        fold: bool = False,
    ) -> None: ...

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
    ) -> Token: ...

    def start_core(
        self,
        tx: Transaction,
        pattern: Pattern,
        result: Link,
        *,
        launch: str,
        chain: tuple[Key, ...],
        key: Key | None = None,
    ) -> Registration: ...

    def release(
        self, key: Key, token: Registration | None = None, *, why: str = "release"
    ) -> bool: ...

    def release_for(
        self,
        reg: Registration,
        child: Link,
        identity: Identity,
        token: Registration | None,
        *,
        why: str,
    ) -> bool: ...

    def stop_if_current(self, key: Key, reg: Registration, why: str) -> None: ...

    def cancel_pending(self, pending: PendingStart) -> None: ...


class Starter(Launcher, Protocol):
    """What the start cascade (`_start`) sees of the runner: a launcher that also
    joins a running result for another identity, and settles start attempts."""

    attempts: Attempts

    def join(
        self,
        tx: Transaction,
        reg: Registration,
        pattern: Pattern,
        result: Link,
        *,
        launch: str,
        rollback: bool = True,
    ) -> None: ...

    def settle_attempt(
        self, attempt: StartAttempt, running: bool, error: BaseException | None
    ) -> bool: ...
