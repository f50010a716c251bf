"""Function list ops: `items.map(fn)`, `.filter(fn)`, `.flat_map(fn)` with a plain function.

The list coordinator (`_lists`) treats a function op as it treats a pattern op
— the same element keys, the same per-element result document (its id
derived from the container and the element key), the same incremental diff
and the same release rules — but where a pattern op launches a child run per
element, a function op registers one scheduler computation per element: it
reads its element (through the link the coordinator hands it, so an edit
inside an element re-runs only that element's computation), calls the
function on the plain value (and the element's index, if the function takes
a second parameter) and writes the result into the element's result
document. There is no child pattern: no handlers, no children, no pages of
its own. An `async def` function is awaited as an async lift is (see
`scheduler._async`).

Invariants (checked by `_check`)
- one registered node per (identity, element result) held, writing exactly
  that result document.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from cells import DocKey, Identity, Link, Transaction
from scheduler import Node

from . import _docs as docs
from ._builder import PatternInstance
from ._computed import materialize, need_loop
from .errors import PatternError

if TYPE_CHECKING:
    from ._core import Launcher


def takes_index(fn: Callable[..., Any]) -> bool:
    """Whether a function op takes the element's index as its second parameter."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # some builtins have no signature: one argument
        return False
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 2 or any(p.kind is p.VAR_POSITIONAL for p in params)


class _Element:
    """One element's computation: what it reads, and where its result goes."""

    __slots__ = ("element", "index", "node")

    def __init__(self, element: Link, index: int | None) -> None:
        self.element = element
        self.index = index
        self.node: Node | None = None


class ElementFunctions:
    """The per-element computations of one function op."""

    def __init__(self, runner: Launcher, fn: Callable[..., Any], label: str) -> None:
        self.runner = runner
        self.fn = fn
        self.label = label
        self.uses_index = takes_index(fn)
        self.is_async = inspect.iscoroutinefunction(fn)
        self.elements: dict[tuple[Identity, DocKey], _Element] = {}

    def issue(self, tx: Transaction, child: Link, element: Link, index: int) -> None:
        """Compute `child` from `element` (at `index`) for `tx.identity`: register its
        computation, or point the existing one at the element and run it again."""
        identity = tx.identity
        out_key = child.key(identity)
        at = index if self.uses_index else None
        held = self.elements.get((identity, out_key))
        if held is not None and held.node is not None and held.node.registered:
            if held.element != element or held.index != at:
                held.element, held.index = element, at
                self.runner.scheduler.invalidate(held.node)
            return
        record = _Element(element, at)
        self.elements[identity, out_key] = record
        record.node = self.runner.scheduler.register(
            self._runner_for(record, out_key),
            identity=identity,
            outputs=[(out_key, (docs.VALUE,))],
            label=f"{self.label} element",
            reads=[(element.key(identity), (docs.VALUE, *element.path), False)],
        )

    def _runner_for(self, record: _Element, out_key: DocKey) -> Callable[[Transaction], Any]:
        fn = self.fn
        label = self.label

        def put(tx: Transaction, value: Any) -> None:
            if isinstance(value, PatternInstance):
                raise PatternError(
                    f"{label}: a function op returns values, not pattern instances (use a"
                    " pattern op to give each element a child)"
                )
            tx.write(out_key, (docs.VALUE,), value)

        async def later(tx: Transaction, pending: Any) -> None:
            put(tx, await pending)

        def run(tx: Transaction) -> Any:
            value = materialize(tx, record.element)
            if self.is_async:
                need_loop(label)
            returned = fn(value) if record.index is None else fn(value, record.index)
            if self.is_async:
                return later(tx, returned)
            put(tx, returned)
            return None

        return run

    def release(self, identity: Identity, child_key: DocKey) -> None:
        """The element left the list (or the op ended): its computation goes."""
        record = self.elements.pop((identity, child_key), None)
        if record is not None and record.node is not None:
            self.runner.scheduler.remove(record.node)

    def _check(self) -> None:
        for (identity, key), record in self.elements.items():
            assert record.node is not None and record.node.registered, key
            assert record.node.identity == identity, key
            assert record.node.outputs == ((key, (docs.VALUE,)),), key
