"""The view protocol: what a browser (or a notebook widget) and the server say to each other.

Messages are JSON objects. The client asks (`op`), the server answers (`type`).
A client never names a document directly: it names a *handle* the server gave
it ("root", a page) and a path inside it, so it can reach only what its
session was shown, and every action still goes through the runtime's owner
checks.

Client -> server, each with an optional `ref` echoed in the answer:

- `{"op": "hello"}`: first message; answered by `hello` and `pages`.
- `{"op": "watch", "watch": W, "cell": H}`: stream the value of handle H:
  one `snapshot`, then `patch` messages (RFC 6902 operations) for watch W.
  With `"full": true`, a `snapshot` of the whole value on every change
  instead (for clients that do not apply patches; costs O(value) per change).
- `{"op": "unwatch", "watch": W}`
- `{"op": "send", "cell": H, "path": [...], "event": E}`: an event to the
  handler bound at that place.
- `{"op": "set", "cell": H, "path": [...], "value": V, "basis": B}`: write V
  where the value shown at that place lives (links followed, as `get()` reads
  it: an element's field shown in a row is written in the element) if it still
  holds B (the value the client showed).
- `{"op": "open", "cell": H, "path": [...]}`: open the result at that place
  as a page of this principal, pinned to the element it holds now.
- `{"op": "stop", "page": H}`: stop (close) a page.
- `{"op": "inspect"}`: the run inspector's view of this principal's runs
  (`Session.inspect()`); `{"op": "inspect_run", "key": K}`: one run's pattern
  graph with run counts; `{"op": "end", "key": K, "how": "stop" | "release"}`:
  end a run from the inspector (the answer says whether it ended).
- `{"op": "inspect_watch"}` / `{"op": "inspect_unwatch"}`: receive `inspect`
  messages (`{"inspect": ...}`, what `inspect` answers) now and whenever it
  changes: right after an action of any tab of the shell (send, set, open,
  stop, end), and otherwise when a check every `INSPECT_POLL_S` seconds finds
  it changed (the runner has no public hook for its lifecycle, so changes
  made outside the shell are seen by that check; an unchanged view is not sent).

Server -> client: `hello`, `snapshot`, `patch`, `pages`, `ok`, `inspect`,
`results` (`{"watch": W, "paths": [[...], ...], "drop": [[...], ...],
"reset": bool}`, sent before the snapshot or patch that shows the change:
where a record is a nested result, reached through a link, which `open` can
open, and where one no longer is; `reset` starts a new set),
`events` (`{"events": {"<label>|<field>": schema}}`, sent before the first
value that shows a handler's stream in that field: the JSON Schema of the
event it takes, None when unannotated),
`error` (with `message`, and `value` when a write met a newer value).

Handler streams are shown in values as `{"$stream": label}`, so a view can
draw a button where a plain `get()` would show `None`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from cells import Cell, CellweaveError

MAX_MESSAGE: Final = 64 * 1024
"""Largest client message accepted, in bytes of JSON."""
MAX_PATH: Final = 64
"""Longest path a client may name."""

STREAM: Final = "$stream"

OPS: Final = frozenset(
    {
        "hello",
        "watch",
        "unwatch",
        "send",
        "set",
        "open",
        "stop",
        "inspect",
        "inspect_watch",
        "inspect_unwatch",
        "inspect_run",
        "end",
    }
)


class ProtocolError(CellweaveError, ValueError):
    """A client message the server cannot act on; answered on that connection only."""


def field(msg: Mapping[str, Any], name: str, kind: type | tuple[type, ...]) -> Any:
    """`msg[name]`, checked against `kind`, or a `ProtocolError` naming both."""
    if name not in msg:
        raise ProtocolError(f"message {msg.get('op')!r} needs a {name!r} field")
    value = msg[name]
    # bool is an int in Python; a path index or a watch id must be a real int.
    if isinstance(value, bool) and kind is int:
        raise ProtocolError(f"{name!r} must be {_kind_name(kind)}, got {value!r}")
    if not isinstance(value, kind):
        raise ProtocolError(f"{name!r} must be {_kind_name(kind)}, got {value!r}")
    return value


def _kind_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(k.__name__ for k in kinds)


def path_of(msg: Mapping[str, Any]) -> tuple[str | int, ...]:
    """The `path` field: a list of str keys and int indexes (default: empty)."""
    raw = msg.get("path", [])
    if not isinstance(raw, list) or len(raw) > MAX_PATH:
        raise ProtocolError(f"'path' must be a list of at most {MAX_PATH} keys, got {raw!r}")
    for elem in raw:
        if isinstance(elem, bool) or not isinstance(elem, str | int):
            raise ProtocolError(f"'path' elements must be str or int, got {elem!r}")
    return tuple(raw)


def mark_streams(label_of: Callable[[Cell], str | None], cell: Cell, value: Any) -> Any:
    """`value` (what `cell` holds) with every handler stream inside it shown as
    `{"$stream": label}`. A stream reads as `None`, so only `None` leaves are
    probed: O(size of value) walks, one handler lookup per `None`."""
    if value is None:
        label = label_of(cell)
        return None if label is None else {STREAM: label}
    if isinstance(value, dict):
        return {k: mark_streams(label_of, cell.key(k), v) for k, v in value.items()}
    if isinstance(value, list):
        return [mark_streams(label_of, cell.key(i), v) for i, v in enumerate(value)]
    return value


def result_places(
    is_result: Callable[[Cell], bool], cell: Cell, value: Any, at: tuple[str | int, ...] = ()
) -> list[tuple[str | int, ...]]:
    """The paths (from `at`, where `cell` is) of the records inside `value` that
    a link to a pattern's result put there (a nested child), so a view can offer
    to open them. Only a dict's record-valued fields are probed (one
    `is_result` each); a list's elements are not (a view offers "open" on every
    row already), their insides are. O(size of value) walks."""
    out: list[tuple[str | int, ...]] = []
    if isinstance(value, dict):
        for k, v in value.items():
            if isinstance(v, dict) and is_result(cell.key(k)):
                out.append((*at, k))
            if isinstance(v, dict | list):
                out.extend(result_places(is_result, cell.key(k), v, (*at, k)))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            if isinstance(v, dict | list):
                out.extend(result_places(is_result, cell.key(i), v, (*at, i)))
    return out


Place = tuple[str | int, ...]


class Results:
    """Where a watch's value holds nested results (`result_places`), kept in
    step with its patches, so the client can be told which places to add and
    which to drop (a result replaced by a plain record loses its "open")."""

    __slots__ = ("cell", "held", "is_result")

    def __init__(self, is_result: Callable[[Cell], bool], cell: Cell) -> None:
        self.is_result = is_result
        self.cell = cell
        self.held: set[Place] = set()

    def snapshot(self, value: Any) -> list[Place]:
        found = self._scan((), value)
        self.held = set(found)
        return found

    def patch(self, ops: list[dict[str, Any]], mirror: Mirror) -> tuple[list[Place], list[Place]]:
        """After `mirror` applied `ops`: the places found and the places dropped.
        A place an operation changed is scanned again; an insert, removal or
        move in a list shifts its elements, so the list is scanned again. O(held
        places + size of what is scanned again)."""
        pointers: set[str] = set()
        for op in ops:
            for key in ("path", "from"):
                pointer = op.get(key)
                if not isinstance(pointer, str):
                    continue
                parent = pointer.rpartition("/")[0]
                shifts = op["op"] != "replace" or key == "from"
                if pointer and shifts and isinstance(mirror.node(parent), list):
                    pointer = parent
                pointers.add(pointer)
        found: list[Place] = []
        dropped: list[Place] = []
        for pointer in sorted(pointers, key=len):
            if any(pointer == q or pointer.startswith(q + "/") for q in pointers if q != pointer):
                continue  # under another place scanned again
            try:
                at = mirror.typed(pointer)
            except ProtocolError:
                continue
            gone = [p for p in self.held if p[: len(at)] == at]
            self.held.difference_update(gone)
            fresh = self._scan(at, mirror.node(pointer))
            self.held.update(fresh)
            dropped.extend(p for p in gone if p not in fresh)
            found.extend(p for p in fresh if p not in gone)
        return found, dropped

    def _scan(self, at: Place, value: Any) -> list[Place]:
        found = result_places(self.is_result, self.cell.key(*at), value, at)
        own = at and type(at[-1]) is str and isinstance(value, dict)
        if own and self.is_result(self.cell.key(*at)):
            found.insert(0, at)
        return found


def pointer_path(pointer: str) -> tuple[str, ...]:
    """The elements of an RFC 6901 pointer ("" is the whole value)."""
    if pointer == "":
        return ()
    return tuple(p.replace("~1", "/").replace("~0", "~") for p in pointer[1:].split("/"))


def mark_patch(
    label_of: Callable[[Cell], str | None],
    cell: Cell,
    ops: list[dict[str, Any]],
    mirror: Mirror,
) -> list[dict[str, Any]]:
    """Patch operations with the values they carry marked as `mark_streams` marks
    a snapshot (so the client's copy keeps its buttons), applied to `mirror` (the
    client's value) on the way. O(size of the values in the operations + path
    lengths), not of the whole value."""
    out = []
    for op in ops:
        path = mirror.apply(op)
        if "value" in op:
            op = {**op, "value": mark_streams(label_of, cell.key(*path), op["value"])}
        out.append(op)
    return out


class Mirror:
    """The value a client holds for one watch, kept in step by applying the same
    patches: its containers say whether a pointer's "3" is a list index or a dict
    key (JSON Pointer does not; a dict may well have digit keys). Values it is
    given are owned by it (`sink_patches` hands out fresh copies)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def typed(self, pointer: str) -> tuple[str | int, ...]:
        """`pointer`'s elements, an element naming a list position as an int."""
        node = self.value
        out: list[str | int] = []
        for elem in pointer_path(pointer):
            if isinstance(node, list):
                index = len(node) if elem == "-" else _list_index(elem, pointer)
                out.append(index)
                node = node[index] if index < len(node) else None
            else:
                out.append(elem)
                node = node.get(elem) if isinstance(node, dict) else None
        return tuple(out)

    def node(self, pointer: str) -> Any:
        """The value at `pointer` (None where there is none)."""
        node = self.value
        for elem in pointer_path(pointer):
            if isinstance(node, list):
                node = node[int(elem)] if elem.isdigit() and int(elem) < len(node) else None
            elif isinstance(node, dict):
                node = node.get(elem)
            else:
                return None
        return node

    def apply(self, op: Mapping[str, Any]) -> tuple[str | int, ...]:
        """Apply one RFC 6902 operation (`add`, `remove`, `replace`, `move`); returns
        its typed `path`. O(path length), plus the list shift of an insert or removal."""
        kind = op["op"]
        if kind == "move":
            moved = self._take(self.typed(op["from"]))
            path = self.typed(op["path"])
            self._put(path, moved, insert=True)
            return path
        path = self.typed(op["path"])
        if kind == "remove":
            self._take(path)
        else:
            self._put(path, op["value"], insert=kind == "add")
        return path

    def _parent(self, path: tuple[str | int, ...]) -> Any:
        node = self.value
        for elem in path[:-1]:
            node = node[elem]
        return node

    def _take(self, path: tuple[str | int, ...]) -> Any:
        parent = self._parent(path)
        return parent.pop(path[-1])

    def _put(self, path: tuple[str | int, ...], value: Any, *, insert: bool) -> None:
        if not path:
            self.value = value
            return
        parent = self._parent(path)
        if isinstance(parent, list) and insert:
            parent.insert(path[-1], value)  # type: ignore[arg-type]
        else:
            parent[path[-1]] = value


def _list_index(elem: str, pointer: str) -> int:
    if not elem.isdigit():
        raise ProtocolError(f"patch path {pointer!r}: {elem!r} is not a list index")
    return int(elem)
