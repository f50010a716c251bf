"""The `cellweave` command: `serve` (the web shell), `worker` (serve open pages under
claims) and `inspect` (stored pages and claims).

cellweave serve examples.todo:Board --db board.db
cellweave serve examples.todo:board --db board.db --pages served   # workers run the pages
cellweave worker --db "host=/run/postgresql dbname=app" --lease 10 --heartbeat 2
cellweave inspect --db board.db --principal alice --json

`--db` takes a SQLite file path or a PostgreSQL connection string (a libpq
`key=value` string or a `postgresql://` URI).
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import json
import os
import secrets
import signal
import sys
from collections.abc import Sequence
from typing import Any

from cells import CellweaveError, SQLiteStore, StoreBase
from runner import Runtime

from ._shell import ShellError, is_dsn, load_target, load_users, make_app, serving

DEFAULT_PORT = 8765


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cellweave", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="serve a pattern's root result in a browser")
    serve.add_argument("target", metavar="MODULE:PATTERN")
    serve.add_argument("--db", help="SQLite file or PostgreSQL DSN (default: .cellweave/serve.db)")
    serve.add_argument("--memory", action="store_true", help="keep nothing: an in-memory store")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=DEFAULT_PORT)
    serve.add_argument(
        "--users", help="JSON file mapping tokens to principals (required off loopback)"
    )
    serve.add_argument(
        "--pages",
        choices=("local", "served"),
        default="local",
        help="local: pages run in this process; served: this process runs nothing, it"
        " records the root and every page opened, and `cellweave worker` processes on the"
        " same --db run them",
    )

    worker = sub.add_parser(
        "worker", help="run the open pages of every principal under claims, until SIGTERM"
    )
    worker.add_argument("--db", required=True, help="SQLite file or PostgreSQL DSN")
    worker.add_argument("--space", default="default")
    worker.add_argument("--lease", type=float, default=10.0, help="claim lease (seconds)")
    worker.add_argument("--heartbeat", type=float, default=2.0, help="renew interval (seconds)")
    worker.add_argument(
        "--import",
        dest="imports",
        action="append",
        default=[],
        metavar="MODULE",
        help="import MODULE first (the pages' patterns; repeatable)",
    )

    inspect = sub.add_parser("inspect", help="print the pages and claims stored in a store")
    inspect.add_argument("--db", required=True, help="SQLite file or PostgreSQL DSN")
    inspect.add_argument("--space", default="default")
    inspect.add_argument("--principal", default="local")
    inspect.add_argument("--json", action="store_true", help="print JSON")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "serve":
            return _serve(args)
        if args.command == "worker":
            return asyncio.run(_worker(args))
        return asyncio.run(_inspect(args))
    except CellweaveError as exc:
        print(f"cellweave {args.command}: {exc}", file=sys.stderr)
        return 2


def _serve(args: argparse.Namespace) -> int:
    # MODULE is looked up from the current directory first, as `python -m` and
    # uvicorn do: `cellweave serve app:Main` serves ./app.py.
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        import uvicorn
    except ImportError:
        raise ShellError("serve needs the web extra: pip install 'cellweave[web]'") from None
    load_target(args.target)  # a bad target is reported here, not from inside the server
    if args.users:
        tokens = load_users(args.users)
    elif not _is_loopback(args.host):
        raise ShellError(f"serve: binding {args.host!r} needs --users FILE (only loopback is open)")
    else:
        tokens = {secrets.token_urlsafe(24): "local"}
    db = None if args.memory else (args.db or ".cellweave/serve.db")
    if args.pages == "served" and db is None:
        raise ShellError("serve: --pages served needs a --db the workers share, not --memory")
    if db is not None and not is_dsn(db):
        os.makedirs(os.path.dirname(os.path.abspath(db)), exist_ok=True)
    app = make_app(lambda: serving(args.target, db, tokens, pages=args.pages))
    shown = "localhost" if args.host in ("127.0.0.1", "::1") else args.host
    if not args.users:
        (token,) = tokens
        print(f"cellweave: serving {args.target} at http://{shown}:{args.port}/?token={token}")
    else:
        print(f"cellweave: serving {args.target} at http://{shown}:{args.port}/ (tokens: --users)")
    sys.stdout.flush()
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", ws_max_size=1 << 20)
    return 0


def open_store(db: str) -> StoreBase:
    """A PostgresStore for a connection string or URI, else a SQLiteStore for a path."""
    if is_dsn(db):
        from cells import PostgresStore

        return PostgresStore(db)
    return SQLiteStore(db)


async def _worker(args: argparse.Namespace) -> int:
    import importlib

    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    for module in args.imports:
        importlib.import_module(module)
    store = open_store(args.db)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        async with Runtime(store=store, space=args.space, principal="worker") as rt:
            server = await rt.serve_pages(lease=args.lease, heartbeat=args.heartbeat)
            print(f"cellweave worker: {server.owner} serving pages of {args.db}", flush=True)
            await stop.wait()
            held = len(server.held)
            await server.stop()  # releases every claim: the others take them at once
            print(f"cellweave worker: stopped, released {held} pages", flush=True)
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        store.close()
    return 0


async def _inspect(args: argparse.Namespace) -> int:
    store = open_store(args.db)
    try:
        async with Runtime(store=store, space=args.space, principal=args.principal) as rt:
            pages: list[dict[str, Any]] = [
                {"page": str(page.link()), "value": page.get()} for page in rt.pages()
            ]
            claims = rt.inspect()["claims"]["claims"]
    finally:
        store.close()
    if args.json:
        print(
            json.dumps(
                {"principal": args.principal, "pages": pages, "claims": claims},
                indent=2,
                default=str,
            )
        )
    else:
        print(f"pages of {args.principal!r} in {args.db}: {len(pages)}")
        for page in pages:
            print(f"  {page['page']}")
        print(f"claims of {args.principal!r}: {len(claims)}")
        for c in claims:
            taken = (
                f", taken from {c['taken_from']} ({c['taken_reason']})" if c["taken_from"] else ""
            )
            print(
                f"  page {c['page']}: owner {c['owner'] or '-'}, fence {c['fence']},"
                f" heartbeat {c['heartbeat_at']:.3f}, takeovers {c['takeovers']}{taken}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
