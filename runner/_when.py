"""Conditionals: `when(condition, then, otherwise=None)` and `unless(...)`.

Inside a body, `when` records a *when node*. Each branch is

- a plain value (written as the node's value),
- a reference (the node's value is a link to it, so a reader follows it there
  and only the chosen reference is read, hence computed), or
- a pattern called in the body (`Child(x=ref)`): that call's nested node
  becomes a *branch node* (kind "branch"), which instantiation skips; the
  when node launches the child only while its branch is chosen, on the
  branch node's own result (`docs.internal_link(result, i)`, the id a nested
  child would have), and the node's value is a link to that result.

Switching branches releases the child of the branch left (tokenless, as a
computation's child: a page opened on it keeps it running, since a page holds a
lifetime of its own). A child is launched in the node's transaction as a
computed child (`_computed.computed_child`): if that transaction fails for
good it is rolled back (released) and the node runs again; on a stale basis
the scheduler re-runs the node, which reads the condition again. The run's
teardown releases the child it holds.

A when node with a child branch is an effect (children launch as a nested
child does, whether or not anyone reads the value); one without is a
computation (computed on demand).

Invariants
- at most one branch child is held per instance, the chosen branch's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cells import Identity, Link, Transaction

from . import _docs as docs
from ._builder import (
    NodeSpec,
    Pattern,
    PatternInstance,
    Ref,
    _active,
    _bind,
    find_pattern,
)
from ._cancel import CancelGroup, RemoveNode
from ._computed import ComputedLaunches, computed_child, declared_reads, materialize, node_label
from .errors import PatternError

if TYPE_CHECKING:
    from ._core import Launcher
    from ._registrations import Registration


def when(condition: Any, then: Any, otherwise: Any = None) -> Ref:
    """`then` while `condition` is truthy, else `otherwise` (each a value, a reference,
    or a pattern called in the body, launched as a child only while chosen)."""
    return _conditional("when", condition, then, otherwise, negate=False)


def unless(condition: Any, then: Any, otherwise: Any = None) -> Ref:
    """`then` while `condition` is falsy, else `otherwise` (see `when`)."""
    return _conditional("unless", condition, then, otherwise, negate=True)


def _conditional(what: str, condition: Any, then: Any, otherwise: Any, *, negate: bool) -> Ref:
    trace = _active(f"{what}()")
    where = f"{what}() in pattern {trace.pattern.identity}"
    inputs: dict[str, Any] = {
        "condition": _bind(condition, trace, f"{where}: condition"),
        "branches": [
            _branch(trace, then, f"{where}: then"),
            _branch(trace, otherwise, f"{where}: otherwise"),
        ],
    }
    if negate:
        inputs["negate"] = True
    return trace.add("when", "", inputs)


def _branch(trace: Any, value: Any, where: str) -> dict[str, Any]:
    if isinstance(value, Ref):
        b = _bind(value, trace, where)
        if b.cell == "internal" and not b.path:
            index = int(b.name[1:])
            spec: NodeSpec = trace.nodes[index]
            if spec.kind == "branch":
                raise PatternError(
                    f"{where}: the child {spec.target} (node {index}) is already a branch of"
                    " another when(); call the pattern again for each branch"
                )
            if spec.kind == "pattern":
                # The call recorded a nested child; it runs only while this branch is chosen.
                trace.nodes[index] = NodeSpec(index, "branch", spec.target, spec.inputs)
                return {"child": index}
        return {"ref": b}
    if isinstance(value, PatternInstance):
        raise PatternError(f"{where}: {value!r} was made outside the body")
    return {"value": _bind(value, trace, where)}


def instantiate_when(
    runner: Launcher,
    reg: Registration,
    pattern: Pattern,
    spec: NodeSpec,
    result: Link,
    identity: Identity,
    group: CancelGroup,
) -> None:
    """Register one instance's when node; its cleanups (node, held child) in `group`."""
    condition = docs.bind(spec.inputs["condition"], result)
    negate = spec.inputs.get("negate") is True
    branches: list[dict[str, Any]] = spec.inputs["branches"]
    out = docs.internal_link(result, spec.index)
    out_key = out.key(identity)
    label = node_label(pattern, spec)
    chain = (*reg.chain, reg.key)
    held: dict[int, Link] = {}
    launches = [ComputedLaunches(), ComputedLaunches()]

    def let_go(keep: int | None, why: str) -> None:
        for i in [i for i in held if i != keep]:
            link = held.pop(i)
            runner.release_for(reg, link, identity, None, why=why)

    def run(tx: Transaction) -> None:
        chosen = 0 if bool(materialize(tx, condition)) != negate else 1
        branch = branches[chosen]
        let_go(chosen, f"{label} switched to branch {chosen}")
        if "child" in branch:
            index: int = branch["child"]
            node_spec = pattern.graph.nodes[index]
            child = docs.internal_link(result, index)
            inst = PatternInstance(
                find_pattern(node_spec.target), docs.bind(node_spec.inputs, result)
            )
            computed_child(runner, tx, inst, child, chain, label, launches[chosen], node)
            held[chosen] = child
            tx.write(out_key, (docs.VALUE,), child)
        elif "ref" in branch:
            tx.write(out_key, (docs.VALUE,), docs.bind(branch["ref"], result))
        else:
            tx.write(out_key, (docs.VALUE,), branch["value"])

    has_child = any("child" in b for b in branches)
    node = runner.scheduler.register(
        run,
        identity=identity,
        kind="effect" if has_child else "computation",
        outputs=[(out_key, (docs.VALUE,))],
        label=label,
        reads=declared_reads(condition, identity),
    )
    group.add(RemoveNode(runner.scheduler, node))
    group.add(lambda: let_go(None, f"teardown of {label}"))
