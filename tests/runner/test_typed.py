"""Typed arguments, results and events (issue 18 item 1).

Each test fails without its feature: defaults, checks with their exact text,
nothing written on a bad argument, events converted and checked at the send,
links checked once loaded and reported in `rt.errors()`, `Pattern.schema()`
and the schema carried by the stored pattern graph.
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from pattern_defs import Child
from support import arun
from typed_defs import AddItem, Counter, Item, Todo, Wrapper

from cells import MemoryStore
from runner import PatternError, PatternGraph, Runtime, handler, pattern
from runner import _docs as docs


async def _run(rt: Runtime, pat: Any, argument: dict[str, Any], name: str = "r") -> Any:
    res = rt.get_cell(name)
    tx = rt.edit()
    rt.run(tx, pat, argument, res)
    assert (await tx.commit()).ok
    return res


def test_defaults_fill_missing_parameters() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            res = await _run(rt, Counter, {"count": 3})
            assert {"count": 3, "title": "Counter"} == await res.pull()
            other = await _run(rt, Counter, {}, name="other")
            assert {"count": 0, "title": "Counter"} == await other.pull()

    arun(main)


def test_a_nested_typed_child_gets_its_defaults() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            res = await _run(rt, Wrapper, {"n": 2})
            assert {"inner": {"count": 2, "title": "Counter"}} == await res.pull()

    arun(main)


def test_a_bad_argument_names_pattern_parameter_path_and_type_and_writes_nothing() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            res = rt.get_cell("r")
            tx = rt.edit()
            with pytest.raises(PatternError) as info:
                rt.run(tx, Todo, {"items": [{"title": "a"}, {"title": 1}]}, res)
            assert (
                "rt.run: pattern typed_defs:Todo: parameter 'items' at items[1].title:"
                " expected `str`, got `int` (value [{'title': 'a'}, {'title': 1}])"
            ) == str(info.value)
            assert [] == list(tx.documents())  # nothing staged
            assert frozenset() == rt.registrations()
            tx.abort("test")

    arun(main)


@pytest.mark.parametrize(
    ("argument", "message"),
    [
        (
            {"items": [], "mode": "done"},
            "parameter 'mode' at mode: invalid enum value 'done' (value 'done')",
        ),
        (
            {"items": [], "limit": -1},
            "parameter 'limit' at limit: expected `int` >= 0 (value -1)",
        ),
        (
            {"items": [], "where": {"x": 1}},
            "parameter 'where' at where: object missing required field `y` (value {'x': 1})",
        ),
        (
            {"items": [{"done": True}]},
            "parameter 'items' at items[0]: object missing required field `title`"
            " (value [{'done': True}])",
        ),
        ({}, "parameter 'items' is required (type list[typed_defs.Item]) and has no default"),
    ],
)
def test_literal_annotated_typeddict_struct_and_required_are_checked(
    argument: dict[str, Any], message: str
) -> None:
    async def main() -> None:
        async with Runtime() as rt:
            tx = rt.edit()
            with pytest.raises(PatternError) as info:
                rt.setup(tx, Todo, argument, rt.get_cell("r"))
            assert f"rt.setup: pattern typed_defs:Todo: {message}" == str(info.value)
            tx.abort("test")

    arun(main)


def test_a_struct_value_is_stored_as_plain_data_and_optional_accepts_none() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            res = await _run(rt, Todo, {"items": [Item("a")], "where": None})
            tx = rt.edit()
            stored = tx.peek(docs.argument_link(res.link()).key(rt.identity), (docs.VALUE,))
            tx.abort("test")
            assert {
                "items": [{"title": "a", "done": False}],
                "title": "Todo",
                "mode": "all",
                "limit": 10,
                "where": None,
            } == stored
            assert {"title": "Todo", "total": 1, "add": None} == await res.pull()

    arun(main)


def test_an_instance_made_outside_a_body_is_checked_when_made() -> None:
    with pytest.raises(PatternError) as info:
        Counter(count="three")
    assert (
        "calling a pattern: pattern typed_defs:Counter: parameter 'count' at count:"
        " expected `int`, got `str` (value 'three')"
    ) == str(info.value)
    assert {"count": 0, "title": "Counter"} == Counter().argument


def test_a_typed_event_is_converted_and_a_bad_one_raises_at_the_send() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            res = await _run(rt, Todo, {"items": []})
            await rt.idle()
            assert "done" == await rt.send(res.key("add"), AddItem("x"))  # a Struct is fine
            assert "done" == await rt.send(res.key("add"), {"title": "y"})
            with pytest.raises(PatternError) as info:
                rt.send(res.key("add"), {"name": "z"})
            assert str(info.value).startswith("event for handler add in pattern typed_defs:Todo:")
            assert str(info.value).endswith(
                "parameter 'event' at event: object missing required field `title`"
                " (value {'name': 'z'})"
            )
            await rt.idle()
            assert 0 == rt.scheduler.statistics()["events_queued"]
            assert 2 == (await res.pull())["total"]

    arun(main)


def test_a_linked_argument_is_checked_when_loaded_and_reported_not_crashed() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            items = rt.get_cell("items")
            res = rt.get_cell("r")
            tx = rt.edit()
            items.with_tx(tx).set([{"title": "a"}, {"title": 3}])
            rt.run(tx, Todo, {"items": items}, res)  # a cell: not checked when staged
            assert (await tx.commit()).ok
            assert 2 == (await res.pull())["total"]  # the run computes on
            await rt.idle()
            (record,) = [e for e in rt.errors() if e.source == "Todo argument check"]
            assert record.message.endswith(
                "raised PatternError: the argument of pattern typed_defs:Todo"
                f" (run {res.link().id[:12]}): parameter 'items' at items[1].title:"
                " expected `str`, got `int` (value [{'title': 'a'}, {'title': 3}])"
            )
            before = len(rt.errors())
            tx = rt.edit()
            items.with_tx(tx).set([{"title": "a"}, {"title": "b"}, {"title": "c"}])
            assert (await tx.commit()).ok
            await rt.idle()
            assert 3 == (await res.pull())["total"]
            assert before == len(rt.errors())  # a value that fits reports nothing

    arun(main)


def test_schema_describes_argument_result_and_events_and_the_stored_graph_has_it() -> None:
    async def main() -> None:
        schema = Todo.schema()
        arg = schema["argument"]["$defs"]["Todo"]
        assert ["items"] == arg["required"]
        assert {"enum": ["all", "open"], "default": "all"} == arg["properties"]["mode"]
        assert {"type": "integer", "minimum": 0, "default": 10} == arg["properties"]["limit"]
        assert {"type": "array", "items": {"$ref": "#/$defs/Item"}} == arg["properties"]["items"]
        assert "#/$defs/Summary" == schema["result"]["$ref"]
        assert ["title", "total"] == sorted(schema["result"]["$defs"]["Summary"]["required"])
        assert msgspec.json.schema(AddItem) == schema["events"]["add"]
        async with Runtime() as rt:
            res = await _run(rt, Todo, {"items": []})
            tx = rt.edit()
            graph = tx.peek(
                docs.pattern_link(res.link().space, Todo.identity).key(rt.identity), (docs.VALUE,)
            )
            tx.abort("test")
            assert schema == graph["schema"]
            assert Todo.graph == PatternGraph.from_json(graph)  # the schema round-trips

    arun(main)


def test_unannotated_patterns_have_no_schema_in_their_graph_and_take_anything() -> None:
    async def main() -> None:
        assert "schema" not in Child.graph.to_json()
        assert {"properties": {"value": {"default": None}}} == {
            "properties": Child.schema()["argument"]["$defs"]["Child"]["properties"]
        }
        async with Runtime() as rt:
            res = await _run(rt, Child, {"value": "ab"})  # nothing checks it
            assert "abab" == await res.key("doubled").pull()

    arun(main)


def test_future_annotations_are_resolved_and_an_unknown_name_is_named() -> None:
    assert Todo.signature.params["items"].type == list[Item]

    def broken(x: NoSuchType) -> Any:  # type: ignore[name-defined]  # noqa: F821
        return {"x": x}

    pat = pattern(broken)
    with pytest.raises(PatternError) as info:
        pat.prepare({"x": 1}, "rt.run")
    assert "its annotations cannot be resolved: NameError" in str(info.value)
    assert "NoSuchType" in str(info.value)


def test_a_typed_handler_event_schema_is_none_when_unannotated() -> None:
    @handler
    def h(event, cell):  # type: ignore[no-untyped-def]
        cell.set(event)

    def body(value: int = 1):  # type: ignore[no-untyped-def]
        return {"value": value, "h": h(cell=value)}

    body.__qualname__ = "typed_test_body"
    pat = pattern(body)
    assert {"h": None} == pat.schema()["events"]


def test_two_runtimes_agree_on_a_typed_result() -> None:
    async def main() -> None:
        store = MemoryStore()
        async with Runtime(store) as one, Runtime(store) as two:
            await _run(one, Counter, {"count": 7})
            await one.idle()
            again = two.get_cell("r")
            assert await two.start(again) is True
            assert {"count": 7, "title": "Counter"} == await again.pull()

    arun(main)


def test_a_struct_event_to_a_run_set_up_but_not_started_is_delivered() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            res = rt.get_cell("r")
            tx = rt.edit()
            rt.setup(tx, Todo, {"items": []}, res)
            assert (await tx.commit()).ok
            assert "done" == await rt.send(res.key("add"), AddItem("parked"))
            assert 1 == (await res.pull())["total"]

    arun(main)


def test_annotations_for_a_type_checker_ref_cell_any_check_nothing() -> None:
    from typed_defs import Plain, note_add

    from runner._types import event_converter

    assert Plain.signature.typed is False  # (name: Ref, notes: Ref) -> Any
    assert Plain.graph.schema is None
    assert {"name": 1, "notes": []} == Plain.prepare({"name": 1, "notes": []}, "t")
    assert None is event_converter(note_add.fn, "note_add")  # (event: Any, notes: Cell)


def test_a_typed_list_op_reports_the_element_that_does_not_fit() -> None:
    from typed_defs import Titles

    async def main() -> None:
        async with Runtime() as rt:
            items = rt.get_cell("items")
            res = rt.get_cell("r")
            tx = rt.edit()
            items.with_tx(tx).set([{"title": "a"}, {"name": "b"}])
            rt.run(tx, Titles, {"items": items}, res)
            assert (await tx.commit()).ok
            assert ["a", None] == await res.key("titles").pull()  # the list goes on
            await rt.idle()
            messages = [e.message for e in rt.errors() if e.source == "TypedTitle argument check"]
            assert 1 == len(messages)
            assert messages[0].endswith(
                "parameter 'element' at element: object missing required field `title`"
                " (value {'name': 'b'})"
            )

    arun(main)
