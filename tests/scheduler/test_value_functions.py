"""Value functions (`scheduler.ValueFunction`) run with no transaction: k plain inputs at
any path (`Replica.run_field`), and the protocol a node function other than a derive
uses. Each test pins one guarantee the direct run keeps (the transaction run's):
checked to fail with that part of the path wrong."""

from __future__ import annotations

from typing import Any

import pytest

import cells
from cells import RUN_DONE, RUN_NONE, DocKey, Link, OwnershipError, Space, Transaction, read_value
from scheduler import NodeError, Scheduler, ValueFunction


def _sum(*vs: Any) -> Any:
    return sum(v or 0 for v in vs)


@pytest.mark.parametrize("k", [2, 3, 5])
def test_a_derive_of_k_plain_inputs_commits_without_a_transaction(
    sp: Space, sch: Scheduler, k: int
) -> None:
    ins = [sp.cell(f"i{j}") for j in range(k)]
    for j, c in enumerate(ins):
        c.set(j)
    out = sp.cell("out")
    node = sch.derive(out, ins, _sum)
    seen: list[Any] = []
    sch.sink(out, seen.append)
    direct = sch.stats.direct_commits
    for v in (10, 20, 30):
        ins[-1].set(v)
        sch.settle()
    base = sum(range(k - 1))
    assert [base + k - 1, base + 10, base + 20, base + 30] == seen
    assert (3, 4) == (sch.stats.direct_commits - direct, node.runs)
    sp.replica.pump()
    assert {"value": base + 30} == sp.replica.store.read_durable(out.doc_key)
    assert 0 == sp.replica.in_flight()


def test_a_derive_reads_plain_values_deep_inside_its_inputs_directly(
    sp: Space, sch: Scheduler
) -> None:
    doc, card, out = sp.cell("doc"), sp.cell("card"), sp.cell("out")
    doc.set({"items": [{"title": "a"}, {"title": "b"}, {"n": 1}]})
    card.set({"title": "x"})
    sch.derive(
        out,
        [doc.key("items").key(1).key("title"), card.key("title"), doc.key("items").key(2).key("t")],
        lambda a, b, c: f"{a}{b}{c}",
    )
    seen: list[Any] = []
    sch.sink(out, seen.append)
    direct = sch.stats.direct_commits
    card.key("title").set("y")
    sch.settle()
    doc.key("items").key(1).key("title").set("c")
    sch.settle()
    doc.key("items").key(2).key("t").set("z")
    sch.settle()
    assert ["bxNone", "byNone", "cyNone", "cyz"] == seen
    assert 3 == sch.stats.direct_commits - direct
    sp.replica.pump()
    assert {"value": "cyz"} == sp.replica.store.read_durable(out.doc_key)


def test_a_path_input_with_a_link_on_the_way_or_at_its_end_is_followed(
    sp: Space, sch: Scheduler
) -> None:
    doc, t1, t2, out = sp.cell("doc"), sp.cell("t1"), sp.cell("t2"), sp.cell("out")
    doc.set({"a": {"b": 1}})
    t1.set({"b": 40})
    t2.set(7)
    other = sp.cell("other")
    other.set(0)
    sch.derive(out, [doc.key("a").key("b"), other], _sum)
    seen: list[Any] = []
    sch.sink(out, seen.append)
    doc.key("a").set(t1.link())  # a link on the way: read through it now
    sch.settle()
    t1.key("b").set(50)  # the node must hear its target
    sch.settle()
    doc.key("a").set({"b": t2.link()})  # a link at the end
    sch.settle()
    t2.set(8)
    sch.settle()
    doc.key("a").set({"b": 2})  # plain again: direct again
    sch.settle()
    direct = sch.stats.direct_commits
    t2.set(9)  # no longer read
    other.set(1)
    sch.settle()
    assert 1 == sch.stats.direct_commits - direct
    assert [1, 40, 50, 7, 8, 2, 3] == seen


def test_a_place_the_walk_cannot_reach_reads_as_the_transaction_reads_it(
    sp: Space, sch: Scheduler
) -> None:
    # Past a list's end, into a scalar: absent (None), as `get_path` reads it, whichever
    # run reads it (the direct one declines these places: a transaction reads them).
    doc, other, out = sp.cell("doc"), sp.cell("other"), sp.cell("out")
    doc.set({"xs": [1, 2], "n": 5})
    other.set(0)
    out.set(0)
    sch.derive(
        out,
        [doc.key("xs").key(3), doc.key("n").key("deep"), doc.key("xs").key(1), other],
        lambda a, b, c, d: f"{a} {b} {c} {d}",
    )
    seen: list[Any] = []
    sch.sink(out, seen.append)
    other.set(1)
    sch.settle()
    doc.key("xs").key(1).set(7)
    sch.settle()
    assert ["None None 2 0", "None None 2 1", "None None 7 1"] == seen
    assert [] == sch.errors()


@pytest.mark.parametrize(("k", "moved"), [(2, 0), (2, 1), (3, 1), (3, 2)])
def test_a_k_input_run_overtaken_by_a_foreign_commit_on_any_input_is_rejected_and_reruns(
    sp: Space, sch: Scheduler, k: int, moved: int
) -> None:
    # Another runtime writes input `moved` of `y` after `y` ran directly, before the
    # drain's commits reach the store: the store must reject `y`'s commit (that read's
    # basis is gone), the replica revert it, and `y` run again on the foreign value.
    # `z` reads `y`'s pending commit: built on a rejected commit, its own must be
    # rejected too (its entry's deps), not accepted.
    ins = [sp.cell(f"x{j}") for j in range(k)]
    for c in ins:
        c.set(1)
    a, y, b, z, w = (sp.cell(n) for n in ("a", "y", "b", "z", "w"))
    a.set(1)
    w.set(1000)
    other = Space(cells.Replica(sp.replica.store), "d")

    def b_fn(v: int) -> int:
        if v == 2:
            tx = other.edit()
            tx.write(ins[moved].doc_key, ("value",), 7)
            tx.commit()
        return v * 10

    ny = sch.derive(y, ins, _sum)  # runs first: registered first, same height
    nb = sch.derive(b, [a], b_fn)
    nz = sch.derive(z, [w, y, w] if k == 3 else [y, w], _sum)
    seen: list[Any] = []
    sch.sink(z, seen.append)
    sch.sink(b, seen.append)
    for c in ins:
        c.set(3)
    a.set(2)
    direct = sch.stats.direct_commits
    sch.settle()
    assert sch.stats.direct_commits - direct >= 3  # `y`, `b`, `z` ran with no transaction
    assert 2 == sch.stats.stale_reruns  # `y` overtaken, `z` on `y`'s rejected commit
    expect_y = 3 * (k - 1) + 7
    expect_z = expect_y + 1000 * (2 if k == 3 else 1)  # (k = 3: `w` twice, one document)
    assert (expect_y, 20, expect_z) == (y.get(), b.get(), z.get())
    assert (3, 2, 3) == (ny.runs, nb.runs, nz.runs)
    assert 0 == sp.replica.in_flight()
    assert {"value": expect_z} == sp.replica.store.read_durable(z.doc_key)


@pytest.mark.parametrize("k", [2, 3])
def test_a_k_input_run_whose_last_input_moves_while_it_computes_reruns(
    sp: Space, sch: Scheduler, k: int
) -> None:
    ins = [sp.cell(f"i{j}") for j in range(k)]
    for c in ins:
        c.set(1)
    out = sp.cell("out")
    bumped: list[int] = []

    def fn(*vs: int) -> int:
        if vs[0] == 2 and not bumped:
            # Change the last input under the running node: its commit must not be made
            # on the values it read (that basis moved), and the node runs again.
            bumped.append(1)
            tx = sp.edit()
            tx.write(ins[-1].doc_key, ("value",), 5)
            tx.commit()
        return sum(vs)

    node = sch.derive(out, ins, fn)
    seen: list[Any] = []
    sch.sink(out, seen.append)
    ins[0].set(2)
    sch.settle()
    assert [k, 2 + (k - 2) + 5] == seen
    assert (3, 1) == (node.runs, sch.stats.stale_reruns)
    sp.replica.pump()
    assert {"value": 2 + (k - 2) + 5} == sp.replica.store.read_durable(out.doc_key)


@pytest.mark.parametrize("k", [2, 3])
def test_a_k_input_run_keeps_its_replica_busy_while_it_computes(
    sp: Space, sch: Scheduler, k: int
) -> None:
    ins = [sp.cell(f"i{j}") for j in range(k)]
    for c in ins:
        c.set(1)
    out = sp.cell("out")
    marks: list[Any] = []

    def fn(*vs: int) -> int:
        marks.append((sp.replica.low_water(), sp.replica.in_flight()))
        return sum(vs)

    sch.derive(out, ins, fn)
    sch.sink(out, lambda _v: None)
    direct = sch.stats.direct_commits
    ins[-1].set(2)
    sp.replica.pump()  # its verdict in: nothing in flight when the node runs
    store = sp.replica.store
    assert isinstance(store, cells.MemoryStore)  # (the fixture's: `seq` is its newest seq)
    seq = store.seq
    sch.settle()
    assert 1 == sch.stats.direct_commits - direct
    assert (seq, 0) == marks[-1]
    assert sp.replica.low_water() is None


@pytest.mark.parametrize("k", [2, 3])
def test_a_k_input_run_s_write_equal_to_a_pending_value_survives_its_failure(
    sp: Space, sch: Scheduler, k: int
) -> None:
    ins = [sp.cell(f"i{j}") for j in range(k)]
    for c in ins:
        c.set(1)
    out = sp.cell("out")
    sch.derive(out, ins, lambda *vs: 2 if vs[0] > 1 else vs[0])
    sch.sink(out, lambda _v: None)
    assert 1 == out.get()
    store = sp.replica.store
    with store.testing.hold_verdicts() as gate:
        out.set(2)  # pending: the node will compute the same value
        ins[0].set(5)
        sch.settle()
        assert 3 == gate.waiting()  # the write, the input and the node's shadow write
        gate.reject(0, cells.Outcome.PERMANENT)
        gate.accept(0)
        gate.accept(0)
        sp.replica.pump()
    sch.settle()
    assert 2 == out.get()
    assert {"value": 2} == store.read_durable(out.doc_key)


def test_a_k_input_run_that_raises_is_a_node_error_and_heals(sp: Space, sch: Scheduler) -> None:
    a, b, c, out = sp.cell("a"), sp.cell("b"), sp.cell("c"), sp.cell("out")
    a.set(10)
    b.set(5)
    c.set(1)
    sch.derive(out, [a, b, c], lambda x, y, z: x // y + z)
    seen: list[Any] = []
    sch.sink(out, seen.append)
    b.set(0)
    sch.settle()
    assert ["derive"] == [e.source for e in sch.errors()]
    with pytest.raises(NodeError, match="ZeroDivisionError"):
        sch.pull_now(out)
    assert [3, None] == seen
    b.set(2)
    sch.settle()
    assert [3, None, 6] == seen
    assert 6 == sch.pull_now(out)


# ----------------------------------------------------------------------------- ownership


def test_a_user_scoped_input_of_the_node_s_own_principal_runs_directly(
    sp: Space, sch: Scheduler
) -> None:
    a, b, out = sp.cell("a", scope="user"), sp.cell("b"), sp.cell("out", scope="session")
    a.set(1)
    b.set(0)
    sch.derive(out, [a, b], _sum)
    seen: list[Any] = []
    sch.sink(out, seen.append)
    direct = sch.stats.direct_commits
    a.set(2)
    sch.settle()
    assert [1, 2] == seen
    assert 1 == sch.stats.direct_commits - direct


def test_a_value_function_reading_an_internal_document_is_refused_as_its_transaction_is(
    sp: Space, sch: Scheduler
) -> None:
    # What `Transaction._guard` refuses a node's transaction (it has no authority), the
    # direct run refuses too: the run goes to the transaction, which raises.
    authority = sch._authority  # (the scheduler claimed it: the runtime's bookkeeping)
    secret = DocKey("d", "cw:secret")
    tx = sp.replica.edit(sp.identity, authority=authority)
    tx.write(secret, ("value",), 41)
    tx.commit()
    out = sp.cell("out")
    out.set(0)
    calls: list[Any] = []
    fn = _Plus(Link("d", "cw:secret"), out.doc_key, calls)
    sch.register(
        fn,
        identity=sp.identity,
        outputs=[(out.doc_key, ("value",))],
        reads=[(secret, ("value",), False)],
    )
    sch.sink(out, lambda _v: None)
    assert 0 == sch.stats.direct_commits
    assert [] == calls  # (the transaction's read raised before the function ran)
    assert cells.MISSING is out.get()  # (a failing node's output is absent)
    with pytest.raises(NodeError) as info:
        sch.pull_now(out)
    assert isinstance(info.value.__cause__, OwnershipError)


def test_run_field_refuses_what_a_node_s_transaction_may_not_touch(sp: Space) -> None:
    other = Space(sp.replica, "d", principal="bob")
    theirs = other.cell("t", scope="user")
    theirs.set(1)
    out = sp.cell("out")
    out.set(0)
    authority = sp.replica.claim_authority()
    internal = DocKey("d", "cw:x")
    tx = sp.replica.edit(sp.identity, authority=authority)
    tx.write(internal, ("value",), 1)
    tx.commit()
    mine = sp.cell("mine")
    mine.set(1)
    called: list[Any] = []
    replica = sp.replica
    fine = (mine.doc_key, ("value",))
    replica.begin_batch()  # (a drain's batch: `run_field` runs only in one)
    try:
        for key in (theirs.doc_key, internal):
            # Read as the only input, as one of two, or as one of three; or written.
            refused = (key, ("value",))
            for places in ((refused,), (fine, refused), (fine, fine, refused)):
                assert RUN_NONE == replica.run_field(
                    places, out.doc_key, ("value",), called.append, sp.identity, None, None
                )
            assert RUN_NONE == replica.run_field(
                (fine,), key, ("value",), called.append, sp.identity, None, None
            )
            # A plan is made only after the same checks (`run_direct` keeps it).
            for places in (((key, ("value",)),), (fine, (key, ("value",)))):
                assert replica.field_plan(places, out.doc_key, ("value",), sp.identity, 0) is None
            assert replica.field_plan((fine,), key, ("value",), sp.identity, 0) is None
        assert replica.field_plan((fine,), mine.doc_key, ("value",), sp.identity, 0) is None
        wkey, wpath = out.doc_key, ("value",)
        plan = replica.field_plan((fine, fine), wkey, wpath, sp.identity, 0)
        assert plan is not None
        # A plan vouches for its own places, output and identity only.
        for key in (theirs.doc_key, internal):
            assert RUN_NONE == replica.run_field(
                (fine, (key, ("value",))), wkey, wpath, lambda *vs: 7, sp.identity, None,
                None, plan=plan,
            )  # fmt: skip
        assert RUN_DONE == replica.run_field(
            plan.places, wkey, wpath, lambda *vs: 7, sp.identity, None, None, plan=plan
        )
    finally:
        replica.end_batch()
    assert [] == called


# ----------------------------------------------------------------------------- the protocol


class _Plus(ValueFunction):
    """A node function that is not a derive: ``out = input + 1``, refusing negative
    results for the direct commit (as a lift refuses a pattern instance)."""

    __slots__ = ("calls", "inputs", "out", "written")

    inputs: Link  # (one input: a writable attribute for the protocol's read-only property)

    def __init__(self, link: Link, out: DocKey, calls: list[Any]) -> None:
        self.inputs = link
        self.out = out
        self.calls = calls
        self.written: list[Any] = []

    def compute(self, v: Any) -> Any:
        self.calls.append(v)
        return (v or 0) + 1

    def accepts(self, value: Any) -> bool:
        return bool(value >= 0)

    def wrote(self, value: Any) -> None:
        self.written.append(value)

    def put(self, tx: Transaction, value: Any) -> None:
        tx.write(self.out, ("value",), value)

    def __call__(self, tx: Transaction) -> None:
        self.put(tx, self.compute(read_value(tx, self.inputs)))


def test_a_value_function_node_runs_directly_through_the_protocol(
    sp: Space, sch: Scheduler
) -> None:
    a, out = sp.cell("a"), sp.cell("out")
    a.set(1)
    calls: list[Any] = []
    fn = _Plus(a.link(), out.doc_key, calls)
    assert _Plus.hooked
    sch.register(
        fn,
        identity=sp.identity,
        outputs=[(out.doc_key, ("value",))],
        reads=[(a.doc_key, ("value",), False)],
    )
    seen: list[Any] = []
    sch.sink(out, seen.append)
    direct = sch.stats.direct_commits
    for v in (2, -5, 3, 3):
        a.set(v)
        sch.settle()
    # -5 + 1 is refused by `accepts`: written by `put` in a transaction, computed once.
    assert [2, 3, -4, 4] == seen
    assert [1, 2, -5, 3] == calls
    # Its first run was a transaction's (`out` had no record yet); then 3 and 4 directly.
    assert 2 == sch.stats.direct_commits - direct
    assert [3, 4] == fn.written  # (not -4: a transaction wrote it)
    sp.replica.pump()
    assert {"value": 4} == sp.replica.store.read_durable(out.doc_key)


@pytest.mark.parametrize("others", [1, 2])
def test_a_read_set_that_is_not_exactly_the_inputs_places_runs_in_a_transaction(
    sp: Space, sch: Scheduler, others: int
) -> None:
    # The last run followed a link inside the input's own document (a shallow read at
    # the link, a deep one where it leads): the same documents as the inputs', other
    # paths. A run must log its new read set (a transaction's): kept as it was, the
    # node would not hear a later change below the place the link was.
    doc = sp.cell("doc")
    doc.set({"a": {"b": 1}, "c": {"b": 40}})
    rest = [sp.cell(f"o{j}") for j in range(others)]
    for c in rest:
        c.set(0)
    out = sp.cell("out")
    out.set(0)
    sch.derive(out, [doc.key("a").key("b"), *rest], _sum)
    seen: list[Any] = []
    sch.sink(out, seen.append)
    doc.key("a").set(doc.key("c").link())
    sch.settle()
    doc.key("a").set({"b": 2})  # plain again (the shallow read at the link hears it)
    sch.settle()
    doc.key("a").key("b").set(3)  # below where the link was: heard only if re-read
    sch.settle()
    assert [1, 40, 2, 3] == seen


def test_a_read_set_naming_another_principal_s_document_is_not_read_directly(
    sp: Space, sch: Scheduler
) -> None:
    # The node declared (its read set until it runs) bob's user document of the same id
    # as its input: the direct run must not read it (`reaches` refuses it); its
    # transaction reads the input the link names for the node's identity, its own.
    bob = Space(sp.replica, "d", principal="bob")
    theirs, mine, out = bob.cell("t", scope="user"), sp.cell("t", scope="user"), sp.cell("out")
    theirs.set(100)
    mine.set(1)
    out.set(0)
    fn = _Plus(mine.link(), out.doc_key, [])
    sch.register(
        fn,
        identity=sp.identity,
        outputs=[(out.doc_key, ("value",))],
        reads=[(theirs.doc_key, ("value",), False)],
    )
    sch.sink(out, lambda _v: None)
    assert (2, [1]) == (out.get(), fn.calls)
    assert 0 == sch.stats.direct_commits
