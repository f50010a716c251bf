"""What the SQL stores (`SQLiteStore`, `PostgresStore`) share, whatever their dialect.

- A document key is stored as five text columns (`KEY_COLUMNS`, `key_params`) and
  read back, checked, with `key_from_row`.
- Values are stored as the codec's JSON text (`encode_value` / `decode_value`), so
  what a backend can hold and how it escapes is one rule; an unreadable stored value
  is a `CorruptStoreError` naming the document.
- Revision paths are stored as JSON lists (`encode_paths`); `revisions_from_rows`
  turns stored revisions back into `Revision`s for `validate_commit`, naming the
  request's own session by its in-process id. A read older than its document's
  history floor meets `pruned_revision` (a write at the root: conflict).
- `SessionVerdicts`: which commits of each session have a verdict. A session is
  recorded under a key unique to one store object (`<session id>@<uuid>`), so only
  that object ever evaluates its commits and its memory answers dependency checks
  (nothing per commit is written for them).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterable
from typing import Final

import msgspec

from .._address import SCOPES, DocKey, Path
from .._codec import decode_json, encode_json
from .._store import Revision
from .._values import MISSING, Value
from ..errors import CellweaveError, CorruptStoreError
from .memory import _Resolved

KEY_COLUMNS: Final = ("space", "doc_id", "scope", "principal", "session")

KeyParams = tuple[str, str, str, str, str]


def key_params(key: DocKey) -> KeyParams:
    """The key's five column values, in `KEY_COLUMNS` order."""
    return (key.space, key.id, key.scope, key.principal, key.session)


def key_from_row(
    where: str, space: str, doc_id: str, scope: str, principal: str, session: str
) -> DocKey:
    if scope not in SCOPES:
        raise CorruptStoreError(f"{where}: document {space}/{doc_id} has scope {scope!r}")
    return DocKey(space, doc_id, scope, principal, session)


def encode_value(value: Value) -> str | None:
    """The stored text of a document (None: deleted)."""
    return None if value is MISSING else encode_json(value).decode()


def decode_value(where: str, raw: str | None, key: DocKey) -> Value:
    if raw is None:
        return MISSING
    try:
        return decode_json(raw)
    except (msgspec.MsgspecError, CellweaveError, KeyError, TypeError, ValueError) as exc:
        raise CorruptStoreError(f"{where}: the stored value of {key} is unreadable: {exc}") from exc


def encode_paths(paths: Iterable[Path]) -> str:
    return msgspec.json.encode([list(p) for p in paths]).decode()


def pruned_revision(floor: int) -> Revision:
    """What a read older than its document's floor meets: the revisions after its basis
    were pruned, so assume the worst (a write at the document root), as MemoryStore
    does. Over-approximating is allowed."""
    return Revision(floor, "", -1, ((),))


def revisions_from_rows(
    rows: Iterable[tuple[int, str, int, str]], session_id: str, session_key: str
) -> list[Revision]:
    """Rows of (seq, stored session key, local seq, stored paths), oldest first."""
    out = []
    for rseq, sess, local_seq, paths in rows:
        # Only the request's own session may match `request.session_id`.
        own = session_id if sess == session_key else sess
        decoded: list[list[str | int]] = msgspec.json.decode(paths)
        out.append(Revision(int(rseq), own, int(local_seq), tuple(tuple(p) for p in decoded)))
    return out


class SessionVerdicts:
    """Per store object: each session's stored key, and which of its commits have a verdict."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._keys: dict[str, str] = {}
        self.resolved: dict[str, _Resolved] = {}

    def new_key(self, session_id: str) -> str:
        """A fresh stored key for `session_id` (on connect: session ids repeat across
        processes and reconnects; what the database records must not mix)."""
        with self._lock:
            key = self._keys[session_id] = f"{session_id}@{uuid.uuid4().hex}"
            return key

    def key(self, session_id: str) -> str:
        with self._lock:
            key = self._keys.get(session_id)
            if key is None:  # submitted without connect(): still unique to this store object
                key = self._keys[session_id] = f"{session_id}@{uuid.uuid4().hex}"
            return key

    def resolution(self, session_key: str, local_seq: int) -> int | bool | None:
        """`validate_commit`'s `resolution`: True accepted, None rejected, False no verdict."""
        resolved = self.resolved.get(session_key)
        if resolved is None or not resolved.resolved(local_seq):
            return False
        return None if local_seq in resolved.rejected else True

    def resolve(self, session_key: str, local_seq: int, *, rejected: bool) -> None:
        """Remember a verdict, once it is durable."""
        resolved = self.resolved.get(session_key)
        if resolved is None:
            resolved = self.resolved[session_key] = _Resolved()
        resolved.add(local_seq, rejected=rejected)

    def check(self) -> None:
        for session_key, resolved in self.resolved.items():
            assert all(s > resolved.low for s in resolved.above), session_key
            assert all(resolved.resolved(s) for s in resolved.rejected), session_key
