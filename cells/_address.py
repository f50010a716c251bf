"""Addresses: which document, which instance of it, and which place inside it.

A document's canonical address is `(space, id, scope)`. `scope` is one of
`"space"` (one shared instance), `"user"` (one instance per principal) or
`"session"` (one per principal and session). A resolution `Identity`
`(principal, session)` selects the physical instance: `DocKey` is that
physical key, and the only key storage and the replica know.

Invariants
- A `DocKey` at scope "space" has empty principal and session; at "user" a
  non-empty principal and empty session; at "session" both non-empty.
- `Link` holds a canonical address (scope kind, never an instance) plus a
  value-relative path, so the same stored link resolves to each reader's own
  instance.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, Final, Literal, Protocol, TypeAlias, final, runtime_checkable

import msgspec

from .errors import ArgumentTypeError, InvalidValueError

Scope: TypeAlias = Literal["space", "user", "session"]
SCOPES: Final[tuple[Scope, ...]] = ("space", "user", "session")
PathElem: TypeAlias = str | int
Path: TypeAlias = tuple[PathElem, ...]


class Identity(msgspec.Struct, frozen=True, gc=False):
    """Who is reading or writing: selects the instance of `user` and `session` documents.

    `gc=False` (as for `DocKey` and `Link`): it holds only strs, so it can never be
    part of a reference cycle.
    """

    principal: str
    session: str

    def __post_init__(self) -> None:
        for field, value in (("principal", self.principal), ("session", self.session)):
            if not isinstance(value, str) or not value:
                raise (InvalidValueError if isinstance(value, str) else ArgumentTypeError)(
                    f"Identity.{field} must be a non-empty string, got {value!r}", value=value
                )


@final  # (no subclass: a `Place` is told by `type()`, see `as_link`)
class DocKey(msgspec.Struct, frozen=True, gc=False):
    """The physical key of one document instance.

    `gc=False`: it holds only strs, so it can never be part of a reference cycle.
    This matters beyond the key itself: CPython keeps a dict or tuple that holds
    an object of a collected type tracked by the collector for good, and
    transactions, read logs, read sets and store records are full of keys.
    """

    space: str
    id: str
    scope: Scope = "space"
    principal: str = ""
    session: str = ""

    path: ClassVar[Path] = ()
    """As a `Place` (a cell of a whole shared document holds its key): the place is the
    document's whole value, so its value-relative path is empty, as a `Link`'s to it.
    (A class attribute, not a field: no byte per key.)"""

    def key(self, identity: Identity) -> DocKey:
        """As a `Place`: the physical document it names for `identity`, itself (`Link.key`)."""
        return self

    def child(self, *path: PathElem) -> Link:
        """As a `Place`: the link to `path` in its document's value (`Link.child`)."""
        return Link(self.space, self.id, self.scope, path)

    @property
    def scope_key(self) -> str:
        """The storage layer's scope key: "space", "user:<p>" or "session:<p>:<s>"."""
        if self.scope == "space":
            return "space"
        if self.scope == "user":
            return f"user:{self.principal}"
        return f"session:{self.principal}:{self.session}"

    def __str__(self) -> str:
        return f"{self.space}/{self.scope_key}/{self.id}"


def check_scope(scope: object, *, where: str) -> Scope:
    """`scope` if it is one of `SCOPES`, else `InvalidValueError` naming `where`."""
    if scope not in SCOPES:
        raise InvalidValueError(
            f"{where}: scope must be one of {', '.join(map(repr, SCOPES))}, got {scope!r}",
            value=scope,
        )
    return scope


def instance_key(space: str, id: str, scope: Scope, identity: Identity) -> DocKey:
    """The physical key of `(space, id, scope)` for `identity`.  O(1)."""
    if scope == "space":
        return DocKey(space, id)
    if scope == "user":
        return DocKey(space, id, "user", identity.principal)
    if scope == "session":
        return DocKey(space, id, "session", identity.principal, identity.session)
    check_scope(scope, where=f"document {space}/{id}")
    raise AssertionError("unreachable")


def check_path(path: tuple[Any, ...], *, where: str) -> Path:
    """Validate a path: a tuple of str (dict keys) and non-negative int (list indices)."""
    for i, elem in enumerate(path):
        if isinstance(elem, bool) or not isinstance(elem, (str, int)):
            raise ArgumentTypeError(
                f"{where}: path element {i} must be a str or int, got {type(elem).__name__}"
                f" {elem!r}",
                path=tuple(path[:i]),
                value=elem,
            )
        if isinstance(elem, int) and elem < 0:
            raise InvalidValueError(
                f"{where}: list index {elem} at path element {i} is negative",
                path=tuple(path[:i]),
                value=elem,
            )
    return path


_force_setattr = msgspec.structs.force_setattr


class Link(msgspec.Struct, frozen=True, gc=False):
    """A reference to a place: a document (canonical address) and a value-relative path.

    Links are values: they can be stored inside documents, and reads follow them.
    `gc=False`: it holds only strs and a path of strs and ints, so it can never
    be part of a reference cycle (and documents holding links can leave the
    collector's view, see `DocKey`).
    """

    space: str
    id: str
    scope: Scope = "space"
    path: Path = ()

    def __post_init__(self) -> None:
        # Checked here so equal links always hash alike (True is not the index 1).
        # Fast path first: links are made often, messages only when something is wrong.
        path = self.path
        if (
            type(self.space) is str
            and type(self.id) is str
            and self.scope in SCOPES
            and type(path) is tuple
        ):
            # A loop, not `all()` over a generator: a link is made per hop, per pull
            # and per `Cell.key`, and the generator's frame cost more than the checks.
            for e in path:
                if type(e) is not str and (type(e) is not int or e < 0):
                    break
            else:
                return
        if not isinstance(self.space, str) or not isinstance(self.id, str):
            raise ArgumentTypeError(
                f"Link: space and id must be str, got {self.space!r}, {self.id!r}",
                value=(self.space, self.id),
            )
        if not isinstance(self.path, tuple):
            raise ArgumentTypeError(
                f"Link to {self.space}/{self.id}: path must be a tuple of str and int,"
                f" got {type(self.path).__name__} {self.path!r}",
                value=self.path,
            )
        check_scope(self.scope, where=f"Link to {self.space}/{self.id}")
        check_path(self.path, where=f"Link to {self.space}/{self.id}")

    def key(self, identity: Identity) -> DocKey:
        """The physical document this link names for `identity`."""
        return instance_key(self.space, self.id, self.scope, identity)

    def child(self, *path: PathElem) -> Link:
        """This place with `path` appended. Checks only `path`: the rest was checked when
        this link was made, so the child is this link's copy with its new path, without
        a second `__post_init__` (a UI makes one per edit and per pull; the full check
        was most of `Cell.key`). A bad element raises what `Link(...)` raises.
        O(len(self.path) + len(path))."""
        for e in path:
            if type(e) is not str and (type(e) is not int or e < 0):
                return Link(self.space, self.id, self.scope, self.path + path)  # (raises)
        link = _copy_link(self)
        _force_setattr(link, "path", self.path + path)
        return link

    def __str__(self) -> str:
        tail = "".join(f"[{p!r}]" for p in self.path)
        return f"<{self.space}/{self.scope}/{self.id}{tail}>"


_copy_link: Callable[[Link], Link] = Link.__copy__  # type: ignore[attr-defined]
"""A link's copy (msgspec's, in C: no `__post_init__`), for `Link.child`."""


Place: TypeAlias = Link | DocKey
"""Where a cell is: a `Link`, or, for a cell of a whole shared document (scope
"space", empty path), that document's `DocKey`, which names the same place for every
identity (`as_link`). A cell holding the key the replica, the scheduler and the store
share keeps no `Link` of its own (48 bytes a cell)."""

_WHOLE_LINK: Final = Link("_", "_")


def as_link(place: Place) -> Link:
    """`place` as a `Link`: itself, or the link to the whole shared document a key
    names (made now, unchecked: the key was checked when made). O(1)."""
    if type(place) is Link:
        return place
    link = _copy_link(_WHOLE_LINK)
    _force_setattr(link, "space", place.space)
    _force_setattr(link, "id", place.id)
    return link


@runtime_checkable
class Linkable(Protocol):
    """Anything that stands for a place (a `Cell`, a pattern reference): stored as a link."""

    def link(self) -> Link: ...
