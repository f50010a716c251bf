"""Ids and addresses: `entity_id`, canonical bytes, scopes, identities and document keys."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

from cells import (
    DocKey,
    Identity,
    InvalidValueError,
    Link,
    MemoryStore,
    Space,
    canonical_bytes,
    entity_id,
)

ALICE_S1 = Identity("alice", "s1")
ALICE_S2 = Identity("alice", "s2")
BOB_S1 = Identity("bob", "s1")

# Causes whose ids are compared across processes. Built from source text so the
# child process constructs exactly the same objects (dicts with many keys, so a
# different hash seed would change any set- or hash-ordered walk).
CAUSE_SOURCES = [
    "{'note': 1}",
    "{'z': 1, 'a': [1, 2.5, None, True], 'm': {'y': 'x', 'b': -0.0}}",
    "[str(i) for i in range(40)]",
    "{str(i): i for i in range(40)}",
    "{'text': 'caf\\u00e9 \\U0001f600', 'n': 1e-300, 'big': 1.5e300}",
    "{'ref': Link('sp', 'doc', 'user', ('items', 3))}",
    "2**63 - 1",
    "'plain'",
]


def _check(sp: Space) -> None:
    sp.replica.store._check()
    sp.replica._check()


# --------------------------------------------------------------------------- entity_id


def test_entity_id_is_deterministic_and_well_formed() -> None:
    first = entity_id({"note": 1})
    assert first == entity_id({"note": 1})
    assert first.startswith("of:")
    assert first[3:] == first[3:].lower()
    assert first != entity_id({"note": 2})


def test_entity_id_ignores_dict_key_order() -> None:
    a = {"x": 1, "y": {"p": 1, "q": [1, {"s": 1, "r": 2}]}}
    b = {"y": {"q": [1, {"r": 2, "s": 1}], "p": 1}, "x": 1}
    assert entity_id(a) == entity_id(b)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (1, 1.0),
        ({"n": 1}, {"n": 1.0}),
        ([1, 2], (1, 2)),
        (-0.0, -0.0),
        (2**60, float(2**60)),
        (-(2**62), float(-(2**62))),
        (10**18, 1e18),
    ],
)
def test_entity_id_same_for_equal_causes(a: Any, b: Any) -> None:
    assert entity_id(a) == entity_id(b)
    assert canonical_bytes(a) == canonical_bytes(b)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (True, 1),
        (False, 0),
        (True, 1.0),
        (0.0, -0.0),
        (0, -0.0),
        (1, "1"),
        (None, False),
        (None, []),
        ([], {}),
        ([1, 2], [2, 1]),
        ({"a": 1}, {"a": 1, "b": None}),
        ("ab", ["a", "b"]),
        (2**53 + 1, float(2**53)),
        (Link("sp", "a"), Link("sp", "a", "user")),
        (Link("sp", "a", path=("x",)), Link("sp", "a", path=("y",))),
        (Link("sp", "a"), {"space": "sp", "id": "a", "scope": "space", "path": []}),
    ],
)
def test_entity_id_differs_for_different_causes(a: Any, b: Any) -> None:
    assert entity_id(a) != entity_id(b)
    assert canonical_bytes(a) != canonical_bytes(b)


def test_entity_id_reduces_a_cell_to_its_address() -> None:
    sp = Space(MemoryStore(), "sp", principal="alice")
    cell = sp.cell("doc", path=("x",))
    assert entity_id(cell) == entity_id(cell.link())
    assert entity_id({"parent": cell, "i": 0}) == entity_id({"i": 0, "parent": cell.link()})
    # The address is canonical: another principal's cell of the same address gives the same id.
    bob = Space(sp.replica, "sp", principal="bob")
    assert entity_id(sp.cell("u", scope="user")) == entity_id(bob.cell("u", scope="user"))
    _check(sp)


def test_entity_id_refuses_values_that_are_not_json_like() -> None:
    with pytest.raises(InvalidValueError) as info:
        entity_id({"a": {1, 2}})
    assert "cause" in str(info.value)
    assert "set" in str(info.value)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), {"x": [float("-inf")]}, "\ud800"])
def test_entity_id_refuses_non_finite_floats_and_lone_surrogates(bad: Any) -> None:
    with pytest.raises(InvalidValueError, match="cause"):
        entity_id(bad)


def _ids_in_subprocess(hash_seed: str) -> list[str]:
    script = (
        "import json\n"
        "from cells import Link, entity_id\n"
        f"sources = {CAUSE_SOURCES!r}\n"
        "print(json.dumps([entity_id(eval(s)) for s in sources]))\n"
    )
    env = dict(os.environ, PYTHONHASHSEED=hash_seed)
    out = subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    ids: list[str] = json.loads(out.stdout)
    return ids


def test_entity_id_is_identical_in_another_process_with_another_hash_seed() -> None:
    here = [entity_id(eval(s, {"Link": Link})) for s in CAUSE_SOURCES]
    assert len(set(here)) == len(here)
    seed = "1" if os.environ.get("PYTHONHASHSEED") != "1" else "2"
    assert here == _ids_in_subprocess(seed)
    assert here == _ids_in_subprocess("4242")


# --------------------------------------------------------------------------- identities and scopes


@pytest.mark.parametrize(("principal", "session"), [("", "s"), ("p", ""), (None, "s")])
def test_identity_needs_non_empty_strings(principal: Any, session: Any) -> None:
    with pytest.raises(InvalidValueError):
        Identity(principal, session)


def test_space_scope_is_one_shared_instance() -> None:
    link = Link("sp", "doc")
    assert link.key(ALICE_S1) == link.key(BOB_S1) == link.key(ALICE_S2)
    assert DocKey("sp", "doc") == link.key(ALICE_S1)
    assert link.key(ALICE_S1).scope_key == "space"


def test_user_scope_instance_per_principal() -> None:
    link = Link("sp", "doc", "user")
    alice, bob = link.key(ALICE_S1), link.key(BOB_S1)
    assert alice != bob
    assert alice.scope_key == "user:alice"
    assert bob.scope_key == "user:bob"
    # The session does not select a user-scoped instance.
    assert alice == link.key(ALICE_S2)
    assert DocKey("sp", "doc", "user", "alice") == alice


def test_session_scope_instance_per_principal_and_session() -> None:
    link = Link("sp", "doc", "session")
    keys = {link.key(ALICE_S1), link.key(ALICE_S2), link.key(BOB_S1)}
    assert len(keys) == 3
    assert link.key(ALICE_S1) == link.key(Identity("alice", "s1"))
    assert link.key(ALICE_S1).scope_key == "session:alice:s1"
    assert link.key(BOB_S1).scope_key == "session:bob:s1"


def test_document_address_is_space_id_and_scope() -> None:
    for scope in ("space", "user", "session"):
        key = Link("sp", "doc", scope).key(ALICE_S1)
        assert ("sp", "doc", scope) == (key.space, key.id, key.scope)
    assert Link("sp", "a").key(ALICE_S1) != Link("other", "a").key(ALICE_S1)
    assert str(Link("sp", "doc", "user").key(ALICE_S1)) == "sp/user:alice/doc"


def test_same_cause_at_two_scopes_has_same_id_and_different_instances() -> None:
    sp = Space(MemoryStore(), "sp", principal="alice", session="s1")
    shared = sp.get_cell({"c": 1})
    mine = sp.get_cell({"c": 1}, scope="user")
    assert shared.id == mine.id
    assert (shared.scope, mine.scope) == ("space", "user")
    assert shared.doc_key != mine.doc_key
    _check(sp)


def test_unknown_scope_is_refused() -> None:
    sp = Space(MemoryStore(), "sp")
    with pytest.raises(InvalidValueError) as info:
        sp.cell("doc", scope="world")  # type: ignore[arg-type]
    assert "world" in str(info.value)
    _check(sp)


def test_link_child_extends_the_path() -> None:
    link = Link("sp", "doc", "user", ("a",))
    assert Link("sp", "doc", "user", ("a", 0, "b")) == link.child(0, "b")
    assert str(link.child(0)) == "<sp/user/doc['a'][0]>"
