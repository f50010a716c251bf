"""Change patches of a mapped list: what a view pays per one-element edit.

The workload: `Tags`, `{"out": items.map(Tag)}` with `Tag(element) = {"up":
lift(upper)(element["name"])}`, over N elements (``BENCH_FLOW_SIZE``, default
10,000), inline dicts or links to one document per element. Each operation
edits one element's name (spread over the list), then:

- baseline: pulls that element's result (`res.key("out", i, "up")`), the
  one-element edit of the lists benchmarks;
- `sink_patches`: settles with a `sink_patches` observer on the whole mapped
  list (the operations must be exactly one `replace` under `/<i>`);
- whole `sink`: settles with a plain `sink` on the whole mapped list.

Counts: computation runs and lift calls per edit (each must be 1: only the
edited element's node runs), and patch operations delivered per edit.

Timed: the edits and their settles. Not timed: attaching the observer (setup)
and removing it (`cancel()`, O(N): it drops every read of the whole list),
which run once per sample, not once per edit.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from bench.harness import BenchError, Counts, Finish, Run, bench
from cells import Cell
from runner import Runtime, lift, pattern

EDITS = 20
CALLS = [0]


def _size() -> int:
    raw = os.environ.get("BENCH_FLOW_SIZE", "10000")
    try:
        n = int(raw)
    except ValueError:
        n = 0
    if n < EDITS:
        raise BenchError(f"BENCH_FLOW_SIZE must be an integer >= {EDITS}, got {raw!r}")
    return n


N = _size()


def upper(name: Any) -> str:
    CALLS[0] += 1
    return str(name or "").upper()


@pattern
def Tag(element):  # type: ignore[no-untyped-def]
    return {"up": lift(upper)(element["name"])}


@pattern
def Tags(items):  # type: ignore[no-untyped-def]
    return {"out": items.map(Tag)}


class _World:
    """One runtime with the mapped list built and computed (shared by the rows)."""

    def __init__(self, links: bool) -> None:
        self.rt = Runtime(space="flow-bench")
        self.items = self.rt.get_cell("items")
        self.res = self.rt.get_cell("res")
        self.links = links
        tx = self.rt.edit()
        self.docs: list[Cell] = []
        if links:
            for i in range(N):
                doc = self.rt.get_cell(("tag", i))
                doc.with_tx(tx).set({"name": f"n{i}"})
                self.docs.append(doc)
            self.items.with_tx(tx).set([d.link() for d in self.docs])
        else:
            self.items.with_tx(tx).set([{"name": f"n{i}"} for i in range(N)])
        self.rt.run(tx, Tags, {"items": self.items}, self.res)
        tx.commit()
        self.rt.settle()
        got = self.rt.scheduler.pull_now(self.res.key("out"))
        if len(got) != N:
            raise BenchError(f"the {N}-element map computed {len(got)} results")
        self.made = 0

    def edit(self, i: int, name: str) -> None:
        target = self.docs[i] if self.links else self.items.key(i)
        target.key("name").set(name)

    def positions(self) -> list[tuple[int, str]]:
        self.made += 1
        step = N // EDITS
        return [((k * step + self.made) % N, f"e{self.made}-{k}") for k in range(EDITS)]

    def counts(self) -> dict[str, int]:
        return {"computations": self.rt.scheduler.stats.runs_computation, "calls": CALLS[0]}


_worlds: dict[bool, _World] = {}


def _world(links: bool) -> _World:
    if links not in _worlds:
        _worlds[links] = _World(links)
    return _worlds[links]


def _check(what: str, counts: dict[str, int]) -> dict[str, int]:
    for k in ("computations", "calls"):
        if counts[k] != EDITS:
            raise BenchError(f"{what}: {counts[k]} {k} for {EDITS} edits (expected one each)")
    return counts


def _rows(links: bool) -> None:
    kind = "links" if links else "inline dicts"
    group = f"flow patches {'links' if links else 'inline'}"

    @bench(group=group, name=f"edit + pull N={N} ({kind})", ops=EDITS, baseline=True)
    def pull_one() -> Run:
        world = _world(links)
        todo = world.positions()

        def run() -> Counts:
            start = world.counts()
            for i, name in todo:
                world.edit(i, name)
                got = world.rt.scheduler.pull_now(world.res.key("out", i, "up"))
                if got != name.upper():
                    raise BenchError(f"pulled {got!r} after editing element {i}")
            return _check("edit + pull", {k: v - start[k] for k, v in world.counts().items()})

        return run

    @bench(group=group, name=f"edit + sink_patches N={N} ({kind})", ops=EDITS)
    def patches() -> Run:
        world = _world(links)
        todo = world.positions()
        got: list[list[dict[str, Any]]] = []
        cancel = world.res.key("out").sink_patches(got.append)
        got.clear()

        def run() -> Finish:
            start = world.counts()
            try:
                for i, name in todo:
                    world.edit(i, name)
                    world.rt.settle()
            except BaseException:
                cancel()
                raise
            counts = {k: v - start[k] for k, v in world.counts().items()}

            def finish() -> Counts:  # untimed: the observer's removal and the checks
                cancel()
                expected = [
                    [{"op": "replace", "path": f"/{i}/up", "value": name.upper()}]
                    for i, name in todo
                ]
                if got != expected:
                    raise BenchError(f"sink_patches delivered {got[:2]!r}..., not one op per edit")
                return {**_check("edit + sink_patches", counts), "ops": sum(map(len, got))}

            return finish

        return run

    @bench(group=group, name=f"edit + whole sink N={N} ({kind})", ops=EDITS)
    def whole() -> Run:
        world = _world(links)
        todo = world.positions()
        got: list[Any] = []
        cancel: Callable[[], None] = world.res.key("out").sink(got.append)
        got.clear()

        def run() -> Finish:
            start = world.counts()
            try:
                for i, name in todo:
                    world.edit(i, name)
                    world.rt.settle()
            except BaseException:
                cancel()
                raise
            counts = {k: v - start[k] for k, v in world.counts().items()}

            def finish() -> Counts:  # untimed: the observer's removal and the checks
                cancel()
                if len(got) != EDITS or any(
                    g[i]["up"] != n.upper() for g, (i, n) in zip(got, todo, strict=True)
                ):
                    raise BenchError("the whole-value sink did not see every edit")
                return _check("edit + whole sink", counts)

            return finish

        return run


_rows(False)
_rows(True)
