"""Changes reach observers on their own (issue 14): the running loop, other runtimes and
processes, first values, and change patches of mapped lists.

The loop is driven by hand (`await asyncio.sleep(0)` runs what is queued); only the
cross-process test waits, polling with a deadline for the other process's commit.
"""

from __future__ import annotations

import asyncio
import copy
import json
import subprocess
import sys
import textwrap
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from cells import MISSING, SQLiteStore, value_equal
from runner import Runtime, lift, pattern


def run(main: Callable[[], Coroutine[Any, Any, None]]) -> None:
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(main())
    finally:
        loop.close()


def double(v: Any) -> Any:
    return None if v is None else v * 2


def upper(v: Any) -> Any:
    return str(v or "").upper()


@pattern
def Doubled(value):  # type: ignore[no-untyped-def]
    return {"d": lift(double)(value)}


@pattern
def Tag(element):  # type: ignore[no-untyped-def]
    return {"up": lift(upper)(element["name"])}


@pattern
def Tags(items):  # type: ignore[no-untyped-def]
    return {"out": items.map(Tag)}


def test_a_write_reaches_sinks_on_it_and_derived_from_it_with_no_call() -> None:
    async def main() -> None:
        rt = Runtime()
        x, out = rt.get_cell("x"), rt.get_cell("out")
        tx = rt.edit()
        x.with_tx(tx).set(1)
        rt.run(tx, Doubled, {"value": x}, out)
        await tx.commit()
        on_x: list[Any] = []
        on_d: list[Any] = []
        x.sink(on_x.append)
        out.key("d").sink(on_d.append)
        x.set(5)
        await asyncio.sleep(0)
        assert ([1, 5], [2, 10]) == (on_x, on_d)
        await rt.aclose()

    run(main)


def test_a_sink_on_a_derived_value_not_computed_yet_gets_the_value_first() -> None:
    # Without a loop as with one: the sink's demand starts the lift, and the first
    # call holds its result, never MISSING.
    rt = Runtime()
    x, out = rt.get_cell("x"), rt.get_cell("out")
    tx = rt.edit()
    x.with_tx(tx).set(3)
    rt.run(tx, Doubled, {"value": x}, out)
    tx.commit()
    seen: list[Any] = []
    out.key("d").sink(seen.append)
    observed: list[Any] = []
    out.observe().subscribe(observed.append)
    assert [6] == seen
    assert [{"d": 6}] == observed
    json.dumps([seen, observed])


def test_an_absent_value_reaches_an_observer_as_none() -> None:
    rt = Runtime()
    seen: list[Any] = []
    rt.get_cell("nothing").sink(seen.append)
    assert [None] == seen
    assert MISSING is rt.get_cell("nothing").get()


def test_a_commit_by_another_runtime_on_the_store_reaches_sinks_in_one_turn() -> None:
    async def main() -> None:
        rt = Runtime()
        other = Runtime(store=rt.store)
        x, out = rt.get_cell("x"), rt.get_cell("out")
        tx = rt.edit()
        x.with_tx(tx).set(1)
        rt.run(tx, Doubled, {"value": x}, out)
        await tx.commit()
        seen: list[Any] = []
        out.key("d").sink(seen.append)
        other.get_cell("x").set(20)
        await asyncio.sleep(0)  # the turn in which this runtime integrates it
        assert [2, 40] == seen
        await other.aclose()
        await rt.aclose()

    run(main)


WRITER = textwrap.dedent(
    """
    import sys
    from cells import SQLiteStore
    from runner import Runtime

    store = SQLiteStore(sys.argv[1], poll_interval=0)
    rt = Runtime(store=store, space="flow")
    result = rt.get_cell("x").set(int(sys.argv[2])).wait()
    assert result.ok, result
    rt.close()
    store.close()
    """
)


def test_a_commit_by_another_process_on_the_sqlite_file_reaches_sinks(tmp_path: Path) -> None:
    db = str(tmp_path / "flow.db")

    async def main() -> None:
        store = SQLiteStore(db)
        rt = Runtime(store=store, space="flow")
        x, d = rt.get_cell("x"), rt.get_cell("d")
        await x.set(1)
        rt.scheduler.derive(d, [x], double)
        seen: list[Any] = []
        d.sink(seen.append)
        assert [2] == seen
        proc = await asyncio.to_thread(
            subprocess.run, [sys.executable, "-c", WRITER, db, "21"], capture_output=True
        )
        assert 0 == proc.returncode, proc.stderr.decode()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10.0
        while seen[-1] != 42 and loop.time() < deadline:
            await asyncio.sleep(0.005)  # not a call on the runtime: the loop just turns
        assert [2, 42] == seen
        await rt.aclose()
        store.close()

    run(main)


def _apply(doc: Any, ops: list[dict[str, Any]]) -> Any:
    """Enough of RFC 6902 for these tests (the property test has the full oracle)."""
    for op in ops:
        parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        if not parts:
            doc = copy.deepcopy(op["value"])
            continue
        node = doc
        for p in parts[:-1]:
            node = node[int(p)] if isinstance(node, list) else node[p]
        last: Any = int(parts[-1]) if isinstance(node, list) else parts[-1]
        if op["op"] == "replace":
            node[last] = copy.deepcopy(op["value"])
        elif op["op"] == "add":
            if isinstance(node, list):
                node.insert(last, copy.deepcopy(op["value"]))
            else:
                node[last] = copy.deepcopy(op["value"])
        elif op["op"] == "remove":
            del node[last]
        else:
            raise AssertionError(op)
    return doc


def test_one_element_edited_in_a_mapped_list_patches_only_under_its_index() -> None:
    rt = Runtime()
    items, res = rt.get_cell("items"), rt.get_cell("res")
    tx = rt.edit()
    items.with_tx(tx).set([{"name": f"n{i}"} for i in range(40)])
    rt.run(tx, Tags, {"items": items}, res)
    tx.commit()
    calls: list[list[dict[str, Any]]] = []
    res.key("out").sink_patches(calls.append)
    assert [[{"op": "replace", "path": "", "value": [{"up": f"N{i}"} for i in range(40)]}]] == (
        calls
    )
    items.key(17, "name").set("zz")
    rt.settle()
    assert [{"op": "replace", "path": "/17/up", "value": "ZZ"}] == calls[-1]
    mirror: Any = None
    for ops in calls:
        mirror = _apply(mirror, ops)
    items.insert(0, {"name": "first"})
    items.remove(20)
    rt.settle()
    for ops in calls[2:]:
        mirror = _apply(mirror, ops)
    assert value_equal(res.key("out").get(), mirror)
    assert 3 == len(calls)


def test_observe_patches_is_the_same_stream_and_runs_on_the_loop() -> None:
    async def main() -> None:
        rt = Runtime()
        doc = rt.get_cell("doc")
        await doc.set({"a": 1, "b/c": [1, 2]})
        got: list[Any] = []
        rt.get_cell("doc").observe_patches().subscribe(got.append)
        doc.key("b/c").push(3)
        doc.key("a").delete()
        await asyncio.sleep(0)
        assert [
            [{"op": "replace", "path": "", "value": {"a": 1, "b/c": [1, 2]}}],
            [{"op": "remove", "path": "/a"}, {"op": "add", "path": "/b~1c/2", "value": 3}],
        ] == got
        await rt.aclose()

    run(main)


def test_a_moved_element_of_a_mapped_list_of_links_arrives_as_one_move() -> None:
    rt = Runtime()
    items, res = rt.get_cell("items"), rt.get_cell("res")
    docs = [rt.get_cell(("tag", i)) for i in range(8)]
    tx = rt.edit()
    for i, d in enumerate(docs):
        d.with_tx(tx).set({"name": f"n{i}"})
    items.with_tx(tx).set([d.link() for d in docs])
    rt.run(tx, Tags, {"items": items}, res)
    tx.commit()
    calls: list[list[dict[str, Any]]] = []
    res.key("out").sink_patches(calls.append)
    order = [docs[i].link() for i in (1, 2, 3, 4, 5, 0, 6, 7)]
    items.set(order)
    rt.settle()
    assert [{"op": "move", "from": "/0", "path": "/5"}] == calls[-1]


def test_observe_patches_ends_as_observe_does() -> None:
    rt = Runtime()
    x, out = rt.get_cell("x"), rt.get_cell("out")
    tx = rt.edit()
    x.with_tx(tx).set(1)
    rt.run(tx, Doubled, {"value": x}, out)
    tx.commit()
    got: list[Any] = []
    completed: list[bool] = []
    out.observe_patches().subscribe(got.append, lambda e: None, lambda: completed.append(True))
    x.set(2)
    rt.settle()
    assert [
        [{"op": "replace", "path": "", "value": {"d": 2}}],
        [{"op": "replace", "path": "/d", "value": 4}],
    ] == got
    rt.close()
    assert [True] == completed
