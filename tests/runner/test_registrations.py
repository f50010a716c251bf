"""Cancel groups and the registration map (tokens and generation fences)."""

from __future__ import annotations

import functools

import pytest

from cells import DocKey, Identity
from runner._cancel import CancelGroup, Teardown
from runner._registrations import InstanceGroup, Registrations

K1 = DocKey("sp", "r1")
K2 = DocKey("sp", "r2", "user", "alice")


# ---------------------------------------------------------------------------- S39 unit level


def test_S39_cancel_group_runs_each_cleanup_once_newest_first() -> None:
    ran: list[str] = []
    g = CancelGroup("g")
    g.add(lambda: ran.append("first"))
    g.add(lambda: ran.append("second"))
    g.cancel()
    g.cancel()  # latched: nothing runs twice
    assert ["second", "first"] == ran
    g._check()


def test_S39_cleanup_added_after_cancellation_runs_at_once() -> None:
    ran: list[str] = []
    g = CancelGroup("g")
    g.cancel()
    g.add(lambda: ran.append("late child"))
    assert ["late child"] == ran
    g._check()


def test_S39_cleanup_added_during_cancellation_runs_too() -> None:
    ran: list[str] = []
    g = CancelGroup("g")
    g.add(lambda: g.add(lambda: ran.append("added while cancelling")))
    g.cancel()
    assert ["added while cancelling"] == ran


def test_S39_one_failing_cleanup_does_not_skip_its_siblings() -> None:
    ran: list[str] = []
    g = CancelGroup("g")
    g.add(lambda: ran.append("a"))
    g.add(lambda: (_ for _ in ()).throw(RuntimeError("bad cleanup")))
    g.add(lambda: ran.append("c"))
    with pytest.raises(RuntimeError, match="bad cleanup"):
        g.cancel()
    assert ["c", "a"] == ran
    assert g.cancelled


def test_several_failing_cleanups_are_raised_together() -> None:
    g = CancelGroup("g")
    for i in range(2):

        def fail(i: int = i) -> None:
            raise ValueError(f"cleanup {i}")

        g.add(fail)
    with pytest.raises(ExceptionGroup) as info:
        g.cancel()
    assert 2 == len(info.value.exceptions)


def test_a_discarded_cleanup_never_runs() -> None:
    ran: list[str] = []
    g = CancelGroup("g")
    discard = g.add(lambda: ran.append("x"))
    discard()
    discard()
    g.cancel()
    assert [] == ran


# ---------------------------------------------------------------------------- registrations


def test_install_end_and_tokens() -> None:
    regs = Registrations()
    r1 = regs.install(K1, "start")
    assert r1 is regs.get(K1)
    assert frozenset({K1}) == regs.keys()
    with pytest.raises(ValueError, match="already has"):
        regs.install(K1, "start")
    stale = r1
    assert regs.end(K1, token=stale) is r1
    r2 = regs.install(K1, "run")
    # S08: a release naming a replaced registration does nothing
    assert regs.end(K1, token=stale) is None
    assert r2 is regs.get(K1)
    assert r1.ended and not r2.ended
    regs._check()


def test_generations_are_unique_and_fence_ends() -> None:
    regs = Registrations()
    a = regs.install(K1, "start")
    b = regs.install(K2, "start")
    assert a.generation != b.generation
    assert regs.end(K1, generation=a.generation + 1000) is None
    assert regs.end(K1, generation=a.generation) is a
    again = regs.install(K1, "start")
    assert again.generation > a.generation
    assert regs.end(K1, generation=a.generation) is None  # the old generation is stale
    regs._check()


def test_ending_runs_the_group_and_a_cleanup_may_reinstall() -> None:
    regs = Registrations()
    reg = regs.install(K1, "start")
    reinstalled = []
    reg.group.add(lambda: reinstalled.append(regs.install(K1, "restart")))
    regs.end(K1)
    assert reg.group.cancelled
    assert reinstalled[0] is regs.get(K1)
    regs._check()


def test_end_of_nothing_is_harmless() -> None:
    # S09 at the map level: nothing registered, nothing happens, no error
    regs = Registrations()
    assert regs.end(K1) is None
    assert 0 == len(regs)


def test_end_all_ends_everything_even_if_a_cleanup_fails() -> None:
    regs = Registrations()
    a = regs.install(K1, "start")
    b = regs.install(K2, "start")
    a.group.add(lambda: (_ for _ in ()).throw(RuntimeError("a fails")))
    with pytest.raises(ExceptionGroup):
        regs.end_all()
    assert a.ended and b.ended
    assert 0 == len(regs)
    regs._check()


def test_churn_leaves_nothing_behind() -> None:
    # S06 at the map level: start/stop churn keeps no per-key state
    regs = Registrations()
    keys = [DocKey("sp", f"r{i}") for i in range(32)]
    for key in keys:
        regs.install(key, "start")
    for key in keys:
        regs.end(key)
    assert 0 == len(regs)
    assert {} == regs._by_key


# ---------------------------------------------------------------------------- compact forms
# A group keeps a lone cleanup bare and a registration its lone instance bare (memory per
# run): the containers they replace behaved as below, and so must these.


def test_discarding_cleanups_one_by_one_leaves_the_others_in_order() -> None:
    ran: list[str] = []
    g = CancelGroup("g")
    discards = [g.add(functools.partial(ran.append, name)) for name in "abc"]
    discards[1]()
    discards[0]()
    g._check()
    discards[2]()
    g._check()
    g.add(lambda: ran.append("d"))
    g.add(lambda: ran.append("e"))
    discards[2]()  # already discarded: nothing
    g.cancel()
    assert ["e", "d"] == ran
    g._check()


def test_a_lone_cleanup_discarded_then_another_added_runs_only_the_other() -> None:
    ran: list[str] = []
    g = CancelGroup("g")
    first = g.add(lambda: ran.append("first"))
    first()
    g.add(lambda: ran.append("second"))
    first()  # discards nothing now: "second" is not its cleanup
    g.cancel()
    assert ["second"] == ran


def test_the_same_cleanup_added_twice_runs_twice_and_one_discard_removes_one() -> None:
    ran: list[str] = []
    g = CancelGroup("g")

    def cleanup() -> None:
        ran.append("x")

    discard = g.add(cleanup)
    g.add(cleanup)
    discard()
    g.cancel()
    assert ["x"] == ran


def test_instances_keep_join_order_and_go_back_to_one() -> None:
    regs = Registrations()
    reg = regs.install(K1, "start")
    alice, bob, carol = (Identity(p, "s") for p in ("alice", "bob", "carol"))
    groups = {i: InstanceGroup(reg, i) for i in (alice, bob, carol)}
    assert 0 == len(reg.identities) and not reg.identities and alice not in reg.identities
    reg.identities[alice] = groups[alice]
    assert [alice] == list(reg.identities) and reg.identities.get(bob) is None
    reg.identities[bob] = groups[bob]
    reg.identities[carol] = groups[carol]
    assert [alice, bob, carol] == list(reg.identities)
    assert [(bob, groups[bob])] == [(i, g) for i, g in reg.identities.items() if i == bob]
    del reg.identities[alice]
    assert [bob, carol] == list(reg.identities)
    del reg.identities[carol]
    assert [bob] == list(reg.identities) and 1 == len(reg.identities)
    assert reg.identities[bob] is groups[bob] and "bob" not in reg.identities
    with pytest.raises(KeyError):
        del reg.identities[carol]
    with pytest.raises(KeyError):
        reg.identities[alice]
    del reg.identities[bob]
    assert not reg.identities and [] == reg.identities.items()


def test_calling_an_instance_group_ends_that_instance_only() -> None:
    regs = Registrations()
    reg = regs.install(K1, "start")
    alice, bob = Identity("alice", "s"), Identity("bob", "s")
    ran: list[str] = []
    for who in (alice, bob):
        group = InstanceGroup(reg, who)
        group.add(functools.partial(ran.append, who.principal))
        reg.identities[who] = group
        reg.group.add(group)
    reg.identities[alice]()
    assert ["alice"] == ran and [bob] == list(reg.identities)
    regs.end(K1)  # bob's instance ends with the registration; alice's ran once
    assert ["alice", "bob"] == ran and not reg.identities
    regs._check()


def test_tracked_nodes_go_from_one_pair_to_many_and_back() -> None:
    # One tracked node is kept as a bare pair, more in a list: each form answers
    # `tracked`, `nodes` and `untrack` alike, and the flags read back what was set.
    reg = Registrations().install(K1, "start")
    a, b, c = object(), object(), object()
    reg.untrack(0, a)  # nothing tracked: nothing happens
    reg.track(0, a)
    assert reg.tracked(0) == [a] and reg.nodes == {0: [a]}
    reg.untrack(1, a)  # another index: not this one
    assert reg.tracked(0) == [a]
    reg.untrack(0, a)
    assert reg.tracked(0) == [] and reg.nodes == {}
    reg.track(0, a)
    reg.track(1, b)
    reg.track(0, c)
    assert reg.tracked(0) == [a, c] and reg.nodes == {0: [a, c], 1: [b]}
    reg.untrack(0, a)
    reg.track(2, a)
    assert reg.nodes == {1: [b], 0: [c], 2: [a]}
    assert not reg.adopted and not reg.owed and not reg.ended
    reg.owed = True
    reg.adopted = True
    reg.owed = False
    assert reg.adopted and not reg.owed and not reg.ended


class _Torn(Teardown):
    __slots__ = ("name", "ran")

    def __init__(self, name: str, ran: list[str]) -> None:
        self.name, self.ran = name, ran

    def teardown(self) -> None:
        self.ran.append(self.name)


def test_a_teardown_object_is_a_cleanup_like_any_other() -> None:
    # A group holds an object with a `teardown` method itself (a lift instance), and
    # runs it in its turn, once; a discarded one never runs; added late, it runs at once.
    ran: list[str] = []
    g = CancelGroup("g")
    g.add(_Torn("first", ran))
    g.add(lambda: ran.append("second"))
    discard = g.add(_Torn("discarded", ran))
    g.add(_Torn("last", ran))
    discard()
    g._check()
    g.cancel()
    g.cancel()
    assert ran == ["last", "second", "first"]
    g.add(_Torn("late", ran))
    assert ran[-1] == "late"
    g._check()


def test_a_registration_is_its_own_group_and_hands_its_cleanups_over() -> None:
    # A switch cancels what the old pattern installed and keeps the registration: its
    # cleanups move to a group of their own, in order, and later ones stay behind.
    ran: list[str] = []
    reg = Registrations().install(K1, "start")
    assert reg.group is reg and reg.label == f"{K1}#{reg.generation}"
    reg.add(lambda: ran.append("old first"))
    reg.add(lambda: ran.append("old second"))
    old = reg.hand_over(reg)
    reg.add(lambda: ran.append("new"))
    assert old.label == reg.label
    old.cancel()
    assert ran == ["old second", "old first"] and not reg.cancelled
    reg._check()
    old._check()
    reg.cancel()
    assert ran[-1] == "new"
