"""Where a run's documents are, stated from the rules: the machines' oracle for keys.

The list and ownership machines compare the runtime's registrations with keys
derived here, from the documented rules alone (design/DESIGN.md §2 "Identity"
and §4.2 "List coordinators", the derivation table in `runner/_docs.py`'s
docstring), never with the runner's own helpers: a change to how the runner
derives a child is then caught by the machines instead of mirrored by them.
Only `cells`' public `entity_id` and `Link` are used.

- Element identity: an element that is a link is keyed by its target and by how
  many earlier elements of the list link to the same target (its occurrence);
  any other element is keyed by its element id (docs/reference/cells.md,
  "Element ids"): the list's document keeps `[next, ids]` at
  `doc["element_ids"][repr(path)]` once the list was spliced; with no table the
  ids are `#0`, `#1`, ... by position; positions past the table get
  `#<next + k>`; a shorter list keeps the first ids; a splice gives what it
  inserts `~<next>`. An id `#k` derives its child as position k did, any other
  id as itself.
- The container an element's child is keyed from: the list node's output cell,
  re-addressed (same id) at the narrower of the run's scope and the scope of
  the document the list lives in.
- An element's child result: its id derives from (list kind, container,
  element key) as `entity_id({kind: [container id, container scope], "element":
  ...})`; it lives in the container's space, at the narrower of the container's
  scope and, for a link element, the link's scope.
- A pattern's document: `entity_id({"pattern": identity})`, space scope.
- A run's argument document: `entity_id({"argument": [result id, result scope]})`,
  in the result's space and scope (a map element's child whose op folds its
  argument keeps it in its result document and has none; a start still syncs it).
- A page's id: `entity_id([space, id, scope, path])` of the link it names.

These ids are persisted: a restarted runtime finds its documents only while
they stay as stated, so the machines pin them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from cells import Link, Scope, entity_id

PRIVACY = {"space": 0, "user": 1, "session": 2}
"""Scopes from the most shared to the most private."""

ElementKey = tuple[Any, ...]
"""("link", target, occurrence), ("position", k) for the element id `#k`, or ("id", id)."""


def inline_ids(doc: Any, n: int, path: tuple[Any, ...] = ("value",)) -> list[str]:
    """The element ids of the `n`-element list at `path` of the document `doc`
    (see the module docstring)."""
    tables = doc.get("element_ids") if type(doc) is dict else None
    entry = tables.get(repr(path)) if type(tables) is dict else None
    following, ids = entry if type(entry) is list else (0, [])
    return [ids[i] if i < len(ids) else f"#{following + i - len(ids)}" for i in range(n)]


def element_keys(items: Iterable[Any], doc: Any = None) -> list[ElementKey]:
    """The identity of each element of a list, the one at "value" of the document
    `doc` (see the module docstring)."""
    items = list(items)
    ids = inline_ids(doc, len(items))
    keys: list[ElementKey] = []
    for index, item in enumerate(items):
        if isinstance(item, Link):
            earlier = sum(1 for key in keys if key[0] == "link" and key[1] == item)
            keys.append(("link", item, earlier))
        else:
            eid = ids[index]
            keys.append(("position", int(eid[1:])) if eid[:1] == "#" else ("id", eid))
    return keys


def narrower(a: Scope, b: Scope) -> Scope:
    """The more private of two scopes."""
    return a if PRIVACY[a] >= PRIVACY[b] else b


def whole(link: Link) -> Link:
    """The whole document a link points into."""
    return Link(link.space, link.id, link.scope)


def base_container(output: Link, list_scope: Scope) -> Link:
    """The list node's output cell at the scope its element children are keyed from."""
    return Link(output.space, output.id, narrower(output.scope, list_scope))


def child_link(kind: str, container: Link, key: ElementKey) -> Link:
    """The result document of the element child with `key` of a `kind` list op."""
    if key[0] == "link":
        _, target, occurrence = key
        element: list[Any] = [
            "link",
            target.space,
            target.id,
            target.scope,
            list(target.path),
            occurrence,
        ]
        scope: Scope = narrower(container.scope, target.scope)
    else:
        element = ["pos" if key[0] == "position" else "id", key[1]]
        scope = container.scope
    cause = {kind: [container.id, container.scope], "element": element}
    return Link(container.space, entity_id(cause), scope)


def pattern_doc(space: str, identity: str) -> Link:
    """The document holding a pattern's traced graph."""
    return Link(space, entity_id({"pattern": identity}))


def argument_doc(result: Link) -> Link:
    """The argument document a run at `result` derives (it may not exist: a folded one)."""
    return Link(result.space, entity_id({"argument": [result.id, result.scope]}), result.scope)


def page_id(link: Link) -> str:
    """The id a page opened with `link` is recorded under."""
    return entity_id([link.space, link.id, link.scope, list(link.path)])
