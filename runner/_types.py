"""Typed patterns: what a pattern's parameters, result and handler events look like.

A pattern's parameters may carry annotations and defaults
(`def Counter(count: int = 0, title: str = "Counter")`); a handler's first
parameter (its event) an annotation; a pattern's return annotation describes
its result. Any type `msgspec` converts is allowed: scalars, `list[...]`,
`dict[str, ...]`, `TypedDict`, `msgspec.Struct`, `Optional`, `Literal`,
`Annotated[..., msgspec.Meta(...)]`. Annotations are resolved lazily (on first
use) with `typing.get_type_hints` and the function's globals, so `from
__future__ import annotations` and types defined after the pattern work.

Rules
- A parameter with a default is filled with it when the argument lacks it
  (annotated or not); an annotated parameter without a default is required.
- A value is converted with `msgspec.convert` and stored as plain data
  (`msgspec.to_builtins`): a `Struct` becomes a dict, a tuple a list.
- A value holding a cell (a link) anywhere is not checked when staged: what a
  link points to may not be loaded yet. The run checks it when its target is
  loaded (`check_node`), and reports a mismatch in `rt.errors()`.
- Unannotated parameters are `Any`: nothing is checked, as before. So are
  parameters annotated `Any`, `Ref` or `Cell` (annotations for a type checker,
  describing the handle a body or handler holds, not the value).

Not here: where a check is called (the builder, the runtime, instantiation).
"""

from __future__ import annotations

import copy
import functools
import inspect
import re
import typing
from collections.abc import Callable, Mapping
from typing import Any, Final

import msgspec

from cells import Cell, Link, Linkable

from .errors import PatternError

NO_DEFAULT: Final = inspect.Parameter.empty

_AT = re.compile(r"^(?P<msg>.*?)(?: - at `\$(?P<path>[^`]*)`)?$", re.DOTALL)


class Param(msgspec.Struct, frozen=True):
    """One parameter: its name, type (`Any` when unannotated) and default."""

    name: str
    type: Any
    default: Any
    annotated: bool


class Signature:
    """The resolved types of a pattern or handler function (made lazily, cached)."""

    __slots__ = ("_struct", "params", "result", "typed")

    def __init__(self, params: tuple[Param, ...], result: Any, typed: bool) -> None:
        self.params = {p.name: p for p in params}
        self.result = result
        self.typed = typed
        self._struct: type[msgspec.Struct] | None = None

    def first(self) -> Param | None:
        """The first parameter (a handler's event), if any."""
        return next(iter(self.params.values()), None)

    def argument_struct(self, name: str) -> type[msgspec.Struct]:
        """The argument as a Struct type (for its JSON Schema)."""
        if self._struct is None:
            fields: list[tuple[str, Any] | tuple[str, Any, Any]] = []
            for p in self.params.values():
                if p.default is NO_DEFAULT:
                    fields.append((p.name, p.type) if p.annotated else (p.name, Any, None))
                elif isinstance(p.default, (list, dict, set)):
                    factory = functools.partial(copy.deepcopy, p.default)
                    fields.append((p.name, p.type, msgspec.field(default_factory=factory)))
                else:
                    fields.append((p.name, p.type, p.default))
            self._struct = msgspec.defstruct(name, fields, kw_only=True)
        return self._struct


def signature(
    fn: Callable[..., Any], what: str, *, skip: int = 0, opaque: tuple[type, ...] = ()
) -> Signature:
    """The parameters of `fn` after the first `skip`, with resolved annotations."""
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception as exc:
        raise PatternError(
            f"{what} {getattr(fn, '__qualname__', fn)}: its annotations cannot be resolved:"
            f" {type(exc).__name__}: {exc} (define the types at module level)"
        ) from exc
    params: list[Param] = []
    typed = False
    for i, p in enumerate(inspect.signature(fn).parameters.values()):
        if i < skip:
            continue
        annotated = p.name in hints and not untyped(hints[p.name], opaque)
        typed = typed or annotated
        params.append(Param(p.name, hints[p.name] if annotated else Any, p.default, annotated))
    result = hints.get("return", NO_DEFAULT)
    if result is not NO_DEFAULT and untyped(result, opaque):
        result = NO_DEFAULT
    return Signature(tuple(params), result, typed or result is not NO_DEFAULT)


def untyped(tp: Any, opaque: tuple[type, ...] = ()) -> bool:
    """Whether an annotation says nothing about the value: `Any`, or a handle type
    (`Ref`, `Cell`: what a body or a handler holds, for a type checker's sake)."""
    return tp is Any or (isinstance(tp, type) and issubclass(tp, (Cell, *opaque)))


def has_link(value: Any, opaque: tuple[type, ...] = ()) -> bool:
    """Whether `value` holds a cell or link (or one of `opaque`) anywhere."""
    stack = [value]
    while stack:
        v = stack.pop()
        t = type(v)
        if t is dict:
            stack.extend(v.values())
        elif t is list or t is tuple:
            stack.extend(v)
        elif t in (str, int, float, bool) or v is None:
            continue
        elif t is Link or t in opaque or isinstance(v, Linkable):
            return True
    return False


def _fail(where: str, param: str, exc: Exception, value: Any) -> PatternError:
    """The error for `param`: the path inside the value and what was expected."""
    m = _AT.match(str(exc))
    assert m is not None
    msg = m.group("msg")
    path = f"{param}{m.group('path') or ''}"
    if isinstance(exc, msgspec.ValidationError):
        msg = msg[:1].lower() + msg[1:]
    return PatternError(f"{where}: parameter {param!r} at {path}: {msg} (value {_short(value)})")


def _short(value: Any, limit: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 5]}...{text[-1]}"


def convert(
    sig: Signature, name: str, value: Any, where: str, opaque: tuple[type, ...] = ()
) -> Any:
    """`value` for parameter `name`, checked against its type and stored as plain data;
    a value holding a link (or an `opaque` object) is returned as it is."""
    param = sig.params[name]
    if not param.annotated or has_link(value, opaque):
        return value
    try:
        return msgspec.to_builtins(msgspec.convert(value, param.type))
    except (msgspec.ValidationError, TypeError, ValueError) as exc:
        raise _fail(where, name, exc, value) from None


def prepare(
    sig: Signature,
    argument: Mapping[str, Any],
    where: str,
    opaque: tuple[type, ...] = (),
) -> dict[str, Any]:
    """The argument with defaults filled and every value without links checked and
    converted. Raises `PatternError` naming the parameter, the path and the type."""
    out: dict[str, Any] = {}
    for name, param in sig.params.items():
        if name in argument:
            out[name] = convert(sig, name, argument[name], where, opaque)
        elif param.default is not NO_DEFAULT:
            out[name] = msgspec.to_builtins(copy.deepcopy(param.default))
        elif param.annotated:
            raise PatternError(
                f"{where}: parameter {name!r} is required (type {_type_name(param.type)})"
                " and has no default"
            )
    return out


def _type_name(tp: Any) -> str:
    if typing.get_origin(tp) is not None:
        return repr(tp).replace("typing.", "")
    return getattr(tp, "__name__", None) or repr(tp)


def check_loaded(sig: Signature, name: str, value: Any, where: str) -> None:
    """Check a parameter's value as its links read now (links followed)."""
    param = sig.params[name]
    try:
        msgspec.convert(value, param.type)
    except (msgspec.ValidationError, TypeError, ValueError) as exc:
        raise _fail(where, name, exc, value) from None


@functools.lru_cache(maxsize=4096)
def event_converter(fn: Callable[..., Any], label: str) -> Callable[[Any], Any] | None:
    """How a handler's event is converted to its annotated type (None: unannotated).

    The handler receives the converted value (an annotated `msgspec.Struct`
    event arrives as that Struct); a mismatch raises `PatternError`."""
    params = list(inspect.signature(fn).parameters)
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception as exc:
        raise PatternError(
            f"handler {label}: its annotations cannot be resolved: {type(exc).__name__}: {exc}"
        ) from exc
    if not params or params[0] not in hints or untyped(hints[params[0]]):
        return None
    name = params[0]
    tp = hints[name]

    def convert_event(event: Any) -> Any:
        try:
            return msgspec.convert(event, tp)
        except (msgspec.ValidationError, TypeError, ValueError) as exc:
            raise _fail(f"event for handler {label}", name, exc, event) from None

    return convert_event


def schema_of(tp: Any) -> Any:
    """The JSON Schema of `tp` (msgspec's), or None for an unannotated place."""
    if tp is NO_DEFAULT:
        return None
    return msgspec.json.schema(tp)
