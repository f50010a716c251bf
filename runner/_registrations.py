"""Registrations: which result is running, and who may end it.

A registration is the runner's record that a result is running: one per
scoped result key, holding the cancel group of everything the run installed.
The `Registration` object itself is the *token*: a launch keeps the one it
installed, and a release naming another token does nothing (a replacement
owns itself). Every registration also carries a *generation*, unique in the
runtime, so a stop or release may name the one it means; a stale generation
does nothing. Registrations are not transactional.

A registration runs for one or more resolution identities: its *instances*.
A space-scoped result that two principals demand on one serving runtime is
one registration (one key, one token, one stop) whose nodes run once per
demanding identity, each with that identity, so each reads and writes its own
instances of user- and session-scoped documents. Each instance has a cancel
group of its own inside the registration's, so a join that fails, or one
principal's stop of a run others launched too, ends that identity's instance
without touching the other identities' ones.

Invariants (checked by `_check`)
- at most one registration per key, and it is the one stored under its key;
- a registration in the map is not ended; an ended one's group is cancelled.
Not here: the start cascade, lifetimes and pending starts (the ownership
rules built on these), or how a pattern's nodes run (scheduler).
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable, Iterator
from typing import Any, Final

from cells import DocKey, Identity, InvalidArgumentError

from ._cancel import CancelGroup

Key = DocKey
"""A registration key: the result's document instance (space, scope instance, id)."""


ENDED: Final = 1
ADOPTED: Final = 2
OWED: Final = 4
"""`Registration._flags`: ended, adopted, owed (see those properties)."""


class Registration(CancelGroup):
    """The handle (and token) of one running result. Created only by `Registrations`.

    It is its own cancel group (`group`: everything the run installed): a separate
    group object beside it cost 40 bytes more per registration."""

    __slots__ = (
        "_flags",
        "_tracked",
        "chain",
        "generation",
        "identities",
        "key",
        "launch",
        "pattern",
    )

    def __init__(
        self, key: Key, generation: int, launch: str, pattern: str, chain: tuple[Key, ...]
    ) -> None:
        super().__init__()  # (named by `label`, below)
        self.key = key
        self.generation = generation
        self.launch = launch
        """Who installed it (for traces and errors): "start", "nested node 2 of ...", ..."""
        self.pattern = pattern
        """The identity of the pattern it runs."""
        self.chain = chain
        """The results that launched it, outermost first (walked for runaway nesting)."""
        self._flags = 0
        """`ENDED`, `ADOPTED` and `OWED` (one int: three bool slots cost 16 bytes more
        per registration)."""
        self.identities = Instances()
        """The identities its nodes run for (its instances), each with the cancel group of
        what that instance installed, in the order they joined."""
        self._tracked: Any = ()
        """For inspection: the scheduler nodes and handlers its pattern's nodes
        registered (one per node and instance) while they exist, each after its
        pattern node's index: (index, node, index, node, ...) (see `tracked`). Flat:
        a dict of lists cost about 250 bytes per registration; the node itself while it
        is the only one and its pattern node's index is 0 (most registrations: a
        one-lift pattern, a list element, a page; a one-pair tuple cost 56 bytes
        more), else a tuple while it holds at most one node, a list from the second
        on (a one-pair list costs 16 bytes more). A node is never a tuple or a list."""

    def __repr__(self) -> str:
        state = " ended" if self.ended else ""
        return f"<Registration {self.key} gen={self.generation} by {self.launch!r}{state}>"

    @property
    def group(self) -> CancelGroup:
        """The cancel group of everything the run installed (each instance's group among
        them): the registration itself. `Runner.switch` moves its cleanups to a group
        of their own (`hand_over`) to cancel them."""
        return self

    @property
    def label(self) -> str:
        return self.group_label()

    @property
    def ended(self) -> bool:
        return bool(self._flags & ENDED)

    @property
    def adopted(self) -> bool:
        """A later parent's nested launch found it running and holds it now: the launch
        that installed it no longer rolls it back (the later parent's teardown ends it)."""
        return bool(self._flags & ADOPTED)

    @adopted.setter
    def adopted(self, value: bool) -> None:
        self._flags = self._flags | ADOPTED if value else self._flags & ~ADOPTED

    @property
    def owed(self) -> bool:
        """Its setup transaction failed on a stale basis: the setup writes are owed (debt)
        and the next launch of the same run re-issues them, nested children included."""
        return bool(self._flags & OWED)

    @owed.setter
    def owed(self, value: bool) -> None:
        self._flags = self._flags | OWED if value else self._flags & ~OWED

    def track(self, index: int, node: Any) -> None:
        """Remember `node` as an instance of its pattern's node `index`."""
        nodes = self._tracked
        t = type(nodes)
        if t is list:
            nodes += (index, node)
        elif t is not tuple:
            self._tracked = [0, nodes, index, node]  # (a lone node is tracked under 0)
        elif nodes:
            self._tracked = [*nodes, index, node]
        else:
            self._tracked = node if index == 0 else (index, node)

    def _pairs(self) -> tuple[Any, ...] | list[Any]:
        """What it tracks as (index, node, index, node, ...)."""
        nodes = self._tracked
        t = type(nodes)
        return nodes if t is list or t is tuple else (0, nodes)

    def untrack(self, index: int, node: Any) -> None:
        """Forget `node` (tracked under `index`); nothing if it is not tracked. O(nodes)."""
        nodes = self._pairs()
        for i in range(1, len(nodes), 2):
            if nodes[i] is node and nodes[i - 1] == index:
                if type(nodes) is list:
                    del nodes[i - 1 : i + 1]
                else:
                    self._tracked = ()
                return

    def tracked(self, index: int) -> list[Any]:
        """The nodes tracked under the pattern's node `index`, oldest first."""
        nodes = self._pairs()
        return [nodes[i + 1] for i in range(0, len(nodes), 2) if nodes[i] == index]

    @property
    def nodes(self) -> dict[int, list[Any]]:
        """The tracked nodes by their pattern node's index (a fresh dict; see `tracked`)."""
        out: dict[int, list[Any]] = {}
        nodes = self._pairs()
        for i in range(0, len(nodes), 2):
            out.setdefault(nodes[i], []).append(nodes[i + 1])
        return out

    def group_label(self) -> str:
        """How its cancel group is named: "key#generation"."""
        return f"{self.key}#{self.generation}"


class InstanceGroup(CancelGroup):
    """The cancel group of one instance of a registration (what it installed for one
    identity), which is also the cleanup the registration's group holds for it: calling
    it ends that instance. One object where a group and a separate cleanup object cost
    56 bytes more per instance."""

    __slots__ = ("reg",)

    def __init__(self, reg: Registration, identity: Identity) -> None:
        super().__init__(identity)
        self.reg = reg

    @property
    def identity(self) -> Identity:
        label = self._label
        assert isinstance(label, Identity)
        return label

    def __call__(self) -> None:
        end_instance(self.reg, self.identity, self)


class Instances:
    """A registration's instances: identity -> its `InstanceGroup`, in the order they
    joined (the read and write operations of a dict that the runner uses). Nearly every
    registration has one instance, kept bare (the group knows its identity): a dict for
    it cost about 220 bytes per registration."""

    __slots__ = ("_many", "_one")

    def __init__(self) -> None:
        self._one: InstanceGroup | None = None
        self._many: dict[Identity, InstanceGroup] | None = None
        """Two or more instances (then `_one` is None)."""

    def __repr__(self) -> str:
        return f"Instances({dict(self.items())!r})"

    def __len__(self) -> int:
        if self._one is not None:
            return 1
        return len(self._many) if self._many is not None else 0

    def __bool__(self) -> bool:
        return self._one is not None or bool(self._many)

    def __iter__(self) -> Iterator[Identity]:
        one = self._one
        if one is not None:
            return iter((one.identity,))
        return iter(list(self._many) if self._many is not None else ())

    def __contains__(self, identity: object) -> bool:
        return isinstance(identity, Identity) and self.get(identity) is not None

    def get(self, identity: Identity) -> InstanceGroup | None:
        one = self._one
        if one is not None:
            return one if one.identity == identity else None
        many = self._many
        return many.get(identity) if many is not None else None

    def __getitem__(self, identity: Identity) -> InstanceGroup:
        group = self.get(identity)
        if group is None:
            raise KeyError(identity)
        return group

    def __setitem__(self, identity: Identity, group: InstanceGroup) -> None:
        assert group.identity == identity, (identity, group)
        one, many = self._one, self._many
        if one is None and not many:
            self._one, self._many = group, None
        elif one is not None and one.identity != identity:
            self._one, self._many = None, {one.identity: one, identity: group}
        elif one is not None:
            self._one = group
        else:
            assert many is not None
            many[identity] = group

    def __delitem__(self, identity: Identity) -> None:
        one = self._one
        if one is not None and one.identity == identity:
            self._one = None
            return
        many = self._many
        if many is None or identity not in many:
            raise KeyError(identity)
        del many[identity]
        if len(many) == 1:
            (self._one,) = many.values()
            self._many = None

    def items(self) -> list[tuple[Identity, InstanceGroup]]:
        """A fresh list (iterating while instances end is safe)."""
        one = self._one
        if one is not None:
            return [(one.identity, one)]
        return list(self._many.items()) if self._many is not None else []


def end_instance(reg: Registration, identity: Identity, group: CancelGroup) -> None:
    """End `reg`'s instance for `identity` (its cancel group `group`)."""
    # The identity leaves first: its cleanups then see which identities still hold a
    # child they share (`release_for`). A later instance's drop runs before an earlier
    # one's (the registration's group runs newest first), so the first releases last.
    if reg.identities.get(identity) is group:
        del reg.identities[identity]
    group.cancel()


class Registrations:
    """The registration map of one runtime."""

    def __init__(self, on_end: Callable[[Registration], None] | None = None) -> None:
        self._by_key: dict[Key, Registration] = {}
        self._generations = itertools.count(1)
        self._on_end = on_end
        """Runs as each registration ends, however it ends (before its cleanups)."""

    def __len__(self) -> int:
        return len(self._by_key)

    def __iter__(self) -> Iterator[Registration]:
        return iter(list(self._by_key.values()))

    def __contains__(self, key: object) -> bool:
        return key in self._by_key

    def keys(self) -> frozenset[Key]:
        return frozenset(self._by_key)

    @property
    def by_key(self) -> dict[Key, Registration]:
        """The live registrations by key, oldest first (the table itself: read, never write)."""
        return self._by_key

    def get(self, key: Key) -> Registration | None:
        return self._by_key.get(key)

    def install(
        self, key: Key, launch: str, *, pattern: str = "", chain: tuple[Key, ...] = ()
    ) -> Registration:
        """Install a fresh registration for `key`. The key must be free (end the old one first)."""
        if key in self._by_key:
            raise InvalidArgumentError(
                f"{key} already has {self._by_key[key]!r}; end it before installing"
            )
        # Interned: launches name the node that made them ("element of Board.n0 map(Card)"),
        # so a list's elements or a pattern's nested children share one string.
        reg = Registration(key, next(self._generations), sys.intern(launch), pattern, chain)
        self._by_key[key] = reg
        return reg

    def end(
        self,
        key: Key,
        *,
        token: Registration | None = None,
        generation: int | None = None,
    ) -> Registration | None:
        """End the registration under `key` if it matches; returns it, or None if nothing ended.

        `token` (the exact registration) and `generation` fence the call: a
        mismatch ends nothing. The registration leaves the map before its
        cleanups run, so a cleanup that installs anew under the same key works.
        """
        reg = self._by_key.get(key)
        if reg is None:
            return None
        if token is not None and token is not reg:
            return None
        if generation is not None and generation != reg.generation:
            return None
        del self._by_key[key]
        reg._flags |= ENDED
        if self._on_end is not None:
            self._on_end(reg)
        reg.group.cancel()
        return reg

    def end_all(self) -> list[Registration]:
        """End every registration (each group is cancelled even if another's cleanup fails)."""
        ended: list[Registration] = []
        errors: list[Exception] = []
        for key in list(self._by_key):
            try:
                reg = self.end(key)
            except Exception as exc:
                errors.append(exc)
                continue
            if reg is not None:
                ended.append(reg)
        if errors:
            raise ExceptionGroup(f"{len(errors)} registrations failed to end cleanly", errors)
        return ended

    def _check(self) -> None:
        for key, reg in self._by_key.items():
            assert reg.key == key, (key, reg)
            assert not reg.ended and not reg.group.cancelled, reg
            reg.group._check()
            for identity, group in reg.identities.items():
                assert not group.cancelled, (reg, identity)
                assert group is not reg.group, (reg, identity)
                group._check()
