"""Start attempts and pending starts: the bookkeeping behind stop's reach.

A *start attempt* is one `rt.start` call from the moment it is called until
its result settles. It records the runtime epoch, the generation of every
document key it has *discovered* (the key it was called on, each link hop,
the target), and the *tombstones* a stop left for keys it had not yet
discovered. It is current while the epoch is unchanged, no discovered key is
tombstoned and every discovered key still has the generation it saw; every
asynchronous stage re-checks this, so a stop reaches a start held anywhere.

A *pending start* is a start gated on a commit: owned from the moment it is
scheduled, indexed under its result key so a stop can tombstone it and a
release can cancel it; it settles (leaves the index) when it installs, is
cancelled, or its transaction fails.

Invariants (checked by `_check`)
- a generation entry exists only while some active attempt tracks its key;
- `by_key` mirrors the discovered keys of the active attempts exactly;
- every pending start in the index is unsettled, under its own key.
Not here: registrations themselves (`_registrations`), the cascade (`_start`), the
rules that use these (`_core`).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator

from cells import Identity

from ._registrations import Key, Registration


class StartAttempt:
    __slots__ = (
        "epoch",
        "generations",
        "identity",
        "label",
        "number",
        "on_claim",
        "target",
        "tombstones",
    )

    _numbers = itertools.count(1)

    def __init__(self, epoch: int, label: str, identity: Identity | None = None) -> None:
        self.number = next(StartAttempt._numbers)
        self.epoch = epoch
        self.label = label
        self.identity = identity
        """Who started it: a session's stop reaches only its own principal's attempts."""
        self.generations: dict[Key, int] = {}
        self.tombstones: set[Key] = set()
        self.target: Key | None = None
        self.on_claim: Callable[[Key], None] | None = None

    def __repr__(self) -> str:
        return f"<StartAttempt #{self.number} {self.label} target={self.target}>"


class Attempts:
    """Active start attempts, indexed by every key they discovered."""

    def __init__(self) -> None:
        self.epoch = 0
        self.active: set[StartAttempt] = set()
        self.by_key: dict[Key, set[StartAttempt]] = {}
        self.generation: dict[Key, int] = {}

    def __len__(self) -> int:
        return len(self.active)

    def begin(self, label: str, identity: Identity | None = None) -> StartAttempt:
        attempt = StartAttempt(self.epoch, label, identity)
        self.active.add(attempt)
        return attempt

    def track(self, attempt: StartAttempt, key: Key) -> None:
        """`attempt` discovered `key`: it now answers to stops of `key` by generation."""
        if key in attempt.generations:
            return
        attempt.generations[key] = self.generation.setdefault(key, 0)
        self.by_key.setdefault(key, set()).add(attempt)

    def in_flight(self, key: Key) -> bool:
        return bool(self.by_key.get(key))

    def principals(self, key: Key) -> set[str | None]:
        """The principals of the attempts that discovered `key` (None: the runtime's own)."""
        return {a.identity.principal if a.identity else None for a in self.by_key.get(key, ())}

    def tombstone_undiscovered(self, key: Key, principal: str | None = None) -> int:
        """A stop of `key`: every active attempt that has not discovered it yet gets a
        tombstone, so it stops the moment it resolves a link to `key`. A session's stop
        (`principal`) reaches only the attempts its own principal started."""
        n = 0
        for attempt in self.active:
            if principal is not None and (
                attempt.identity is None or attempt.identity.principal != principal
            ):
                continue
            if key not in attempt.generations:
                attempt.tombstones.add(key)
                n += 1
        return n

    def bump(self, key: Key) -> None:
        """A stop or replacement of `key`: attempts that saw the old generation are stale."""
        if key in self.by_key:
            self.generation[key] = self.generation.get(key, 0) + 1
        else:
            self.generation.pop(key, None)

    def current(self, attempt: StartAttempt) -> bool:
        if attempt.epoch != self.epoch or attempt not in self.active:
            return False
        for key, gen in attempt.generations.items():
            if key in attempt.tombstones or self.generation.get(key, 0) != gen:
                return False
        return True

    def current_for(self, attempt: StartAttempt, key: Key) -> bool:
        """The target-only judgement of the claim: stops of other keys it passed through
        (an intermediate link document) do not count."""
        if attempt.epoch != self.epoch or key not in attempt.generations:
            return False
        if key in attempt.tombstones:
            return False
        return self.generation.get(key, 0) == attempt.generations[key]

    def finish(self, attempt: StartAttempt) -> None:
        self.active.discard(attempt)
        for key in attempt.generations:
            holders = self.by_key.get(key)
            if holders is None:
                continue
            holders.discard(attempt)
            if not holders:
                del self.by_key[key]
                self.generation.pop(key, None)  # churn leaks nothing

    def invalidate_all(self) -> None:
        """`stop_all`: a new epoch; every active attempt stops at its next check."""
        self.epoch += 1

    def _check(self) -> None:
        mirror: dict[Key, set[StartAttempt]] = {}
        for attempt in self.active:
            for key in attempt.generations:
                mirror.setdefault(key, set()).add(attempt)
        assert mirror == self.by_key, (mirror, self.by_key)
        assert set(self.generation) <= set(self.by_key), set(self.generation) - set(self.by_key)


class PendingStart:
    """A start scheduled now that installs only after a transaction commits."""

    __slots__ = ("cancelled", "identity", "installed", "key", "label", "settled")

    def __init__(self, key: Key, label: str, identity: Identity | None = None) -> None:
        self.key = key
        self.label = label
        self.identity = identity
        """Whose launch scheduled it (a session may stop only its own principal's)."""
        self.cancelled = False
        self.settled = False
        self.installed: Registration | None = None

    def __repr__(self) -> str:
        state = "cancelled" if self.cancelled else "installed" if self.installed else "pending"
        return f"<PendingStart {self.key} {self.label!r} {state}>"


class PendingStarts:
    def __init__(self) -> None:
        self._by_key: dict[Key, list[PendingStart]] = {}

    def __len__(self) -> int:
        return sum(len(v) for v in self._by_key.values())

    def __iter__(self) -> Iterator[PendingStart]:
        for starts in list(self._by_key.values()):
            yield from list(starts)

    def keys(self) -> frozenset[Key]:
        return frozenset(self._by_key)

    def add(self, key: Key, label: str, identity: Identity | None = None) -> PendingStart:
        pending = PendingStart(key, label, identity)
        self._by_key.setdefault(key, []).append(pending)
        return pending

    def settle(self, pending: PendingStart) -> None:
        """Take `pending` out of the index (installed, cancelled or its commit failed)."""
        if pending.settled:
            return
        pending.settled = True
        starts = self._by_key.get(pending.key)
        if starts is not None and pending in starts:
            starts.remove(pending)
            if not starts:
                del self._by_key[pending.key]

    def cancel_key(self, key: Key, on_cancel: Callable[[PendingStart], None]) -> int:
        """Cancel every pending start held for `key` (the spec's stated width)."""
        starts = self._by_key.pop(key, [])
        for pending in starts:
            pending.cancelled = True
            pending.settled = True
            on_cancel(pending)
        return len(starts)

    def principals(self, key: Key) -> set[str | None]:
        """The principals whose launches hold pending starts for `key`."""
        return {p.identity.principal if p.identity else None for p in self._by_key.get(key, ())}

    def cancel_all(self, on_cancel: Callable[[PendingStart], None]) -> int:
        return sum(self.cancel_key(key, on_cancel) for key in list(self._by_key))

    def _check(self) -> None:
        for key, starts in self._by_key.items():
            assert starts, key
            for pending in starts:
                assert pending.key == key and not pending.settled, pending
