"""Value functions whose inputs are reached through link hops and element-id steps (a
map card's lifts: the child's argument link, then the element) run with no
transaction when the walk a transaction would make now logs exactly the node's read
set (`scheduler._direct.chained_places`, `Replica.run_field`'s `hops`). Each test pins
one guarantee of that path: checked to fail with that part of it wrong."""

from __future__ import annotations

from typing import Any

import cells
from cells import RUN_NONE, DocKey, Link, Path, Space
from cells._store import RUN_WIDTH, run_request
from scheduler import Node, Scheduler


def _title(v: Any) -> Any:
    return None if v is None else f"<{v}>"


def _two_hops(sp: Space) -> tuple[cells.Cell, cells.Cell, cells.Cell, cells.Cell]:
    """arg, mid, task, out: arg's element links to mid, whose value links to task."""
    arg, mid, task, out = sp.cell("arg"), sp.cell("mid"), sp.cell("task"), sp.cell("out")
    task.set({"title": "a"})
    mid.set(task.link())
    arg.set({"element": mid.link()})
    return arg, mid, task, out


def test_an_input_through_link_hops_runs_directly_and_lands(sp: Space, sch: Scheduler) -> None:
    # arg.element -> mid (a whole-value link) -> task: two hops, each a shallow read.
    arg, _mid, task, out = _two_hops(sp)
    node = sch.derive(out, [arg.key("element").key("title")], _title)
    seen: list[Any] = []
    sch.sink(out, seen.append)
    direct = sch.stats.direct_commits
    for t in ("b", "c"):
        task.key("title").set(t)
        sch.settle()
    assert ["<a>", "<b>", "<c>"] == seen
    assert (2, 3) == (sch.stats.direct_commits - direct, node.runs)
    sp.replica.pump()
    assert {"value": "<c>"} == sp.replica.store.read_durable(out.doc_key)
    assert 0 == sp.replica.in_flight()


def test_a_re_pointed_link_is_heard_and_the_run_reads_the_new_target(
    sp: Space, sch: Scheduler
) -> None:
    arg, t1, t2, out = sp.cell("arg"), sp.cell("t1"), sp.cell("t2"), sp.cell("out")
    t1.set({"title": "one"})
    t2.set({"title": "two"})
    arg.set({"element": t1.link()})
    k = sp.cell("k")
    k.set("")
    node = sch.derive(out, [arg.key("element").key("title"), k], _join)
    seen: list[Any] = []
    sch.sink(out, seen.append)
    t1.key("title").set("one!")  # direct (through the hop)
    sch.settle()
    direct = sch.stats.direct_commits
    arg.key("element").set(t2.link())  # re-pointed: not the walk its read set holds
    sch.settle()
    assert 0 == sch.stats.direct_commits - direct  # a transaction run: new read set
    runs = node.runs
    t1.key("title").set("stale")  # no longer read: nothing runs
    sch.settle()
    assert runs == node.runs
    t2.key("title").set("two!")  # read now, directly
    sch.settle()
    assert 1 == sch.stats.direct_commits - direct
    assert ["one|", "one!|", "two|", "two!|"] == seen
    sp.replica.pump()
    assert {"value": "two!|"} == sp.replica.store.read_durable(out.doc_key)


def _join(*vs: Any) -> str:
    return "|".join("" if v is None else str(v) for v in vs)


def _items_link(items: cells.Cell, eid: str) -> Link:
    return Link(items.space, items.id, items.scope, (eid,))


def test_an_element_id_step_follows_the_element_when_it_moves(sp: Space, sch: Scheduler) -> None:
    items, arg, out = sp.cell("items"), sp.cell("arg"), sp.cell("out")
    items.set([{"title": "a"}, {"title": "b"}, {"title": "c"}])
    arg.set({"element": _items_link(items, "#1")})  # the element "b"
    sch.derive(out, [arg.key("element").key("title")], _title)
    seen: list[Any] = []
    sch.sink(out, seen.append)
    direct = sch.stats.direct_commits
    items.key(1).key("title").set("b1")
    sch.settle()
    assert 1 == sch.stats.direct_commits - direct
    items.insert(0, {"title": "new"})  # "#1" moves to position 2
    sch.settle()
    items.key(2).key("title").set("b2")  # the same element, at its new position
    sch.settle()
    items.key(1).key("title").set("a1")  # another element now at "#1"'s old position
    sch.settle()
    assert "<b2>" == out.get()
    assert ["<b>", "<b1>", "<b2>"] == seen
    assert 2 <= sch.stats.direct_commits - direct
    sp.replica.pump()
    assert {"value": "<b2>"} == sp.replica.store.read_durable(out.doc_key)


def test_an_element_id_step_whose_element_is_removed_reads_as_a_transaction_does(
    sp: Space, sch: Scheduler
) -> None:
    items, arg, out = sp.cell("items"), sp.cell("arg"), sp.cell("out")
    items.set([{"title": "a"}, {"title": "b"}, {"title": "c"}])
    arg.set({"element": _items_link(items, "#1")})
    node = sch.derive(out, [arg.key("element").key("title"), sp.cell("k")], _join)
    seen: list[Any] = []
    sch.sink(out, seen.append)
    items.remove(1)  # gone: the walk names no element (never the next one, "c")
    sch.settle()
    sp.cell("k").set(1)  # a run on the removed element's read set
    sch.settle()
    assert ["b|", "|", "|1"] == seen
    assert 3 == node.runs
    # The direct run declines a place whose element id names nothing (never reads the
    # element now at its old position).
    called: list[Any] = []
    sp.replica.begin_batch()  # (a drain's batch: `run_field` runs only in one)
    try:
        gone = ((items.doc_key, ("value", "#1", "title")),)
        assert RUN_NONE == sp.replica.run_field(
            gone, out.doc_key, ("value",), called.append, sp.identity, None, None
        )
        kept = ((items.doc_key, ("value", "#2", "title")),)  # "c", now at position 1
        assert 1 == sp.replica.run_field(
            kept, out.doc_key, ("value",), called.append, sp.identity, None, None
        )
    finally:
        sp.replica.end_batch()
    assert ["c"] == called


def test_a_foreign_commit_to_a_hop_document_between_read_and_commit_is_rejected(
    sp: Space, sch: Scheduler
) -> None:
    # `y` runs directly through arg's link; then, in the same drain, another replica
    # re-points that link before the drain's commits reach the store: the store must
    # reject `y`'s commit (its shallow read of the link's place is stale), and `y` run
    # again through the new link.
    arg, t1, t2, a, y, b = (sp.cell(n) for n in ("arg", "t1", "t2", "a", "y", "b"))
    t1.set({"title": "one"})
    t2.set({"title": "two"})
    arg.set({"element": t1.link()})
    a.set(1)
    other = Space(cells.Replica(sp.replica.store), "d")

    def b_fn(v: int) -> int:
        if v == 2:
            tx = other.edit()
            tx.write(arg.doc_key, ("value", "element"), t2.link())
            tx.commit()
        return v * 10

    ny = sch.derive(y, [arg.key("element").key("title")], _title)  # runs first
    sch.derive(b, [a], b_fn)
    seen: list[Any] = []
    sch.sink(y, seen.append)
    sch.sink(b, seen.append)
    t1.key("title").set("one!")
    a.set(2)
    direct = sch.stats.direct_commits
    stale = sch.stats.stale_reruns
    sch.settle()
    assert sch.stats.direct_commits - direct >= 2  # `y` and `b` with no transaction
    assert 1 == sch.stats.stale_reruns - stale  # `y`'s commit rejected
    assert ("<two>", 20) == (y.get(), b.get())
    assert 3 == ny.runs
    assert 0 == sp.replica.in_flight()
    assert {"value": "<two>"} == sp.replica.store.read_durable(y.doc_key)


def test_a_hop_that_goes_away_leaves_the_read_set_and_nothing_runs_on_it(
    sp: Space, sch: Scheduler
) -> None:
    # arg.element -> mid -> task, then arg.element -> task itself: every place the new
    # walk reads was in the read set, but the read set also holds mid's link: a run
    # that kept it would run again when mid changes (an unnecessary run).
    arg, mid, task, out = _two_hops(sp)
    node = sch.derive(out, [arg.key("element").key("title")], _title)
    seen: list[Any] = []
    sch.sink(out, seen.append)
    arg.key("element").set(task.link())  # one hop now, to the same place
    sch.settle()
    runs = node.runs
    mid.set({"title": "elsewhere"})  # no longer on the way: nothing runs
    sch.settle()
    assert runs == node.runs
    task.key("title").set("b")
    sch.settle()
    assert ["<a>", "<b>"] == seen


def _runs_spy(sp: Space) -> list[list[Any]]:
    """The run logs the store is given from now on (each a list of entries' fields)."""
    logs: list[list[Any]] = []
    store = sp.replica.store
    submit_runs = store.submit_runs

    def spy(listener: Any, session_id: str, runs: list[Any]) -> bool:
        logs.append(list(runs))
        return submit_runs(listener, session_id, runs)

    store.submit_runs = spy  # type: ignore[method-assign]
    return logs


def _four_reads(
    sp: Space, sch: Scheduler, foreign: tuple[Path, Any]
) -> tuple[cells.Cell, Node, list[list[Any]]]:
    """`y` of four reads (arg's link to t1, shallow; t1's title, k1 and k2, deep) runs
    directly; then, in the same drain, another replica writes `foreign` (a path of
    arg's document and a value) before the drain's commits reach the store. Returns
    `y`, its node and the run logs the store was given."""
    arg, t1, t2, k1, k2, a, y, b = (
        sp.cell(n) for n in ("arg", "t1", "t2", "k1", "k2", "a", "y", "b")
    )
    t1.set({"title": "one"})
    t2.set({"title": "two"})
    arg.set({"element": t1.link(), "other": 0})
    k1.set("x")
    k2.set("z")
    a.set(1)
    other = Space(cells.Replica(sp.replica.store), "d")
    where, value = foreign
    value = t2.link() if value is Link else value

    def b_fn(v: int) -> int:
        if v == 2:
            tx = other.edit()
            tx.write(arg.doc_key, where, value)
            tx.commit()
        return v * 10

    ny = sch.derive(y, [arg.key("element").key("title"), k1, k2], _join)  # runs first
    sch.derive(b, [a], b_fn)
    sch.sink(y, lambda _: None)
    sch.sink(b, lambda _: None)
    logs = _runs_spy(sp)
    t1.key("title").set("one!")
    a.set(2)
    return y, ny, logs


def test_four_reads_through_a_hop_go_as_the_k_read_entry_with_the_hop_shallow(
    sp: Space, sch: Scheduler
) -> None:
    # No claim objects: the hop is a shallow read of the k-read entry (see RUN_WIDTH),
    # and its request (the general path's) claims exactly what a transaction would.
    y, ny, logs = _four_reads(sp, sch, (("value", "other"), 0))  # (an unchanged value)
    arg, t1 = sp.cell("arg").doc_key, sp.cell("t1").doc_key
    direct = sch.stats.direct_commits
    sch.settle()
    assert sch.stats.direct_commits - direct >= 2
    (entry,) = [
        runs[i : i + RUN_WIDTH]
        for runs in logs
        for i in range(0, len(runs), RUN_WIDTH)
        if runs[i + 1] is not None and runs[i + 7] == y.doc_key
    ]
    assert (None, True) == (entry[2], entry[5])  # the k-read entry
    reads = run_request(sp.replica.session_id, entry, 0).reads
    assert [
        (arg, ("value", "element"), True),
        (t1, ("value", "title"), False),
        (sp.cell("k1").doc_key, ("value",), False),
        (sp.cell("k2").doc_key, ("value",), False),
    ] == [(c.key, c.path, c.shallow) for c in reads]
    assert ("one!|x|z", 2) == (y.get(), ny.runs)


def test_four_reads_a_foreign_re_pointing_of_the_hop_link_is_rejected_and_run_again(
    sp: Space, sch: Scheduler
) -> None:
    # The link at the hop place changes between `y`'s read and its commit: the store
    # rejects the commit (the shallow read sees a write at its place) and `y` runs
    # again through the new link. (Fails with the hop left out of the entry.)
    y, ny, _ = _four_reads(sp, sch, (("value", "element"), Link))
    stale = sch.stats.stale_reruns
    sch.settle()
    assert 1 == sch.stats.stale_reruns - stale
    assert ("two|x|z", 3) == (y.get(), ny.runs)
    assert 0 == sp.replica.in_flight()
    assert {"value": "two|x|z"} == sp.replica.store.read_durable(y.doc_key)


def test_four_reads_a_foreign_write_beside_the_hop_place_is_accepted(
    sp: Space, sch: Scheduler
) -> None:
    # A sibling field of the hop place: a shallow read of ("value", "element") does not
    # see it, so the store accepts `y`'s commit and nothing runs again. (Fails with the
    # hop claimed at its parent, ("value",), or over the whole document.)
    y, ny, _ = _four_reads(sp, sch, (("value", "other"), 1))
    stale = sch.stats.stale_reruns
    sch.settle()
    assert 0 == sch.stats.stale_reruns - stale
    assert ("one!|x|z", 2) == (y.get(), ny.runs)
    assert 0 == sp.replica.in_flight()
    assert {"value": "one!|x|z"} == sp.replica.store.read_durable(y.doc_key)
    assert 1 == sp.cell("arg").key("other").get()  # (the foreign write landed)


def test_a_kept_walk_is_walked_again_once_its_element_is_removed(sp: Space, sch: Scheduler) -> None:
    # `plain_chain` keeps a walk while no document on it moves: after a direct run
    # walked to element "#1", its removal must make the next run walk again (and read
    # it as absent), never hand back the kept walk and its value.
    items, arg, k, out = sp.cell("items"), sp.cell("arg"), sp.cell("k"), sp.cell("out")
    items.set([{"title": "a"}, {"title": "b"}, {"title": "c"}])
    arg.set({"element": _items_link(items, "#1")})
    sch.derive(out, [arg.key("element").key("title"), k], _join)
    seen: list[Any] = []
    sch.sink(out, seen.append)
    direct = sch.stats.direct_commits
    k.set(0)  # a direct run: the walk through arg's link to "#1" is kept
    sch.settle()
    assert (seen[-1], sch.stats.direct_commits - direct) == ("b|0", 1)
    items.remove(1)
    sch.settle()
    assert seen[-1] == "|0"
    k.set(1)
    sch.settle()
    assert seen[-1] == "|1"


def test_a_walk_kept_for_one_node_serves_another_only_while_nothing_on_it_moves(
    sp: Space, sch: Scheduler
) -> None:
    # Two derives read one field through one link (as a card's lifts do): the second
    # run of a drain reuses the first's walk. A re-pointed link between drains, and an
    # element moved by an insert, are walked again by both.
    items, arg, out1, out2 = sp.cell("items"), sp.cell("arg"), sp.cell("o1"), sp.cell("o2")
    items.set([{"title": "a"}, {"title": "b"}])
    arg.set({"element": _items_link(items, "#1")})
    title = arg.key("element").key("title")
    sch.derive(out1, [title], _title)
    sch.derive(out2, [title], _join)
    seen: list[Any] = []
    sch.sink(out1, lambda v: seen.append(("o1", v)))
    sch.sink(out2, lambda v: seen.append(("o2", v)))
    direct = sch.stats.direct_commits
    items.key(1).key("title").set("b1")
    sch.settle()
    assert sch.stats.direct_commits - direct == 2
    assert (out1.get(), out2.get()) == ("<b1>", "b1")
    arg.set({"element": _items_link(items, "#0")})  # re-pointed
    sch.settle()
    assert (out1.get(), out2.get()) == ("<a>", "a")
    items.insert(0, {"title": "z"})  # "#0" moves to position 1
    items.key(1).key("title").set("a1")
    sch.settle()
    assert (out1.get(), out2.get()) == ("<a1>", "a1")


def _entry_reads(sp: Space, logs: list[list[Any]], out: cells.Cell) -> list[Any]:
    """The reads of the last direct run's entry that wrote `out` (key, path, shallow)."""
    entries = [
        runs[i : i + RUN_WIDTH]
        for runs in logs
        for i in range(0, len(runs), RUN_WIDTH)
        if runs[i + 1] is not None and runs[i + 7] == out.doc_key
    ]
    request = run_request(sp.replica.session_id, entries[-1], 0)
    return [(c.key, c.path, c.shallow) for c in request.reads]


def test_two_inputs_through_one_link_read_its_place_once_and_share_a_kept_walk(
    sp: Space, sch: Scheduler
) -> None:
    # Two derives over the same two fields through one link (a card's `words` and
    # `score` over element["title"] and element["body"]): each run's entry reads the
    # link's place once, as the transaction logs it (fails with the walks' reads only
    # concatenated in `walk_inputs`: the hop twice); the second derive of a drain takes
    # the first's walk of each field, which an edit, a move of the element and a
    # re-pointed link make stale (fails with `plain_chain` handing back a kept walk
    # without its version check: the second edit would read the first's title).
    items, arg = sp.cell("items"), sp.cell("arg")
    items.set([{"title": "a", "body": "x"}, {"title": "b", "body": "y"}])
    arg.set({"element": _items_link(items, "#1")})
    fields = [arg.key("element").key("title"), arg.key("element").key("body")]
    out1, out2 = sp.cell("o1"), sp.cell("o2")
    sch.derive(out1, fields, _join)
    sch.derive(out2, fields, lambda t, b: f"{b}/{t}")
    sch.sink(out1, lambda _: None)
    sch.sink(out2, lambda _: None)
    logs = _runs_spy(sp)
    direct = sch.stats.direct_commits
    for title in ("b1", "b2"):
        items.key(1).key("title").set(title)
        sch.settle()
        assert (out1.get(), out2.get()) == (f"{title}|y", f"y/{title}")
    assert sch.stats.direct_commits - direct == 4
    assert [
        (arg.doc_key, ("value", "element"), True),
        (items.doc_key, ("value", "#1", "title"), False),
        (items.doc_key, ("value", "#1", "body"), False),
    ] == _entry_reads(sp, logs, out2)
    items.insert(0, {"title": "z", "body": "w"})  # "#1" moves to position 2
    items.key(2).key("body").set("y2")
    sch.settle()
    assert (out1.get(), out2.get()) == ("b2|y2", "y2/b2")
    arg.set({"element": _items_link(items, "#0")})  # re-pointed
    sch.settle()
    assert (out1.get(), out2.get()) == ("a|x", "x/a")
    items.key(1).key("title").set("a1")  # "#0", now at position 1
    sch.settle()
    assert (out1.get(), out2.get()) == ("a1|x", "x/a1")
    sp.replica.pump()
    assert {"value": "x/a1"} == sp.replica.store.read_durable(out2.doc_key)


def test_whole_values_beside_a_hop_are_read_once_each_as_the_transaction_logs_them(
    sp: Space, sch: Scheduler
) -> None:
    # A card's `label`: a field through the argument's link, then whole values of other
    # cells (`Replica.walk_inputs` takes a plain whole value with no walk made). The
    # same whole value twice is one read, as the transaction logs it, so the run stays
    # direct (fails with the whole value appended again: the walk then holds a read
    # more than the read set, and every run is a transaction); its entry reads each
    # place once, and a new value of either input reaches the output.
    items, arg, n = sp.cell("items"), sp.cell("arg"), sp.cell("n")
    items.set([{"title": "a"}])
    arg.set({"element": _items_link(items, "#0")})
    n.set(1)
    out = sp.cell("out")
    sch.derive(out, [arg.key("element").key("title"), n, n], _join)
    sch.sink(out, lambda _: None)
    logs = _runs_spy(sp)
    direct = sch.stats.direct_commits
    for k, title in enumerate(("b", "c"), start=2):
        items.key(0).key("title").set(title)
        n.set(k)
        sch.settle()
        assert out.get() == f"{title}|{k}|{k}"
    assert sch.stats.direct_commits - direct == 2
    assert [
        (arg.doc_key, ("value", "element"), True),
        (items.doc_key, ("value", "#0", "title"), False),
        (n.doc_key, ("value",), False),
    ] == _entry_reads(sp, logs, out)


def test_a_walk_through_a_document_its_identity_does_not_reach_is_the_transactions(
    sp: Space,
) -> None:
    # A link into an internal document: the transaction's walk refuses it (`_guard`),
    # so the direct run's walk must not go there either (fails with `plain_chain`'s
    # `reaches` check removed: the walk reads the internal document's value).
    authority = sp.replica.claim_authority()
    internal = DocKey("d", "cw:x")
    tx = sp.replica.edit(sp.identity, authority=authority)
    tx.write(internal, ("value",), {"title": "secret"})
    tx.commit()
    arg = sp.cell("arg")
    arg.set({"element": Link("d", "cw:x", "space", ())})
    mine = sp.cell("mine")
    mine.set({"title": "mine"})
    assert sp.replica.plain_chain(arg.key("element").key("title").link(), sp.identity) is None
    arg.set({"element": mine.link()})
    walk = sp.replica.plain_chain(arg.key("element").key("title").link(), sp.identity)
    assert walk is not None and ("mine",) == walk[4]


def test_a_kept_walk_serves_only_the_identity_that_walked_it(sp: Space) -> None:
    # A shared document's link into a user-scoped one leads each identity to its own
    # instance: the walk kept for one (`plain_chain`, kept by link) is never handed to
    # another (fails with the kept walk's identity check removed: b gets a's title).
    a, b = sp.identity, cells.Identity("someone-else", "s2")
    note = Link("d", "note", "user", ())
    for who, title in ((a, "a's"), (b, "b's")):
        tx = sp.replica.edit(who)
        tx.write(note.key(who), ("value",), {"title": title})
        tx.commit()
    arg = sp.cell("arg")
    arg.set({"element": note})
    link = arg.key("element").key("title").link()
    for _ in range(2):
        for who, title in ((a, "a's"), (b, "b's")):
            walk = sp.replica.plain_chain(link, who)
            assert walk is not None and (title,) == walk[4]
