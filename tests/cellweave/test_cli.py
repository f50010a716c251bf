"""The `cellweave` command, run as a user runs it (a subprocess of this venv's Python)."""

from __future__ import annotations

import asyncio
import json
import pathlib
import subprocess
import sys
from typing import Any

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
