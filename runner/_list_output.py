"""What a list coordinator writes: the aggregate, and the scope it is written at.

- map: a list of links to the element results (positions kept);
- filter: links to the original elements whose result is truthy, dense;
- flat_map: the element results flattened one level (a scalar counts as one
  item; an element whose result is still absent contributes nothing yet).

(A filter's or flat_map's output is written by its combiner, `_list_combine`.)

Scopes (S70): map writes its aggregate (links to the children) into the base
container, so it stays at the list's scope whatever its elements' scopes (a
link resolves to each reader's own instance). filter and flat_map aggregates
are made of the children's values, so their cardinality is controlled by
every child: the aggregate goes to the narrowest of the base container's and
the children's scopes. A narrowed output is written at the same id, and the
run's own output cell (at the run's scope) then holds a link to it, so the
run's result resolves each reader's instance.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from cells import SCOPES, DocKey, Identity, Link, Transaction

from . import _docs as docs
from ._list_keys import narrower, rescoped
from ._list_state import Entry


def output_keys(container: Link, identity: Identity) -> list[DocKey]:
    """Every document a reconcile for `identity` may write its aggregate to: the output
    at the run's scope (`container`) and its re-addressings at each narrower scope."""
    narrow = SCOPES[SCOPES.index(container.scope) :]
    return list(dict.fromkeys(rescoped(container, s).key(identity) for s in narrow))


def output_link(kind: str, base: Link, entries: Iterable[Entry]) -> Link:
    """Where the aggregate goes: the base container for map; for filter and flat_map,
    re-addressed as private as the most private child (its values decide how long the
    aggregate is, while map's links resolve per reader instead). O(N) for those."""
    out = base
    if kind != "map":
        for e in entries:
            out = rescoped(out, narrower(out.scope, e.child.scope))
    return out


def publish(tx: Transaction, container: Link, out: Link, aggregate: Any) -> None:
    """Write the aggregate at `out`; a narrowed output is linked from the run's own
    output `container`."""
    identity = tx.identity
    tx.write(out.key(identity), (docs.VALUE,), aggregate)
    if out != container:
        tx.write(container.key(identity), (docs.VALUE,), out)
