"""Encodings: JSON on disk, and canonical bytes for hashing identities.

Disk form (`encode_json` / `decode_json`): plain JSON, with reserved
single-key objects under the key "/" (tags):
- `{"/": {"link@1": {"space": ..., "id": ..., "scope": ..., "path": [...]}}}` for a link;
- `{"/": {"num@1": "-0"}}` for the number JSON cannot spell (-0.0). Files written
  before non-finite floats were refused may also hold "NaN", "Infinity" and
  "-Infinity" there; they still read back as those floats.
- `{"/": {"dict@1": {...}}}` for a user dict whose only key is "/" (the one shape
  that could be mistaken for a tag): the body is that dict, its keys taken
  literally. Every other dict, whatever its keys ("num@1", "link@1", "/" beside
  other keys), is written as itself: a tag is recognised only as a single-key
  object whose key is "/", so escaping that one shape makes every value
  round-trip exactly.
Encoding and decoding refuse nesting deeper than `MAX_DEPTH` (plus the root)
rather than exhausting Python's recursion limit: `InvalidValueError` when
encoding, `CorruptStoreError` when decoding stored data.

Canonical form (`canonical_bytes`): a type-tagged msgpack encoding with dict
keys sorted, so equal values (by `value_equal`) encode identically in any
process, and values of different kinds never do. `entity_id(cause)` hashes it.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import math
import sys
from collections.abc import Callable
from typing import Any, Final

import msgspec

from ._address import Link, Scope
from ._values import MAX_DEPTH, MAX_INT, MISSING, Value, normalize
from .errors import CorruptStoreError, InvalidValueError

_json_encoder = msgspec.json.Encoder()
_json_decoder = msgspec.json.Decoder()
_msgpack_encoder = msgspec.msgpack.Encoder()


def _special_float(x: float) -> str | None:
    if x != x:
        return "NaN"
    if x == math.inf:
        return "Infinity"
    if x == -math.inf:
        return "-Infinity"
    if x == 0.0 and math.copysign(1.0, x) < 0:
        return "-0"
    return None


def to_wire(value: Value) -> Any:
    """Replace links and special floats by their tagged JSON objects.  O(size)."""
    return _to_wire(value, 0)


def _to_wire(value: Value, depth: int) -> Any:
    t = type(value)
    if t is dict:
        if depth > MAX_DEPTH:  # a document's containers sit at depths 0..MAX_DEPTH
            raise InvalidValueError(
                f"cannot encode a value nesting deeper than {MAX_DEPTH} containers",
                value="dict",
            )
        depth += 1
        out = {k: _to_wire(v, depth) for k, v in value.items()}
        if len(out) == 1 and "/" in out:
            return {"/": {"dict@1": out}}  # would read back as a tag otherwise
        return out
    if t is list:
        if depth > MAX_DEPTH:
            raise InvalidValueError(
                f"cannot encode a value nesting deeper than {MAX_DEPTH} containers",
                value="list",
            )
        depth += 1
        return [_to_wire(v, depth) for v in value]
    if t is float:
        tag = _special_float(value)
        return value if tag is None else {"/": {"num@1": tag}}
    if t is Link:
        return {
            "/": {
                "link@1": {
                    "space": value.space,
                    "id": value.id,
                    "scope": value.scope,
                    "path": list(value.path),
                }
            }
        }
    return value


_FLOATS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf, "-0": -0.0}


def from_wire(value: Any) -> Value:
    """Inverse of `to_wire`.  O(size)."""
    return _from_wire(value, 0)


SHARED_STRING: Final = 48
"""Decoded strings up to this length (names, field keys, enum-like values such as a
page record's session or a run's pattern) are interned: a replica holding thousands
of documents keeps one copy of each, not a fresh one per decoded occurrence (50 to
80 bytes each). Ids (55 characters) are longer: most occur once in a process, where
interning would only add its table's entry (about 40 bytes)."""
_intern = sys.intern


def _from_wire(value: Any, depth: int) -> Value:
    t = type(value)
    if t is str:
        return _intern(value) if len(value) <= SHARED_STRING else value
    if t is dict:
        if depth > MAX_DEPTH:
            raise CorruptStoreError(
                f"stored data nests deeper than {MAX_DEPTH} containers, which no write makes"
            )
        depth += 1
        if len(value) == 1 and "/" in value:
            tagged = value["/"]
            if type(tagged) is dict and len(tagged) == 1:
                if "link@1" in tagged:
                    body = tagged["link@1"]
                    return Link(
                        _intern(body["space"]),
                        body["id"],
                        _intern(body.get("scope", "space")),  # type: ignore[arg-type]
                        tuple(_from_wire(p, depth) for p in body["path"]) if body["path"] else (),
                    )
                if "num@1" in tagged and tagged["num@1"] in _FLOATS:
                    return _FLOATS[tagged["num@1"]]
                body = tagged.get("dict@1")
                if type(body) is dict:
                    # Its keys are literal (never a tag), its values encoded as usual.
                    return {_key(k): _from_wire(v, depth) for k, v in body.items()}
            if type(tagged) is dict and len(tagged) == 1 and "@" in next(iter(tagged)):
                raise CorruptStoreError(f"unknown tagged value in stored data: {value!r}")
            # Not a tag's shape (tags are one "name@version" key): a dict written
            # before the "/" key was escaped, by a path write such as
            # `cell.key("/").set("x")`. It reads back as what was written.
            return {"/": _from_wire(tagged, depth)}
        return {_key(k): _from_wire(v, depth) for k, v in value.items()}
    if t is list:
        if depth > MAX_DEPTH:
            raise CorruptStoreError(
                f"stored data nests deeper than {MAX_DEPTH} containers, which no write makes"
            )
        return [_from_wire(v, depth + 1) for v in value]
    return value


def _key(k: str) -> str:
    return _intern(k) if len(k) <= SHARED_STRING else k


def encode_json(value: Value) -> bytes:
    return _json_encoder.encode(to_wire(value))


def decode_json(data: bytes | str) -> Value:
    try:
        raw = _json_decoder.decode(data)
    except RecursionError:  # msgspec's own limit: JSON no write of ours makes
        raise CorruptStoreError(
            f"stored data nests deeper than {MAX_DEPTH} containers, which no write makes"
        ) from None
    return from_wire(raw)


def pack_value(value: Value) -> bytes:
    """`value` as compact bytes for a replica to keep instead of the decoded document
    (`Replica.pack`); `unpack_value` gives an equal value back. O(size).

    msgpack, with each link an extension object (its space, id, scope and path): no
    tags to escape or recognise, and decoding builds the document in msgspec's C
    code, calling back only for links. Never written anywhere: the form may change
    with the code."""
    # Through a buffer, then copied: `encode` returns its working buffer, whose spare
    # room stays allocated (a one-field document took 74 bytes where it needs 41).
    buf = bytearray()
    _msgpack_encoder.encode_into(_to_packed(value), buf)
    return bytes(buf)


def _to_packed(value: Value) -> Any:
    t = type(value)
    if t is dict:
        return {k: _to_packed(v) for k, v in value.items()}
    if t is list:
        return [_to_packed(v) for v in value]
    if t is Link:
        eid = _packed_id(value.id)
        if value.scope == "space" and not value.path:
            body: tuple[Any, ...] = (value.space, eid)
        else:
            body = (value.space, eid, value.scope, value.path)
        return msgspec.msgpack.Ext(_LINK_EXT, _msgpack_encoder.encode(body))
    return value


def _packed_id(eid: str) -> str | bytes:
    """An id as `entity_id` makes them ("of:" or another three-character prefix, then
    52 base32 characters: 55 in all) as its prefix and the 32 bytes the characters
    spell (35 bytes); any other id as itself."""
    if len(eid) == 55 and eid[2] == ":":
        try:
            packed = eid[:3].encode("ascii") + base64.b32decode(eid[3:].upper() + "====")
        except ValueError:  # (not ASCII, not base32)
            return eid
        if _unpacked_id(packed) == eid:  # (only an id that reads back exactly)
            return packed
    return eid


def _unpacked_id(data: bytes) -> str:
    return data[:3].decode("ascii") + base64.b32encode(data[3:]).decode("ascii").rstrip("=").lower()


def unpack_value(data: bytes) -> Value:
    """Inverse of `pack_value`. O(size)."""
    value: Value = _packed_decoder.decode(data)
    return value


_LINK_EXT: Final = 1


def _link_from_ext(code: int, data: memoryview) -> Link:
    if code != _LINK_EXT:
        raise AssertionError(f"not a packed value's extension: {code}")
    body = _msgpack_decoder.decode(data)
    eid = body[1]
    if type(eid) is bytes:
        eid = _unpacked_id(eid)
    if len(body) == 2:
        return Link(_intern(body[0]), eid)
    scope: Scope = _intern(body[2])  # type: ignore[assignment]  # (it was a Link's scope)
    path = body[3]
    return Link(_intern(body[0]), eid, scope, tuple(path) if path else ())


_packed_decoder = msgspec.msgpack.Decoder(ext_hook=_link_from_ext)


def _tagged(value: Value) -> Any:
    t = type(value)
    if value is None:
        return ("n",)
    if t is bool:
        return ("b", value)
    if t is int:
        return ("i", value)
    if t is float:
        if value != value:
            return ("f", "nan")
        if value != 0 and value.is_integer() and -MAX_INT - 1 <= value <= MAX_INT:
            # normalize keeps integral floats past 2**53 as floats, yet value_equal
            # calls 1e18 equal to 10**18: equal values must hash alike.
            return ("i", int(value))
        return ("f", value.hex())
    if t is str:
        return ("s", value)
    if t is list:
        return ("l", [_tagged(v) for v in value])
    if t is dict:
        return ("d", [(k, _tagged(value[k])) for k in sorted(value)])
    if t is Link:
        return ("L", value.space, value.id, value.scope, [_tagged(p) for p in value.path])
    raise AssertionError(f"not a normalized value: {type(value).__name__}")


def canonical_bytes(value: Any) -> bytes:
    """Canonical, type-tagged bytes of a JSON-like value (normalized first).

    Links (and cells) reduce to their address. Deterministic across processes
    and Python hash seeds.  O(size · log(keys)).
    """
    return _msgpack_encoder.encode(_tagged(normalize(value, where="cause")))


def entity_id(cause: Any, *, recall: Recall | None = None) -> str:
    """A document id derived deterministically from `cause` (any JSON-like value).

    Equal causes (by `value_equal`, dict key order ignored) give equal ids in
    every process; different causes give different ids (SHA-256). The cause is
    remembered in this process (see `cause_of`), so reprs and errors can name a
    cell by what it was made from rather than by its hash.

    `recall`, for ids derived in bulk from objects the caller keeps anyway (a run's
    internal documents, derived from its result's link): a tuple of a function and
    its arguments, or a callable of no arguments, that gives `cause` again (see
    `Recall`). It is remembered instead of the cause's canonical bytes (24 to 72
    bytes of references, against about 150), and called only when `cause_of` asks.
    """
    norm = normalize(cause, where="cause")
    data = _msgpack_encoder.encode(_tagged(norm))
    eid = (
        "of:" + base64.b32encode(hashlib.sha256(data).digest()).decode("ascii").rstrip("=").lower()
    )
    causes = _causes
    if eid not in causes and len(data) <= MAX_REMEMBERED_CAUSE:
        if len(causes) >= MAX_REMEMBERED_CAUSES:
            _forget_oldest(causes)  # a bounded memory, not a leak
        # The canonical bytes, not the normalized value: about 120 bytes where the value
        # cost about 270 per id (a run's every internal document has one), and a copy a
        # caller mutating `cause` cannot change. Decoded only when asked (`cause_of`).
        causes[eid] = data if recall is None else recall
    return eid


def _forget_oldest(causes: dict[str, bytes | Recall]) -> None:
    """Forget the oldest quarter of `causes` at once. (One deletion per new id made each
    `next(iter(causes))` step over every slot deleted before it, until the dict was
    rebuilt: O(MAX_REMEMBERED_CAUSES) per id once full, 2.7 s of the 250,000 ids a
    50,000-element map derives. A quarter at a time is one pass per
    `MAX_REMEMBERED_CAUSES // 4` ids.)"""
    for eid in list(itertools.islice(causes, max(1, len(causes) // 4))):
        del causes[eid]


Recall = tuple[Any, ...] | Callable[[], Any]
"""`(function, *arguments)`: calling `function(*arguments)` gives a cause again; or a
callable of no arguments that gives it (for ids derived in bulk: a `msgspec.Struct`
with ``gc=False`` holding the arguments is 24 to 32 bytes, where the tuple of a
function and one or two arguments is 56 to 64)."""


MAX_REMEMBERED_CAUSES: Final = 1 << 16
"""How many causes `entity_id` remembers (the oldest are forgotten first)."""
MAX_REMEMBERED_CAUSE: Final = 512
"""Causes whose canonical form is longer (in bytes) are not remembered."""
_causes: dict[str, bytes | Recall] = {}
_msgpack_decoder = msgspec.msgpack.Decoder()


def cause_of(eid: str) -> Value:
    """The cause `entity_id` made `eid` from in this process, or `MISSING` when unknown
    (made in another process, forgotten, too large, or not an entity id). Its dicts
    list their keys sorted; an integral float reads as an int (equal by `value_equal`,
    as the id is). O(size of the cause), no I/O."""
    data = _causes.get(eid)
    if data is None:
        return MISSING
    if type(data) is not bytes:
        recall: Recall = data  # type: ignore[assignment]
        cause = recall() if callable(recall) else recall[0](*recall[1:])
        data = canonical_bytes(cause)  # the same form a remembered cause has
    return _untagged(_msgpack_decoder.decode(data))


def _untagged(tagged: Any) -> Value:
    """The value `_tagged` made `tagged` from (after a msgpack round trip)."""
    tag = tagged[0]
    if tag == "n":
        return None
    if tag == "b" or tag == "i" or tag == "s":
        value: Value = tagged[1]
        return value
    if tag == "f":
        return math.nan if tagged[1] == "nan" else float.fromhex(tagged[1])
    if tag == "l":
        return [_untagged(v) for v in tagged[1]]
    if tag == "d":
        return {k: _untagged(v) for k, v in tagged[1]}
    if tag == "L":
        _, space, id_, scope, path = tagged
        return Link(space, id_, scope, tuple(_untagged(p) for p in path))
    raise AssertionError(f"not a tagged value: {tagged!r}")


def describe(place: object) -> str:
    """`str(place)` of a `Link`, `DocKey` or cell, followed by the cause its id was made
    from when known: `<default/user/of:g77is5…> ('notes')`. For error messages and
    diagnostics; O(1), no I/O."""
    text = str(place)
    eid = getattr(place, "id", None)
    if type(eid) is str:
        cause = describe_id(eid)
        if cause is not None:
            return f"{text} ({cause})"
    return text


def describe_id(eid: str, *, limit: int = 60) -> str | None:
    """A short Python-like text of `eid`'s cause (`'notes'`, `{'note': 1}`), or None if
    unknown. Cut to `limit` characters with "…"."""
    cause = cause_of(eid)
    if cause is MISSING:
        return None
    text = _render(cause, 0)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _render(value: Value, depth: int) -> str:
    """`repr(value)`, with each id inside it whose cause is known shown as `<cause>`
    (ids derived from other ids, like a run's internal documents, read as what they
    were made from). Nesting is cut at depth 3."""
    t = type(value)
    if t is str:
        inner = cause_of(value) if depth < 3 else MISSING
        return repr(value) if inner is MISSING else f"<{_render(inner, depth + 1)}>"
    if t is list:
        return "[" + ", ".join(_render(v, depth) for v in value) + "]"
    if t is dict:
        items = value.items()
        return "{" + ", ".join(f"{k!r}: {_render(v, depth)}" for k, v in items) + "}"
    return repr(value)
