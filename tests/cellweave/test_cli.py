"""The `cellweave` command, run as a user runs it (a subprocess of this venv's Python)."""

from __future__ import annotations

import asyncio
import json
import pathlib
import subprocess
import sys
from typing import Any

import pytest

from cells import SQLiteStore
from runner import Runtime

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from examples.todo import board  # noqa: E402


def cli(*args: str, cwd: Any = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cellweave", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


def make_board_with_a_page(path: str) -> str:
    """A SQLite file where alice opened the board as a page; the page's address."""

    async def main() -> str:
        store = SQLiteStore(path)
        try:
            async with Runtime(store=store, principal="alice") as rt:
                tx = rt.edit()
                result = board(rt, tx)
                assert (await tx.commit()).ok
                assert await rt.open_page(result)
                await rt.idle()
                return str(result.link())
        finally:
            store.close()

    return asyncio.run(main())


def test_inspect_lists_a_principals_pages_and_only_theirs(tmp_path: Any) -> None:
    db = str(tmp_path / "board.db")
    page = make_board_with_a_page(db)
    mine = cli("inspect", "--db", db, "--principal", "alice", "--json")
    assert 0 == mine.returncode, mine.stderr
    data = json.loads(mine.stdout)
    assert "alice" == data["principal"]
    assert [page] == [p["page"] for p in data["pages"]]
    assert "Todo" == data["pages"][0]["value"]["name"]
    theirs = cli("inspect", "--db", db, "--principal", "bob")
    assert 0 == theirs.returncode, theirs.stderr
    assert "pages of 'bob'" in theirs.stdout and ": 0" in theirs.stdout


def test_serve_refuses_a_public_address_without_users() -> None:
    out = cli("serve", "examples.todo:board", "--memory", "--host", "0.0.0.0")
    assert 2 == out.returncode
    assert "binding '0.0.0.0' needs --users FILE" in out.stderr


def test_serve_with_served_pages_needs_a_shared_store() -> None:
    out = cli("serve", "examples.todo:board", "--memory", "--pages", "served")
    assert 2 == out.returncode
    assert "--pages served needs a --db the workers share" in out.stderr
    out = cli("serve", "examples.todo:board", "--pages", "elsewhere")
    assert 2 == out.returncode and "invalid choice: 'elsewhere'" in out.stderr


def test_serve_names_a_bad_target_and_a_bad_users_file(tmp_path: Any) -> None:
    users = tmp_path / "users.json"
    users.write_text(json.dumps({"short": "alice"}))
    out = cli("serve", "examples.todo:board", "--memory", "--users", str(users))
    assert 2 == out.returncode
    assert "token for 'alice' is too short" in out.stderr
    out = cli("serve", "no_such_module:X", "--memory", "--port", "0")
    assert 2 == out.returncode
    assert "cannot import 'no_such_module'" in out.stderr


def test_worker_serves_pages_under_claims_and_releases_them_on_sigterm(tmp_path: Any) -> None:
    import select
    import signal

    db = str(tmp_path / "board.db")
    make_board_with_a_page(db)
    worker = subprocess.Popen(
        [
            *(sys.executable, "-m", "cellweave", "worker", "--db", db),
            *("--lease", "4", "--heartbeat", "1", "--import", "examples.todo"),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert worker.stdout is not None
        # Printed once the first heartbeat ran (the wait bounds an I/O wait, no race).
        ready, _, _ = select.select([worker.stdout], [], [], 60)
        assert ready, "the worker printed nothing"
        first = worker.stdout.readline()
        assert "serving pages of" in first, (first, worker.stderr)
        shown = cli("inspect", "--db", db, "--principal", "alice", "--json")
        assert 0 == shown.returncode, shown.stderr
        (claim,) = json.loads(shown.stdout)["claims"]
        assert claim["fence"] == 1 and claim["owner"] is not None
        text = cli("inspect", "--db", db, "--principal", "alice")
        assert "claims of 'alice': 1" in text.stdout
        worker.send_signal(signal.SIGTERM)
        out, err = worker.communicate(timeout=60)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    assert 0 == worker.returncode, err
    assert "stopped, released 1 pages" in out
    after = cli("inspect", "--db", db, "--principal", "alice", "--json")
    (claim,) = json.loads(after.stdout)["claims"]
    assert claim["owner"] is None and claim["fence"] == 1


HERE = pathlib.Path(__file__).resolve().parent


def _start(*args: str) -> subprocess.Popen[str]:
    """A `cellweave` process run from this directory (it imports served_app from here)."""
    return subprocess.Popen(
        [sys.executable, "-m", "cellweave", *args],
        cwd=HERE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _first_line(proc: subprocess.Popen[str], what: str) -> str:
    import select

    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 60)  # bounds an I/O wait
    assert ready, f"{what} printed nothing"
    return proc.stdout.readline()


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_serve_with_served_pages_runs_nothing_and_workers_run_its_pages_and_events(
    kind: str, tmp_path: Any, request: pytest.FixtureRequest
) -> None:
    import signal

    from shell_support import Client, hello, wait_for
    from websockets.sync.client import connect

    def until(cond: Any, what: str) -> Any:
        # Another process's effect, behind a process start: a longer deadline.
        return wait_for(cond, what, deadline=60.0, every=0.05)

    if kind == "sqlite":
        db = str(tmp_path / "served.db")
    else:
        db = request.getfixturevalue("pg_cluster").dsn
    worker = _start(
        *("worker", "--db", db, "--lease", "2", "--heartbeat", "0.5", "--import", "served_app")
    )
    port = _free_port()
    ui = _start("serve", "served_app:page", "--db", db, "--pages", "served", "--port", str(port))
    procs = [worker, ui]
    try:
        first = _first_line(worker, "the worker")
        assert "serving pages of" in first, first
        owner = first.split()[2]  # "cellweave worker: OWNER serving pages of DB"
        line = _first_line(ui, "serve")
        token = line.rsplit("?token=", 1)[1].strip()

        def connected() -> Any:
            from websockets.exceptions import InvalidHandshake

            try:
                return connect(f"ws://127.0.0.1:{port}/ws?token={token}")
            except (OSError, InvalidHandshake):  # not listening, or not answering yet
                return None

        conn = until(connected, "the shell to listen")
        conn.__enter__()  # (closed by client.close(), or by the process ending)
        client = Client(conn)
        client.send({"op": "hello"})
        _, pages = hello(client)
        assert [] == pages["pages"]  # the root's own page shows as the root only
        watches = iter(range(1, 10**6))

        def root() -> Any:
            n = next(watches)
            client.send({"op": "watch", "watch": n, "cell": "root"})
            snap = client.until(
                lambda m: m["type"] == "snapshot" and m["watch"] == n, f"snapshot {n}"
            )
            client.send({"op": "unwatch", "watch": n})
            return snap["value"]

        # Computed by the worker (the setup function's `rt.run` only staged the setup
        # here), read by the UI through the store; then an edit in the UI, computed there.
        until(lambda: root().get("loud") == "HI", "the worker's first result in the UI")
        ok = client.ask(
            {"op": "set", "cell": "root", "path": ["text"], "value": "hey", "basis": "hi"}
        )
        assert "ok" == ok["type"], ok
        until(lambda: root().get("loud") == "HEY", "the worker's result of the edit in the UI")
        view = client.ask({"op": "inspect"})["inspect"]
        assert [] == view["registrations"]  # the UI process runs nothing
        shown = cli("inspect", "--db", db, "--principal", "local", "--json")
        assert 0 == shown.returncode, shown.stderr
        (claim,) = json.loads(shown.stdout)["claims"]  # the root, opened as a page
        assert claim["owner"] == owner and claim["fence"] == 1
        # The stream shows as a button (its handler found in the page's pattern) ...
        button = root()["clear"]
        assert button == {"$stream": "Shout.n1 handler served_app:clear"}, button
        # ... and a click in the served shell is recorded in the store, handled by the
        # worker that holds the page, its result shown here.
        sent = client.ask({"op": "send", "cell": "root", "path": ["clear"], "event": None})
        assert "ok" == sent["type"], sent
        cleared = {"text": None, "loud": None, "clear": button}
        until(lambda: root() == cleared, "the worker's handling of the click, recomputed")
        assert [] == client.ask({"op": "inspect"})["inspect"]["registrations"]
        client.close()
        worker.send_signal(signal.SIGTERM)
        out, err = worker.communicate(timeout=60)
        assert 0 == worker.returncode, err
        assert "stopped, released 1 pages" in out
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.communicate(timeout=60)
