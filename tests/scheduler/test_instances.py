"""The graph's instance rule: writers of the same places for several identities.

The instances of a space-scoped result that k principals started all write the
same documents; a reader depends on its own identity's writer of such a spot
when there is one, on all of them otherwise, and never loses a writer of other
places (see `scheduler._graph`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import cells
from cells import Identity, Space, Transaction, read_value
from scheduler import ManualClock, Node, Scheduler

ALICE = Identity("alice", "a1")
BOB = Identity("bob", "b1")
CAROL = Identity("carol", "c1")


class World:
    def __init__(self) -> None:
        self.sp = Space(cells.MemoryStore(), "x")
        self.sch = Scheduler(self.sp.replica, clock=ManualClock())
        self.src = self.sp.cell("src")
        self.src.set(1)
        self.sp.replica.pump()
        self.out = self.sp.cell("out")
        self.runs: list[Identity] = []

    def writer(self, identity: Identity, path: tuple[str, ...] = ("value",)) -> Node:
        """An instance of "out = src + 1" run as `identity`, writing `path` of out."""
        src, out, runs = self.src, self.out, self.runs

        def run(tx: Transaction) -> None:
            runs.append(identity)
            tx.write(out.doc_key, path, read_value(tx, src.link()) + 1)

        return self.sch.register(
            run,
            identity=identity,
            outputs=[(out.doc_key, path)],
            reads=[(src.doc_key, ("value",), False)],
            label=f"writer {identity.principal} {path}",
        )

    def reader(self, identity: Identity, seen: list[Any]) -> Node:
        """An effect reading the whole of out as `identity`."""
        out = self.out

        def run(tx: Transaction) -> None:
            seen.append(read_value(tx, out.link()))

        return self.sch.register(
            run,
            identity=identity,
            kind="effect",
            reads=[(out.doc_key, ("value",), False)],
            label=f"reader {identity.principal}",
        )

    def writers(self, node: Node) -> set[Node]:
        return self.sch.graph.edges_into(node)

    def check(self) -> None:
        self.sch._check()
        self.sp.replica._check()


@pytest.fixture
def world() -> Iterator[World]:
    w = World()
    yield w
    w.check()


def test_a_reader_depends_on_its_own_identitys_instance_only(world: World) -> None:
    writers = {who: world.writer(who) for who in (ALICE, BOB, CAROL)}
    seen: list[Any] = []
    reader = world.reader(BOB, seen)
    world.sch.settle()
    assert {writers[BOB]} == world.writers(reader)
    assert [BOB] == world.runs  # the other instances stay dormant
    assert [2] == seen
    assert [False, True, False] == [writers[w].is_live for w in (ALICE, BOB, CAROL)]
    world.check()


def test_a_reader_without_an_instance_of_its_own_depends_on_every_instance(world: World) -> None:
    writers = [world.writer(ALICE), world.writer(BOB)]
    seen: list[Any] = []
    reader = world.reader(CAROL, seen)
    world.sch.settle()
    assert set(writers) == world.writers(reader)
    assert [2] == seen
    world.check()


def test_removing_a_readers_own_instance_falls_back_to_the_others(world: World) -> None:
    alice, bob = world.writer(ALICE), world.writer(BOB)
    seen: list[Any] = []
    reader = world.reader(ALICE, seen)
    world.sch.settle()
    assert {alice} == world.writers(reader) and not bob.is_live
    world.sch.remove(alice)
    world.check()
    assert {bob} == world.writers(reader) and bob.is_live
    world.src.set(5)
    world.sch.settle()
    assert 6 == seen[-1]
    assert BOB == world.runs[-1]
    world.check()


def test_a_new_instance_of_the_readers_identity_replaces_the_others(world: World) -> None:
    bob = world.writer(BOB)
    seen: list[Any] = []
    reader = world.reader(ALICE, seen)
    world.sch.settle()
    assert {bob} == world.writers(reader) and bob.is_live
    alice = world.writer(ALICE)
    world.check()
    assert {alice} == world.writers(reader)
    assert alice.is_live and not bob.is_live
    world.src.set(7)
    world.sch.settle()
    assert 8 == seen[-1]
    assert ALICE == world.runs[-1]
    world.check()


def test_writers_of_other_places_are_never_dropped(world: World) -> None:
    # Bob's node writes another field of the same document: not an instance of
    # alice's, so alice's reader of the whole document depends on both.
    alice = world.writer(ALICE, ("value", "a"))
    bob = world.writer(BOB, ("value", "b"))
    other_alice = world.writer(ALICE, ("value", "b"))
    seen: list[Any] = []
    reader = world.reader(ALICE, seen)
    world.sch.settle()
    # (value, b) has an alice instance: bob's is dropped there; (value, a) is alice's.
    assert {alice, other_alice} == world.writers(reader)
    world.sch.remove(other_alice)
    world.check()
    assert {alice, bob} == world.writers(reader)
    world.sch.settle()
    assert {"a": 2, "b": 2} == seen[-1]
    world.check()


def test_a_reader_follows_its_instances_through_a_chain(world: World) -> None:
    # Two levels of instances (a result k principals started: each instance of the
    # second node reads the document all instances of the first write).
    mid = world.out
    last = world.sp.cell("last")
    first = {who: world.writer(who) for who in (ALICE, BOB)}

    def second(identity: Identity) -> Node:
        def run(tx: Transaction) -> None:
            tx.write(last.doc_key, ("value",), read_value(tx, mid.link()) * 10)

        return world.sch.register(
            run,
            identity=identity,
            outputs=[(last.doc_key, ("value",))],
            reads=[(mid.doc_key, ("value",), False)],
        )

    seconds = {who: second(who) for who in (ALICE, BOB)}
    for who in (ALICE, BOB):
        assert {first[who]} == world.writers(seconds[who])
    seen: list[Any] = []
    world.sch.register(
        lambda tx: seen.append(read_value(tx, last.link())),
        identity=ALICE,
        kind="effect",
        reads=[(last.doc_key, ("value",), False)],
    )
    world.sch.settle()
    assert [20] == seen
    assert [ALICE] == world.runs  # bob's chain stays dormant
    assert not seconds[BOB].is_live and not first[BOB].is_live
    world.check()
