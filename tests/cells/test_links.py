"""Links: reads follow them, every probe is a logged read, cycles and long chains end in errors."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from cells import (
    MAX_HOPS,
    MISSING,
    Cell,
    InvalidValueError,
    Link,
    LinkCycleError,
    MemoryStore,
    Replica,
    Space,
    TransactionError,
    read_value,
    resolve,
)
from cells._links import VALUE


class World:
    """One store, one replica, one space; checks every invariant at teardown."""

    def __init__(self) -> None:
        self.store = MemoryStore()
        self.replica = Replica(self.store)
        self.sp = Space(self.replica, "sp")

    def cell(self, id: str, *path: str | int) -> Cell:
        return self.sp.cell(id, path=tuple(path))

    def put(self, id: str, value: Any) -> Cell:
        cell = self.cell(id)
        pending = cell.set(value)
        self.replica.pump()
        assert pending.result().ok
        return cell

    def raw(self, id: str) -> Any:
        """The stored document's cell data, links not followed."""
        doc = self.replica.visible(self.cell(id).doc_key)
        return MISSING if doc is MISSING else doc.get(VALUE, MISSING)

    def check(self) -> None:
        self.replica.pump()
        self.store._check()
        self.replica._check()


@pytest.fixture
def w() -> Iterator[World]:
    world = World()
    yield world
    world.check()


def _finishes(fn: Callable[[], Any], timeout: float = 10.0) -> BaseException | None:
    """Run `fn` in a daemon thread; fail the test (rather than hang it) if it does not end."""
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            fn()
        except BaseException as exc:
            outcome.append(exc)
        else:
            outcome.append(None)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout)
    assert not thread.is_alive(), "link resolution did not return"
    return outcome[0]


# --------------------------------------------------------------------------- reading


def test_read_follows_a_link_to_another_document(w: World) -> None:
    w.put("b", {"x": 1})
    w.put("a", w.cell("b").link())
    assert w.cell("a").get() == {"x": 1}
    assert w.cell("a", "x").get() == 1
    assert Link("sp", "b") == w.raw("a")


def test_read_follows_links_in_the_middle_of_a_path(w: World) -> None:
    w.put("b", {"inner": {"x": [10, 20]}})
    w.put("a", {"child": w.cell("b", "inner").link()})
    assert w.cell("a", "child", "x", 1).get() == 20
    assert w.cell("a", "child").get() == {"x": [10, 20]}


def test_read_follows_a_chain(w: World) -> None:
    w.put("c", "end")
    w.put("b", w.cell("c").link())
    w.put("a", w.cell("b").link())
    assert w.cell("a").get() == "end"


def test_a_list_of_links_reads_as_values(w: World) -> None:
    w.put("x", {"n": 1})
    w.put("y", "two")
    w.put("list", [w.cell("x").link(), w.cell("y").link(), 3])
    assert w.cell("list").get() == [{"n": 1}, "two", 3]
    assert [Link("sp", "x"), Link("sp", "y"), 3] == w.raw("list")


def test_links_nested_inside_values_are_followed(w: World) -> None:
    w.put("x", [1, 2])
    w.put("doc", {"deep": {"ref": w.cell("x").link()}, "plain": 0})
    assert w.cell("doc").get() == {"deep": {"ref": [1, 2]}, "plain": 0}


def test_a_link_to_a_missing_document_reads_missing(w: World) -> None:
    w.put("a", w.cell("nowhere").link())
    assert MISSING is w.cell("a").get()


def test_an_absent_link_target_inside_a_value_is_plain_data(w: World) -> None:
    """MISSING never reaches a user inside a value: a dict drops the key, a list reads None."""
    gone = w.cell("nowhere").link()
    w.put("doc", {"a": 1, "b": gone, "items": [gone, 2]})
    assert {"a": 1, "items": [None, 2]} == w.cell("doc").get()


def test_get_returns_a_copy_the_caller_may_mutate(w: World) -> None:
    w.put("b", {"items": [1, 2]})
    w.put("a", {"ref": w.cell("b").link()})
    got = w.cell("a").get()
    got["ref"]["items"].append(3)
    got["extra"] = True
    assert w.cell("a").get() == {"ref": {"items": [1, 2]}}
    assert w.cell("b").get() == {"items": [1, 2]}


def test_one_stored_link_resolves_to_each_readers_own_instance(w: World) -> None:
    alice = Space(w.replica, "sp", principal="alice")
    bob = Space(w.replica, "sp", principal="bob")
    alice.cell("prefs", scope="user").set("alice's")
    bob.cell("prefs", scope="user").set("bob's")
    alice.cell("shared").set(alice.cell("prefs", scope="user").link())
    w.replica.pump()
    assert alice.cell("shared").get() == "alice's"
    assert bob.cell("shared").get() == "bob's"


# --------------------------------------------------------------------------- logged probes


def test_every_probe_is_logged_as_a_shallow_read(w: World) -> None:
    w.put("c", {"x": 5})
    w.put("b", {"next": w.cell("c").link()})
    w.put("a", {"child": w.cell("b", "next").link()})
    tx = w.sp.edit()
    assert w.cell("a", "child", "x").with_tx(tx).get() == 5
    a, b, c = (w.cell(i).doc_key for i in "abc")
    assert [
        (a, (VALUE, "child"), True),
        (b, (VALUE, "next"), True),
        (c, (VALUE, "x"), False),
    ] == tx.reads
    tx.abort("done looking")


def test_probe_at_a_link_sitting_at_the_root_is_logged(w: World) -> None:
    w.put("b", 1)
    w.put("a", w.cell("b").link())
    tx = w.sp.edit()
    resolve(tx, w.cell("a").link())
    assert [(w.cell("a").doc_key, (VALUE,), True)] == tx.reads
    tx.abort()


def test_reading_a_value_with_links_inside_logs_each_link_target(w: World) -> None:
    w.put("x", 1)
    w.put("list", [w.cell("x").link()])
    tx = w.sp.edit()
    assert read_value(tx, w.cell("list").link()) == [1]
    assert [
        (w.cell("list").doc_key, (VALUE,), False),
        (w.cell("x").doc_key, (VALUE,), False),
    ] == tx.reads
    tx.abort()


def test_read_value_without_logging_logs_nothing(w: World) -> None:
    w.put("x", 1)
    w.put("a", w.cell("x").link())
    tx = w.sp.edit()
    assert read_value(tx, w.cell("a").link(), log=False) == 1
    assert [(w.cell("a").doc_key, (VALUE,), True)] == tx.reads  # the probe is still logged
    tx.abort()


# --------------------------------------------------------------------------- repeated reads


def test_a_repeated_read_value_logs_what_one_read_logs(w: World) -> None:
    w.put("x", 5)
    w.put("a", {"child": w.cell("x").link()})
    for link in (w.cell("x").link(), w.cell("a", "child").link()):
        once, again = w.sp.edit(), w.sp.edit()
        assert read_value(once, link) == 5
        assert [5, 5, 5] == [read_value(again, link) for _ in range(3)]
        assert once.reads == again.reads
        once.abort()
        again.abort()


def test_read_value_after_a_write_sees_the_write(w: World) -> None:
    w.put("x", 1)
    w.put("y", 7)
    tx = w.sp.edit()
    x = w.cell("x")
    assert [1, 1] == [read_value(tx, x.link()) for _ in range(2)]
    tx.write(x.doc_key, (VALUE,), 2)
    assert 2 == read_value(tx, x.link())
    # A link written at the cell is followed by the next read, and its probe logged.
    tx.write(x.doc_key, (VALUE,), w.cell("y").link())
    assert 7 == read_value(tx, x.link())
    assert (x.doc_key, (VALUE,), True) in tx.reads
    assert (w.cell("y").doc_key, (VALUE,), False) in tx.reads
    tx.abort()


def test_read_value_through_a_link_sees_a_write_to_its_target(w: World) -> None:
    w.put("x", 1)
    w.put("a", w.cell("x").link())
    tx = w.sp.edit()
    a = w.cell("a").link()
    assert [1, 1] == [read_value(tx, a) for _ in range(2)]
    tx.write(w.cell("x").doc_key, (VALUE,), 3)
    assert 3 == read_value(tx, a)
    tx.abort()


def test_read_value_without_log_then_with_log_is_logged(w: World) -> None:
    w.put("x", 1)
    tx = w.sp.edit()
    x = w.cell("x")
    read_value(tx, x.link(), log=False)
    read_value(tx, x.link(), log=False)
    assert [] == tx.reads
    assert 1 == read_value(tx, x.link())
    assert [(x.doc_key, (VALUE,), False)] == tx.reads
    assert 1 == read_value(tx, x.link(), log=False)
    assert [(x.doc_key, (VALUE,), False)] == tx.reads
    tx.abort()


def test_a_repeated_read_of_a_value_with_links_inside_is_a_fresh_copy(w: World) -> None:
    w.put("x", 1)
    w.put("list", [w.cell("x").link()])
    tx = w.sp.edit()
    link = w.cell("list").link()
    first, second = read_value(tx, link), read_value(tx, link)
    assert [1] == first == second
    assert first is not second  # as without repeats: materialized values are not shared
    tx.abort()


def test_a_repeated_read_value_after_commit_raises(w: World) -> None:
    x = w.put("x", 1)
    tx = w.sp.edit()
    read_value(tx, x.link())
    read_value(tx, x.link())
    tx.write(w.cell("out").doc_key, (VALUE,), 1)
    read_value(tx, x.link())
    read_value(tx, x.link())
    tx.commit()
    with pytest.raises(TransactionError, match="committing"):
        read_value(tx, x.link())
    w.replica.pump()
    with pytest.raises(TransactionError, match="committed"):
        read_value(tx, x.link())


# --------------------------------------------------------------------------- cycles and hop limit


def test_self_cycle_raises(w: World) -> None:
    w.put("a", w.cell("a").link())
    error = _finishes(w.cell("a").get)
    assert isinstance(error, LinkCycleError)
    assert "sp/space/a" in str(error)


def test_self_cycle_inside_a_path_raises(w: World) -> None:
    w.put("a", {"x": w.cell("a", "x").link()})
    assert isinstance(_finishes(w.cell("a", "x").get), LinkCycleError)


def test_two_cycle_raises_and_names_the_chain(w: World) -> None:
    w.put("a", w.cell("b").link())
    w.put("b", w.cell("a").link())
    error = _finishes(w.cell("a").get)
    assert isinstance(error, LinkCycleError)
    assert len(error.chain) >= 2
    assert "<sp/space/a>" in error.chain[0]
    assert any("sp/space/b" in hop for hop in error.chain)


def test_a_value_that_links_back_to_itself_raises(w: World) -> None:
    w.put("a", {"me": w.cell("a").link()})
    assert isinstance(_finishes(w.cell("a").get), LinkCycleError)


def _chain(w: World, links: int) -> None:
    """Cells c0 -> c1 -> ... -> c{links} = "end": exactly `links` links to follow."""
    tx = w.sp.edit()
    for i in range(links):
        w.cell(f"c{i}").with_tx(tx).set(w.cell(f"c{i + 1}").link())
    w.cell(f"c{links}").with_tx(tx).set("end")
    tx.commit()
    w.replica.pump()


def test_a_chain_of_max_hops_links_resolves(w: World) -> None:
    assert MAX_HOPS == 100
    _chain(w, MAX_HOPS)
    assert w.cell("c0").get() == "end"


def test_a_chain_past_max_hops_raises_promptly(w: World) -> None:
    _chain(w, MAX_HOPS + 1)
    error = _finishes(w.cell("c0").get)
    assert isinstance(error, LinkCycleError)
    assert str(MAX_HOPS) in str(error)
    tx = w.sp.edit()
    with pytest.raises(LinkCycleError):
        resolve(tx, w.cell("c0").link())
    assert len(tx.reads) <= MAX_HOPS + 1
    tx.abort()


# --------------------------------------------------------------------------- resolve and writes


def test_cell_resolve_ends_at_the_target(w: World) -> None:
    w.put("b", {"inner": {"x": 1}})
    w.put("a", {"child": w.cell("b", "inner").link()})
    end = w.cell("a", "child", "x").resolve()
    assert Link("sp", "b", "space", ("inner", "x")) == end.link()
    assert end.get() == 1
    plain = w.cell("b", "inner")
    assert plain.link() == plain.resolve().link()


def test_write_through_a_link_in_the_middle_lands_in_the_target(w: World) -> None:
    w.put("b", {"x": 1, "y": 2})
    w.put("a", {"child": w.cell("b").link()})
    w.cell("a", "child", "x").set(5)
    w.replica.pump()
    assert w.raw("b") == {"x": 5, "y": 2}
    assert {"child": Link("sp", "b")} == w.raw("a")


def test_write_at_the_link_itself_replaces_the_link(w: World) -> None:
    w.put("b", {"x": 1})
    w.put("a", {"child": w.cell("b").link()})
    w.cell("a", "child").set(7)
    w.replica.pump()
    assert w.raw("a") == {"child": 7}
    assert w.raw("b") == {"x": 1}


def test_write_into_a_cycle_raises_and_writes_nothing(w: World) -> None:
    w.put("a", w.cell("b").link())
    w.put("b", w.cell("a").link())
    before = w.store.commits_evaluated
    with pytest.raises(LinkCycleError):
        w.cell("a", "x").set(1)
    w.replica.pump()
    assert before == w.store.commits_evaluated
    assert Link("sp", "b") == w.raw("a")


def test_a_link_refuses_a_bool_or_negative_path_element_and_an_unknown_scope() -> None:
    # Link(path=(True,)) compared equal to Link(path=(1,)) but hashed differently.
    with pytest.raises(InvalidValueError, match="path element 0"):
        Link("s", "d", "space", (True,))
    with pytest.raises(InvalidValueError, match="negative"):
        Link("s", "d", "space", ("a", -1))
    with pytest.raises(InvalidValueError, match="scope must be one of"):
        Link("s", "d", "galaxy")  # type: ignore[arg-type]
