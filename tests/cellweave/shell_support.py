"""A real web shell on loopback for the tests: uvicorn in a thread, a websocket client.

Nothing is mocked: the server is the one `cellweave serve` runs, on a free
port of 127.0.0.1, and clients speak the wire protocol over real sockets.
Waiting is always for a message or a condition, with a deadline that only
turns a hang into a failure.
"""

from __future__ import annotations

import contextlib
import json
import pathlib
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import uvicorn
from websockets.sync.client import ClientConnection, connect

from cellweave._shell import make_app, serving

# The served app lives in examples/ (the repository root is not on sys.path by itself).
ROOT = str(pathlib.Path(__file__).resolve().parents[2])
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

DEADLINE = 15.0
ALICE = "alice-token-0123456789abcdef"
BOB = "bob-token-0123456789abcdef00"
TOKENS = {ALICE: "alice", BOB: "bob"}


class ShellServer:
    """A running shell: `url`, `ws_url`, stopped by `close()`."""

    def __init__(self, target: str, db: str | None, tokens: Mapping[str, str]) -> None:
        app = make_app(lambda: serving(target, db, tokens))
        config = uvicorn.Config(
            app, host="127.0.0.1", port=0, log_level="warning", ws_max_size=1 << 20
        )
        self.server = uvicorn.Server(config)
        self.clients = contextlib.ExitStack()
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        wait_for(lambda: self.server.started, "the server to start")
        sock = self.server.servers[0].sockets[0]
        self.port = sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"

    def ws(self, token: str) -> Client:
        conn = self.clients.enter_context(connect(f"ws://127.0.0.1:{self.port}/ws?token={token}"))
        client = Client(conn)
        if token in TOKENS:
            client.send({"op": "hello"})
        return client

    def close(self) -> None:
        self.clients.close()
        self.server.should_exit = True
        self.thread.join(DEADLINE)


def wait_for(
    cond: Callable[[], Any], what: str, deadline: float = DEADLINE, every: float = 0.01
) -> Any:
    """Polls `cond` every `every` seconds until it gives something true, and returns that
    (for another thread's or process's effect: no verdict gate reaches it); the
    deadline only turns a hang into a failure."""
    end = time.monotonic() + deadline
    while True:
        got = cond()
        if got:
            return got
        if time.monotonic() > end:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(every)


class Client:
    """One tab: sends ops and reads messages. `until` takes the first message that
    matches, in arrival order, and leaves the others for later calls, so waiting
    for an answer never loses a patch that arrived before it."""

    def __init__(self, conn: ClientConnection) -> None:
        self.conn = conn
        self.seen: list[dict[str, Any]] = []
        self.unread: list[dict[str, Any]] = []
        self.refs = 0

    def send(self, msg: Mapping[str, Any]) -> int:
        self.refs += 1
        self.conn.send(json.dumps({**msg, "ref": self.refs}))
        return self.refs

    def send_raw(self, raw: str) -> None:
        self.conn.send(raw)

    def next(self) -> dict[str, Any]:
        msg: dict[str, Any] = json.loads(self.conn.recv(timeout=DEADLINE))
        self.seen.append(msg)
        return msg

    def until(self, pred: Callable[[dict[str, Any]], bool], what: str) -> dict[str, Any]:
        """The first message, read or not yet, that satisfies `pred` (a deadline
        turns a hang into a failure)."""
        for i, msg in enumerate(self.unread):
            if pred(msg):
                return self.unread.pop(i)
        end = time.monotonic() + DEADLINE
        while time.monotonic() < end:
            msg = self.next()
            if pred(msg):
                return msg
            self.unread.append(msg)
        raise AssertionError(f"no message {what}; saw {self.seen[-5:]}")

    def answer(self, ref: int) -> dict[str, Any]:
        return self.until(lambda m: m.get("ref") == ref, f"answering ref {ref}")

    def ask(self, msg: Mapping[str, Any]) -> dict[str, Any]:
        return self.answer(self.send(msg))

    def close(self) -> None:
        self.conn.close()


@contextlib.contextmanager
def shell(
    tmp_path: Any, target: str = "examples.todo:board", tokens: Mapping[str, str] = TOKENS
) -> Iterator[ShellServer]:
    server = ShellServer(target, str(tmp_path / "shell.db"), tokens)
    try:
        yield server
    finally:
        server.close()


def hello(client: Client) -> tuple[dict[str, Any], dict[str, Any]]:
    """The greeting and the first pages message a tab receives."""
    first = client.until(lambda m: m["type"] == "hello", "hello")
    pages = client.until(lambda m: m["type"] == "pages", "pages")
    return first, pages


def watch(client: Client, watch_id: int, cell: str) -> Any:
    """Watch a handle; the snapshot's value."""
    client.send({"op": "watch", "watch": watch_id, "cell": cell})
    snap = client.until(
        lambda m: m["type"] == "snapshot" and m["watch"] == watch_id, f"snapshot {watch_id}"
    )
    return snap["value"]
