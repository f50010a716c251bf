"""The start cascade: `start(link)` follows links to a result, loads what it needs, runs it.

A start is a generator of `Pending` stages — root sync, each link hop, the
pattern load, the dependency pre-sync, and for a run with lists the list
pre-sync and the element pre-sync — driven by store answers, so it works with
or without a running event loop, a held load holds it at exactly that stage,
and the lifetime claim (`Ownership.settle_attempt`) always happens in a later
mailbox step, never inside the `start` call. After every stage the attempt
must still be current (no stop reached it), or it ends claiming nothing.

The pre-sync derives every document of the run exactly as setup derives them
(`run_keys`, `element_run_keys`), so a cold resume holds a first run until the
documents it reads have loaded.

A start's own transaction stages its nested children's setups; when it does
not land on a stale basis those writes are owed, and they are issued again
(`start_settled`, up to `MAX_START_REISSUES` times).

Not here: registrations and the claim (the core), installing and joining a run
(the runner, seen through `Starter`).
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any, Final

from cells import (
    MAX_HOPS,
    CommitResult,
    Identity,
    Link,
    LinkCycleError,
    Outcome,
    Pending,
    Transaction,
    describe,
    element_ids,
    first_link,
    resolve,
)

from . import _docs as docs
from ._builder import LIST_KINDS, Pattern, find_pattern
from ._core import MAX_NESTING
from ._list_keys import keys_and_counts
from ._lists import base_container, presynced_child
from ._ownership import StartAttempt
from ._registrations import Key, Registration
from .errors import PatternError, PatternLoadError

if TYPE_CHECKING:
    from ._core import Starter

MAX_START_REISSUES: Final = 5
"""Times a start re-issues its nested children's setup writes after stale-basis rejections."""


def start(
    runner: Starter,
    link: Link,
    identity: Identity,
    *,
    label: str = "start",
    on_claim: Callable[[Key], None] | None = None,
) -> Pending[bool]:
    """Start the result `link` names (following links). See the module docstring.

    `on_claim(key)` runs when this start claims a lifetime for the result `key`.
    """
    attempt = runner.attempts.begin(label, identity)
    attempt.on_claim = on_claim
    runner.attempts.track(attempt, docs.root(link).key(identity))
    result: Pending[bool] = Pending(runner.replica.mailbox)
    gen = _cascade(runner, attempt, link, identity)
    _step(runner, gen, attempt, result, None, None)
    return result


def _step(
    runner: Starter,
    gen: Generator[Pending[Any], Any, bool],
    attempt: StartAttempt,
    result: Pending[bool],
    value: Any,
    error: BaseException | None,
) -> None:
    try:
        stage = gen.send(value) if error is None else gen.throw(error)
    except StopIteration as stop:
        running = bool(stop.value)
        # The claim runs in a later step: code after `start(...)` (a stop, a re-run)
        # must be able to supersede it first.
        runner.replica.mailbox.post(lambda: _settle(runner, attempt, running, result, None))
        return
    except Exception as exc:
        failure = exc
        runner.replica.mailbox.post(lambda: _settle(runner, attempt, False, result, failure))
        return

    def next_stage(p: Pending[Any]) -> None:
        try:
            got = p.result()
        except Exception as exc:
            _step(runner, gen, attempt, result, None, exc)
        else:
            _step(runner, gen, attempt, result, got, None)

    stage.add_done_callback(next_stage)


def _settle(
    runner: Starter,
    attempt: StartAttempt,
    running: bool,
    result: Pending[bool],
    error: BaseException | None,
) -> None:
    claimed = runner.settle_attempt(attempt, running, error)
    if error is not None:
        result.set_exception(error)
    else:
        result.set_result(claimed)


def _current(runner: Starter, attempt: StartAttempt, key: Key, stage: str) -> bool:
    if runner.attempts.current(attempt):
        return True
    runner.trace.record("superseded", key, attempt=attempt.number, stage=stage)
    return False


def _cascade(
    runner: Starter, attempt: StartAttempt, link: Link, identity: Identity
) -> Generator[Pending[Any], Any, bool]:
    replica = runner.replica
    given = link
    for _ in range(MAX_HOPS + 1):
        key = docs.root(link).key(identity)
        runner.attempts.track(attempt, key)
        yield replica.sync([key])
        if not _current(runner, attempt, key, "root sync" if link is given else "link hop"):
            return False
        doc = replica.visible(key)
        if type(doc) is dict and docs.PATTERN in doc:
            break
        found = first_link(doc.get(docs.VALUE) if type(doc) is dict else None, link.path, doc)
        if found is None:
            raise PatternError(
                f"cannot start {describe(given)}: {describe(key)} holds no pattern run (set"
                " one up with rt.setup or rt.run first) and no link to follow"
            )
        at, hop = found
        link = hop.child(*link.path[at:])
    else:
        raise LinkCycleError(f"cannot start {describe(given)}: more than {MAX_HOPS} link hops")
    target = docs.root(link)
    attempt.target = key
    running = runner.registrations.get(key)
    if running is not None and identity in running.identities:
        return True
    identity_name = doc[docs.PATTERN]
    if not isinstance(identity_name, str):
        raise PatternLoadError(
            f"cannot start {describe(key)}: its pattern identity is {identity_name!r}, not a str",
            identity=str(identity_name),
        )
    yield replica.sync([docs.pattern_link(key.space, identity_name).key(identity)])
    if not _current(runner, attempt, key, "pattern load"):
        return False
    pattern = find_pattern(identity_name)
    yield replica.sync(run_keys(pattern, target, identity))
    if not _current(runner, attempt, key, "dependency pre-sync"):
        return False
    if list_nodes(pattern, target):
        # Lists: their input documents, then every element child they hold now,
        # derived exactly as the coordinators derive them on first setup.
        yield replica.sync(list_input_keys(runner, pattern, target, identity))
        if not _current(runner, attempt, key, "list pre-sync"):
            return False
        yield replica.sync(element_run_keys(runner, pattern, target, identity))
        if not _current(runner, attempt, key, "element pre-sync"):
            return False
    running = runner.registrations.get(key)
    if running is not None and (
        identity in running.identities or running.pattern != pattern.identity
    ):
        return True
    tx = replica.edit(identity)
    if running is not None:
        # Running for other identities: this start is a new demander, and joins it.
        runner.join(tx, running, pattern, target, launch="start", rollback=False)
    else:
        runner.start_core(tx, pattern, target, launch="start", chain=(), key=key)
    tx.add_settle_callback(
        lambda _tx, res: start_settled(runner, key, pattern, target, identity, res)
    )
    tx.commit_detached()
    return True


def start_settled(
    runner: Starter,
    key: Key,
    pattern: Pattern,
    target: Link,
    identity: Identity,
    res: CommitResult,
    reissues: int = 0,
) -> None:
    """A start's own transaction (its nested children's setups) did not land: those
    writes are owed; issue them again while the run is still registered. The
    re-issue is watched the same way (a re-issue that goes stale too is owed
    again), up to `MAX_START_REISSUES` times."""
    if res.ok or key not in runner.registrations:
        return
    runner.trace.record("debt", key, launch="start", outcome=res.outcome.name)
    if res.outcome is not Outcome.STALE_BASIS:
        return  # not retryable: the nested children read what did land
    if reissues >= MAX_START_REISSUES:
        runner.trace.record("debt-abandoned", key, reissues=reissues)
        return
    tx = runner.replica.edit(identity)
    stage_tree(runner, tx, pattern, target, depth=0)
    tx.add_settle_callback(
        lambda _tx, again: start_settled(
            runner, key, pattern, target, identity, again, reissues + 1
        )
    )
    tx.commit_detached()


# --------------------------------------------------------------------------- a run's documents


def run_keys(pattern: Pattern, result: Link, identity: Identity, depth: int = 0) -> list[Any]:
    """Every document a run of `pattern` at `result` owns, nested children included,
    derived exactly as setup derives them (the cold-resume pre-sync reads these)."""
    graph = pattern.graph
    keys = [docs.argument_link(result).key(identity)]
    for node in graph.nodes:
        out = docs.internal_link(result, node.index)
        keys.append(out.key(identity))
        if node.kind == "pattern" and depth < MAX_NESTING:
            try:
                child = find_pattern(node.target)
            except PatternLoadError:
                continue  # instantiation reports it with the node's place
            keys.extend(run_keys(child, out, identity, depth + 1))
    return keys


def list_nodes(
    pattern: Pattern, result: Link, depth: int = 0
) -> list[tuple[Any, Link, Pattern, str, Link]]:
    """(node, bound list link, op, kind, container) for every list node of a run's tree."""
    out: list[tuple[Any, Link, Pattern, str, Link]] = []
    for node in pattern.graph.nodes:
        if node.kind in LIST_KINDS:
            bound = docs.bind(node.inputs, result)["list"]
            try:
                op = find_pattern(node.target)
            except PatternLoadError:
                continue
            out.append((node, bound, op, node.kind, docs.internal_link(result, node.index)))
        elif node.kind == "pattern" and depth < MAX_NESTING:
            try:
                child = find_pattern(node.target)
            except PatternLoadError:
                continue
            out.extend(list_nodes(child, docs.internal_link(result, node.index), depth + 1))
    return out


def list_input_keys(
    runner: Starter, pattern: Pattern, result: Link, identity: Identity
) -> list[Any]:
    """The documents the run's lists live in (read through the synced argument links)."""
    tx = runner.replica.edit(identity)
    try:
        return [resolve(tx, bound).key(identity) for _n, bound, *_ in list_nodes(pattern, result)]
    finally:
        tx.abort("pre-sync probe")


def element_run_keys(
    runner: Starter, pattern: Pattern, result: Link, identity: Identity
) -> list[Any]:
    """Every document of every element child the run's lists hold now, derived exactly as
    the coordinators derive them (container, element key, scope)."""
    keys: list[Any] = []
    tx = runner.replica.edit(identity)
    try:
        for _node, bound, op, kind, container in list_nodes(pattern, result):
            place = resolve(tx, bound)
            list_key = place.key(identity)
            path = (docs.VALUE, *place.path)
            items = tx.peek(list_key, path)
            if type(items) is not list:
                continue
            # Keyed as the coordinator keys them: inline elements by their element ids.
            ids = None
            if any(type(item) is not Link for item in items):
                ids = element_ids(tx.peek(list_key), path, items)
            base = base_container(container, place.scope)
            for key in keys_and_counts(items, ids)[0]:
                child = presynced_child(runner.presynced, kind, base, key)
                keys.append(child.key(identity))
                keys.extend(run_keys(op, child, identity))
    finally:
        tx.abort("pre-sync probe")
    return keys


def stage_tree(
    runner: Starter, tx: Transaction, pattern: Pattern, result: Link, depth: int
) -> list[Registration]:
    """Re-issue the setup writes of every nested child of a run (the owed debt); returns
    the nested children's registrations whose debt this cleared."""
    paid: list[Registration] = []
    for node in pattern.graph.nodes:
        if node.kind != "pattern" or depth >= MAX_NESTING:
            continue
        child = find_pattern(node.target)
        out = docs.internal_link(result, node.index)
        runner.stage_setup(tx, child, docs.bind(node.inputs, result), out, f"node {node.index}")
        reg = runner.registrations.get(out.key(tx.identity))
        if reg is not None and reg.owed:
            reg.owed = False
            paid.append(reg)
        paid.extend(stage_tree(runner, tx, child, out, depth + 1))
    return paid
