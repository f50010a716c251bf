"""Element identity: which child an element of a list gets, and what changed between two lists.

An element that is a link is keyed by its target (space, id, scope, path) and
its occurrence, so its child moves with it and repeated references get a
child each; an inline value is keyed by its element id (`cells.element_ids`),
which is its position in a list that was never spliced and follows the element
through every splice (an insert or a remove moves no other element's key, so no
other child owes a setup or re-reads anything). The scope is part of
the key, so a re-scoped element is a new element. A child's result id
derives from (base container, element key), so every runtime and every
restart finds the same child.

Over a list of links the diff is O(changed): `diff_middle` compares the new
list with the one the last clean reconcile matched (C-level slice comparisons
find the common prefix and suffix) and derives the keys of the middle only.

Scopes (S70). Narrower means more private: space < user < session. The *base
container* is the coordinator's output re-addressed (same id) at the narrower
of the run's scope and the list's scope; an element's child is exposed at the
narrower of the base container's scope and the element's own scope (a link's
scope; an inline element lives in the list's document).

Pure functions of their arguments: no runner, no transaction.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgspec

from cells import SCOPES, Link, Scope, entity_id
from scheduler import common_ends

ElementKey = tuple[Any, ...]


def element_keys(items: Iterable[Any]) -> list[ElementKey]:
    """The identity key of each element: a link by its target and occurrence (the
    scope is part of the link, so a re-scoped element is a new one), an inline value
    by its position. O(N), one small tuple per element."""
    return keys_and_counts(items)[0]


def keys_and_counts(
    items: Iterable[Any], ids: list[str] | None = None
) -> tuple[list[ElementKey], dict[Link, int]]:
    """`element_keys`, and how often each link occurs. With `ids` (the list's
    `element_ids`), an inline element is keyed by its element id instead of its position."""
    seen: dict[Link, int] = {}
    keys: list[ElementKey] = []
    for i, item in enumerate(items):
        if type(item) is Link:
            n = seen.get(item, 0)
            seen[item] = n + 1
            keys.append((item, n))
        else:
            keys.append((i,) if ids is None else id_key(ids[i]))
    return keys, seen


def id_key(eid: str) -> ElementKey:
    """The element key of an inline element with id `eid`: `#k` keys as `(k,)`, as
    position k did (a list that was never spliced has ids `#0`, `#1`, ... by position,
    so its children keep their ids); an id of another form keys as itself."""
    digits = eid[1:]
    return (int(digits),) if eid[:1] == "#" and digits.isdigit() else (eid,)


def keys_at(items: list[Any], counts: dict[Link, int], start: int, end: int) -> list[ElementKey]:
    """The element keys of `items[start:end]`, for a list of links whose occurrence
    counts are `counts`. A link that occurs once is `(link, 0)`; a repeated one
    counts its occurrences before `start` (C-level `list.count`). O(end - start),
    plus O(start) per distinct repeated link there."""
    keys: list[ElementKey] = []
    seen: dict[Link, int] = {}
    for i in range(start, end):
        item = items[i]
        if counts[item] == 1:
            keys.append((item, 0))
            continue
        n = seen.get(item)
        if n is None:
            n = items[:start].count(item) if start else 0
        seen[item] = n + 1
        keys.append((item, n))
    return keys


def _plain(key: ElementKey) -> Any:
    """The element key as JSON-like data (for deriving the child's id)."""
    if len(key) == 2:
        link, n = key
        return ["link", link.space, link.id, link.scope, list(link.path), n]
    x = key[0]
    return ["id", x] if type(x) is str else ["pos", x]


def narrower(a: Scope, b: Scope) -> Scope:
    """The more private of two scopes (space < user < session)."""
    return a if SCOPES.index(a) >= SCOPES.index(b) else b


def rescoped(link: Link, scope: Scope) -> Link:
    """The same document id at another scope (a scope re-addresses, never forks, an id)."""
    return link if link.scope == scope else Link(link.space, link.id, scope)


def base_container(output: Link, list_scope: Scope) -> Link:
    """The container element children are keyed from: the coordinator's output at the
    narrower of the run's scope and the list's scope."""
    return rescoped(output, narrower(output.scope, list_scope))


def child_link(kind: str, container: Link, key: ElementKey) -> Link:
    """The element's child result: its id derives from (base container, element key), and
    it is exposed at the narrower of the container's scope and the element's scope (an
    element linked at a narrower scope gets a child per instance of it)."""
    cause = _child_cause(kind, container, key)
    scope = container.scope
    if len(key) == 2:
        scope = narrower(scope, key[0].scope)
    # The cause is remembered as a recall of the objects the coordinator keeps anyway.
    return Link(container.space, entity_id(cause, recall=_ChildOf(kind, container, key)), scope)


def _child_cause(kind: str, container: Link, key: ElementKey) -> Any:
    return {kind: [container.id, container.scope], "element": _plain(key)}


class _ChildOf(msgspec.Struct, frozen=True, gc=False):
    """Gives the cause of an element child's id again (`entity_id`'s `recall`): 40 bytes
    per element, where a `(function, kind, container, key)` tuple cost 72. Untracked by
    the collector: it holds a str, a link and an element key (links, ints and strs),
    so it can be part of no cycle."""

    kind: str
    container: Link
    key: ElementKey

    def __call__(self) -> Any:
        return _child_cause(self.kind, self.container, self.key)


def diff_middle(
    counts: dict[Link, int], old: list[Any], new: list[Any]
) -> tuple[int, int, list[ElementKey], list[ElementKey]] | None:
    """(prefix, suffix, keys of the old middle, keys of the new middle) when only the
    middle needs a diff.

    `old` is the list of links the last clean reconcile read and `counts` how often
    each link occurs in it. Elements in the common prefix and suffix keep their keys,
    so only the middle is diffed — unless the middle holds an inline value, or changes
    how often a link that also occurs outside the middle appears (that would renumber
    the suffix's occurrences): then None, and the whole list is walked.
    O(prefix + suffix) C-level comparisons plus O(middle).
    """
    prefix, suffix = common_ends(old, new)
    old_mid = keys_at(old, counts, prefix, len(old) - suffix)
    new_items = new[prefix : len(new) - suffix]
    # Per link in the middle: the occurrence numbers the old middle used, in order.
    numbers: dict[Link, list[int]] = {}
    for link, n in old_mid:
        numbers.setdefault(link, []).append(n)
    wanted: dict[Link, int] = {}
    for item in new_items:
        if type(item) is not Link:
            return None
        wanted[item] = wanted.get(item, 0) + 1
    for link in numbers.keys() | wanted.keys():
        had = len(numbers.get(link, ()))
        want = wanted.get(link, 0)
        if had == want:
            continue
        if counts.get(link, 0) != had:
            return None  # it also occurs outside the middle: renumbering
        numbers[link] = list(range(want))
    new_mid: list[ElementKey] = []
    taken: dict[Link, int] = {}
    for item in new_items:
        k = taken.get(item, 0)
        taken[item] = k + 1
        new_mid.append((item, numbers[item][k]))
    return prefix, suffix, old_mid, new_mid
