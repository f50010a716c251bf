"""A list coordinator's bookkeeping: one entry per element child, one state per identity.

Setup debt: issuing an element's setup stamps the entry with the issuing
reconcile (an `Issuance`). When that reconcile's transaction fails (a stale
basis too), every entry it still stamps owes its setup again, and only the
latest issuer decides.

A dormant entry (`_list_dormant`) holds a `Sleeper`: its child counts as set
up although nothing of it is installed.

Bookkeeping is kept per resolution identity `(principal, session)` (a
`State` each): one identity's completed setup never satisfies another's.

Invariants (checked by `State._check`)
- entry keys are unique and each entry's child id derives from its key and the
  state's base container;
- a document is awaited (syncing) or has a failed load to report, never both;
- when a state records its last clean reconcile (`State.items`), its link
  counts are those of that list, every element key has an entry, and the
  recorded aggregate is those entries' children (map) or their pairs `[child,
  element]` (the elements document of a filter or flat_map).
"""

from __future__ import annotations

from typing import Any

from cells import DocKey, Identity, Link

from ._list_keys import ElementKey, child_link, id_key, keys_and_counts, keys_at


class Issuance:
    """One reconcile's transaction: the token that stamps the setups it issued."""

    __slots__ = ("number",)

    def __init__(self, number: int) -> None:
        self.number = number

    def __repr__(self) -> str:
        return f"<reconcile #{self.number}>"


class Entry:
    """One element's child, and its position as of the last reconcile that matched it.

    A reconcile that diffs only the middle (`Coordinator._reconcile_middle`) moves only the
    middle's entries; for an op that reads `index` it runs only when the length is
    unchanged, so nothing else moved. For the other ops a shifted prefix or suffix
    keeps its older `index`, which nothing reads (updating it would be O(N))."""

    __slots__ = ("child", "created_by", "index", "issuer", "key", "owed", "sleeper")

    def __init__(self, key: ElementKey, child: Link, index: int) -> None:
        self.key = key
        self.child = child
        self.index = index
        self.owed = True
        self.issuer: Issuance | None = None
        self.created_by: Issuance | None = None
        self.sleeper: Sleeper | None = None
        """Set while its child is dormant (`_list_dormant`): counted as set up, nothing
        installed. Cleared when it wakes or is set up again."""

    def __repr__(self) -> str:
        state = " owed" if self.owed else " dormant" if self.sleeper is not None else ""
        return f"<element {self.key!r} @{self.index}{state}>"


class Sleeper:
    """One dormant child: its entry, the element argument it would be set up with, and
    every place its lifts' records list with what each saw when it fell asleep."""

    __slots__ = ("element", "entry", "reads", "seen")

    def __init__(
        self,
        entry: Entry,
        element: Link,
        reads: list[tuple[DocKey, tuple[Any, ...], bool]],
        seen: list[Any],
    ) -> None:
        self.entry = entry
        self.element = element
        self.reads = reads
        self.seen = seen

    def __repr__(self) -> str:
        return f"<dormant {self.entry!r}>"


class State:
    """A coordinator's bookkeeping for one resolution identity.

    `items`, `counts` and `aggregate` describe the last reconcile that finished
    cleanly over a list of links only (else `items` is None): the list it read (the
    stored object itself, not a copy), how often each link occurs in it, and the
    aggregate list object it wrote (map's output, or a filter's or flat_map's elements
    document). No key list is kept: a key is the
    link and its occurrence, which `keys_at` derives for the part it needs (a new
    N-element list per change is what the collector's young-generation passes pay
    for at N = 10,000). Any failure (a raising release or setup, a transaction that
    does not land, a child still loading) clears `items`, so the next reconcile
    walks the whole list again.
    """

    __slots__ = (
        "aggregate",
        "base",
        "counts",
        "entries",
        "failures",
        "identity",
        "ids",
        "items",
        "load_errors",
        "place",
        "syncing",
        "waking",
    )

    def __init__(self, identity: Identity) -> None:
        self.identity = identity
        self.entries: dict[ElementKey, Entry] = {}
        self.failures = 0
        self.place: Link | None = None
        """Where the list was read last (an inline element's argument points into it)."""
        self.syncing: set[DocKey] = set()
        """Documents this identity's reconciles wait for: one sync each, shared."""
        self.load_errors: dict[DocKey, BaseException] = {}
        """A list document whose load failed, for the next reconcile to report."""
        self.base: Link | None = None
        """The base container the entries' children derive from (None before the first
        reconcile that read a loaded list)."""
        self.items: list[Any] | None = None
        self.counts: dict[Link, int] = {}
        self.aggregate: list[Any] | None = None
        self.waking: list[tuple[Entry, Link]] = []
        """Dormant entries that woke (owed), with their element argument, for the next
        reconcile to set up (`_list_dormant`)."""
        self.ids: list[str] | None = None
        """The element ids the last reconcile over a list with inline elements saw, when
        it finished cleanly (else None): the next one diffs against them."""

    def __repr__(self) -> str:
        return f"<list state for {self.identity.principal}/{self.identity.session}>"

    def _check(self, kind: str) -> None:
        assert not self.syncing & self.load_errors.keys(), self.load_errors
        assert self.base is not None or not self.entries, self
        for key, entry in self.entries.items():
            assert entry.key == key, entry
            assert entry.sleeper is None or entry.sleeper.entry is entry, entry
            assert self.base is not None
            assert entry.child == child_link(kind, self.base, key), entry
        if self.items is not None:
            # What the next reconcile diffs against is exactly the last clean one.
            keys, counts = keys_and_counts(self.items)
            assert self.counts == counts, (self.counts, counts)
            assert sum(counts.values()) == len(self.items), "links only"
            for start in range(len(keys) + 1):
                assert keys[start:] == keys_at(self.items, counts, start, len(keys))
            for key in keys:
                assert key in self.entries, key
            if self.aggregate is not None:
                if kind == "map":
                    assert self.aggregate == [self.entries[k].child for k in keys]
                else:  # the elements document: a pair [child, element] per element
                    assert self.aggregate == [[self.entries[k].child, k[0]] for k in keys]
        if self.ids is not None:
            assert self.items is None, "inline elements or links only, not both"
            id_keys = [id_key(x) for x in self.ids]
            for key in id_keys:
                assert key in self.entries, key
            if kind == "map":
                assert self.aggregate == [self.entries[k].child for k in id_keys]
            else:  # the elements document: an inline element by its id in the list
                assert self.place is not None
                place = self.place
                assert self.aggregate == [
                    [self.entries[k].child, place.child(x)]
                    for k, x in zip(id_keys, self.ids, strict=True)
                ]
