"""Type checks a run makes once it runs: linked arguments and events of typed handlers.

- A typed pattern's run gets one effect node that reads each annotated
  parameter holding a link, follows it (so it reads what the link points to as
  loaded now, and runs again when that changes) and checks it against the
  parameter's type. A mismatch makes the node fail: it is reported in
  `rt.errors()` (and `inspect()["failing"]`) naming the pattern, the parameter,
  the path and the type, and nothing else stops; the run computes on.
- A typed handler's stream is recorded here, so `rt.send` checks an event
  before queueing it (a bad event raises `PatternError` at the send and is
  never queued) and stores it as plain data.

Invariants
- A stream is in `_STREAMS[runner]` exactly while its handler is bound (the
  registration's cancel group removes it).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgspec

from cells import MISSING, Cell, DocKey, Identity, Link, Transaction, read_value

from . import _docs as docs
from . import _types as types
from ._builder import Pattern
from ._cancel import CancelGroup, RemoveNode

if TYPE_CHECKING:
    from ._core import Launcher

_STREAMS: weakref.WeakKeyDictionary[Launcher, dict[DocKey, Callable[[Any], Any]]] = (
    weakref.WeakKeyDictionary()
)


def bind_event_check(
    runner: Launcher, stream: DocKey, convert: Callable[[Any], Any], group: CancelGroup
) -> None:
    """Record the converter of a typed handler's stream while the handler is bound."""
    streams = _STREAMS.setdefault(runner, {})
    streams[stream] = convert

    def unbind() -> None:
        if streams.get(stream) is convert:
            del streams[stream]

    group.add(unbind)


def plain_event(event: Any) -> Any:
    """A `msgspec.Struct` event as plain data (what a stream carries); else `event`."""
    return msgspec.to_builtins(event) if isinstance(event, msgspec.Struct) else event


def check_event(runner: Launcher, target: Cell, event: Any) -> Any:
    """`event` checked against the type of the handler bound at `target` and as plain
    data; unchanged when that handler is untyped (or not bound here)."""
    streams = _STREAMS.get(runner)
    if not streams:
        return event
    convert = streams.get(target.link().key(target.identity))
    if convert is None:
        return event
    return msgspec.to_builtins(convert(event))


def check_node(
    runner: Launcher,
    pattern: Pattern,
    result: Link,
    identity: Identity,
    group: CancelGroup,
) -> None:
    """Register the argument-check effect of a typed pattern's run (nothing if untyped)."""
    sig = pattern.signature
    typed = [p.name for p in sig.params.values() if p.annotated]
    if not typed:
        return
    arg = docs.argument_link(result)
    arg_key = arg.key(identity)
    where = f"the argument of pattern {pattern.identity} (run {result.id[:12]})"

    def run(tx: Transaction) -> None:
        for name in typed:
            raw = tx.read(arg_key, (docs.VALUE, name))
            if raw is MISSING or not types.has_link(raw):
                continue  # plain values were checked when the argument was staged
            value = read_value(tx, arg.child(name))
            if value is MISSING:
                continue  # the target is not loaded (or absent): checked when it is
            types.check_loaded(sig, name, value, where)

    node = runner.scheduler.register(
        run, identity=identity, kind="effect", label=f"{pattern.__qualname__} argument check"
    )
    group.add(RemoveNode(runner.scheduler, node))
