"""The `cellweave` command: `serve` (the web shell) and `inspect` (stored pages).

cellweave serve examples.todo:Board --db board.db
cellweave inspect --db board.db --principal alice --json
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import json
import os
import secrets
import sys
from collections.abc import Sequence
from typing import Any

from cells import CellweaveError, SQLiteStore
from runner import Runtime

from ._shell import ShellError, load_target, load_users, make_app, serving

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
    serve.add_argument("--db", help="SQLite file (default: .cellweave/serve.db)")
    serve.add_argument("--memory", action="store_true", help="keep nothing: an in-memory store")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=DEFAULT_PORT)
    serve.add_argument(
        "--users", help="JSON file mapping tokens to principals (required off loopback)"
    )

    inspect = sub.add_parser("inspect", help="print the pages stored in a SQLite file")
    inspect.add_argument("--db", required=True, help="SQLite file")
    inspect.add_argument("--space", default="default")
    inspect.add_argument("--principal", default="local")
    inspect.add_argument("--json", action="store_true", help="print JSON")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "serve":
            return _serve(args)
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
    if db is not None:
        os.makedirs(os.path.dirname(os.path.abspath(db)), exist_ok=True)
    app = make_app(lambda: serving(args.target, db, tokens))
    shown = "localhost" if args.host in ("127.0.0.1", "::1") else args.host
    if not args.users:
        (token,) = tokens
        print(f"cellweave: serving {args.target} at http://{shown}:{args.port}/?token={token}")
    else:
        print(f"cellweave: serving {args.target} at http://{shown}:{args.port}/ (tokens: --users)")
    sys.stdout.flush()
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", ws_max_size=1 << 20)
    return 0


async def _inspect(args: argparse.Namespace) -> int:
    store = SQLiteStore(args.db)
    try:
        async with Runtime(store=store, space=args.space, principal=args.principal) as rt:
            pages: list[dict[str, Any]] = [
                {"page": str(page.link()), "value": page.get()} for page in rt.pages()
            ]
    finally:
        store.close()
    if args.json:
        print(json.dumps({"principal": args.principal, "pages": pages}, indent=2, default=str))
    else:
        print(f"pages of {args.principal!r} in {args.db}: {len(pages)}")
        for page in pages:
            print(f"  {page['page']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
