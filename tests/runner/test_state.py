"""`state(initial)`: a cell a run owns (issue 18 item 2)."""

from __future__ import annotations

from typing import Any

import pytest
from support import arun
from typed_defs import Clicker, Expander

from cells import MemoryStore, Outcome
from runner import PatternError, Runtime, pattern, state
from runner import _docs as docs


async def _clicker(rt: Runtime, name: str = "c", label: str | None = None) -> Any:
    res = rt.get_cell(name)
    tx = rt.edit()
    rt.run(tx, Clicker, {} if label is None else {"label": label}, res)
    assert (await tx.commit()).ok
    return res


def test_state_starts_at_its_initial_value_and_handlers_and_lifts_use_it() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            res = await _clicker(rt)
            assert {"label": "clicks", "clicks": 0, "doubled": 0, "bump": None} == await res.pull()
            assert "done" == await rt.send(res.key("bump"), {"by": 4})
            assert 4 == await res.key("clicks").pull()
            assert 8 == await res.key("doubled").pull()

    arun(main)


def test_state_id_derives_from_the_result_and_the_node() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            res = await _clicker(rt)
            index = next(n.index for n in Clicker.graph.nodes if n.kind == "state")
            assert docs.internal_link(res.link(), index).id == res.key("clicks").resolve().id
            other = await _clicker(rt, "other")
            assert res.key("clicks").resolve().id != other.key("clicks").resolve().id

    arun(main)


def test_initial_is_written_only_at_first_setup() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            res = await _clicker(rt)
            await rt.send(res.key("bump"), {"by": 2})
            tx = rt.edit()
            rt.run(tx, Clicker, {"label": "again"}, res)  # a second setup of the same result
            assert (await tx.commit()).ok
            assert {"label": "again", "clicks": 2, "doubled": 4, "bump": None} == await res.pull()
            rt.stop(res)
            await rt.idle()
            assert 0 == rt.scheduler.statistics()["nodes"]  # released with the run
            res = await _clicker(rt)  # stopped and run again: the state stays
            assert 2 == await res.key("clicks").pull()

    arun(main)


def test_a_second_runtime_sees_the_same_state() -> None:
    async def main() -> None:
        store = MemoryStore()
        async with Runtime(store) as one, Runtime(store) as two:
            res = await _clicker(one)
            await one.send(res.key("bump"), {"by": 3})
            await one.idle()
            again = two.get_cell("c")
            assert await two.start(again) is True
            assert 3 == await again.key("clicks").pull()
            await two.send(again.key("bump"), {"by": 1})
            await two.idle()
            await one.idle()
            assert 4 == await res.key("clicks").pull()

    arun(main)


def test_restart_keeps_state_even_when_the_run_is_set_up_again(tmp_path: Any) -> None:
    from cells import SQLiteStore

    path = tmp_path / "state.db"

    async def first() -> None:
        async with Runtime(SQLiteStore(path)) as rt:
            res = await _clicker(rt)
            assert "done" == await rt.send(res.key("bump"), {"by": 5})

    async def second() -> None:
        async with Runtime(SQLiteStore(path)) as rt:
            res = await _clicker(rt, label="restarted")
            await rt.idle()
            assert {"label": "restarted", "clicks": 5, "doubled": 10, "bump": None} == (
                await res.pull()
            )

    arun(first)
    arun(second)


def test_inspect_shows_each_runs_state_by_name() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            res = await _clicker(rt)
            await rt.send(res.key("bump"), {"by": 7})
            exp = rt.get_cell("e")
            tx = rt.edit()
            rt.run(tx, Expander, {}, exp)
            assert (await tx.commit()).ok
            await rt.idle()
            regs = {r["key"]: r for r in rt.inspect()["registrations"]}
            clicks = res.key("clicks").resolve().id
            assert {"clicks": {"id": clicks, "value": 7}} == regs[str(rt.key(res))]["state"]
            assert False is regs[str(rt.key(exp))]["state"]["open"]["value"]

    arun(main)


def test_state_outside_a_body_or_with_a_reference_is_refused() -> None:
    with pytest.raises(PatternError, match="inside a @pattern body"):
        state(0)

    def body(x):  # type: ignore[no-untyped-def]
        return {"s": state(x)}

    body.__qualname__ = "state_of_a_ref"
    with pytest.raises(PatternError, match="holds a reference; an initial value is plain data"):
        pattern(body).graph  # noqa: B018


def test_a_setup_on_a_replica_that_has_not_loaded_the_state_never_overwrites_it() -> None:
    async def main() -> None:
        store = MemoryStore()
        async with Runtime(store) as one, Runtime(store) as two:
            res = await _clicker(one)
            await one.send(res.key("bump"), {"by": 3})
            await one.idle()
            index = next(n.index for n in Clicker.graph.nodes if n.kind == "state")
            key = docs.internal_link(res.link(), index).key(one.identity)
            with store.testing.hold_loads(key) as gate:
                again = two.get_cell("c")
                tx = two.edit()
                two.run(tx, Clicker, {"label": "two"}, again)  # the state reads as absent
                pending = tx.commit()
                gate.release()
            assert Outcome.STALE_BASIS == (await pending).outcome
            await two.idle()
            tx = two.edit()
            two.run(tx, Clicker, {"label": "two"}, again)  # run again, as a stale basis asks
            assert (await tx.commit()).ok
            await two.idle()
            assert {"label": "two", "clicks": 3, "doubled": 6, "bump": None} == await again.pull()

    arun(main)
