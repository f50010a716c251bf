"""Public calls of cells check their arguments (issue 13 item 8, the cells part).

A wrong type raises `InvalidArgumentError` (a `TypeError` and a `ValueError`, from the
one `CellweaveError` hierarchy) naming the call, the argument and what it accepts,
before anything is staged or sent; never an `AttributeError` from deep inside.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path as FsPath
from typing import Any

import pytest

from cells import (
    ArgumentTypeError,
    CellweaveError,
    DocKey,
    Identity,
    InvalidArgumentError,
    InvalidValueError,
    Link,
    MemoryStore,
    Replica,
    Space,
    SQLiteStore,
    edit_with_retry,
)


@pytest.fixture
def sp() -> Space:
    return Space(MemoryStore(), "sp")


def test_the_error_is_a_type_error_and_a_value_error_of_one_hierarchy() -> None:
    assert issubclass(ArgumentTypeError, TypeError)
    assert issubclass(ArgumentTypeError, InvalidArgumentError)
    assert issubclass(ArgumentTypeError, InvalidValueError)
    assert issubclass(InvalidArgumentError, ValueError)
    assert issubclass(InvalidArgumentError, CellweaveError)


def wrong(value: object) -> Any:
    """`value`, of a type the call it is passed to does not accept, on purpose."""
    return value


CALLS: list[tuple[str, Callable[[Space], Any], str, str]] = [
    ("get_cell-tx", lambda sp: sp.get_cell("c", tx=wrong("nope")), "tx", "a Transaction or None"),
    ("with_tx", lambda sp: sp.get_cell("c").with_tx(wrong("nope")), "tx", "a Transaction"),
    ("with_tx-none", lambda sp: sp.get_cell("c").with_tx(wrong(None)), "tx", "a Transaction"),
    ("update", lambda sp: sp.get_cell("c").update(wrong([("a", 1)])), "mapping", "a mapping"),
    ("cell-id", lambda sp: sp.cell(wrong(7)), "id", "a str"),
    ("cell-path", lambda sp: sp.cell("c", path=wrong(["a"])), "path", "a tuple"),
    ("space-store", lambda sp: Space(wrong("not a store")), "store_or_replica", "a store"),
    ("space-name", lambda sp: Space(MemoryStore(), wrong(None)), "space", "a non-empty str"),
    ("replica-store", lambda sp: Replica(wrong(None)), "store", "a store"),
    ("replica-edit", lambda sp: sp.replica.edit(wrong("alice")), "identity", "an Identity"),
    ("subscribe", lambda sp: sp.replica.subscribe(wrong(None)), "fn", "a callable"),
    ("visible", lambda sp: sp.replica.visible(wrong("doc")), "key", "a DocKey"),
    ("sync", lambda sp: sp.replica.sync([wrong("doc")]), "each key", "a DocKey"),
    ("tx-read-key", lambda sp: sp.edit().read(wrong("doc")), "key", "a DocKey"),
    (
        "tx-read-path",
        lambda sp: sp.edit().read(DocKey("sp", "d"), wrong("value")),
        "path",
        "a tuple",
    ),
    (
        "tx-write-key",
        lambda sp: sp.edit().write(wrong(("sp", "d")), ("value",), 1),
        "key",
        "a DocKey",
    ),
    (
        "tx-write-path",
        lambda sp: sp.edit().write(DocKey("sp", "d"), wrong(["value"]), 1),
        "path",
        "a tuple",
    ),
    ("tx-peek-key", lambda sp: sp.edit().peek(wrong(None)), "key", "a DocKey"),
    (
        "tx-splice",
        lambda sp: sp.edit().splice(wrong("d"), ("value",), 0, 0, [1]),
        "key",
        "a DocKey",
    ),
    ("tx-create-only", lambda sp: sp.edit().create_only(wrong("d")), "key", "a DocKey"),
    ("tx-settle-cb", lambda sp: sp.edit().add_settle_callback(wrong(1)), "fn", "a callable"),
    ("tx-post-commit", lambda sp: sp.edit().post_commit(wrong("f")), "fn", "a callable"),
    ("link-path", lambda sp: Link("sp", "d", "space", wrong(["a"])), "path", "a tuple"),
    ("identity", lambda sp: Identity(wrong(None), "s"), "principal", "a non-empty string"),
    ("cell-key", lambda sp: sp.get_cell("c").key(wrong(None)), "path element 0", "a str or int"),
    ("cell-splice", lambda sp: sp.get_cell("c").splice(wrong("0"), 0, [1]), "index", "an int"),
    ("wait", lambda sp: sp.get_cell("c").set(1).wait(wrong("1")), "timeout", "seconds"),
    (
        "done-callback",
        lambda sp: sp.get_cell("c").set(1).add_done_callback(wrong(None)),
        "fn",
        "a callable",
    ),
    (
        "hold-loads",
        lambda sp: sp.replica.store.testing.hold_loads(wrong("doc")),
        "each",
        "a DocKey",
    ),
    (
        "gate-accept",
        lambda sp: sp.replica.store.testing.hold_verdicts().accept(wrong("0")),
        "i",
        "an int index",
    ),
    (
        "gate-reject",
        lambda sp: sp.replica.store.testing.hold_verdicts().reject(0, wrong("stale")),
        "outcome",
        "a failure Outcome",
    ),
]


@pytest.mark.parametrize(
    ("call", "name", "accepts"), [c[1:] for c in CALLS], ids=[c[0] for c in CALLS]
)
def test_a_wrong_argument_names_itself_and_what_it_accepts(
    sp: Space, call: Callable[[Space], Any], name: str, accepts: str
) -> None:
    with pytest.raises(ArgumentTypeError) as info:
        call(sp)
    message = str(info.value)
    assert name in message
    assert accepts in message


def test_nothing_is_staged_by_a_refused_argument(sp: Space) -> None:
    tx = sp.edit()
    with pytest.raises(InvalidArgumentError):
        tx.write(DocKey("sp", "d"), ["value"], 1)  # type: ignore[arg-type]
    assert {} == tx.documents()
    assert tx.commit().result().ok  # nothing to send


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"replica": "r"}, "replica"),
        ({"identity": ("local", "local")}, "identity"),
        ({"fn": None}, "fn"),
        ({"attempts": "3"}, "attempts"),
        ({"attempts": 0}, "attempts"),
        ({"attempts": True}, "attempts"),
    ],
)
def test_edit_with_retry_checks_its_arguments(sp: Space, kwargs: dict[str, Any], name: str) -> None:
    args: dict[str, Any] = {
        "replica": sp.replica,
        "identity": sp.identity,
        "fn": lambda tx: None,
        "attempts": 2,
        **kwargs,
    }
    attempts = args.pop("attempts")
    with pytest.raises(InvalidArgumentError, match=name):
        asyncio.run(edit_with_retry(*args.values(), attempts=attempts))


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"path": 7}, "path"),
        ({"path": ""}, "path"),
        ({"path": ":memory:"}, "path"),
        ({"synchronous": 2}, "synchronous"),
        ({"synchronous": "SOMETIMES"}, "synchronous"),
        ({"poll_interval": "0.1"}, "poll_interval"),
        ({"poll_interval": -1}, "poll_interval"),
        ({"poll_interval": float("nan")}, "poll_interval"),
        ({"poll_interval": True}, "poll_interval"),
    ],
)
def test_sqlite_store_checks_its_arguments(
    tmp_path: FsPath, kwargs: dict[str, Any], name: str
) -> None:
    args: dict[str, Any] = {"path": tmp_path / "c.db", **kwargs}
    path = args.pop("path")
    with pytest.raises(InvalidArgumentError, match=name):
        SQLiteStore(path, **args)
    assert not (tmp_path / "c.db").exists()
