"""Instantiation: one pattern run's graph becomes scheduler nodes and child launches.

For each node of the traced graph, in order:

- a lift becomes a scheduler computation that reads its bound inputs (links,
  followed), calls the Python function on plain values and writes the
  internal output cell. If the function returns a pattern instance, the
  output cell becomes that child's result (a *computation-produced child*,
  launched from the run and released when it stops returning it). If it
  returns a list or dict holding pattern instances (nested too), each is
  launched as a computed child on a result derived from its place in the
  value (`docs.computed_child_link`), the output holds links to those
  results, and a child the function no longer returns at that place is
  released;
- a nested pattern node stages its child's setup in the same transaction
  (argument links into this run, the child's result at this run's output
  spot) and launches it; this run's teardown releases it (token-checked);
- a handler binds its stream cell (the internal cell) in the scheduler; its
  return value may launch a child (stopped if the event's transaction fails)
  or navigate (after the commit, the target opens as a page);
- `navigate_to` in a body is an effect that opens its target as a page after
  its commit, once per target.

Every node and handler is removed by the registration's cancel group, so
ending the registration (stop, release, rollback) leaves nothing behind.

Instances (S69): a registration's nodes are instantiated once per identity
that demands it (`Runner.join`), each with that identity and in that
instance's own cancel group: lifts, navigations, list coordinators (one
coordinator per list node, one reconcile node per identity) and nested
children, which the instance launches for its identity (so the join carries
on down the tree). Handlers are bound once per registration: an event runs
as the identity that sent it. A child whose key is the same for two
instances (a space-scoped child) is one registration, released by the last
instance that lets go of it.
"""

from __future__ import annotations

import inspect
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from cells import (
    MISSING,
    Cell,
    CommitResult,
    DocKey,
    Identity,
    Link,
    Linkable,
    Transaction,
    resolve,
)
from scheduler import Node, QueuedEvent, ValueFunction

from . import _docs as docs
from ._builder import (
    LIST_KINDS,
    Binding,
    Navigate,
    NodeSpec,
    Pattern,
    PatternInstance,
    find_pattern,
)
from ._cancel import CancelGroup, RemoveNode, Teardown
from ._checks import bind_event_check, check_node
from ._computed import (
    ComputedLaunches,
    computed_child,
    declared_reads,
    materialize,
    materialize_all,
    need_loop,
    node_label,
)
from ._lists import Coordinator
from ._registrations import Registration
from ._reuse import PENDING, REUSED, drop_record, node_code_key, reused
from ._types import event_converter
from ._when import instantiate_when
from .errors import PatternError

if TYPE_CHECKING:
    from ._core import Launcher


def instantiate(
    runner: Launcher,
    reg: Registration,
    pattern: Pattern,
    result: Link,
    tx: Transaction,
    group: CancelGroup,
) -> None:
    """Instantiate `pattern`'s nodes for `tx.identity`, their cleanups in `group` (that
    instance's cancel group); handlers only for the registration's first instance."""
    identity = tx.identity
    first = len(reg.identities) == 1
    if pattern.signature.typed:
        check_node(runner, pattern, result, identity, group)
    # A list element's folded argument (`docs.folds_argument`): its lifts read the element
    # itself. (A pattern that can no longer take it reads the argument document until
    # its coordinator sets it up again in that form, which re-instantiates it.)
    argument = docs.folded(tx.peek(result.key(identity), _ARGUMENT_PATH))
    if argument is not None and not docs.folds_argument(pattern):
        argument = None
    for spec in pattern.graph.nodes:
        if spec.kind == "lift":
            _lift(runner, reg, pattern, spec, result, identity, group, argument)
        elif spec.kind == "pattern":
            _nested(runner, reg, pattern, spec, result, tx, group)
        elif spec.kind == "handler":
            if first:
                _handler(runner, reg, pattern, spec, result, identity)
        elif spec.kind == "navigate":
            _navigate(runner, reg, pattern, spec, result, identity, group)
        elif spec.kind == "when":
            instantiate_when(runner, reg, pattern, spec, result, identity, group)
        elif spec.kind in ("state", "branch"):
            pass  # a cell the setup wrote / a child a `when` node launches
        elif spec.kind in LIST_KINDS:
            coordinator = runner.list_coordinators.get((reg, spec.index))
            if coordinator is None:
                coordinator = Coordinator(runner, reg, pattern, spec, result)
            coordinator.add_identity(identity, group)
        else:  # pragma: no cover - PatternGraph only holds the kinds above
            raise PatternError(f"pattern {pattern.identity}: unknown node kind {spec.kind!r}")


def _track(reg: Registration, index: int, node: Any, group: CancelGroup) -> None:
    """Remember `node` under its pattern node's index for inspection, until `group` ends."""
    reg.track(index, node)
    group.add(_Untrack(reg, index, node))


class _Untrack:
    """Forget a tracked node (a slotted callable, not a closure with three cells)."""

    __slots__ = ("index", "node", "reg")

    def __init__(self, reg: Registration, index: int, node: Any) -> None:
        self.reg = reg
        self.index = index
        self.node = node

    def __call__(self) -> None:
        self.reg.untrack(self.index, self.node)


# --------------------------------------------------------------------------- lifts


def _lift(
    runner: Launcher,
    reg: Registration,
    pattern: Pattern,
    spec: NodeSpec,
    result: Link,
    identity: Identity,
    group: CancelGroup,
    argument: dict[str, Any] | None = None,
) -> None:
    shape = _shape(pattern, spec)
    bound = docs.bind(spec.inputs, result, argument)
    kind = _DirectLift if shape.direct else _Lift
    lift = kind(runner, reg, shape, bound, docs.internal_link(result, spec.index), identity)
    lift.node = runner.scheduler.register(
        lift,
        identity=identity,
        outputs=((lift.out_key, _VALUE_PATH),),
        label=shape.label,
        reads=declared_reads(bound, identity) if argument is None else _whole_docs(bound, identity),
    )
    # What the inputs record is keyed on (no key: never reused, see `_reuse`).
    if shape.code is not None:
        runner.reuse_book.add(lift.node, lift)
    reg.track(spec.index, lift.node)
    group.add(lift)  # (a `Teardown`: the group calls `lift.teardown`)


def _whole_docs(bound: Any, identity: Identity) -> list[tuple[DocKey, tuple[Any, ...], bool]]:
    """The reads a lift over a folded argument declares: the whole document of each link
    (deep at its value), not the link's own path. A folded element's link ends at the
    element's id, a path of its own per element, which the node keeps as its declared
    read set (about 100 bytes per element, where the argument document's
    `("value", "element")` was one read entry every element shared). Declared reads
    only order and keep live (edges, which may over-approximate); the first run's
    read set is what invalidates."""
    return [(ln.key(identity), _VALUE_PATH, False) for ln in docs.links_in(bound)]


class _LiftShape:
    """What every instance of one lift node of a pattern shares (made once per node):
    its function, label, index, whether it is async, and its code key (`_reuse`)."""

    __slots__ = ("code", "direct", "fn", "index", "is_async", "label", "links", "spec")

    def __init__(self, pattern: Pattern, spec: NodeSpec) -> None:
        self.spec = spec
        self.fn = fn = pattern.function(spec.target)
        self.label = node_label(pattern, spec)
        self.index = spec.index
        self.is_async = inspect.iscoroutinefunction(fn)
        self.code = node_code_key(pattern, spec, fn)
        self.direct = not self.is_async and _over_lifts(pattern, spec.inputs)
        """Whether its instances are `_DirectLift`s (may run with no transaction)."""
        args = spec.inputs.get("args") if type(spec.inputs) is dict else None
        self.links: tuple[int, ...] | None = (
            tuple(i for i, a in enumerate(args) if type(a) is Binding)
            if self.direct and args is not None and any(type(a) is not Binding for a in args)
            else None
        )
        """For a `_DirectLift` with constant inputs: the positions of its links (the
        inputs a direct run reads); None when every input is a link."""


_PLAIN_KINDS: Final = frozenset({"lift", "state"})
"""Nodes whose output cell holds the value itself (a nested pattern's, a list's or a
`when`'s holds links to results: read through them, never a plain place)."""


def _over_lifts(pattern: Pattern, inputs: Any) -> bool:
    """Whether a lift's inputs (its spec's, unbound) are each a place in the output of
    another lift or a state cell, a place in the pattern's argument, or a scalar
    constant, at least one not a constant, with no keyword input: what a direct run can
    read (`_DirectLift`).

    An argument is read through the link its run's argument document holds (to the
    caller's cell, or a map's element: the card's lifts), which a direct run follows
    as the transaction does (`Replica.plain_chain`, `scheduler._direct.walk_matches`:
    each hop's place a shallow read). A nested pattern's, a list's or a `when`'s output
    holds links to results (a container at the end: never a plain value), so a lift
    over it stays a plain `_Lift`, decided per pattern node at no cost per run."""
    args = inputs.get("args") if type(inputs) is dict else None
    if type(args) is not list or not args or inputs.get("kwargs"):
        return False
    kinds = {n.index: n.kind for n in pattern.graph.nodes}
    linked = False
    for b in args:
        if type(b) is not Binding:
            t = type(b)
            if t is str or t is int or t is float or t is bool or b is None:
                continue  # a constant: `compute` passes it as it is (`materialize` does)
            return False
        linked = True
        if b.cell == "argument":
            continue  # read through the argument's link (hops: `scheduler._direct`)
        if kinds.get(int(b.name[1:])) not in _PLAIN_KINDS:  # ("n3": as `docs.bind` reads it)
            return False
    return linked


_shapes: weakref.WeakKeyDictionary[Pattern, dict[int, _LiftShape]]
_shapes = weakref.WeakKeyDictionary()


def _shape(pattern: Pattern, spec: NodeSpec) -> _LiftShape:
    shapes = _shapes.get(pattern)
    if shapes is None:
        shapes = _shapes[pattern] = {}
    shape = shapes.get(spec.index)
    if shape is None or shape.spec is not spec:
        shape = shapes[spec.index] = _LiftShape(pattern, spec)
    return shape


_VALUE_PATH = (docs.VALUE,)
"""The path a lift writes (one shared tuple, not one per node)."""
_ARGUMENT_PATH = (docs.ARGUMENT,)
_NO_KWARGS: dict[str, Any] = {}
"""The keyword arguments of a lift called without any (shared: never written)."""


class _Lift(Teardown):
    """One instance of a lift node: the scheduler computation's function (calling it
    runs the lift in `tx`), and the teardown its instance's cancel group runs.

    A slotted object rather than nested closures: one object per lift, where the
    closures (`run`, `put`, `let_go`, the cleanups), their tuples and cells cost
    about 3 KB per node; what its node's every instance shares is in its `shape`.
    `launches` is made on the first pattern instance the function returns (most
    lifts return plain values).
    """

    __slots__ = (
        "args",
        "kwargs",
        "launches",
        "node",
        "out",
        "out_key",
        "reg",
        "runner",
        "shape",
        "written",
    )

    def __init__(
        self,
        runner: Launcher,
        reg: Registration,
        shape: _LiftShape,
        bound: dict[str, Any],
        out: Link,
        identity: Identity,
    ) -> None:
        self.runner = runner
        self.reg = reg
        self.shape = shape
        args: list[Any] = bound["args"]
        kwargs: dict[str, Any] = bound["kwargs"]
        self.args = tuple(args)
        self.kwargs = kwargs or _NO_KWARGS
        self.out = out
        # The replica's key object when it has the document (a page's pre-sync loaded
        # it): one key object per document (`Replica.held_key`).
        self.out_key = runner.replica.held_key(out.key(identity))
        self.launches: ComputedLaunches | None = None
        self.node: Node | None = None
        self.written: Any = PENDING
        """What the last run wrote, for the reuse book (`_reuse.Entry`: the lift is its
        own entry there when its shape has a code key)."""

    @property
    def identity(self) -> Identity:
        """The identity it runs for: its node's (registered right after it is made, before
        anything asks; a slot of its own cost 8 bytes per lift)."""
        node = self.node
        assert node is not None
        return node.identity

    @property
    def code(self) -> str | None:
        """The code key of its inputs record (`_reuse.Entry`); None: not in the book."""
        return self.shape.code

    def __call__(self, tx: Transaction) -> Any:
        shape = self.shape
        code = shape.code
        if code is not None:
            node = self.node
            if (
                node is not None
                and node.runs == 1
                and self.runner.reuse
                and reused(tx, self.out_key, _VALUE_PATH, code)
            ):
                self.written = REUSED
                return None  # this node's first run: the stored output stands
            self.written = PENDING  # until `_put` (a run that raises leaves no record)
        args = materialize_all(tx, self.args)
        kwargs = self.kwargs
        if kwargs:  # (most lifts have none: no dict made, read or copied per run)
            kwargs = {k: materialize(tx, v) for k, v in kwargs.items()}
        is_async = shape.is_async
        if is_async:
            need_loop(shape.label)
        value = shape.fn(*args, **kwargs)
        if is_async:
            # The scheduler awaits it in a task, then commits `tx` (whose basis is what
            # was read above): a value computed from inputs that changed meanwhile
            # never lands.
            return self._write_later(tx, value)
        self._put(tx, value)
        return None

    async def _write_later(self, tx: Transaction, pending: Any) -> None:
        value = await pending
        if _holds_instances(value):
            raise PatternError(
                f"{self.shape.label}: an async lift returns values, not pattern instances (launch"
                " children from a sync lift that reads this one's result)"
            )
        self._put(tx, value)

    def _chain(self) -> tuple[DocKey, ...]:
        reg = self.reg
        return (*reg.chain, reg.key)

    def _child_link(self, at: tuple[str | int, ...]) -> Link:
        return docs.computed_child_link(self.out, at)

    def _let_go(self, keep: dict[DocKey, Link]) -> None:
        """Release the children of a list/dict return that are not in `keep`."""
        launches = self.launches
        if launches is None:
            return
        many = launches.many
        for key in [k for k in many if k not in keep]:
            link, _launches = many.pop(key)
            self.runner.release_for(
                self.reg, link, self.identity, None, why=f"{self.shape.label} stopped returning it"
            )

    def _put(self, tx: Transaction, value: Any) -> None:
        runner, out_key, label = self.runner, self.out_key, self.shape.label
        node = self.node
        assert node is not None
        launches = self.launches
        if isinstance(value, PatternInstance):
            self._let_go({})
            if launches is None:
                launches = self.launches = ComputedLaunches()
            computed_child(runner, tx, value, self.out, self._chain(), label, launches, node)
            drop_record(tx, out_key)  # a launching run is never skipped
            return
        # The whole document (one peek, with no path to walk): its pattern field, and
        # nothing else, is asked of it here.
        held = tx.peek(out_key)
        if type(held) is dict and docs.PATTERN in held:
            # It returned a pattern before and a plain value now: let the child go.
            if launches is None:
                launches = self.launches = ComputedLaunches()
            launches.latest += 1
            runner.release(out_key, None, why=f"{label} stopped returning a pattern")
            tx.write(out_key, (docs.PATTERN,), MISSING)
            tx.write(out_key, (docs.ARGUMENT,), MISSING)
        t = type(value)
        if (t is str or t is int or t is bool or value is None) and (
            launches is None or not launches.many
        ):
            # A scalar: no child to look for, and the write stores it as it is
            # (`normalize` returns such a value itself, or raises before anything is
            # staged), so the reuse book records the value, with no peek after the write.
            tx.write(out_key, _VALUE_PATH, value)
            if self.shape.code is not None:
                self.written = value
            return
        found: list[tuple[tuple[str | int, ...], PatternInstance]] = []
        if isinstance(value, (dict, list, tuple)):
            replaced = _children_in(value, (), found, self._child_link)
            if found:
                value = replaced
        if found or (launches is not None and launches.many):
            if launches is None:
                launches = self.launches = ComputedLaunches()
            keep: dict[DocKey, Link] = {}
            chain = self._chain()
            for at, inst in found:
                child = self._child_link(at)
                key = child.key(tx.identity)
                held = launches.many.get(key)
                own = held[1] if held is not None else ComputedLaunches()
                launches.many[key] = (child, own)
                keep[key] = child
                computed_child(runner, tx, inst, child, chain, label, own, node)
            self._let_go(keep)
        tx.write(out_key, _VALUE_PATH, value)  # the write stores a returned cell as a link
        if found:
            drop_record(tx, out_key)  # a launching run is never skipped
        elif self.shape.code is not None:
            self.written = tx.peek(out_key, _VALUE_PATH)  # recorded at close (`_reuse`)

    def _remove(self) -> None:
        if self.node is not None:
            if self.shape.code is not None:
                self.runner.reuse_book.discard(self.node)
            self.runner.scheduler.remove(self.node)

    def teardown(self) -> None:
        """Undo the instance, in the order separate cleanups ran (newest first): let the
        children of a list/dict return go, let the child go, forget the node, remove it."""
        reg, label = self.reg, self.shape.label
        errors: list[Exception] = []
        steps: tuple[Callable[[], object], ...] = (
            lambda: self._let_go({}),
            # Tokenless: later runs re-drive one shared child and install nothing of
            # their own, so a token narrowed to one run would never match.
            lambda: self.runner.release_for(
                reg, self.out, self.identity, None, why=f"teardown of {label}"
            ),
            lambda: reg.untrack(self.shape.index, self.node),
            self._remove,
        )
        for step in steps:
            try:
                step()
            except Exception as exc:  # siblings still run, as in a cancel group
                errors.append(exc)
        if len(errors) == 1:
            raise errors[0]
        if errors:
            raise ExceptionGroup(f"teardown of {label} failed", errors)


class _DirectLift(_Lift, ValueFunction):
    """A lift whose every input is a place in another lift's or a state cell's output,
    in the pattern's argument, or a scalar constant, with no keyword input and no async
    function (`_over_lifts`): it may run with no transaction (`scheduler.ValueFunction`)
    once its node has run in one, when a transaction run now would read what that run
    read (a plain place per input, reached through the same link hops: the scheduler
    checks the read set, `Replica.run_field` the values). `compute`, `put` and `wrote`
    keep what a transaction run keeps: the reuse book hears each write, and a result
    that is not a plain scalar (a pattern instance, a container, a float) is written by
    `put` in a transaction, which launches or lets go of children as `_put` does.

    A class of its own, chosen per pattern node (`_LiftShape.direct`), so that a lift
    that can never run directly (over a nested pattern's, a list's or a `when`'s
    output, which hold links to results) costs the scheduler one `isinstance` per run
    and nothing more.
    """

    __slots__ = ()

    @property
    def inputs(self) -> Link | tuple[Link, ...]:
        """What a direct run reads: its positional inputs; `()` (this run is a
        transaction run) on its node's first run (which may keep a stored output,
        `_reuse`, and sees a pattern field an earlier process left), for a lift that
        launched children (its runs decide what to let go). O(1).

        Why a direct run may skip `_put`'s look at the pattern field: a transaction run
        completed `_put` before it (the first run, or it kept a stored output, which a
        launching run never leaves a record for), and a node that raised is never run
        directly again (the scheduler), so a field an earlier process left is seen and
        the child let go (`launches` is set from then on)."""
        node = self.node
        if node is None or node.runs <= 1 or self.launches is not None:
            return ()  # (`runs` is counted before the run: 1 is the first)
        args = self.args
        at = self.shape.links
        if at is None:
            return args[0] if len(args) == 1 else args
        return args[at[0]] if len(at) == 1 else tuple([args[i] for i in at])

    def compute(self, *values: Any) -> Any:
        """A direct run's call: the function over its inputs' plain values (an absent
        value is None, as `materialize` gives it)."""
        shape = self.shape
        if shape.code is not None:
            self.written = PENDING  # until `wrote` / `_put`: a raising run leaves no record
        at = shape.links
        if at is not None:  # the constants in their places, the values in the links'
            args = list(self.args)
            if len(at) == 1:
                (args[at[0]],) = values  # (one link among constants: no loop)
            else:
                for i, value in zip(at, values, strict=True):
                    args[i] = value
            return shape.fn(*args)
        return shape.fn(*values)

    def put(self, tx: Transaction, value: Any) -> None:
        """Write what `compute` returned, in `tx`, as a transaction run does."""
        self._put(tx, value)

    def wrote(self, value: Any) -> None:
        """A direct run wrote `value` (an int, an ASCII string or None: stored as it
        is): the reuse book records it at close, as `_put` would have."""
        if self.shape.code is not None:
            self.written = value


def _holds_instances(value: Any) -> bool:
    if isinstance(value, PatternInstance):
        return True
    if isinstance(value, dict):
        return any(_holds_instances(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_holds_instances(v) for v in value)
    return False


def _children_in(
    value: Any,
    at: tuple[str | int, ...],
    found: list[tuple[tuple[str | int, ...], PatternInstance]],
    link_for: Callable[[tuple[str | int, ...]], Link],
) -> Any:
    """`value` with each pattern instance inside a list or dict (nested too) replaced by
    the link to the result of the child it launches; each is appended to `found` with
    its place. O(size of the value)."""
    if isinstance(value, PatternInstance):
        found.append((at, value))
        return link_for(at)
    if isinstance(value, dict):
        return {k: _children_in(v, (*at, k), found, link_for) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_children_in(v, (*at, i), found, link_for) for i, v in enumerate(value)]
    return value


# --------------------------------------------------------------------------- nested patterns


def _nested(
    runner: Launcher,
    reg: Registration,
    pattern: Pattern,
    spec: NodeSpec,
    result: Link,
    tx: Transaction,
    group: CancelGroup,
) -> None:
    child = find_pattern(spec.target)
    out = docs.internal_link(result, spec.index)
    label = node_label(pattern, spec)
    runner.stage_setup(tx, child, docs.bind(spec.inputs, result), out, label)
    token = runner.launch(
        tx, child, out, launch=f"nested in {label}", chain=(*reg.chain, reg.key), gated=False
    )
    release_token = token if isinstance(token, Registration) else None
    group.add(_ReleaseNested(runner, reg, out, tx.identity, release_token, label))


class _ReleaseNested:
    """The cleanup of a nested pattern node's instance: let its child go. A slotted
    callable: the closure, its cells and their tuple cost about 350 bytes more per
    nested child."""

    __slots__ = ("identity", "label", "out", "reg", "runner", "token")

    def __init__(
        self,
        runner: Launcher,
        reg: Registration,
        out: Link,
        identity: Identity,
        token: Registration | None,
        label: str,
    ) -> None:
        self.runner = runner
        self.reg = reg
        self.out = out
        self.identity = identity
        self.token = token
        self.label = label

    def __call__(self) -> None:
        self.runner.release_for(
            self.reg, self.out, self.identity, self.token, why=f"teardown of {self.label}"
        )


# --------------------------------------------------------------------------- handlers


def _handler(
    runner: Launcher,
    reg: Registration,
    pattern: Pattern,
    spec: NodeSpec,
    result: Link,
    identity: Identity,
) -> None:
    fn = pattern.function(spec.target)
    bound: dict[str, Any] = docs.bind(spec.inputs, result)
    stream = docs.internal_link(result, spec.index)
    label = node_label(pattern, spec)
    chain = (*reg.chain, reg.key)
    convert = event_converter(
        fn, f"{getattr(fn, '__qualname__', spec.target)} in pattern {pattern.identity}"
    )

    def run(tx: Transaction, payload: Any) -> Any:
        # A parameter bound to a reference is the cell it ends at: `count.set(...)` in
        # a handler writes the user's cell, not over the link the argument holds.
        kwargs = {
            name: (
                Cell(runner.replica, tx.identity, resolve(tx, tree), host=runner.host).with_tx(tx)
                if type(tree) is Link
                else materialize(tx, tree)
            )
            for name, tree in bound.items()
        }
        return fn(payload if convert is None else convert(payload), **kwargs)

    def on_result(tx: Transaction, ev: QueuedEvent, returned: Any) -> None:
        _handler_result(runner, reg, tx, ev, returned, stream, chain, label)

    stream_cell = Cell(runner.replica, identity, stream, host=runner.host)
    handler = runner.scheduler.add_handler(
        stream_cell, run, reads=declared_reads(bound, identity), label=label, on_result=on_result
    )
    reg.group.add(RemoveNode(runner.scheduler, handler, handler=True))
    if convert is not None:
        bind_event_check(runner, stream.key(identity), convert, reg.group)
    _track(reg, spec.index, handler, reg.group)


def _handler_result(
    runner: Launcher,
    reg: Registration,
    tx: Transaction,
    ev: QueuedEvent,
    returned: Any,
    stream: Link,
    chain: tuple[DocKey, ...],
    label: str,
) -> None:
    for item in _walk(returned):
        if isinstance(item, PatternInstance):
            child = docs.handler_result_link(stream, ev.id)
            runner.stage_setup(tx, item.pattern, item.argument, child, label)
            key = child.key(tx.identity)
            if key in runner.registrations:
                continue  # a duplicate delivery: the winner's child stays the winner's
            installed = runner.start_core(
                tx, item.pattern, child, launch=f"event {ev.id[:12]} of {label}", chain=chain
            )

            def stop_own(key: DocKey = key, installed: Registration = installed) -> None:
                runner.stop_if_current(key, installed, why=f"origin of {label} failed")

            runner.scheduler.lineage.record_stop(tx, stop_own)
            reg.group.add(stop_own)
        elif isinstance(item, Navigate):
            _navigate_after_commit(
                runner, reg, tx, item.target, label, stream, ev, chain, item.follow
            )


def _walk(value: Any) -> list[Any]:
    """Pattern instances and navigations in a handler's return value (nested too)."""
    if isinstance(value, (PatternInstance, Navigate)):
        return [value]
    if isinstance(value, dict):
        return [x for v in value.values() for x in _walk(v)]
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in _walk(v)]
    return []


def _navigate_after_commit(
    runner: Launcher,
    reg: Registration,
    tx: Transaction,
    target: Any,
    label: str,
    stream: Link,
    ev: QueuedEvent,
    chain: tuple[DocKey, ...],
    follow: bool = False,
) -> None:
    if isinstance(target, PatternInstance):
        # navigate_to(Child(...)): the child is set up now and starts only if the
        # handling commits; then it opens as a page.
        link = docs.handler_result_link(stream, ev.id)
        argument = target.argument if follow else _pin_slots(tx, target.argument)
        runner.stage_setup(tx, target.pattern, argument, link, label)
    elif isinstance(target, Link):
        link = target
    elif isinstance(target, Linkable):
        link = target.link()
    else:
        raise PatternError(
            f"{label}: navigate_to needs a cell or a pattern instance, got {target!r}"
        )
    key = docs.root(link).key(tx.identity)
    pending = runner.pending.add(key, f"navigation from {label}", tx.identity)
    runner.trace.record("pending", key, launch=f"navigation from {label}")
    reg.group.add(lambda: runner.pending.cancel_key(key, runner.cancel_pending))
    identity = tx.identity

    def settled(_tx: Transaction, res: CommitResult) -> None:
        if pending.cancelled:
            return
        runner.pending.settle(pending)
        if res.ok:
            runner.open_page(link, identity, via=label, follow=follow)

    tx.add_settle_callback(settled)


def _pin_slots(tx: Transaction, argument: dict[str, Any]) -> dict[str, Any]:
    """`argument` with each cell that names a list slot holding a link replaced by that
    link: the page's argument is the element the slot holds now (`notes.key(i)` stays
    with its note after earlier notes are removed), not the position."""
    pinned: dict[str, Any] = {}
    for name, value in argument.items():
        link = value if isinstance(value, Link) else None
        if link is None and isinstance(value, Linkable):
            link = value.link()
        if link is not None and link.path and type(link.path[-1]) is int:
            place = resolve(tx, link, follow_last=False)
            held = tx.peek(place.key(tx.identity), (docs.VALUE, *place.path))
            if type(held) is Link:
                value = held
        pinned[name] = value
    return pinned


# --------------------------------------------------------------------------- navigate nodes


def _navigate(
    runner: Launcher,
    reg: Registration,
    pattern: Pattern,
    spec: NodeSpec,
    result: Link,
    identity: Identity,
    group: CancelGroup,
) -> None:
    bound = docs.bind(spec.inputs, result)["target"]
    label = node_label(pattern, spec)
    if type(bound) is not Link:
        raise PatternError(f"{label}: navigate_to needs a reference, got {bound!r}")
    out_key = docs.internal_link(result, spec.index).key(identity)
    follow = spec.inputs.get("follow") is True
    navigated: set[str] = set()

    def run(tx: Transaction) -> None:
        # Once per target (the place the reference resolves to, links followed); the
        # page itself is opened with the reference, which the start follows.
        page = docs.page_id(resolve(tx, bound))
        tx.write(out_key, (docs.VALUE,), True)
        if page in navigated:
            return  # once per target, however often this runs
        navigated.add(page)

        def settled(_tx: Transaction, res: CommitResult) -> None:
            if res.ok:
                if reg.ended:
                    return
                runner.open_page(bound, identity, via=label, follow=follow)
            else:
                navigated.discard(page)  # a rejected commit: a later run navigates

        tx.add_settle_callback(settled)

    node = runner.scheduler.register(
        run, identity=identity, kind="effect", outputs=[(out_key, (docs.VALUE,))], label=label
    )
    group.add(RemoveNode(runner.scheduler, node))
    _track(reg, spec.index, node, group)
