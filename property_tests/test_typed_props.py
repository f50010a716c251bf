"""Laws of typed arguments, `state()` and `when()` (issue 18 items 1-3).

- P-TYPED-1: a typed argument is accepted exactly when msgspec converts it, and
  the error of a refused one names the first bad element's path.
- P-STATE-1: a run's state is the sum of what its handlers added, whatever
  setups, stops and re-runs of the same result come between.
- P-WHEN-1: after any sequence of condition writes, each kept or rejected, exactly
  the child of the branch the durable condition picks runs, and the value is its.
"""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st
from typed_patterns import PItem, PList, PSwitch, PTally

from cells import MemoryStore, Outcome
from runner import PatternError, Runtime
from runner import _docs as docs

titles = st.one_of(st.text(max_size=3), st.integers(-2, 2), st.none())


@given(st.lists(st.fixed_dictionaries({"title": titles}), max_size=5))
def test_P_TYPED_1_accepted_exactly_when_msgspec_converts(items: list[dict[str, Any]]) -> None:
    bad = [i for i, item in enumerate(items) if not isinstance(item["title"], str)]
    if not bad:
        prepared = PList.prepare({"items": items}, "prop")
        expected = msgspec.to_builtins(msgspec.convert(items, list[PItem]))
        assert {"items": expected, "limit": 3} == prepared
        return
    with pytest.raises(PatternError) as info:
        PList.prepare({"items": items}, "prop")
    assert f"parameter 'items' at items[{bad[0]}].title: expected `str`" in str(info.value)


steps = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(1, 5)),
        st.tuples(st.just("setup"), st.sampled_from(["a", "b"])),
        st.tuples(st.just("stop"), st.just(0)),
    ),
    max_size=8,
)


@given(steps)
def test_P_STATE_1_state_is_the_sum_of_what_was_added(ops: list[tuple[str, Any]]) -> None:
    async def main() -> None:
        async with Runtime(MemoryStore()) as rt:
            res = rt.get_cell("t")
            tx = rt.edit()
            rt.run(tx, PTally, {}, res)
            assert (await tx.commit()).ok
            added = 0
            running = True
            for op, arg in ops:
                if op == "add":
                    if not running:
                        tx = rt.edit()
                        rt.run(tx, PTally, {}, res)
                        assert (await tx.commit()).ok
                        running = True
                    assert "done" == await rt.send(res.key("add"), {"by": arg})
                    added += arg
                elif op == "setup":
                    tx = rt.edit()
                    rt.run(tx, PTally, {"label": arg}, res)
                    assert (await tx.commit()).ok
                    running = True
                else:
                    rt.stop(res)
                    running = False
                await rt.idle()
                assert added == await res.key("total").pull()
            rt._check()

    asyncio.run(asyncio.wait_for(main(), 30))


@given(st.lists(st.tuples(st.booleans(), st.booleans()), min_size=1, max_size=6))
def test_P_WHEN_1_exactly_the_durable_branchs_child_runs(flips: list[tuple[bool, bool]]) -> None:
    async def main() -> None:
        store = MemoryStore()
        async with Runtime(store) as rt:
            flag = rt.get_cell("flag")
            res = rt.get_cell("s")
            tx = rt.edit()
            flag.with_tx(tx).set(True)
            rt.run(tx, PSwitch, {"flag": flag}, res)
            assert (await tx.commit()).ok
            await rt.idle()
            durable = True
            for value, keep in flips:
                with store.testing.hold_verdicts() as gate:
                    tx = rt.edit()
                    flag.with_tx(tx).set(value)
                    pending = tx.commit()
                    rt.settle()
                    if gate.waiting():
                        if keep:
                            gate.accept(0)
                        else:
                            gate.reject(0, Outcome.PERMANENT)
                    gate.release()
                ok = (await pending).ok
                if ok:
                    durable = value
                await rt.idle()
                chosen = 0 if durable else 1
                regs = rt.registrations()
                running = {
                    i for i in (0, 1) if docs.internal_link(res.link(), i).key(rt.identity) in regs
                }
                assert {chosen} == running
                name = "then" if durable else "otherwise"
                assert {"shown": {"text": f"shows {name}"}} == await res.pull()
            rt._check()

    asyncio.run(asyncio.wait_for(main(), 30))
