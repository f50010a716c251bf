"""Argument checks for public calls: one message shape, two error classes.

`check_arg(value, types, where=..., name=..., accepts=...)` raises
`ArgumentTypeError` (an `InvalidArgumentError` and a `TypeError`) naming the call,
the argument, what it accepts and what it got (its type and a short repr);
`bad_arg(..., kind="value")` makes the `InvalidArgumentError` for an argument of a
usable type but a value the call cannot take. Checks are `isinstance` tests, O(1);
hot paths call them only where an argument is first used (a transaction's first
access to a document), so a correct program pays one comparison.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from .errors import ArgumentTypeError, InvalidArgumentError


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def bad_arg(
    value: Any, *, where: str, name: str, accepts: str, kind: Literal["type", "value"] = "type"
) -> InvalidArgumentError:
    """The error for argument `name` of `where`, which accepts `accepts`, given `value`:
    `ArgumentTypeError` for a wrong type, `InvalidArgumentError` for a wrong value."""
    message = f"{where}: {name} must be {accepts}, got {type(value).__name__} {_shown(value)}"
    if kind == "value":
        return InvalidArgumentError(message)
    return ArgumentTypeError(message, value=value)


def check_arg(
    value: Any,
    types: type | tuple[type, ...],
    *,
    where: str,
    name: str,
    accepts: str,
) -> None:
    """Raise `ArgumentTypeError` unless `value` is an instance of `types` (bool is
    never accepted for int: `True` is not a count or an index)."""
    if not isinstance(value, types) or (
        isinstance(value, bool) and bool not in (types if isinstance(types, tuple) else (types,))
    ):
        raise bad_arg(value, where=where, name=name, accepts=accepts)


def check_callable(value: Any, *, where: str, name: str) -> Callable[..., Any]:
    if not callable(value):
        raise bad_arg(value, where=where, name=name, accepts="a callable")
    return value  # type: ignore[no-any-return]
