"""Where a run keeps its state: every document of a run derives from its result.

A result document `R` (any `(space, id, scope)`) holds, besides its value:

- `"pattern"`: the pattern's identity (`module:qualname`);
- `"argument"`: a link to the run's argument document; or, for a list element's
  child whose op folds its argument (`folds_argument`), the argument itself
  (`{"element": link}`, never a link): that child has no argument document.

Everything else a run owns derives deterministically from `R`'s canonical
address, so a re-run, a second runtime and a restart find the same documents:

- the argument document: `entity_id({"argument": [R.id, R.scope]})` (none for a
  folded argument, below);
- node `i`'s output ("internal" cell `n{i}`): `entity_id({"internal": [R.id,
  R.scope], "node": i})`. For a nested pattern node this document *is* the
  child's result, so a child's id derives from its parent's output spot. A
  lift's output document also holds, at `"inputs"`, the record of what its last
  run read (`_reuse`), which lets a restarted runtime keep the output;
- a handler result launched by event `e`: `entity_id({"handler": ..., "event": e})`;
- a child a lift returned inside a list or dict, at path `p` of its value:
  `entity_id({"computed": [out.id, out.scope], "at": p})`, `out` the lift's output;
- the pattern document (the traced graph as JSON, shared by every run of the
  pattern): `entity_id({"pattern": identity})` at scope "space".

A run's result is an end of resolution (`resolve_to_result`): the link a result
holds as its whole value (a pattern that returns one computed cell) is its
projection, not a place to go on to, so `cell.resolve()` of a runtime's cell names
the result and `rt.start`/`rt.open_page` of it start that run.

Derivations are cached (an id is a SHA-256 of canonical bytes, about 9 µs,
and setup, start and the pre-sync ask for the same ones many times).

All of a run's documents share `R`'s scope, so a user- or session-scoped run
keeps its whole tree in that principal's (or session's) instance.

Folded arguments. A map's element child gets the argument `{"element": e}`, where
`e` is the element's link (a list of links) or a link *through the coordinator's
own list input* to the element's id (an inline element: the list input's link with
the id appended, so a list re-pointed elsewhere is followed by link resolution, as
every reader follows a link). Either is a function of the child's identity (its
id derives from the container and the element key), so it never changes while the
child exists: when the op can take it as constants (`folds_argument`: no `index`
parameter, untyped, lift nodes only, every argument binding under `element`), the
coordinator stores it in the result document's `"argument"` field and
instantiation binds `argument.element...` to `e` itself (`bind` with `argument`):
no argument document (about 0.7 KB per element: its key, id, replica record,
store head and value), and a lift reads its element with the same hops as before.
A setup that changes the form (a user's `setup` of such a child with an argument
document, or back) re-instantiates a registration running it in that runtime
(`Runner.stage_setup`).
"""

from __future__ import annotations

import functools
import weakref
from typing import Any, Final

import msgspec

from cells import (
    MAX_HOPS,
    MISSING,
    Link,
    LinkCycleError,
    Transaction,
    entity_id,
    internal_id,
    resolve,
)

from ._builder import Binding, Pattern

PATTERN: Final = "pattern"
ARGUMENT: Final = "argument"
VALUE: Final = "value"
PAGES_CAUSE: Final = {"cellweave": "pages"}


_VALUE_PATHS: dict[tuple[Any, ...], tuple[Any, ...]] = {}


def value_path(path: tuple[Any, ...]) -> tuple[Any, ...]:
    """`("value", *path)`, one shared tuple per path (a node's declared reads keep it:
    one per instance cost 56 bytes or more each). Bounded by `_MEMO_LIMIT`."""
    full = _VALUE_PATHS.get(path)
    if full is None:
        if len(_VALUE_PATHS) >= _MEMO_LIMIT:
            _VALUE_PATHS.clear()
        full = _VALUE_PATHS[path] = (VALUE, *path)
    return full


def root(link: Link) -> Link:
    """The whole document `link` points into (starting a sub-path starts the root)."""
    return link if not link.path else Link(link.space, link.id, link.scope)


_MEMO_LIMIT: Final = 1 << 16
"""Entries each memo below (each node index's, for internal links) holds at most;
a full memo starts over (the ids are derived again as they are asked for)."""
_ARGUMENTS: dict[Link, Link] = {}
_INTERNALS: dict[int, dict[Link, Link]] = {}
"""By node index, then by result (no (result, index) tuple per entry)."""
# (Plain dicts, not `functools.lru_cache`: an LRU entry cost about 135 bytes, a dict
# entry 30 to 85, and every running result has one of each.)


def argument_link(result: Link) -> Link:
    link = _ARGUMENTS.get(result)
    if link is None:
        if len(_ARGUMENTS) >= _MEMO_LIMIT:
            _ARGUMENTS.clear()
        eid = entity_id(_argument_cause(result), recall=_ArgumentOf(result))
        link = _ARGUMENTS[result] = Link(result.space, eid, result.scope)
    return link


def internal_link(result: Link, index: int) -> Link:
    memo = _INTERNALS.get(index)
    if memo is None:
        memo = _INTERNALS[index] = {}
    link = memo.get(result)
    if link is None:
        if len(memo) >= _MEMO_LIMIT:
            memo.clear()
        eid = entity_id(_internal_cause(result, index), recall=_InternalOf(result, index))
        link = memo[result] = Link(result.space, eid, result.scope)
    return link


# (Each derived id remembers its cause as a recall of the result's link, which the
# run keeps anyway: 24 or 32 bytes, where the cause's bytes cost about 150 and a
# `(function, link)` tuple 56 or 64. The recalls are structs the collector does not
# track: they hold links and ints only, so they can be part of no cycle.)
def _argument_cause(result: Link) -> Any:
    return {"argument": [result.id, result.scope]}


def _internal_cause(result: Link, index: int) -> Any:
    return {"internal": [result.id, result.scope], "node": index}


class _ArgumentOf(msgspec.Struct, frozen=True, gc=False):
    """Gives the cause of `result`'s argument id again (`entity_id`'s `recall`)."""

    result: Link

    def __call__(self) -> Any:
        return _argument_cause(self.result)


class _InternalOf(msgspec.Struct, frozen=True, gc=False):
    """Gives the cause of the id of `result`'s internal document `index` again."""

    result: Link
    index: int

    def __call__(self) -> Any:
        return _internal_cause(self.result, self.index)


class _PageOf(msgspec.Struct, frozen=True, gc=False):
    """Gives the cause of the page id of `target` again."""

    target: Link

    def __call__(self) -> Any:
        return _page_cause(self.target)


def computed_child_link(out: Link, at: tuple[str | int, ...]) -> Link:
    """The result of the child a lift returned at `at` inside a list or dict value."""
    cause = {"computed": [out.id, out.scope], "at": list(at)}
    return Link(out.space, entity_id(cause), out.scope)


def handler_result_link(stream: Link, event_id: str) -> Link:
    cause = {"handler": [stream.id, stream.scope, list(stream.path)], "event": event_id}
    return Link(stream.space, entity_id(cause), stream.scope)


@functools.lru_cache(maxsize=1 << 16)
def pattern_link(space: str, identity: str) -> Link:
    return Link(space, entity_id({"pattern": identity}))


def pages_link(space: str) -> Link:
    """One pages document per principal (user scope: each principal has its own).

    An internal document: no identity's transaction reaches it, the principal's own
    included (page records are written only with the runtime's authority)."""
    return Link(space, internal_id(PAGES_CAUSE), "user")


def page_id(target: Link) -> str:
    return entity_id(_page_cause(target), recall=_PageOf(target))


def _page_cause(target: Link) -> Any:
    return [target.space, target.id, target.scope, list(target.path)]


def folds_argument(pattern: Pattern) -> bool:
    """Whether a list element's child of `pattern` keeps its argument in its result
    document (see "Folded arguments" above): untyped (a typed argument is checked by a
    node reading the argument document), no `index` parameter (an index changes as
    its element moves), lift nodes only, and every argument binding at `element` or
    under it (bound to the element's link, or a link with that path appended).
    Decided once per pattern."""
    folds = _FOLDS.get(pattern)
    if folds is None:
        graph = pattern.graph
        folds = _FOLDS[pattern] = (
            not pattern.signature.typed
            and "index" not in pattern.params
            and all(node.kind == "lift" for node in graph.nodes)
            and all(
                b.path[:1] == ("element",) for _w, b in graph.bindings() if b.cell == "argument"
            )
        )
    return folds


_FOLDS: weakref.WeakKeyDictionary[Pattern, bool] = weakref.WeakKeyDictionary()


def folded(held: Any) -> dict[str, Any] | None:
    """The folded argument a result document's `"argument"` field holds (`held`), or
    None (a link to an argument document, or nothing)."""
    return held if type(held) is dict else None


def bind(tree: Any, result: Link, argument: dict[str, Any] | None = None) -> Any:
    """A graph tree with each `Binding` replaced by the link it names for run `result`
    (`argument`: the run's folded argument, whose `element` a binding under it names)."""
    t = type(tree)
    if t is Binding:
        if tree.cell == "argument" and argument is not None:
            element = argument["element"]
            rest = tree.path[1:]
            if not rest:
                return element
            return Link(element.space, element.id, element.scope, (*element.path, *rest))
        if tree.cell == "argument":
            base = argument_link(result)
        else:
            base = internal_link(result, int(tree.name[1:]))
        # The binding's own path tuple (shared by every instance of the pattern; the
        # derived links have none of their own), not a copy per instance.
        return Link(base.space, base.id, base.scope, tree.path) if tree.path else base
    if t is dict:
        return {k: bind(v, result, argument) for k, v in tree.items()}
    if t is list:
        return [bind(v, result, argument) for v in tree]
    return tree


def links_in(tree: Any) -> list[Link]:
    """Every link in a bound tree, in order."""
    out: list[Link] = []
    stack = [tree]
    while stack:
        node = stack.pop()
        t = type(node)
        if t is Link:
            out.append(node)
        elif t is dict:
            stack.extend(reversed(list(node.values())))
        elif t is list:
            stack.extend(reversed(node))
    return out


def resolve_to_result(tx: Transaction, link: Link) -> Link:
    """The place `link` ends at after following links, stopping at a run's result.

    Links along the path are followed as `cells.resolve` follows them, except
    the link a document that runs a pattern holds as its whole value (its result
    projection, when the pattern returns one computed cell or argument): that
    document is the end. O(hops · path length); a cycle or more than `MAX_HOPS`
    hops raises `LinkCycleError`.
    """
    current = link
    identity = tx.identity
    for _ in range(MAX_HOPS + 1):
        place = resolve(tx, current, follow_last=False)
        key = place.key(identity)
        held = tx.peek(key, (VALUE, *place.path))
        if type(held) is not Link:
            return place
        if not place.path and tx.peek(key, (PATTERN,)) is not MISSING:
            return place  # a run's result: its projection link is not followed
        tx.read(key, (VALUE, *place.path), shallow=True)
        current = Link(held.space, held.id, held.scope, held.path)
    raise LinkCycleError(f"following {link} took more than {MAX_HOPS} hops", chain=(str(link),))


def run_target(tx: Transaction, link: Link) -> tuple[Link | None, bool]:
    """The result a start of `link` reaches, as the local replica sees it now: the first
    document on the way that runs a pattern (links along the path followed, as the start
    cascade follows them), or None if the way is not known locally (not loaded, absent);
    and whether the first link on the way sat in a list (a slot, like `notes.key(i)`)."""
    current = link
    identity = tx.identity
    slot: bool | None = None
    for _ in range(MAX_HOPS + 1):
        key = root(current).key(identity)
        if tx.peek(key, (PATTERN,)) is not MISSING:
            return root(current), bool(slot)
        node = tx.peek(key, (VALUE,))
        path = current.path
        at = 0
        in_list = False
        while type(node) is not Link:
            if at == len(path):
                return None, False
            elem = path[at]
            in_list = type(node) is list
            if type(node) is dict and type(elem) is str:
                node = node.get(elem, MISSING)
            elif in_list and type(elem) is int and elem < len(node):
                node = node[elem]
            else:
                return None, False
            at += 1
        if slot is None:
            slot = in_list
        current = Link(node.space, node.id, node.scope, node.path + path[at:])
    return None, False
