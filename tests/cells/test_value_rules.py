"""What a store holds: every JSON-like value round-trips; what is not JSON-like is refused.

The rules are the same on every store (issue 13 items 4 and 7, issue 15 item 14):
- any dict keys round-trip, including "/" and the codec's tag spellings;
- non-finite floats, lone surrogates (in strings and keys) and nesting deeper
  than `MAX_DEPTH` are refused at the write with `InvalidValueError`, before
  anything is staged, so `edit_with_retry` never retries them.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Iterator
from pathlib import Path as FsPath
from typing import Any

import pytest

from cells import (
    MISSING,
    CorruptStoreError,
    Identity,
    InvalidValueError,
    MemoryStore,
    Space,
    SQLiteStore,
    StoreBase,
    decode_json,
    edit_with_retry,
    encode_json,
    value_equal,
)
from cells._values import MAX_DEPTH

MakeStore = Callable[[], StoreBase]


@pytest.fixture(params=["memory", "sqlite"])
def make_store(request: pytest.FixtureRequest, tmp_path: FsPath) -> Iterator[MakeStore]:
    """Opens a store of the parametrized kind; every SQLiteStore opens the same file."""
    opened: list[StoreBase] = []

    def make() -> StoreBase:
        if request.param == "memory":
            store: StoreBase = MemoryStore() if not opened else opened[0]
        else:
            store = SQLiteStore(tmp_path / "cells.db", poll_interval=0)
        opened.append(store)
        return store

    yield make
    for store in opened:
        if not store.closed:
            store._check()
            store.close()


def nested(depth: int) -> Any:
    """`depth` lists inside each other, innermost holding 1 (`nested(2) == [[1]]`)."""
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


# --------------------------------------------------------------------------- keys round-trip

ADVERSARIAL = [
    {"num@1": "NaN"},
    {"/": {"num@1": "NaN"}},
    {"/": {"link@1": {"space": "s", "id": "i", "scope": "space", "path": []}}},
    {"/": {"dict@1": {"/": 1}}},
    {"/": "x"},
    {"/": {"/": {"/": []}}},
    {"/": 1, "other": {"/": None}},
    {"": {"~": {"~0": "~1"}}},
    {"é/ü": ["/", {"/": -0.0}]},
]


@pytest.mark.parametrize("value", ADVERSARIAL)
def test_json_codec_round_trips_dicts_that_look_like_tags(value: Any) -> None:
    assert value_equal(value, decode_json(encode_json(value)))


def test_a_file_written_before_non_finite_floats_were_refused_still_reads() -> None:
    back = decode_json(b'[{"/":{"num@1":"NaN"}},{"/":{"num@1":"Infinity"}}]')
    assert math.isnan(back[0])
    assert math.inf == back[1]


@pytest.mark.parametrize("value", ADVERSARIAL)
def test_whole_value_and_path_writes_read_back_after_reopening(
    make_store: MakeStore, value: Any
) -> None:
    sp = Space(make_store(), "sp")
    whole = sp.get_cell("whole")
    assert whole.set(value).wait(10).ok
    at_slash = sp.get_cell("path")
    assert at_slash.key("/").set(value).wait(10).ok
    assert at_slash.key("/", "/").set("inner").wait(10).ok
    expected_path_doc = {"/": {**value, "/": "inner"}}
    sp.replica.close()

    again = Space(make_store(), "sp")
    assert value_equal(value, again.get_cell("whole").get())
    assert value_equal(expected_path_doc, again.get_cell("path").get())


def test_a_slash_key_written_in_one_store_reaches_another_polling_the_file(
    tmp_path: FsPath,
) -> None:
    """The bug: the other store's poll (and every later commit of it) failed forever."""
    with (
        SQLiteStore(tmp_path / "c.db", poll_interval=0) as a,
        SQLiteStore(tmp_path / "c.db", poll_interval=0) as b,
    ):
        sa, sb = Space(a, "sp"), Space(b, "sp")
        watched = sb.get_cell("doc")
        assert MISSING is watched.get()  # b's replica now holds the document
        assert sa.get_cell("doc").key("/").set("x").wait(10).ok
        assert b.poll() == 1
        sb.replica.pump()
        assert {"/": "x"} == watched.get()
        result = sb.get_cell("doc").key("y").set(1).wait(10)
        assert result.ok, result
        assert a.poll() == 1
        sa.replica.pump()
        assert {"/": "x", "y": 1} == sa.get_cell("doc").get()


# --------------------------------------------------------------------------- refused at the write

REFUSED = [
    pytest.param(math.nan, "not finite", id="nan"),
    pytest.param(math.inf, "not finite", id="inf"),
    pytest.param({"x": [-math.inf]}, "not finite", id="nested-minus-inf"),
    pytest.param("a\ud800", "lone surrogate", id="surrogate-in-string"),
    pytest.param({"k\udfff": 1}, "lone surrogate", id="surrogate-in-key"),
    pytest.param(["ok"] * 20 + ["\udc80"], "lone surrogate", id="surrogate-in-long-list"),
    pytest.param(nested(MAX_DEPTH + 1), "maximum depth", id="too-deep"),
    pytest.param(nested(500), "maximum depth", id="500-deep"),
]


@pytest.mark.parametrize(("bad", "words"), REFUSED)
def test_refused_on_every_store_alike_before_anything_is_staged(
    make_store: MakeStore, bad: Any, words: str
) -> None:
    store = make_store()
    sp = Space(store, "sp")
    cell = sp.get_cell("doc")
    assert cell.set({"a": 1, "list": [0]}).wait(10).ok
    evaluated = store.commits_evaluated
    writes: list[Callable[[], object]] = [
        lambda: cell.set(bad),
        lambda: cell.key("a").set(bad),
        lambda: cell.update({"b": bad}),
        lambda: cell.key("list").push(bad),
        lambda: cell.key("list").insert(0, bad),
    ]
    for write in writes:
        with pytest.raises(InvalidValueError, match=words):
            write()
    sp.replica.pump()
    assert store.commits_evaluated == evaluated
    assert {"a": 1, "list": [0]} == cell.get()


def test_the_deepest_value_allowed_is_stored_and_read_back(make_store: MakeStore) -> None:
    sp = Space(make_store(), "sp")
    cell = sp.get_cell("doc")
    assert cell.set(nested(MAX_DEPTH)).wait(10).ok
    deep = sp.get_cell("deep")
    assert deep.set({}).wait(10).ok
    assert deep.key("a", "b").set(nested(MAX_DEPTH - 2)).wait(10).ok
    with pytest.raises(InvalidValueError, match="maximum depth"):
        deep.key("a", "b").set(nested(MAX_DEPTH - 1))
    sp.replica.close()
    again = Space(make_store(), "sp")
    assert value_equal(nested(MAX_DEPTH), again.get_cell("doc").get())
    assert value_equal({"a": {"b": nested(MAX_DEPTH - 2)}}, again.get_cell("deep").get())


def test_a_write_path_longer_than_a_document_may_nest_is_refused(make_store: MakeStore) -> None:
    sp = Space(make_store(), "sp")
    cell = sp.get_cell("doc")
    with pytest.raises(InvalidValueError, match="maximum depth"):
        cell.key(*(["k"] * (MAX_DEPTH + 1))).set(1)
    assert cell.key(*(["k"] * (MAX_DEPTH - 1))).set(1).wait(10).ok


def test_edit_with_retry_does_not_retry_a_refused_value(make_store: MakeStore) -> None:
    sp = Space(make_store(), "sp")
    key = sp.get_cell("doc").doc_key
    calls = 0

    def fn(tx: Any) -> None:
        nonlocal calls
        calls += 1
        tx.write(key, ("value",), nested(500))

    with pytest.raises(InvalidValueError):
        asyncio.run(edit_with_retry(sp.replica, Identity("local", "local"), fn, attempts=5))
    assert 1 == calls


# --------------------------------------------------------------------------- no RecursionError


def test_value_equal_of_values_deeper_than_any_document_raises_invalid_value() -> None:
    a, b = nested(5000), nested(5000)
    with pytest.raises(InvalidValueError, match="maximum depth"):
        value_equal(a, b)
    assert value_equal(nested(MAX_DEPTH), nested(MAX_DEPTH))


def test_encoding_and_decoding_too_deep_data_raise_cellweave_errors() -> None:
    with pytest.raises(InvalidValueError, match="deeper"):
        encode_json(nested(5000))
    with pytest.raises(CorruptStoreError, match="deeper"):
        decode_json(b"[" * 5000 + b"]" * 5000)
    with pytest.raises(CorruptStoreError, match="deeper"):
        decode_json(b"[" * (MAX_DEPTH + 5) + b"]" * (MAX_DEPTH + 5))


@pytest.mark.parametrize(
    ("stored", "expected"),
    [
        (b'{"/":"x"}', {"/": "x"}),
        (b'{"/":{"a":1,"b":[{"/":null}]}}', {"/": {"a": 1, "b": [{"/": None}]}}),
        (b'{"/":{"title":"t"}}', {"/": {"title": "t"}}),
    ],
)
def test_documents_written_before_slash_keys_were_escaped_read_back(
    stored: bytes, expected: Any
) -> None:
    """A path write at key "/" stored these unescaped, and reading them raised
    CorruptStoreError forever; no tag has their shape, so they read as written."""
    assert value_equal(expected, decode_json(stored))
