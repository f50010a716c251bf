"""Cells named by the cause they were made from (issue 15 item 13): reprs, errors, describe."""

from __future__ import annotations

import pytest

from cells import (
    MISSING,
    InvalidValueError,
    Link,
    LinkCycleError,
    MemoryStore,
    Space,
    cause_of,
    describe,
    describe_id,
    entity_id,
)


def test_a_cells_repr_names_its_cause_scope_and_space() -> None:
    sp = Space(MemoryStore(), "notes")
    assert "Cell('inbox', scope='user', space='notes')" == repr(sp.get_cell("inbox", scope="user"))
    c = sp.get_cell({"note": 1})
    assert "Cell({'note': 1}, scope='space', space='notes', path=['title', 0])" == repr(
        c.key("title", 0)
    )
    assert repr(c).endswith(")") and "(in tx)" in repr(c.with_tx(sp.edit()))


def test_a_cell_whose_cause_is_unknown_is_named_by_its_address() -> None:
    sp = Space(MemoryStore(), "notes")
    c = sp.cell("plain-id")
    assert MISSING is cause_of("plain-id")
    assert "Cell(<notes/space/plain-id>)" == repr(c)


def test_the_cause_is_a_copy_made_when_the_id_was() -> None:
    cause = {"note": [1, 2]}
    eid = entity_id(cause)
    cause["note"].append(3)  # the caller's object changes later
    assert {"note": [1, 2]} == cause_of(eid)
    assert "{'note': [1, 2]}" == describe_id(eid)


def test_a_long_cause_is_cut_in_descriptions() -> None:
    eid = entity_id({"text": "x" * 200})
    text = describe_id(eid)
    assert text is not None and 60 == len(text) and text.endswith("…")


def test_a_repr_reads_nothing_from_the_store() -> None:
    store = MemoryStore()
    sp = Space(store, "notes")
    c = sp.get_cell("inbox")
    with store.testing.hold_loads(c) as gate:
        assert "inbox" in repr(c)
        assert 0 == gate.waiting()


def test_errors_that_name_a_document_name_its_cause() -> None:
    sp = Space(MemoryStore(), "notes")
    c = sp.get_cell("inbox")
    tx = sp.edit()
    with pytest.raises(InvalidValueError, match=r"write to notes/space/of:\w+ \('inbox'\)"):
        c.with_tx(tx).set({1: "not a str key"})
    tx.abort("test over")
    a, b = sp.get_cell("a"), sp.get_cell("b")
    a.set(b)
    b.set(a)
    sp.replica.pump()
    with pytest.raises(LinkCycleError, match=r"\('a'\).*\('b'\)"):
        a.get()
    assert f"{a.link()} ('a')" == describe(a.link())
    assert f"{a.doc_key} ('a')" == describe(a.doc_key)
    assert str(Link("notes", "plain", "space")) == describe(Link("notes", "plain", "space"))


def test_an_id_made_from_another_id_is_described_through_it() -> None:
    internal = entity_id({"internal": [entity_id("board"), "space", 3]})
    assert "{'internal': [<'board'>, 'space', 3]}" == describe_id(internal)


def test_a_remembered_cause_reads_back_as_the_value_it_was() -> None:
    # Kept as its canonical bytes (not the value) and decoded when asked.
    link = Link("notes", "plain", "user", ("a", 0))
    cause = {"z": [None, True, 1, 2.5, "s", link], "a": {"nested": -3}}
    eid = entity_id(cause)
    back = cause_of(eid)
    assert cause == back
    assert ["a", "z"] == list(back)  # keys sorted
    assert [0.1] == cause_of(entity_id([0.1]))


def test_an_id_made_with_a_recall_names_the_cause_the_recall_gives_again() -> None:
    # A recall (a function and its arguments) is remembered instead of the cause's
    # bytes, and called only when the cause is asked for.
    calls: list[str] = []

    def again(base: str, node: float) -> object:
        calls.append(base)
        return {"node": node, "internal": [base, "space"]}

    base = entity_id("recalled board")
    cause = {"internal": [base, "space"], "node": 2.0}
    eid = entity_id(cause, recall=(again, base, 2.0))
    assert eid == entity_id({"node": 2, "internal": [base, "space"]})  # the id is the cause's
    assert [] == calls
    back = cause_of(eid)
    assert {"internal": [base, "space"], "node": 2} == back
    assert ["internal", "node"] == list(back)  # the same form a remembered cause has
    assert int is type(back["node"])
    assert "{'internal': [<'recalled board'>, 'space'], 'node': 2}" == describe_id(eid)
    assert [base, base] == calls


def test_a_recall_may_be_a_callable_of_no_arguments() -> None:
    # A callable recall (a small struct holding the arguments, as the runner's are) is
    # remembered as it is and called only when the cause is asked for.
    calls: list[int] = []

    class Again:
        def __call__(self) -> object:
            calls.append(1)
            return {"node": 3, "internal": ["a callable's board", "space"]}

    eid = entity_id({"internal": ["a callable's board", "space"], "node": 3}, recall=Again())
    assert [] == calls
    assert {"internal": ["a callable's board", "space"], "node": 3} == cause_of(eid)
    assert [1] == calls


def test_remembered_causes_are_bounded_and_the_oldest_go_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from cells import _codec

    monkeypatch.setattr(_codec, "MAX_REMEMBERED_CAUSES", 8)
    monkeypatch.setattr(_codec, "_causes", {})
    ids = [entity_id({"bounded cause": i}) for i in range(30)]
    assert 6 <= len(_codec._causes) <= 8
    # The newest are still known, the first ones forgotten (the oldest quarter goes each
    # time the table is full).
    assert cause_of(ids[-1]) == {"bounded cause": 29}
    assert cause_of(ids[-6]) == {"bounded cause": 24}
    assert cause_of(ids[0]) is MISSING
    assert cause_of(ids[20]) is MISSING
    # A forgotten id derives again, and is remembered again.
    assert entity_id({"bounded cause": 0}) == ids[0]
    assert cause_of(ids[0]) == {"bounded cause": 0}
