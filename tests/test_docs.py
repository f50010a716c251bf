"""The docs' code blocks run as written and print what the docs show.

Each page's ```python blocks run in order, in one namespace and on one event
loop (top-level `await` allowed, as in Jupyter or `python -m asyncio`); a
```text block right after a python block is the output that block must print.
Pages run from a scratch directory (they may write files) with the repository
on sys.path (they import `examples`).

Every page is also pasted, block by block, into the two places a reader
pastes it: a real `python -m asyncio` session (fed on stdin: a compound
statement must end with a blank line there, and a blank line inside one ends
it early) and a real Jupyter kernel (each block one notebook cell, with its
printed output compared too). Neither may show a traceback.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import io
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import psycopg
import pytest
from nbclient import NotebookClient

from bench import pg_cluster

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"```(\w*)\n(.*?)```", re.S)

PAGES = [
    "tutorial.md",
    "howto/durable-storage.md",
    "howto/lists.md",
    "howto/notebooks.md",
    "howto/inspector.md",
    "howto/pages.md",
    "howto/postgres.md",
    "howto/workers.md",
    "howto/web-shell.md",
    "howto/widget.md",
    "reference/runner.md",
    "explanation/ownership.md",
]

# What a traceback, a syntax error or an ignored exception (a warning raised in
# `__del__` under `-W error`) looks like on the REPL's stderr.
PROBLEM = re.compile(
    r"^(Traceback \(most recent call last\)|Exception ignored|\s*File \"<(stdin|console)>\""
    r"|[\w.]*(Error|Exception|Warning)\b)",
    re.M,
)


def _blocks(path: Path) -> list[tuple[str, str]]:
    return BLOCK.findall(path.read_text())


def run_page(path: Path) -> list[tuple[str, str]]:
    """Run the page; return (expected, printed) for every python block followed by text."""
    namespace: dict[str, Any] = {"__name__": "__main__"}
    checks: list[tuple[str, str]] = []
    printed: str | None = None
    loop = asyncio.new_event_loop()
    try:
        for lang, code in _blocks(path):
            if lang == "python":
                out = io.StringIO()
                compiled = compile(
                    code, f"{path.name} block", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
                )
                with contextlib.redirect_stdout(out):
                    returned = eval(compiled, namespace)
                    if asyncio.iscoroutine(returned):
                        loop.run_until_complete(returned)
                printed = out.getvalue()
            elif lang == "text" and printed is not None:
                checks.append((code, printed))
                printed = None
            else:
                printed = None
    finally:
        loop.close()
    return checks


@pytest.fixture(scope="module", autouse=True)
def postgres_server() -> Iterator[None]:
    """A throwaway PostgreSQL server for howto/postgres.md, named by `CELLWEAVE_DSN`
    (the page reads it; the REPL and the kernel inherit it)."""
    with pg_cluster.cluster() as server, pytest.MonkeyPatch.context() as mp:
        mp.setenv("CELLWEAVE_DSN", server.dsn)
        yield


@pytest.fixture(autouse=True)
def fresh_postgres_schema() -> Iterator[None]:
    """Each run of the page starts on an empty store."""
    yield
    with psycopg.connect(os.environ["CELLWEAVE_DSN"], autocommit=True) as conn:
        conn.execute("DROP SCHEMA IF EXISTS cellweave CASCADE")


def _environment() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


@pytest.mark.parametrize("page", PAGES)
def test_doc_page_runs_and_prints_what_it_shows(
    page: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(ROOT))
    for expected, printed in run_page(ROOT / "docs" / page):
        assert expected == printed


def repl_input(path: Path) -> str:
    """The page's python blocks as a reader pastes them, one after the other.

    Each block is followed by one blank line (what ends a block's last compound
    statement in the REPL). Nothing else is added: a block that only works as a
    script fails here.
    """
    return "".join(code.rstrip("\n") + "\n\n" for lang, code in _blocks(path) if lang == "python")


def test_repl_input_reproduces_a_statement_right_after_a_compound_one(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("```python\nfor i in range(2):\n    pass\nprint('after')\n```\n")
    problems = _paste_into_asyncio_repl(repl_input(page), tmp_path)
    assert "SyntaxError" in problems


def _paste_into_asyncio_repl(text: str, cwd: Path) -> str:
    proc = subprocess.run(
        [sys.executable, "-W", "error", "-m", "asyncio"],
        input=text,
        capture_output=True,
        text=True,
        cwd=cwd,
        env=_environment(),
        timeout=300,
    )
    return "\n".join(m.string[m.start() :].splitlines()[0] for m in PROBLEM.finditer(proc.stderr))


@pytest.mark.parametrize("page", PAGES)
def test_doc_page_pastes_into_python_m_asyncio(page: str, tmp_path: Path) -> None:
    problems = _paste_into_asyncio_repl(repl_input(ROOT / "docs" / page), tmp_path)
    assert "" == problems


@pytest.mark.parametrize("page", PAGES)
def test_doc_page_runs_in_jupyter(
    page: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", _environment()["PYTHONPATH"])
    cells: list[str] = []
    expected: dict[int, str] = {}
    last: int | None = None
    for lang, code in _blocks(ROOT / "docs" / page):
        if lang == "python":
            cells.append(code)
            last = len(cells) - 1
        elif lang == "text" and last is not None:
            expected[last] = code
            last = None
        else:
            last = None
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(src) for src in cells]
    client = NotebookClient(
        nb,
        kernel_name="python3",
        timeout=120,
        allow_errors=False,
        resources={"metadata": {"path": str(tmp_path)}},
    )
    client.execute()
    for i, text in expected.items():
        printed = "".join(
            o.get("text", "") for o in nb.cells[i].outputs if o.get("output_type") == "stream"
        )
        assert text == printed, f"{page}, block {i + 1}"
