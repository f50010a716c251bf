"""The pattern builder: `@pattern`, `lift`, `handler`, `navigate_to`, traced into a graph.

A pattern is a Python function whose parameters name the fields of its
argument. It is *traced* once, lazily (on first use, so patterns may refer to
each other and to themselves), by calling it with a `Ref` per parameter.
Inside the body nothing computes: calls record *nodes* —

- `lift(fn)(...)`: a computation (`fn` runs later, on values);
- `Child(field=...)`: a nested pattern;
- `some_handler(field=...)`: an event handler bound to a stream;
- `navigate_to(ref)`: open a result as a page;
- `state(initial)`: a cell the run owns (`_state.py`);
- `when(cond, then, otherwise)` / `unless`: a conditional value or child; a
  pattern called as a branch becomes a "branch" node (`_when.py`);

— and each call returns a `Ref` to the node's output, an *internal* cell of
the pattern. `ref["field"]` reaches into a reference. The body returns the
result: a dict (or any JSON-like tree) of refs and plain values.

Annotated parameters, a handler's annotated event and the return annotation
make a pattern *typed* (`_types.py`): `Pattern.prepare` fills defaults and
checks an argument, `Pattern.schema()` describes it, and the graph carries
that schema.

The graph (`PatternGraph`) is plain data, serializable to JSON: bindings are
`{"$binding": {"cell": "argument" | "internal", "name": ..., "path": [...]}}`
(a graph is stored as an ordinary cell value, so the form must be plain JSON;
the inputs a graph holds are never user data, so the key cannot collide). A
pattern's identity is its import path `module:qualname`, so a restarted
runtime loads it again with `load_pattern`; a lift's function is named by its
own import path, or, for a lambda or closure, by the pattern identity and the
node index (re-tracing the pattern recovers it).

Invariants (checked by `PatternGraph._check`)
- nodes are numbered 0..n-1 in tracing order; node i writes internal "n{i}";
- every binding names the argument (a declared parameter) or an internal cell
  of an earlier-or-same node.
"""

from __future__ import annotations

import contextvars
import importlib
import inspect
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final, Literal, TypeAlias

import msgspec

from cells import InvalidValueError as _InvalidValueError
from cells import Linkable, mimebundle, normalize

from . import _types as types
from .errors import PatternError, PatternLoadError

BindingCell: TypeAlias = Literal["argument", "internal"]
NodeKind: TypeAlias = Literal[
    "lift", "pattern", "handler", "navigate", "map", "filter", "flat_map", "state", "when", "branch"
]
LIST_KINDS: Final = ("map", "filter", "flat_map")


class Binding(msgspec.Struct, frozen=True):
    """Where a value comes from: the argument or an internal cell, and a path into it."""

    cell: BindingCell
    name: str
    path: tuple[str | int, ...] = ()

    def child(self, elem: str | int) -> Binding:
        return Binding(self.cell, self.name, (*self.path, elem))

    def __str__(self) -> str:
        tail = "".join(f"[{p!r}]" for p in self.path)
        return f"{self.cell}:{self.name}{tail}" if self.name else f"{self.cell}{tail}"


class Ref:
    """A reference to data inside a pattern body. `ref["field"]` reaches a nested field.

    Refs exist only while a pattern is traced; they are not values.
    """

    __slots__ = ("_binding", "_trace")

    def __init__(self, trace: _Trace, binding: Binding) -> None:
        self._trace = trace
        self._binding = binding

    def __getitem__(self, elem: str | int) -> Ref:
        if isinstance(elem, bool) or not isinstance(elem, (str, int)):
            raise PatternError(
                f"{self!r}[{elem!r}]: a field is a str, an index an int"
                f" (in pattern {self._trace.pattern.identity})"
            )
        return Ref(self._trace, self._binding.child(elem))

    def __repr__(self) -> str:
        return f"Ref({self._binding})"

    def __bool__(self) -> bool:
        raise PatternError(
            f"{self!r} has no value while the pattern is traced: use lift() to compute"
            f" with it (in pattern {self._trace.pattern.identity})"
        )

    def __iter__(self) -> Iterator[Any]:
        raise PatternError(
            f"{self!r} cannot be iterated while the pattern is traced: use lift() (or,"
            f" for lists, .map/.filter/.flat_map) (in pattern {self._trace.pattern.identity})"
        )

    @property
    def binding(self) -> Binding:
        return self._binding

    def _list_node(self, kind: NodeKind, op: Any) -> Ref:
        trace = self._trace
        where = f"{self!r}.{kind}({op!r}) in pattern {trace.pattern.identity}"
        if _current.get() is not trace:
            raise PatternError(f"{where}: list builtins can only be used inside the pattern body")
        if not isinstance(op, Pattern):
            if isinstance(op, (Lift, Handler)) or not callable(op):
                raise PatternError(
                    f"{where}: the op must be a @pattern taking `element` (and optionally"
                    f" `index`) or a plain function of the element, got {type(op).__name__}"
                )
            # A function op: one computation per element, named like a lift's function
            # (its import path, or the pattern and node index for a lambda or closure).
            fn_id = _function_id(op, trace, len(trace.nodes))
            trace.functions[fn_id] = op
            return trace.add(kind, fn_id, {"list": self._binding, "function": True})
        extra = [p for p in op.params if p not in ("element", "index")]
        if "element" not in op.params or extra:
            raise PatternError(
                f"{where}: op pattern {op.identity} must take `element` and optionally"
                f" `index`; its parameters are ({', '.join(op.params)})"
            )
        return trace.add(kind, op.identity, {"list": self._binding})

    def map(self, op: Pattern | Callable[..., Any]) -> Ref:
        """One child of `op` per element (a function op: one computation per element);
        the output keeps positions (links to results)."""
        return self._list_node("map", op)

    def filter(self, op: Pattern | Callable[..., Any]) -> Ref:
        """The elements whose `op` result is truthy, dense, as the original elements."""
        return self._list_node("filter", op)

    def flat_map(self, op: Pattern | Callable[..., Any]) -> Ref:
        """Each element's `op` result flattened one level (a scalar counts as one item)."""
        return self._list_node("flat_map", op)


class NodeSpec(msgspec.Struct, frozen=True):
    """One node of a traced pattern."""

    index: int
    kind: NodeKind
    target: str
    """lift/handler: the function id; pattern: the child pattern's identity; navigate: ""."""
    inputs: Any
    """A JSON-like tree of plain values and `Binding`s."""

    @property
    def output(self) -> Binding:
        return Binding("internal", f"n{self.index}")


class PatternGraph(msgspec.Struct, frozen=True):
    """A traced pattern: parameters, nodes and the result, as plain data."""

    identity: str
    params: tuple[str, ...]
    nodes: tuple[NodeSpec, ...]
    result: Any
    """A JSON-like tree of plain values and `Binding`s: what the result cell holds."""
    schema: Any = None
    """A typed pattern's `Pattern.schema()` (None for an unannotated one)."""

    def to_json(self) -> dict[str, Any]:
        """The graph as JSON-like data (bindings as `{"$binding": ...}` objects)."""
        out = self._json()
        if self.schema is not None:
            out["schema"] = self.schema
        return out

    def _json(self) -> dict[str, Any]:
        return {
            "identity": self.identity,
            "params": list(self.params),
            "nodes": [
                {
                    "index": n.index,
                    "kind": n.kind,
                    "target": n.target,
                    "inputs": _tree_to_json(n.inputs),
                }
                for n in self.nodes
            ],
            "result": _tree_to_json(self.result),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PatternGraph:
        return cls(
            str(data["identity"]),
            tuple(data["params"]),
            tuple(
                NodeSpec(int(n["index"]), n["kind"], str(n["target"]), _tree_from_json(n["inputs"]))
                for n in data["nodes"]
            ),
            _tree_from_json(data["result"]),
            data.get("schema"),
        )

    def bindings(self) -> Iterator[tuple[str, Binding]]:
        """Every binding with where it stands ("result" or "node i")."""
        for n in self.nodes:
            for b in _bindings_in(n.inputs):
                yield f"node {n.index}", b
        for b in _bindings_in(self.result):
            yield "result", b

    def _check(self) -> None:
        assert [n.index for n in self.nodes] == list(range(len(self.nodes)))
        internal = {f"n{n.index}" for n in self.nodes}
        for where, b in self.bindings():
            if b.cell == "argument":
                assert b.name == "" and (not b.path or b.path[0] in self.params), (where, b)
            else:
                assert b.name in internal, (where, b)


def _tree_to_json(tree: Any) -> Any:
    t = type(tree)
    if t is Binding:
        return {"$binding": {"cell": tree.cell, "name": tree.name, "path": list(tree.path)}}
    if t is dict:
        return {k: _tree_to_json(v) for k, v in tree.items()}
    if t is list:
        return [_tree_to_json(v) for v in tree]
    return tree


def _tree_from_json(tree: Any) -> Any:
    t = type(tree)
    if t is dict:
        if len(tree) == 1 and "$binding" in tree and isinstance(tree["$binding"], dict):
            body = tree["$binding"]
            return Binding(body["cell"], body["name"], tuple(body["path"]))
        return {k: _tree_from_json(v) for k, v in tree.items()}
    if t is list:
        return [_tree_from_json(v) for v in tree]
    return tree


def _bindings_in(tree: Any) -> Iterator[Binding]:
    t = type(tree)
    if t is Binding:
        yield tree
    elif t is dict:
        for v in tree.values():
            yield from _bindings_in(v)
    elif t is list:
        for v in tree:
            yield from _bindings_in(v)


# --------------------------------------------------------------------------- tracing


class _Trace:
    __slots__ = ("functions", "nodes", "pattern")

    def __init__(self, pattern: Pattern) -> None:
        self.pattern = pattern
        self.nodes: list[NodeSpec] = []
        self.functions: dict[str, Callable[..., Any]] = {}

    def add(self, kind: NodeKind, target: str, inputs: Any) -> Ref:
        index = len(self.nodes)
        node = NodeSpec(index, kind, target, inputs)
        self.nodes.append(node)
        return Ref(self, node.output)


_current: contextvars.ContextVar[_Trace | None] = contextvars.ContextVar(
    "cellweave_trace", default=None
)


def _active(what: str) -> _Trace:
    trace = _current.get()
    if trace is None:
        raise PatternError(f"{what} can only be used inside a @pattern body")
    return trace


def _bind(value: Any, trace: _Trace, where: str) -> Any:
    """A JSON-like tree with `Binding`s for refs, checked at the place it is used."""
    if isinstance(value, Ref):
        if value._trace is not trace:
            raise PatternError(
                f"{where}: {value!r} belongs to pattern {value._trace.pattern.identity}, not"
                f" {trace.pattern.identity} (refs cannot cross pattern bodies)"
            )
        return value._binding
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise PatternError(f"{where}: key {k!r} is a {type(k).__name__}; keys must be str")
            out[k] = _bind(v, trace, f"{where}[{k!r}]")
        return out
    if isinstance(value, (list, tuple)):
        return [_bind(v, trace, f"{where}[{i}]") for i, v in enumerate(value)]
    if type(value) in _SCALARS:
        return normalize(value, where=where)
    # A negative isinstance against a runtime-checkable Protocol costs microseconds:
    # scalars never reach it.
    if isinstance(value, Linkable):
        return value.link()
    if isinstance(value, (Pattern, Lift, Handler)):
        raise PatternError(
            f"{where}: {value!r} is a definition, not a value; call it to make a node"
        )
    try:
        return normalize(value, where=where)
    except _InvalidValueError as exc:
        raise PatternError(str(exc)) from exc


_SCALARS: Final = frozenset({str, int, float, bool, type(None)})


def _function_id(fn: Callable[..., Any], trace: _Trace | None, index: int) -> str:
    qualname = getattr(fn, "__qualname__", "")
    module = getattr(fn, "__module__", None)
    if module and qualname and "<" not in qualname:
        return f"{module}:{qualname}"
    if trace is None:
        raise PatternError(f"{fn!r} has no import path and is not inside a pattern")
    return f"{trace.pattern.identity}#{index}"


def _params(fn: Callable[..., Any], what: str, *, skip: int = 0) -> tuple[str, ...]:
    sig = inspect.signature(fn)
    names: list[str] = []
    for i, p in enumerate(sig.parameters.values()):
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD, p.POSITIONAL_ONLY):
            raise PatternError(
                f"{what} {fn.__qualname__}: parameter {p.name!r} must be a plain or"
                " keyword parameter (each names a field of the argument)"
            )
        if i >= skip:
            names.append(p.name)
    return tuple(names)


class Pattern:
    """A reactive program. Create with `@pattern`; call it inside another pattern body
    to nest it (`Child(value=ref)`), or outside one to make an instance (`Child(value=1)`)."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        if not callable(fn):
            raise PatternError(f"@pattern needs a function, got {fn!r}")
        self.fn = fn
        self.identity = f"{fn.__module__}:{fn.__qualname__}"
        self.params = _params(fn, "pattern")
        self._graph: PatternGraph | None = None
        self._functions: dict[str, Callable[..., Any]] = {}
        self._tracing = False
        self._signature: types.Signature | None = None
        _DEFINED[self.identity] = self
        self.__doc__ = fn.__doc__
        self.__name__ = getattr(fn, "__name__", "pattern")
        self.__qualname__ = getattr(fn, "__qualname__", self.__name__)
        self.__module__ = fn.__module__

    def __repr__(self) -> str:
        return f"<pattern {self.identity}>"

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        """Notebook display: the pattern's identity and its traced graph."""
        return mimebundle(repr(self), self.graph.to_json())

    @property
    def graph(self) -> PatternGraph:
        """The traced graph (traced on first access)."""
        if self._graph is None:
            self._trace()
        assert self._graph is not None
        return self._graph

    def function(self, fn_id: str) -> Callable[..., Any]:
        """The callable behind a lift or handler node of this pattern."""
        self.graph  # noqa: B018 - make sure it is traced
        fn = self._functions.get(fn_id)
        if fn is None:
            raise PatternLoadError(
                f"pattern {self.identity} has no function {fn_id!r}", identity=fn_id
            )
        return fn

    def _trace(self) -> None:
        if self._tracing:
            raise PatternError(f"pattern {self.identity} is already being traced (re-entrant)")
        self._tracing = True
        trace = _Trace(self)
        token = _current.set(trace)
        try:
            argument = Binding("argument", "")
            refs = {name: Ref(trace, argument.child(name)) for name in self.params}
            try:
                returned = self.fn(**refs)
            except PatternError:
                raise
            except Exception as exc:
                raise PatternError(
                    f"tracing pattern {self.identity} failed: {type(exc).__name__}: {exc}"
                ) from exc
            result = _bind(returned, trace, f"the result of pattern {self.identity}")
        finally:
            _current.reset(token)
            self._tracing = False
        self._graph = PatternGraph(self.identity, self.params, tuple(trace.nodes), result)
        self._functions = trace.functions
        if self.signature.typed or any(
            types.event_converter(self._functions[n.target], n.target) is not None
            for n in self._graph.nodes
            if n.kind == "handler"
        ):
            self._graph = msgspec.structs.replace(self._graph, schema=self._schema(self._graph))
        self._graph._check()

    @property
    def signature(self) -> types.Signature:
        """The parameters' resolved types and defaults, and the result's type."""
        if self._signature is None:
            self._signature = types.signature(self.fn, f"pattern {self.identity}", opaque=(Ref,))
        return self._signature

    def prepare(self, argument: Mapping[str, Any], where: str) -> dict[str, Any]:
        """`argument` with defaults filled and each value checked against its parameter's
        type (a value holding a cell is checked when the run loads it). Raises
        `PatternError` naming the pattern, the parameter, the path and the type."""
        self._argument(argument, where)
        return types.prepare(
            self.signature, argument, f"{where}: pattern {self.identity}", (Binding,)
        )

    def schema(self) -> dict[str, Any]:
        """JSON Schema (msgspec's) of the argument, the result and each handler's event.

        `{"argument": ..., "result": ... | None, "events": {name: ...}}`; a handler
        is named by the result field that exposes its stream (else by its function).
        An unannotated place has the schema `{}` (argument fields) or None."""
        graph = self.graph
        return graph.schema if graph.schema is not None else self._schema(graph)

    def _schema(self, graph: PatternGraph) -> dict[str, Any]:
        sig = self.signature
        name = self.__qualname__.replace(".", "_").replace("<", "").replace(">", "")
        names: dict[str, str] = {}
        if type(graph.result) is dict:
            for key, b in graph.result.items():
                if type(b) is Binding and b.cell == "internal" and not b.path:
                    names.setdefault(b.name, key)
        events: dict[str, Any] = {}
        for n in graph.nodes:
            if n.kind != "handler":
                continue
            fn = self._functions[n.target]
            key = names.get(f"n{n.index}", getattr(fn, "__name__", n.target))
            first = types.signature(fn, "handler").first()
            try:
                events[key] = types.schema_of(first.type) if first and first.annotated else None
            except (TypeError, ValueError) as exc:
                raise PatternError(
                    f"pattern {self.identity}: the event annotation of handler {key} is not a"
                    f" type msgspec can check: {exc}".replace("\n", " ")
                ) from exc
        try:
            return {
                "argument": msgspec.json.schema(sig.argument_struct(name)),
                "result": types.schema_of(sig.result),
                "events": events,
            }
        except (TypeError, ValueError) as exc:
            raise PatternError(
                f"pattern {self.identity}: an annotation is not a type msgspec can check:"
                f" {exc}".replace("\n", " ")
            ) from exc

    def _argument(self, kwargs: Mapping[str, Any], where: str) -> None:
        unknown = [k for k in kwargs if k not in self.params]
        if unknown:
            raise PatternError(
                f"{where}: pattern {self.identity} has no parameter {unknown[0]!r}"
                f" (its parameters: {', '.join(self.params) or 'none'})"
            )

    def __call__(self, **kwargs: Any) -> Any:
        trace = _current.get()
        if trace is None:
            return PatternInstance(self, self.prepare(kwargs, "calling a pattern"))
        where = f"{self.identity} nested in {trace.pattern.identity}"
        self._argument(kwargs, where)
        inputs = {k: _bind(v, trace, f"{where}: argument {k!r}") for k, v in kwargs.items()}
        return trace.add("pattern", self.identity, self.prepare(inputs, where))


class PatternInstance:
    """A pattern with an argument, made outside a body (a handler may return one)."""

    __slots__ = ("argument", "pattern")

    def __init__(self, pattern: Pattern, argument: dict[str, Any]) -> None:
        self.pattern = pattern
        self.argument = argument

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.argument.items())
        return f"{self.pattern.__qualname__}({args})"

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        """Notebook display: the pattern and its argument (cells by name)."""
        argument = {k: v if _plain(v) else repr(v) for k, v in self.argument.items()}
        return mimebundle(repr(self), {"pattern": self.pattern.identity, "argument": argument})


def _plain(value: Any) -> bool:
    if value is None or isinstance(value, bool | int | float | str):
        return True
    if isinstance(value, list):
        return all(_plain(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    return False


def pattern(fn: Callable[..., Any]) -> Pattern:
    """Define a pattern. Its parameters name the fields of its argument."""
    return Pattern(fn)


class Lift:
    """A function lifted to work on references: `lift(fn)(a, b)` records a computation."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        if not callable(fn):
            raise PatternError(f"lift() needs a function, got {fn!r}")
        self.fn = fn

    def __repr__(self) -> str:
        return f"<lift {getattr(self.fn, '__qualname__', self.fn)!r}>"

    def __call__(self, *args: Any, **kwargs: Any) -> Ref:
        trace = _active(f"{self!r}(...)")
        index = len(trace.nodes)
        fn_id = _function_id(self.fn, trace, index)
        where = f"{self!r} in pattern {trace.pattern.identity}"
        inputs = {
            "args": [_bind(a, trace, f"{where}: argument {i}") for i, a in enumerate(args)],
            "kwargs": {k: _bind(v, trace, f"{where}: argument {k!r}") for k, v in kwargs.items()},
        }
        trace.functions[fn_id] = self.fn
        return trace.add("lift", fn_id, inputs)


def lift(fn: Callable[..., Any]) -> Lift:
    """Lift `fn` so that, inside a pattern, it computes from references."""
    return Lift(fn)


class Handler:
    """An event handler: `fn(event, **bindings)` runs once per event, in its own transaction."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        if not callable(fn):
            raise PatternError(f"@handler needs a function, got {fn!r}")
        params = _params(fn, "handler")
        if not params:
            raise PatternError(f"handler {fn.__qualname__} needs a first parameter for the event")
        self.fn = fn
        self.event_param = params[0]
        self.params = params[1:]

    def __repr__(self) -> str:
        return f"<handler {getattr(self.fn, '__qualname__', self.fn)!r}>"

    def __call__(self, **kwargs: Any) -> Ref:
        trace = _active(f"{self!r}(...)")
        where = f"{self!r} in pattern {trace.pattern.identity}"
        unknown = [k for k in kwargs if k not in self.params]
        if unknown:
            raise PatternError(
                f"{where}: no parameter {unknown[0]!r} (its parameters after the event:"
                f" {', '.join(self.params) or 'none'})"
            )
        index = len(trace.nodes)
        fn_id = _function_id(self.fn, trace, index)
        inputs = {k: _bind(v, trace, f"{where}: argument {k!r}") for k, v in kwargs.items()}
        trace.functions[fn_id] = self.fn
        return trace.add("handler", fn_id, inputs)


def handler(fn: Callable[..., Any]) -> Handler:
    """Define an event handler. The first parameter receives the event."""
    return Handler(fn)


class Navigate:
    """`navigate_to(target)` returned from a handler: open `target` as a page after commit."""

    __slots__ = ("follow", "target")

    def __init__(self, target: Any, follow: bool = False) -> None:
        self.target = target
        self.follow = follow

    def __repr__(self) -> str:
        tail = ", follow=True" if self.follow else ""
        return f"navigate_to({self.target!r}{tail})"


def navigate_to(target: Any, *, follow: bool = False) -> Any:
    """Open `target` as a page of the acting principal, after the transaction commits.

    Inside a pattern body it records a node (and returns a ref to its status);
    returned from a handler it asks the runtime to navigate once the handling commits.
    A target that leads to a result through a link (a list slot, `cards.key(i)`) pins
    the page to the result the slot holds when the page opens; `follow=True` makes the
    page follow the slot instead (see `Runtime.open_page`).
    """
    trace = _current.get()
    if trace is None:
        return Navigate(target, follow)
    where = f"navigate_to in pattern {trace.pattern.identity}"
    inputs: dict[str, Any] = {"target": _bind(target, trace, where)}
    if follow:
        inputs["follow"] = True
    return trace.add("navigate", "", inputs)


MAX_IDENTITY: Final = 300

_DEFINED: dict[str, Pattern] = {}
"""Every pattern defined in this process, by identity (the newest definition wins, so a
notebook cell that redefines a pattern runs the new one)."""


def find_pattern(identity: str) -> Pattern:
    """The pattern with this identity: defined in this process, or else imported."""
    found = _DEFINED.get(identity) if isinstance(identity, str) else None
    return found if found is not None else load_pattern(identity)


def load_pattern(identity: str) -> Pattern:
    """The pattern at `module:qualname` (for a runtime that restarts)."""
    if not isinstance(identity, str) or ":" not in identity or len(identity) > MAX_IDENTITY:
        raise PatternLoadError(
            f"cannot load pattern {identity!r}: an identity is 'module:qualname'",
            identity=str(identity),
        )
    module_name, _, qualname = identity.partition(":")
    if "<" in qualname:
        raise PatternLoadError(
            f"cannot load pattern {identity}: it was defined inside a function; define"
            " patterns at module level so a restarted runtime can find them",
            identity=identity,
        )
    try:
        obj: Any = importlib.import_module(module_name)
    except Exception as exc:
        raise PatternLoadError(
            f"cannot load pattern {identity}: importing {module_name!r} failed:"
            f" {type(exc).__name__}: {exc}",
            identity=identity,
        ) from exc
    for part in qualname.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise PatternLoadError(
                f"cannot load pattern {identity}: {module_name} has no {qualname!r}",
                identity=identity,
            ) from None
    if not isinstance(obj, Pattern):
        raise PatternLoadError(
            f"cannot load pattern {identity}: it is a {type(obj).__name__}, not a @pattern",
            identity=identity,
        )
    return obj
