"""The pattern builder: tracing, graphs, identities and errors."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from cells import MemoryStore, Space, encode_json
from runner import (
    Binding,
    Navigate,
    PatternError,
    PatternGraph,
    PatternInstance,
    PatternLoadError,
    handler,
    lift,
    load_pattern,
    navigate_to,
    pattern,
)


def double(v: int) -> int:
    return v * 2


@pattern
def Child(value: Any) -> Any:
    return {"doubled": lift(double)(value)}


@handler
def add(event: Any, items: Any) -> None:
    items.push(event["item"])


@pattern
def Parent(value: Any, items: Any) -> Any:
    child = Child(value=value)
    return {
        "child": child,
        "doubled": child["doubled"],
        "first": items[0],
        "total": lift(lambda xs: sum(xs))(items),
        "add": add(items=items),
        "constant": {"title": "hi", "tags": ["a"]},
    }


@pattern
def Tree(node: Any) -> Any:
    # Recursion over finite data: the nested node is recorded, not traced now.
    return {"label": node["label"], "first_child": Tree(node=node["children"][0])}


def ref(cell: str, name: str, *path: Any) -> Binding:
    return Binding(cell, name, tuple(path))  # type: ignore[arg-type]


def test_tracing_records_nodes_and_bindings() -> None:
    g = Parent.graph
    assert ("value", "items") == g.params
    assert ["pattern", "lift", "handler"] == [n.kind for n in g.nodes]
    assert f"{__name__}:Child" == g.nodes[0].target
    assert {"value": ref("argument", "", "value")} == g.nodes[0].inputs
    assert {"args": [ref("argument", "", "items")], "kwargs": {}} == g.nodes[1].inputs
    assert f"{__name__}:add" == g.nodes[2].target
    assert {
        "child": ref("internal", "n0"),
        "doubled": ref("internal", "n0", "doubled"),
        "first": ref("argument", "", "items", 0),
        "total": ref("internal", "n1"),
        "add": ref("internal", "n2"),
        "constant": {"title": "hi", "tags": ["a"]},
    } == g.result
    g._check()


def test_function_ids_name_module_functions_and_lambdas_by_pattern_and_node() -> None:
    assert f"{__name__}:double" == Child.graph.nodes[0].target
    assert double is Child.function(f"{__name__}:double")
    lambda_id = Parent.graph.nodes[1].target
    assert f"{__name__}:Parent#1" == lambda_id
    assert 6 == Parent.function(lambda_id)([1, 2, 3])
    with pytest.raises(PatternLoadError, match="no function"):
        Parent.function(f"{__name__}:Parent#9")


def test_graph_round_trips_through_json_and_the_store_encoding() -> None:
    data = Parent.graph.to_json()
    text = json.dumps(data)  # plain JSON
    assert Parent.graph == PatternGraph.from_json(json.loads(text))
    encode_json(data)  # and the store's encoding accepts it (bindings use reserved sigils)


def test_tracing_is_lazy_and_deterministic() -> None:
    @pattern
    def Early(x: Any) -> Any:
        return {"later": Later(y=x)}  # defined below: fine, nothing is traced yet

    @pattern
    def Later(y: Any) -> Any:
        return {"y": y}

    assert "pattern" == Early.graph.nodes[0].kind
    again = pattern(Early.fn)
    assert again.graph.to_json() == Early.graph.to_json()


def test_recursive_pattern_traces_without_recursing() -> None:
    g = Tree.graph
    assert 1 == len(g.nodes)
    assert Tree.identity == g.nodes[0].target
    assert {"node": ref("argument", "", "node", "children", 0)} == g.nodes[0].inputs


def test_navigate_to_records_a_node_in_a_body_and_a_request_outside() -> None:
    @pattern
    def Opener(card: Any) -> Any:
        return {"opened": navigate_to(card)}

    node = Opener.graph.nodes[0]
    assert ("navigate", {"target": ref("argument", "", "card")}) == (node.kind, node.inputs)
    request = navigate_to("somewhere")
    assert isinstance(request, Navigate)
    assert "somewhere" == request.target


def test_calling_a_pattern_outside_a_body_makes_an_instance() -> None:
    inst = Child(value=3)
    assert isinstance(inst, PatternInstance)
    assert (Child, {"value": 3}) == (inst.pattern, inst.argument)
    assert "Child(value=3)" == repr(inst)


def test_cells_in_a_body_become_links() -> None:
    sp = Space(MemoryStore(), "x")
    shared = sp.cell("shared")

    @pattern
    def UsesCell(a: Any) -> Any:
        return {"shared": shared, "a": a}

    assert shared.link() == UsesCell.graph.result["shared"]


# ---------------------------------------------------------------------------- errors


def test_unknown_argument_names_the_pattern_and_parameter() -> None:
    with pytest.raises(
        PatternError, match=r"Child has no parameter 'valu' \(its parameters: value\)"
    ):
        Child(valu=1)

    @pattern
    def Bad(x: Any) -> Any:
        return {"c": Child(valu=x)}

    with pytest.raises(PatternError, match="has no parameter 'valu'"):
        Bad.graph  # noqa: B018


def test_lift_and_handler_only_work_inside_a_body() -> None:
    with pytest.raises(PatternError, match="inside a @pattern body"):
        lift(double)(3)
    with pytest.raises(PatternError, match="inside a @pattern body"):
        add(items=[])


def test_a_ref_has_no_value_while_tracing() -> None:
    @pattern
    def Branches(x: Any) -> Any:
        return {"y": 1 if x else 2}

    with pytest.raises(PatternError, match="has no value while the pattern is traced"):
        Branches.graph  # noqa: B018

    @pattern
    def Loops(xs: Any) -> Any:
        return {"ys": [x for x in xs]}

    with pytest.raises(PatternError, match="cannot be iterated"):
        Loops.graph  # noqa: B018


def test_non_json_result_names_the_place() -> None:
    @pattern
    def Sets(x: Any) -> Any:
        return {"bad": {"inner": {1, 2}}}

    with pytest.raises(PatternError, match=r"result of pattern .*Sets\['bad'\]\['inner'\].*set"):
        Sets.graph  # noqa: B018


def test_refs_cannot_cross_pattern_bodies() -> None:
    leaked: list[Any] = []

    @pattern
    def Leaks(x: Any) -> Any:
        leaked.append(x)
        return {}

    @pattern
    def Uses(y: Any) -> Any:
        return {"z": leaked[0]}

    Leaks.graph  # noqa: B018
    with pytest.raises(PatternError, match="refs cannot cross pattern bodies"):
        Uses.graph  # noqa: B018


def test_signatures_must_name_fields() -> None:
    def star(*xs: Any) -> Any:
        return {}

    with pytest.raises(PatternError, match="must be a plain or keyword parameter"):
        pattern(star)
    with pytest.raises(PatternError, match="needs a first parameter for the event"):
        handler(lambda: None)
    with pytest.raises(PatternError, match="no parameter 'itemz'"):

        @pattern
        def WrongHandlerArg(items: Any) -> Any:
            return {"add": add(itemz=items)}

        WrongHandlerArg.graph  # noqa: B018


def test_a_body_that_raises_fails_the_same_way_each_time() -> None:
    calls: list[int] = []

    @pattern
    def Broken(x: Any) -> Any:
        calls.append(1)
        raise KeyError("missing thing")

    for _ in range(2):
        with pytest.raises(
            PatternError, match=r"tracing pattern .*Broken failed: KeyError"
        ) as info:
            Broken.graph  # noqa: B018
        assert isinstance(info.value.__cause__, KeyError)
    assert 2 == len(calls)  # nothing half-traced was kept


# ---------------------------------------------------------------------------- loading


def test_load_pattern_by_identity(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "cw_loadable.py").write_text(
        textwrap.dedent(
            """
            from runner import lift, pattern

            def inc(v):
                return v + 1

            @pattern
            def Counter(value):
                return {"next": lift(inc)(value)}

            class Holder:
                @pattern
                def Inner(x):
                    return {"x": x}

            not_a_pattern = 3
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("cw_loadable", None)
    loaded = load_pattern("cw_loadable:Counter")
    assert "cw_loadable:Counter" == loaded.identity
    assert "cw_loadable:inc" == loaded.graph.nodes[0].target
    assert "cw_loadable:Holder.Inner" == load_pattern("cw_loadable:Holder.Inner").identity
    with pytest.raises(PatternLoadError, match="has no 'Missing'"):
        load_pattern("cw_loadable:Missing")
    with pytest.raises(PatternLoadError, match="it is a int, not a @pattern"):
        load_pattern("cw_loadable:not_a_pattern")
    with pytest.raises(PatternLoadError, match="importing 'cw_no_such_module' failed"):
        load_pattern("cw_no_such_module:X")
    with pytest.raises(PatternLoadError, match="an identity is 'module:qualname'"):
        load_pattern("no-colon")


def test_a_pattern_defined_in_a_function_cannot_be_loaded() -> None:
    @pattern
    def Local(x: Any) -> Any:
        return {}

    with pytest.raises(PatternLoadError, match="defined inside a function") as info:
        load_pattern(Local.identity)
    assert Local.identity == info.value.identity
