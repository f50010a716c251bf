"""`state(initial)`: a cell a run owns, kept across restarts.

Inside a pattern body, `count = state(0)` records a *state node*. Its cell
is the node's internal cell, so its id derives from the run's result and the
node's index (`docs.internal_link`): the same on every runtime, after a
restart, and for every setup of the same result. The setup writes `initial`
only when the cell holds nothing yet (the first setup); a later setup, a
second runtime or a restart keeps what handlers wrote. Handlers get it as a
`Cell` (`count.set(...)`), lifts read its value, the result may expose it.
It lives with the run's other documents: the cold-resume pre-sync loads it
(`run_keys` lists every internal cell), and `inspect()` shows it.

Not here: writing it (handlers and the user do, as for any cell).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cells import MISSING, DocKey, Link, Replica, Transaction

from . import _docs as docs
from ._builder import NodeSpec, Ref, _active, _bind, _bindings_in, find_pattern
from .errors import PatternError, PatternLoadError

if TYPE_CHECKING:
    from ._registrations import Registration


def state(initial: Any = None, *, name: str | None = None) -> Ref:
    """A cell owned by the run, holding `initial` until something writes it.

    `initial` is a plain value (JSON-like), written only at the run's first
    setup. `name` labels it in `inspect()` (default: `n{index}`).
    """
    trace = _active("state()")
    where = f"state() in pattern {trace.pattern.identity}"
    value = _bind(initial, trace, f"{where}: initial")
    if any(True for _ in _bindings_in(value)):
        raise PatternError(
            f"{where}: initial {initial!r} holds a reference; an initial value is plain data"
            " (compute from references with lift())"
        )
    if name is not None and not isinstance(name, str):
        raise PatternError(f"{where}: name must be a str, got {name!r}")
    inputs: dict[str, Any] = {"initial": value}
    if name is not None:
        inputs["name"] = name
    return trace.add("state", "", inputs)


def stage_state(tx: Transaction, node: NodeSpec, result: Link) -> None:
    """Write a state node's initial value if its cell holds nothing yet.

    The read is unlogged (a lift staging a child's setup must not come to depend
    on the child's state) but counts for the basis: a cell this replica has not
    loaded yet makes the commit fail on a stale basis instead of overwriting it.
    """
    key = docs.internal_link(result, node.index).key(tx.identity)
    if tx.read(key, (docs.VALUE,), log=False) is MISSING:
        tx.write(key, (docs.VALUE,), node.inputs["initial"])


def describe(replica: Replica, reg: Registration) -> dict[str, Any]:
    """The state cells of a registration's run: name -> {"id", "value"} (for `inspect()`)."""
    key: DocKey = reg.key
    try:
        pattern = find_pattern(reg.pattern)
    except PatternLoadError:
        return {}
    nodes = [n for n in pattern.graph.nodes if n.kind == "state"]
    if not nodes:
        return {}
    result = Link(key.space, key.id, key.scope)
    identity = next(iter(reg.identities), None)
    if identity is None:
        return {}
    tx = replica.edit(identity)
    try:
        out: dict[str, Any] = {}
        for n in nodes:
            cell = docs.internal_link(result, n.index)
            value = tx.peek(cell.key(identity), (docs.VALUE,))
            out[n.inputs.get("name", f"n{n.index}")] = {
                "id": cell.id,
                "value": None if value is MISSING else _plain(value),
            }
        return out
    finally:
        tx.abort("inspect probe")


def _plain(value: Any) -> Any:
    t = type(value)
    if t is Link:
        return str(value)
    if t is dict:
        return {k: _plain(v) for k, v in value.items()}
    if t is list:
        return [_plain(v) for v in value]
    return value
