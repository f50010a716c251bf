"""Values: JSON equality, the write boundary (`normalize`), paths, MISSING and the JSON codec."""

from __future__ import annotations

import collections
import copy
import enum
import math
import pickle
import sys
from typing import Any

import pytest

from cells import (
    MISSING,
    CorruptStoreError,
    InvalidValueError,
    Link,
    MemoryStore,
    Space,
    decode_json,
    encode_json,
    get_path,
    normalize,
    set_path,
    value_equal,
)

NAN = float("nan")
LINK_A = Link("sp", "a")


# --------------------------------------------------------------------------- value_equal


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        (True, 1, False),
        (1, True, False),
        (False, 0, False),
        (0, False, False),
        (True, 1.0, False),
        (True, True, True),
        (False, False, True),
        (1, 1.0, True),
        (1.0, 1, True),
        (2**53, float(2**53), True),
        (2**53 + 1, float(2**53), False),
        (NAN, NAN, True),
        (NAN, float("nan"), True),
        (NAN, 0.0, False),
        (0.0, -0.0, False),
        (-0.0, 0.0, False),
        (0, -0.0, False),
        (-0.0, -0.0, True),
        (0.0, 0, True),
        (math.inf, math.inf, True),
        (math.inf, -math.inf, False),
        (0.1 + 0.2, 0.3, False),
        ("1", 1, False),
        ("a", "a", True),
        (None, None, True),
        (None, False, False),
        (None, 0, False),
        ([], {}, False),
        ([], [], True),
        ({}, {}, True),
        ([1, 2], [2, 1], False),
        ([1, 2], [1, 2, 3], False),
        ([1, [2, {"x": NAN}]], [1.0, [2.0, {"x": float("nan")}]], True),
        ([True], [1], False),
        ({"a": 1, "b": [1, 2]}, {"b": [1.0, 2], "a": 1.0}, True),
        ({"a": 1}, {"a": 1, "b": None}, False),
        ({"a": None}, {"b": None}, False),
        ({"a": {"b": -0.0}}, {"a": {"b": 0.0}}, False),
        ({"a": {"b": 0}}, {"a": {"b": 0.0}}, True),
        ([1], (1,), False),  # tuples are not values; normalize turns them into lists
    ],
)
def test_value_equal_json_semantics(a: Any, b: Any, expected: bool) -> None:
    assert expected == value_equal(a, b)
    assert expected == value_equal(b, a)


def test_value_equal_dict_key_order_is_irrelevant() -> None:
    a = {"x": 1, "y": {"p": [1, 2], "q": "s"}}
    b = {"y": {"q": "s", "p": [1, 2]}, "x": 1}
    assert list(a) != list(b)
    assert value_equal(a, b)


def test_value_equal_links_compare_by_address() -> None:
    assert value_equal(Link("sp", "a", "user", ("x", 0)), Link("sp", "a", "user", ("x", 0)))
    assert not value_equal(Link("sp", "a"), Link("sp", "b"))
    assert not value_equal(Link("sp", "a"), Link("sp2", "a"))
    assert not value_equal(Link("sp", "a", "space"), Link("sp", "a", "user"))
    assert not value_equal(Link("sp", "a", path=("x",)), Link("sp", "a", path=("y",)))
    assert value_equal({"ref": [Link("sp", "a")]}, {"ref": [Link("sp", "a")]})
    assert not value_equal(Link("sp", "a"), {"space": "sp", "id": "a"})


# --------------------------------------------------------------------------- normalize: refusals


class Thing:
    pass


def _dict_cycle() -> dict[str, Any]:
    d: dict[str, Any] = {"ok": 1}
    d["self"] = d
    return d


def _list_cycle() -> list[Any]:
    items: list[Any] = [1]
    items.append(items)
    return items


@pytest.mark.parametrize(
    ("bad", "type_name", "inner_path"),
    [
        pytest.param({1, 2}, "set", (), id="set"),
        pytest.param(frozenset(), "frozenset", (), id="frozenset"),
        pytest.param(Thing(), "Thing", (), id="object"),
        pytest.param(b"bytes", "bytes", (), id="bytes"),
        pytest.param({1: "one"}, "int", (), id="non-str-key"),
        pytest.param({("a",): "tuple"}, "tuple", (), id="tuple-key"),
        pytest.param(_dict_cycle(), "dict", ("self",), id="dict-cycle"),
        pytest.param(_list_cycle(), "list", (1,), id="list-cycle"),
        pytest.param(float("nan"), "float nan", (), id="nan"),
        pytest.param(math.inf, "float inf", (), id="inf"),
        pytest.param(-math.inf, "float -inf", (), id="minus-inf"),
        pytest.param("a\ud800b", "lone surrogate", (), id="surrogate-in-string"),
        pytest.param({"\udc00": 1}, "dict key", (), id="surrogate-in-key"),
        pytest.param(2**63, "int", (), id="int-above-64-bit"),
        pytest.param(-(2**63) - 1, "int", (), id="int-below-64-bit"),
        pytest.param(10**30, "int", (), id="huge-int"),
    ],
)
def test_normalize_refuses_with_place_path_and_type(
    bad: Any, type_name: str, inner_path: tuple[Any, ...]
) -> None:
    value = {"outer": [0, bad]}
    with pytest.raises(InvalidValueError) as info:
        normalize(value, where="the-place")
    message = str(info.value)
    expected_path = ("outer", 1, *inner_path)
    assert message.startswith("the-place")
    assert "".join(f"[{p!r}]" for p in expected_path) in message
    assert type_name in message
    assert expected_path == info.value.path


def test_normalize_refusal_at_root_says_root() -> None:
    with pytest.raises(InvalidValueError) as info:
        normalize({1, 2}, where="root-place")
    assert "root-place" in str(info.value)
    assert "(root)" in str(info.value)
    assert info.value.path == ()


def test_invalid_value_error_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        normalize(object())


# --------------------------------------------------------------------------- normalize: accepts


def test_normalize_accepts_the_64_bit_range() -> None:
    assert normalize(2**63 - 1) == 2**63 - 1
    assert normalize(-(2**63)) == -(2**63)


def test_normalize_turns_tuples_into_lists() -> None:
    out = normalize({"t": (1, (2, 3), [4, (5,)])})
    assert out == {"t": [1, [2, 3], [4, [5]]]}
    assert type(out["t"]) is list
    assert type(out["t"][1]) is list
    assert type(out["t"][2][1]) is list


@pytest.mark.parametrize(
    ("given", "expected", "expected_type"),
    [
        (1.0, 1, int),
        (-3.0, -3, int),
        (0.0, 0, int),
        (float(2**53), 2**53, int),
        (2.5, 2.5, float),
        (1e300, 1e300, float),
    ],
)
def test_normalize_integral_floats_become_ints(
    given: float, expected: Any, expected_type: type
) -> None:
    out = normalize(given)
    assert expected == out
    assert expected_type is type(out)


def test_normalize_keeps_negative_zero() -> None:
    neg = normalize(-0.0)
    assert type(neg) is float
    assert math.copysign(1.0, neg) == -1.0


def test_normalize_allows_slash_keys_and_tag_spellings() -> None:
    assert normalize({"/": 1, "x": 2}) == {"/": 1, "x": 2}
    assert normalize({"/": {"link@1": {}}}) == {"/": {"link@1": {}}}
    assert normalize({"/": {"num@1": "NaN"}}) == {"/": {"num@1": "NaN"}}


def test_normalize_keeps_links_and_converts_linkables() -> None:
    class Handle:
        def link(self) -> Link:
            return LINK_A

    assert normalize([LINK_A, Handle()]) == [LINK_A, LINK_A]


def test_normalize_stores_the_plain_kind_of_subclasses() -> None:
    class Color(enum.IntEnum):
        RED = 1

    class Name(str):
        pass

    out = normalize({"c": Color.RED, "n": Name("x"), "d": collections.OrderedDict(a=1)})
    assert out == {"c": 1, "n": "x", "d": {"a": 1}}
    assert type(out["c"]) is int
    assert type(out["n"]) is str
    assert type(out["d"]) is dict


def test_normalize_returns_an_independent_copy() -> None:
    original: dict[str, Any] = {"a": [1, {"b": 2}], "c": {"d": []}}
    out = normalize(original)
    original["a"][1]["b"] = 99
    original["a"].append(3)
    original["c"]["d"].append("x")
    original["new"] = 1
    assert out == {"a": [1, {"b": 2}], "c": {"d": []}}


def test_normalize_accepts_shared_non_cyclic_substructure() -> None:
    shared = [1, 2]
    assert normalize({"a": shared, "b": shared}) == {"a": [1, 2], "b": [1, 2]}


# --------------------------------------------------------------------------- MISSING


def test_missing_is_a_falsy_singleton() -> None:
    assert not MISSING
    assert repr(MISSING) == "MISSING"
    assert type(MISSING)() is MISSING
    assert pickle.loads(pickle.dumps(MISSING)) is MISSING
    assert copy.deepcopy(MISSING) is MISSING


# --------------------------------------------------------------------------- get_path


def test_get_path_reads_nested_places() -> None:
    doc = {"a": [10, {"b": "x"}], "n": None}
    assert doc == get_path(doc, ())
    assert get_path(doc, ("a", 1, "b")) == "x"
    assert get_path(doc, ("a", 0)) == 10
    assert None is get_path(doc, ("n",))


@pytest.mark.parametrize(
    "path",
    [
        ("missing",),
        ("a", 2),
        ("a", "0"),
        (0,),
        ("a", 0, "deeper"),
        ("n", "x"),
        ("a", True),
    ],
)
def test_get_path_unreachable_is_missing(path: tuple[Any, ...]) -> None:
    assert MISSING is get_path({"a": [10, {"b": "x"}], "n": None}, path)


def test_get_path_of_missing_root_is_missing() -> None:
    assert MISSING is get_path(MISSING, ("a",))


# --------------------------------------------------------------------------- set_path


def test_set_path_copies_only_along_the_path_and_never_mutates() -> None:
    root: dict[str, Any] = {"a": {"b": 1, "keep": [1]}, "other": {"deep": [1, 2]}}
    before = copy.deepcopy(root)
    out = set_path(root, ("a", "b"), 2)
    assert before == root
    assert out == {"a": {"b": 2, "keep": [1]}, "other": {"deep": [1, 2]}}
    assert out["other"] is root["other"]
    assert out["a"]["keep"] is root["a"]["keep"]
    assert out["a"] is not root["a"]


def test_a_document_s_value_dict_shares_its_key_table_and_is_a_plain_dict() -> None:
    # A document's first value, `{"value": v}`, is a copy of `_values._VALUE_DOC` and
    # shares its key table (80 bytes, not 184), and so is each later version a write
    # makes of it, in the replica and in the store. It is a plain dict in every other
    # way: it compares, encodes and pickles as one; a key added or removed changes only
    # the copy made.
    doc = set_path(MISSING, ("value",), 5)
    plain = {"value": 5}
    assert type(doc) is dict and plain == doc
    assert sys.getsizeof(doc) < sys.getsizeof(plain)
    later = set_path(doc, ("value",), 6)
    assert {"value": 6} == later and {"value": 5} == doc
    assert sys.getsizeof(later) == sys.getsizeof(doc)
    assert encode_json(later) == encode_json({"value": 6})
    assert pickle.loads(pickle.dumps(later)) == later == copy.deepcopy(later)
    assert {"value": 6, "other": 1} == set_path(later, ("other",), 1)
    gone = set_path(later, ("value",), MISSING)
    assert {} == gone and {"value": 6} == later
    assert {"value": 7} == set_path(gone, ("value",), 7)
    assert {"value": {"a": 1}} == set_path(MISSING, ("value", "a"), 1)
    store = MemoryStore()
    sp = Space(store, "sp")
    cell = sp.cell("doc")
    for value in (1, 2, {"a": 3}):
        cell.set(value)
        sp.replica.pump()
        stored = store.read_durable(cell.doc_key)
        assert {"value": value} == stored and sys.getsizeof(stored) == sys.getsizeof(doc)
        assert sp.replica.peek(cell.doc_key) is stored  # (one object: the replica's)


def test_set_path_creates_missing_dict_levels() -> None:
    assert set_path(MISSING, ("a", "b", "c"), 1) == {"a": {"b": {"c": 1}}}
    assert set_path({"x": 0}, ("a", "b"), 1) == {"x": 0, "a": {"b": 1}}


def test_set_path_appends_at_list_length_and_replaces_inside() -> None:
    assert set_path([1, 2], (2,), 3) == [1, 2, 3]
    assert set_path([1, 2], (1,), 9) == [1, 9]
    assert set_path({"l": []}, ("l", 0, "x"), 1) == {"l": [{"x": 1}]}


def test_set_path_empty_path_replaces_root() -> None:
    assert set_path({"a": 1}, (), "new") == "new"


def test_set_path_missing_deletes() -> None:
    assert set_path({"a": 1, "b": 2}, ("a",), MISSING) == {"b": 2}
    assert set_path([1, 2, 3], (1,), MISSING) == [1, 3]
    assert set_path({"a": {"x": 1}}, ("a", "x"), MISSING) == {"a": {}}
    assert set_path({"a": 1}, ("nope", "deeper"), MISSING) == {"a": 1}


@pytest.mark.parametrize(
    ("root", "path"),
    [
        ({"a": 1}, ("a", "b")),
        ({"a": "text"}, ("a", 0)),
        ([1, 2], (3,)),
        ([1, 2], ("x",)),
        ({"a": [1]}, ("a", -1)),
        ({"a": 1}, (0,)),
        (MISSING, (0,)),
    ],
)
def test_set_path_refuses_unusable_paths(root: Any, path: tuple[Any, ...]) -> None:
    with pytest.raises(InvalidValueError) as info:
        set_path(root, path, "v", where="the-write")
    assert str(info.value).startswith("the-write")


# --------------------------------------------------------------------------- JSON codec


def test_json_round_trips_specials_links_and_reserved_lookalikes() -> None:
    value = {
        "negzero": -0.0,
        "link": Link("sp", "doc", "session", ("x", 0)),
        "links": [Link("sp", "a"), Link("sp", "b", "user")],
        "slash": {"/": 1, "other": 2},
        "text": "unicode \u00e9\U0001f600",
        "big": 2**63 - 1,
        "float": 0.1,
    }
    back = decode_json(encode_json(value))
    assert value_equal(value, back)
    assert math.copysign(1.0, back["negzero"]) == -1.0
    assert type(back["link"]) is Link


def test_json_disk_form_is_plain_json() -> None:
    assert encode_json({"a": [1, "x", None, True]}) == b'{"a":[1,"x",null,true]}'


def test_decoded_short_strings_are_one_object_per_process() -> None:
    # A replica holding thousands of documents keeps one copy of each name, field key
    # and link part, not one per decoded document; longer strings (ids) are left alone.
    long = "x" * 80
    raw = encode_json(
        {
            "session": "local",
            "page": {"local": [long]},
            "at": Link("space one", "of:id", "user", ("field", 2)),
        }
    )
    a, b = decode_json(raw), decode_json(raw)
    assert a == b
    assert a["session"] is b["session"]
    assert next(iter(a["page"])) is next(iter(b["page"]))
    assert a["at"].space is b["at"].space and a["at"].scope is b["at"].scope
    assert a["at"].path[0] is b["at"].path[0] and a["at"].path == ("field", 2)
    assert a["page"]["local"][0] == long and a["page"]["local"][0] is not b["page"]["local"][0]


def test_decode_json_refuses_unknown_tagged_values() -> None:
    with pytest.raises(CorruptStoreError):
        decode_json(b'{"/": {"what@9": 1}}')
    with pytest.raises(CorruptStoreError):
        decode_json(b'{"/": {"num@1": "Huge"}}')


def test_a_long_list_of_plain_items_is_copied_and_other_long_lists_still_checked() -> None:
    links = [Link("sp", f"id{i}") for i in range(40)]
    plain = [*links, "text", None, True, False]
    out = normalize(plain)
    assert out == plain and out is not plain  # a fresh copy, the same items
    assert all(a is b for a, b in zip(out, plain, strict=True))
    assert normalize(tuple(plain)) == plain
    mixed = [*links, 2.0, ("a",)]
    assert normalize(mixed)[-2:] == [2, ["a"]]  # still converted element by element
    with pytest.raises(InvalidValueError):
        normalize([*links, object()])
