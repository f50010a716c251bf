"""Rich display in notebooks: every object users print has one MIME bundle shape."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

import cellweave
from cells import MemoryStore, Space, mimebundle
from cellweave import Runtime, lift, pattern
from cellweave._widget import WidgetError, bundled_module

KINDS = {"text/plain", "text/html", "application/json"}


@pattern
def Doubler(value: Any) -> Any:
    return {"doubled": lift(lambda v: (v or 0) * 2)(value)}


def test_a_cell_shows_its_name_its_value_escaped_html_and_json() -> None:
    rt = Runtime()
    cell = rt.get_cell("note")
    cell.set({"title": "<script>alert(1)</script>", "n": 3})
    rt.settle()
    bundle = cell._repr_mimebundle_()
    assert KINDS == set(bundle)
    assert bundle["text/plain"].startswith(repr(cell))
    assert '"n": 3' in bundle["text/plain"]
    assert "<script>" not in bundle["text/html"]
    assert "&lt;script&gt;" in bundle["text/html"]
    assert {"title": "<script>alert(1)</script>", "n": 3} == bundle["application/json"]
    json.dumps(bundle)  # every part is plain data


def test_a_list_of_records_is_a_table_and_long_lists_are_cut() -> None:
    rows = [{"title": f"t{i}", "done": i % 2 == 0} for i in range(500)]
    bundle = mimebundle("rows", rows)
    html = bundle["text/html"]
    assert "<table>" in html and "<th>title</th>" in html
    assert 50 == html.count("<tr><td>")
    assert "450 more" in html
    assert len(bundle["text/plain"]) < 120


def test_runtime_session_pattern_instance_and_inspect_display() -> None:
    rt = Runtime(principal="alice")
    bundles = {
        "runtime": rt._repr_mimebundle_(),
        "session": rt.session("alice", "tab")._repr_mimebundle_(),
        "pattern": Doubler._repr_mimebundle_(),
        "instance": Doubler(value=rt.get_cell("v"))._repr_mimebundle_(),
        "inspect": rt.inspect()._repr_mimebundle_(),
    }
    for name, bundle in bundles.items():
        assert KINDS == set(bundle), name
        json.dumps(bundle)
    assert "alice" == bundles["runtime"]["application/json"]["identity"]["principal"]
    assert "tab" == bundles["session"]["application/json"]["session"]
    assert Doubler.identity == bundles["pattern"]["application/json"]["identity"]
    assert Doubler.identity == bundles["instance"]["application/json"]["pattern"]
    assert bundles["inspect"]["text/plain"].startswith("inspect() as alice/")
    assert isinstance(rt.inspect(), dict)
    rt.close()
    assert {} == rt._repr_mimebundle_()["application/json"]


def test_the_widget_module_is_one_self_contained_es_module() -> None:
    text = bundled_module()
    assert "import " not in "\n".join(
        line for line in text.splitlines() if line.startswith("import ")
    )
    assert "function applyPatch" in text
    assert "export default { render }" in text
    assert not any(line.startswith("export {") for line in text.splitlines())


def test_view_refuses_what_it_cannot_show() -> None:
    with pytest.raises(WidgetError, match="expected a Cell"):
        cellweave.view("not a cell")  # type: ignore[arg-type]
    plain = Space(MemoryStore()).cell("x")
    with pytest.raises(WidgetError, match="made without a runtime"):
        cellweave.view(plain)


def test_the_widget_speaks_the_shell_protocol_over_its_comm() -> None:
    async def main() -> list[dict[str, Any]]:
        async with Runtime(principal="alice") as rt:
            cell = rt.get_cell("x")
            cell.set({"a": 1})
            await rt.idle()
            widget = cellweave.view(cell)
            sent: list[dict[str, Any]] = []
            widget.send = sent.append
            widget._handle_custom_msg({"op": "hello", "ref": 1}, [])
            widget._handle_custom_msg({"op": "watch", "watch": 1, "cell": "root", "ref": 2}, [])
            # Each comm message is handled in a task of its own: let them run.
            for _ in range(3):
                await asyncio.sleep(0)
            await rt.idle()
            cell.key("a").set(2)
            await rt.idle()
            return sent

    sent = asyncio.run(main())
    kinds = [m["type"] for m in sent]
    assert "hello" == kinds[0] and "alice" == sent[0]["principal"]
    snapshot = next(m for m in sent if m["type"] == "snapshot")
    assert {"a": 1} == snapshot["value"]
    patch = next(m for m in sent if m["type"] == "patch")
    assert [{"op": "replace", "path": "/a", "value": 2}] == patch["ops"]
