"""Async runs never land a stale value (issue 18 item 5), under any interleaving.

An async node computes `10 * a`, each run waiting at the gate of the value it
read. Random programs change `a`, open gates, settle and let the loop turn.
Law: whenever the output document changes, it equals `10 *` the input visible
at that moment (a result computed from an input that changed meanwhile never
lands); once every gate is open and the scheduler is idle, it equals `10 * a`.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from cells import MISSING, Notification

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "scheduler"))
from test_async_runs import Env

VALUES = st.integers(min_value=0, max_value=3)
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("set"), VALUES),
        st.tuples(st.just("open"), VALUES),
        st.tuples(st.just("settle"), st.just(0)),
        st.tuples(st.just("turn"), st.integers(min_value=1, max_value=3)),
    ),
    max_size=30,
)


@given(OPS)
def test_an_async_run_never_lands_a_value_computed_from_a_changed_input(
    ops: list[tuple[str, int]],
) -> None:
    async def main() -> None:
        env = Env()
        bad: list[tuple[Any, Any]] = []

        def watch(nf: Notification) -> None:
            if nf.kind == "commit" and any(c.key == env.b.doc_key for c in nf.changes):
                b, a = env.b.get(), env.a.get()
                if b is not MISSING and b != 10 * a:
                    bad.append((b, a))

        unsubscribe = env.sp.replica.subscribe(watch)
        env.sch.sink(env.b, lambda _v: None)
        for op, arg in ops:
            if op == "set":
                env.a.set(arg)
            elif op == "open":
                env.gate(arg).set()
            elif op == "settle":
                env.sch.settle()
            else:
                for _ in range(arg):
                    await asyncio.sleep(0)
            assert [] == bad
        for value in range(4):
            env.gate(value).set()
        await env.sch.idle()
        assert [] == bad
        assert 10 * env.a.get() == env.b.get()
        env.check()
        unsubscribe()
        env.sch.close()

    asyncio.run(main())
