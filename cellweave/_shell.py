"""The web shell: one pattern's root result served to browsers over a websocket.

`cellweave serve MODULE:PATTERN` builds a `Shell` and runs it under uvicorn.
Each websocket connection (a browser tab) is a session of the principal its
token names; two tabs of one principal share that principal's pages, two
principals never see or end each other's (every action goes through a
`Session` of the runtime, and the runtime's owner checks decide).

Security
- The server binds loopback unless a users file is given; the default token
  is random, printed once, and compared in constant time.
- A client never names a document: only handles the server gave it ("root",
  its pages) and paths inside them.
- A malformed or oversized message is answered with an `error` on that
  connection; the connection, the server and the other sessions keep going.
- Values travel as JSON and are rendered as text by the client.

Pages served by workers (`cellweave serve --pages served`)
- The shell's runtime is made with `pages="served"`: it runs nothing. The root
  result is set up (not started) and opened as a page, and every page a tab
  opens is recorded; `cellweave worker` processes on the same store claim and
  run them, and their results reach the tabs through the store. A send to a
  handler raises there (an event reaches a handler only in its own process);
  edits of cells (`set`), opening and stopping pages work as usual.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import importlib
import itertools
import json
import logging
import secrets
from collections.abc import AsyncIterator, Callable, Mapping
from importlib import resources
from typing import Any

from cells import MISSING, Cell, CellweaveError, MemoryStore, SQLiteStore, StoreBase, value_equal
from runner import Pattern, Runtime, Session, load_pattern

from . import _wire as wire
from ._wire import ProtocolError

log = logging.getLogger("cellweave.shell")

ROOT = "root"
INSPECT_POLL_S = 1.0
"""How often a watched inspector checks for changes the shell did not make (seconds)."""
ACTIONS = frozenset({"send", "set", "open", "stop", "end"})
"""Ops after which every watched inspector is checked at once."""


class ShellError(CellweaveError, ValueError):
    """A web shell that cannot start as configured (target, users file, address)."""


def load_target(spec: str) -> Pattern | Callable[..., Any]:
    """`MODULE:NAME` -> the pattern (or setup function) it names."""
    module_name, sep, name = spec.partition(":")
    if not sep or not module_name or not name:
        raise ShellError(f"serve: expected MODULE:PATTERN, got {spec!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ShellError(f"serve: cannot import {module_name!r} (from {spec!r}): {exc}") from exc
    try:
        target = getattr(module, name)
    except AttributeError:
        raise ShellError(f"serve: module {module_name!r} has no {name!r}") from None
    if not isinstance(target, Pattern) and not callable(target):
        raise ShellError(f"serve: {spec!r} is neither a pattern nor a setup function")
    return target  # type: ignore[no-any-return]


def load_users(path: str) -> dict[str, str]:
    """A users file: a JSON object mapping tokens to principals."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError) as exc:
        raise ShellError(f"serve: cannot read users file {path!r}: {exc}") from exc
    if not isinstance(data, dict) or not data:
        raise ShellError(f"serve: users file {path!r} must map tokens to principals")
    for token, principal in data.items():
        if not token or len(token) < 16:
            raise ShellError(f"serve: users file {path!r}: token for {principal!r} is too short")
        if not isinstance(principal, str) or not principal:
            raise ShellError(f"serve: users file {path!r}: principal {principal!r} is not a name")
    return dict(data)


class _SetupOnly:
    """The runtime as a setup function sees it in a shell whose pages are served: its
    `rt.run(tx, ...)` stages the setup only (`rt.setup`), for a worker to run."""

    def __init__(self, rt: Runtime) -> None:
        self._rt = rt

    def run(self, tx: Any, pattern: Pattern, argument: Any, result: Cell) -> Cell:
        return self._rt.setup(tx, pattern, argument, result)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._rt, name)


async def setup_root(
    rt: Runtime, target: Pattern | Callable[..., Any], name: str, *, served: bool = False
) -> Cell:
    """The served root result, set up on first use and started after a restart.

    A pattern runs on an argument of one cell per parameter (each holding
    `None` at first); a setup function `fn(rt, tx) -> Cell` stages its own
    setup in `tx` and returns the result, which the shell links to. Both are
    keyed by `name`, so a restart on the same store finds them again instead
    of setting up anew.

    `served`: the runtime runs nothing (`pages="served"`): the root is set up
    without starting (a setup function's `rt.run` stages only) and opened as a
    page, for a serving process (`cellweave worker`) to claim and run.
    """
    anchor = rt.get_cell({"cellweave.serve": name})
    if anchor.get() in (None, MISSING):
        tx = rt.edit()
        if isinstance(target, Pattern):
            argument = {
                p: rt.get_cell({"cellweave.serve": name, "argument": p}) for p in target.params
            }
            if served:
                rt.setup(tx, target, argument, anchor.with_tx(tx))
            else:
                rt.run(tx, target, argument, anchor.with_tx(tx))
        else:
            made = target(_SetupOnly(rt) if served else rt, tx)
            if not isinstance(made, Cell):
                raise ShellError(f"serve: setup function {name!r} returned {made!r}, not a Cell")
            anchor.with_tx(tx).set(made.link())
        outcome = await tx.commit()
        if not outcome.ok:
            raise ShellError(f"serve: setting up {name!r} failed: {outcome.error}")
        if served:
            await rt.open_page(anchor)
    elif served:
        await rt.open_page(anchor)  # recorded again (it may have been stopped): served
    else:
        await rt.start(anchor)
    await rt.idle()
    return anchor.resolve()


class Shell:
    """The served runtime and its connections (see the module docstring)."""

    def __init__(
        self,
        rt: Runtime,
        root: Cell | None,
        tokens: Mapping[str, str],
        *,
        title: str = "cellweave",
    ) -> None:
        self.rt = rt
        self.root = root
        self.tokens = dict(tokens)
        self.title = title
        self.root_page: str | None = None
        """The root's own page (pages served by workers: the root is opened as a page
        for them to run), left out of the tabs' page lists: it shows as the root."""
        self.connections: set[Connection] = set()
        self._sessions = itertools.count(1)
        self._events: dict[tuple[str, str], Any] = {}

    def event_schema(self, label: str, field: str) -> Any:
        """The JSON Schema of the event the handler labelled `label` takes (its
        pattern's `schema()["events"]` entry, looked up by the `field` that shows
        the stream, else by the handler function's name), or None when it is
        unannotated or its pattern is not found.
        Cached per label and field: a pattern's code does not change under a
        running shell."""
        at = (label, field)
        if at not in self._events:
            self._events[at] = self._find_event_schema(label, field)
        return self._events[at]

    def _find_event_schema(self, label: str, field: str) -> Any:
        # A handler's label is "<pattern qualname>.n<node index> handler <target>",
        # the target "<module>:<function>". The pattern is looked for in the
        # handler's module first, then among the running patterns (any
        # principal's: only its code is read, for a stream this viewer sees).
        head, _, rest = label.partition(" ")
        qualname, _, node = head.rpartition(".n")
        if not node.isdigit():
            return None
        index = int(node)
        module = rest.rpartition(" ")[2].partition(":")[0]
        identities = [f"{module}:{qualname}"]
        for r in self.rt.inspect()["registrations"]:
            if r["pattern"] not in identities and r["pattern"].partition(":")[2] == qualname:
                identities.append(r["pattern"])
        for identity in identities:
            try:
                pattern = load_pattern(identity)
                nodes = pattern.graph.nodes
                if index >= len(nodes) or nodes[index].kind != "handler":
                    continue
                events = pattern.schema()["events"]
                name = getattr(pattern.function(nodes[index].target), "__name__", "")
            except (CellweaveError, ImportError):
                continue
            for key in (field, name):
                if key in events:
                    return events[key]
        return None

    def principal_for(self, token: str | None) -> str | None:
        """The principal a token names, compared in constant time; None if unknown."""
        if not token:
            return None
        found = None
        for known, principal in self.tokens.items():
            if hmac.compare_digest(known.encode(), token.encode()):
                found = principal
        return found

    def connect(self, principal: str, send: Callable[[dict[str, Any]], None]) -> Connection:
        session_id = f"tab-{next(self._sessions)}-{secrets.token_hex(4)}"
        conn = Connection(self, self.rt.session(principal, session_id), send)
        self.connections.add(conn)
        return conn

    def disconnect(self, conn: Connection) -> None:
        conn.close()
        self.connections.discard(conn)

    def inspect_changed(self) -> None:
        """Something may have started or ended: watched inspectors check now."""
        for conn in list(self.connections):
            conn.push_inspect()

    def pages_changed(self, principal: str) -> None:
        for conn in list(self.connections):
            if conn.session.identity.principal == principal:
                conn.send_pages()


class Connection:
    """One browser tab: a session of its principal, its handles and its watches."""

    def __init__(
        self, shell: Shell, session: Session, send: Callable[[dict[str, Any]], None]
    ) -> None:
        self.shell = shell
        self.session = session
        self._send = send
        self.handles: dict[str, Cell] = {}
        if shell.root is not None:
            self.handles[ROOT] = session.cell(shell.root)
        self.watches: dict[int, Callable[[], None]] = {}
        self._page_handles: dict[str, str] = {}
        self._described: set[tuple[str, str]] = set()  # (label, field) sent as "events"
        self._inspecting: asyncio.Task[None] | None = None
        self._last_inspect: Any = None

    @property
    def principal(self) -> str:
        return self.session.identity.principal

    def close(self) -> None:
        for cancel in self.watches.values():
            cancel()
        self.watches.clear()
        self._stop_inspecting()

    def push_inspect(self, force: bool = False) -> None:
        """Send the inspector's view if it is watched and changed since the last one sent."""
        if self._inspecting is None:
            return
        data = self.session.inspect()
        if force or data != self._last_inspect:
            self._last_inspect = data
            self._send({"type": "inspect", "inspect": data})

    async def _inspect_poll(self) -> None:
        while True:
            await asyncio.sleep(INSPECT_POLL_S)
            try:
                self.push_inspect()
            except CellweaveError as exc:  # the runtime closed under the shell
                self._send({"type": "error", "ref": None, "message": str(exc)})
                return

    def _stop_inspecting(self) -> None:
        if self._inspecting is not None:
            self._inspecting.cancel()
            self._inspecting = None
            self._last_inspect = None

    def hello(self) -> None:
        ident = self.session.identity
        self._send(
            {
                "type": "hello",
                "principal": ident.principal,
                "session": ident.session,
                "title": self.shell.title,
                "root": ROOT if ROOT in self.handles else None,
            }
        )
        self.send_pages()

    def send_pages(self) -> None:
        pages = []
        for page in self.session.pages():
            if str(page.link()) == self.shell.root_page:
                continue
            handle = self._page_handles.setdefault(str(page.link()), f"p{len(self._page_handles)}")
            self.handles[handle] = page
            pages.append({"handle": handle, "title": page_title(page)})
        self._send({"type": "pages", "pages": pages})

    async def handle(self, raw: str | bytes) -> None:
        """Act on one client message; any failure is an `error` on this connection."""
        ref = None
        try:
            if len(raw) > wire.MAX_MESSAGE:
                raise ProtocolError(
                    f"message of {len(raw)} bytes is larger than the limit of {wire.MAX_MESSAGE}"
                )
            try:
                msg = json.loads(raw)
            except ValueError as exc:
                raise ProtocolError(f"message is not JSON: {exc}") from None
            if not isinstance(msg, dict):
                raise ProtocolError(f"message must be a JSON object, got {type(msg).__name__}")
            ref = msg.get("ref")
            op = msg.get("op")
            if op not in wire.OPS:
                raise ProtocolError(f"unknown op {op!r}; expected one of {sorted(wire.OPS)}")
            answer = await getattr(self, f"_op_{op}")(msg)
            self._send({"type": "ok", "ref": ref, **(answer or {})})
            if op in ACTIONS:
                self.shell.inspect_changed()
        except CellweaveError as exc:
            self._send({"type": "error", "ref": ref, "message": str(exc), **_extra(exc)})
        except Exception as exc:  # a bug must not take the connection down
            log.exception("web shell: message failed")
            self._send({"type": "error", "ref": ref, "message": f"internal error: {exc!r}"})

    def _cell(self, msg: Mapping[str, Any], name: str = "cell") -> Cell:
        handle = wire.field(msg, name, str)
        cell = self.handles.get(handle)
        if cell is None:
            raise ProtocolError(f"unknown {name} handle {handle!r}")
        return cell.key(*wire.path_of(msg))

    async def _op_hello(self, msg: Mapping[str, Any]) -> None:
        self.hello()

    async def _op_watch(self, msg: Mapping[str, Any]) -> None:
        watch = wire.field(msg, "watch", int)
        cell = self._cell(msg)
        if watch in self.watches:
            raise ProtocolError(f"watch {watch} is already in use on this connection")
        handler_label = self.shell.rt.handler_label
        fresh: dict[str, Any] = {}

        def label_of(stream: Cell) -> str | None:
            # A stream's label names its handler; the client learns each
            # handler's event schema once, before the value that shows it.
            label = handler_label(stream)
            if label is not None and stream.path:
                field = str(stream.path[-1])
                if (label, field) not in self._described:
                    self._described.add((label, field))
                    fresh[f"{label}|{field}"] = self.shell.event_schema(label, field)
            return label

        def send(msg: dict[str, Any]) -> None:
            if fresh:
                self._send({"type": "events", "events": dict(fresh)})
                fresh.clear()
            self._send(msg)

        def is_result(place: Cell) -> bool:
            # A record is a nested result when its place leads, through links,
            # to the whole document of a run.
            try:
                target = place.resolve()
            except CellweaveError:
                return False
            return not target.path and self.shell.rt.registration(target) is not None

        held = wire.Results(is_result, cell)

        def results(found: list[wire.Place], dropped: list[wire.Place], reset: bool) -> None:
            if found or dropped or reset:
                send(
                    {
                        "type": "results",
                        "watch": watch,
                        "paths": found,
                        "drop": dropped,
                        "reset": reset,
                    }
                )

        mirror = wire.Mirror(None)

        def deliver(ops: list[dict[str, Any]]) -> None:
            if len(ops) == 1 and ops[0]["op"] == "replace" and ops[0]["path"] == "":
                mirror.value = ops[0]["value"]
                value = wire.mark_streams(label_of, cell, ops[0]["value"])
                results(held.snapshot(ops[0]["value"]), [], True)
                send({"type": "snapshot", "watch": watch, "value": value})
            else:
                marked = wire.mark_patch(label_of, cell, ops, mirror)
                results(*held.patch(ops, mirror), False)
                send({"type": "patch", "watch": watch, "ops": marked})

        if msg.get("full") is True:
            # A client that cannot apply patches: the whole value on every change.
            def whole(value: Any) -> None:
                marked = wire.mark_streams(label_of, cell, value)
                results(held.snapshot(value), [], True)
                send({"type": "snapshot", "watch": watch, "value": marked})

            self.watches[watch] = cell.sink(whole)
            return
        self.watches[watch] = cell.sink_patches(deliver)

    async def _op_unwatch(self, msg: Mapping[str, Any]) -> None:
        cancel = self.watches.pop(wire.field(msg, "watch", int), None)
        if cancel is not None:
            cancel()

    async def _op_send(self, msg: Mapping[str, Any]) -> None:
        if "event" not in msg:
            raise ProtocolError("message 'send' needs an 'event' field")
        self.session.send(self._cell(msg), msg["event"])

    async def _op_set(self, msg: Mapping[str, Any]) -> None:
        if "value" not in msg or "basis" not in msg:
            raise ProtocolError("message 'set' needs 'value' and 'basis' fields")
        target = self._cell(msg)
        tx = self.session.edit()
        # Where the shown value lives: links followed as `get()` follows them (inside
        # the transaction, so a link re-pointed meanwhile fails the commit). Writing
        # at the link's own place instead would replace the link by a copy of the
        # value: the row would stop following its element (a derived field beside it
        # would keep the old text), and the view's read set would change shape.
        place = target.with_tx(tx).resolve()
        current = place.get()
        if not value_equal(current, msg["basis"]):
            tx.abort("the value changed since the view showed it")
            raise StaleEdit(
                f"not saved: {_where(msg)} changed to {current!r} since it was shown", current
            )
        place.set(msg["value"])
        result = await tx.commit()
        if not result.ok:
            raise StaleEdit(f"not saved: {result.error}", target.get())

    async def _op_open(self, msg: Mapping[str, Any]) -> dict[str, Any]:
        # Resolve now: the page is the element's result this place holds at this
        # moment, not whatever the list slot holds later.
        target = self._cell(msg).resolve()
        opened = await self.session.open_page(target)
        self.shell.pages_changed(self.principal)
        return {"opened": bool(opened)}

    async def _op_stop(self, msg: Mapping[str, Any]) -> None:
        # Answered once the page's closed record is durable (a stop acknowledged
        # only then never comes back after a restart).
        await self.session.stop(self._cell(msg, "page"))
        self.shell.pages_changed(self.principal)

    async def _op_inspect(self, msg: Mapping[str, Any]) -> dict[str, Any]:
        return {"inspect": self.session.inspect()}

    async def _op_inspect_watch(self, msg: Mapping[str, Any]) -> None:
        if self._inspecting is None:
            self._inspecting = asyncio.get_running_loop().create_task(self._inspect_poll())
        self.push_inspect(force=True)

    async def _op_inspect_unwatch(self, msg: Mapping[str, Any]) -> None:
        self._stop_inspecting()

    async def _op_inspect_run(self, msg: Mapping[str, Any]) -> dict[str, Any]:
        key = wire.field(msg, "key", str)
        return {"run": self.shell.rt.inspect_run(key, principal=self.principal)}

    async def _op_end(self, msg: Mapping[str, Any]) -> dict[str, Any]:
        key = wire.field(msg, "key", str)
        how = wire.field(msg, "how", str)
        if how not in ("stop", "release"):
            raise ProtocolError(f"'how' must be 'stop' or 'release', got {how!r}")
        cell = self.session.run_cell(key)  # refuses a run this principal did not launch
        if how == "stop":
            await self.session.stop(cell)
        else:
            self.session.release(cell)
        self.shell.pages_changed(self.principal)
        # The runtime's answer, for this principal: a stop ends this principal's part
        # (a run others launched too keeps running for them); a release may decline
        # (a lifetime or a page holds the run, or a start is in flight).
        ended = all(
            r["key"] != key or not r["mine"] for r in self.session.inspect()["registrations"]
        )
        return {"ended": ended, "how": how}


class StaleEdit(CellweaveError, ValueError):
    """An edit from a view that showed an older value; carries the fresh one."""

    def __init__(self, message: str, value: Any) -> None:
        super().__init__(message)
        self.value = value


def _extra(exc: CellweaveError) -> dict[str, Any]:
    return {"value": exc.value} if isinstance(exc, StaleEdit) else {}


def _where(msg: Mapping[str, Any]) -> str:
    path = msg.get("path") or []
    return "/".join(str(p) for p in path) or "the value"


def page_title(page: Cell) -> str:
    """A page's name in the tab bar: its title or name field, else its address."""
    value = page.get()
    if isinstance(value, dict):
        for key in ("title", "name"):
            if isinstance(value.get(key), str) and value[key]:
                return str(value[key])
    return str(page)


def is_dsn(db: str) -> bool:
    """Whether `db` names a PostgreSQL database (a URI or a libpq `key=value` string)
    rather than a SQLite file path."""
    return db.startswith(("postgres://", "postgresql://")) or "=" in db


def open_store(db: str | None) -> StoreBase:
    """A PostgresStore for a connection string or URI, a SQLiteStore for a path, a
    MemoryStore for None."""
    if not db:
        return MemoryStore()
    if is_dsn(db):
        from cells import PostgresStore

        return PostgresStore(db)
    return SQLiteStore(db)


@contextlib.asynccontextmanager
async def serving(
    target_spec: str, db: str | None, tokens: Mapping[str, str], *, pages: str = "local"
) -> AsyncIterator[Shell]:
    """The runtime and shell for `target_spec`, closed on exit. `pages="served"`: the
    runtime runs nothing, workers on the same store run the root and every page."""
    if pages == "served" and not db:
        raise ShellError(
            "serve: --pages served needs --db (a store the workers share), not a memory store"
        )
    target = load_target(target_spec)
    store = open_store(db)
    shells: list[Shell] = []

    def navigated(page: Cell) -> None:
        # A handler navigated (navigate_to): that principal's tabs show the new page.
        for shell in shells:
            shell.pages_changed(page.identity.principal)

    rt = Runtime(store=store, on_navigate=navigated, pages=pages)
    try:
        await rt.resume()  # (pages="served": none starts here, the workers run them)
        root = await setup_root(rt, target, target_spec, served=pages == "served")
        shells.append(Shell(rt, root, tokens, title=target_spec))
        if pages == "served":
            shells[0].root_page = str(rt.get_cell({"cellweave.serve": target_spec}).link())
        yield shells[0]
    finally:
        await rt.aclose()
        store.close()


def static_text(name: str) -> str:
    return resources.files("cellweave").joinpath("static", name).read_text(encoding="utf-8")


def make_app(shell_cm: Callable[[], contextlib.AbstractAsyncContextManager[Shell]]) -> Any:
    """The Starlette application serving the shell (needs the `web` extra)."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import HTMLResponse, PlainTextResponse, Response
    from starlette.routing import Mount, Route, WebSocketRoute
    from starlette.staticfiles import StaticFiles
    from starlette.websockets import WebSocket, WebSocketDisconnect

    state: dict[str, Shell] = {}

    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        async with shell_cm() as shell:
            state["shell"] = shell
            yield

    async def index(request: Request) -> Response:
        if state["shell"].principal_for(request.query_params.get("token")) is None:
            return PlainTextResponse("unknown or missing token", status_code=401)
        return HTMLResponse(static_text("index.html"))

    async def socket(ws: WebSocket) -> None:
        shell = state["shell"]
        principal = shell.principal_for(ws.query_params.get("token"))
        await ws.accept()
        if principal is None:
            # Accepted first so the page learns why (a refused handshake is only a 403).
            await ws.close(code=4401, reason="unknown or missing token")
            return
        outbox: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        conn = shell.connect(principal, outbox.put_nowait)

        async def writer() -> None:
            while (msg := await outbox.get()) is not None:
                await ws.send_text(json.dumps(msg, allow_nan=False))

        task = asyncio.create_task(writer())
        try:
            while True:
                raw = await ws.receive_text()
                await conn.handle(raw)
        except WebSocketDisconnect:
            pass
        finally:
            shell.disconnect(conn)
            outbox.put_nowait(None)
            with contextlib.suppress(Exception):
                await task

    static = resources.files("cellweave").joinpath("static")
    return Starlette(
        routes=[
            Route("/", index),
            WebSocketRoute("/ws", socket),
            Mount("/static", app=StaticFiles(directory=str(static)), name="static"),
        ],
        lifespan=lifespan,
    )
