"""The docs' code blocks run as written and print what the docs show.

Each page's ```python blocks run in order, in one namespace and on one event
loop (top-level `await` allowed, as in Jupyter or `python -m asyncio`); a
```text block right after a python block is the output that block must print.
Pages run from a scratch directory (they may write files) with the repository
on sys.path (they import `examples`).
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import io
import re
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"```(\w*)\n(.*?)```", re.S)

PAGES = [
    "tutorial.md",
    "howto/lists.md",
    "howto/notebooks.md",
    "howto/pages.md",
    "reference/runner.md",
    "explanation/ownership.md",
]


def run_page(path: Path) -> list[tuple[str, str]]:
    """Run the page; return (expected, printed) for every python block followed by text."""
    namespace: dict[str, Any] = {"__name__": "__main__"}
    checks: list[tuple[str, str]] = []
    printed: str | None = None
    loop = asyncio.new_event_loop()
    try:
        for lang, code in BLOCK.findall(path.read_text()):
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


@pytest.mark.parametrize("page", PAGES)
def test_doc_page_runs_and_prints_what_it_shows(
    page: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(ROOT))
    for expected, printed in run_page(ROOT / "docs" / page):
        assert expected == printed
