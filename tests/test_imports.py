"""What each package loads when imported: what only some programs need waits for first use.

Each check runs in a fresh interpreter (this one has imported everything already)
and looks at `sys.modules`; the time it saves is measured in bench/ (group
`imports`), never asserted here.
"""

from __future__ import annotations

import ast
import subprocess
import sys

import pytest

# Loaded on first use, by the few programs that need them: asyncio where a coroutine
# is awaited, reactivex by `observe()`, the SQL stores by `SQLiteStore` /
# `PostgresStore`, html and json by a notebook display.
LAZY_FOR_RUNNER = (
    "asyncio",
    "reactivex",
    "sqlite3",
    "cells.stores.sqlite",
    "cells.stores.postgres",
    "cells.stores._sql",
    "psycopg",
    "html",
    "json",
)
# The web shell's server and the notebook widget's base load when serving or viewing.
LAZY_FOR_CELLWEAVE = ("starlette", "uvicorn", "anywidget", "psycopg", "reactivex")


def _loaded_after(statement: str, names: tuple[str, ...]) -> list[str]:
    # (sys only: json here would load json itself)
    code = f"import sys\n{statement}\nprint([n for n in {list(names)!r} if n in sys.modules])\n"
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=120
    )
    loaded: list[str] = ast.literal_eval(out.stdout)
    return loaded


@pytest.mark.parametrize("package", ["cells", "scheduler", "runner"])
def test_importing_an_engine_package_loads_no_optional_module(package: str) -> None:
    assert [] == _loaded_after(f"import {package}", LAZY_FOR_RUNNER)


def test_importing_cellweave_loads_no_server_or_widget_module() -> None:
    assert [] == _loaded_after("import cellweave", LAZY_FOR_CELLWEAVE)


def test_the_lazy_names_load_on_first_use() -> None:
    statement = (
        "import cells, cells.stores\n"
        "assert cells.SQLiteStore is cells.stores.SQLiteStore\n"
        "from cells import SQLiteStore\n"
        "assert SQLiteStore.__module__ == 'cells.stores.sqlite'\n"
    )
    assert ["sqlite3", "cells.stores.sqlite", "cells.stores._sql"] == _loaded_after(
        statement, ("sqlite3", "cells.stores.sqlite", "cells.stores._sql")
    )


def test_observe_loads_reactivex_when_called() -> None:
    statement = (
        "from cells import MemoryStore, Space\n"
        "from scheduler import ManualClock, Scheduler\n"
        "import sys\n"
        "assert 'reactivex' not in sys.modules\n"
        "sp = Space(MemoryStore(), 'x')\n"
        "sch = Scheduler(sp.replica, clock=ManualClock())\n"
        "cell = sp.cell('doc')\n"
        "cell.set(7)\n"
        "sp.replica.pump()\n"
        "seen = []\n"
        "sch.observe(cell).subscribe(seen.append)\n"
        "sch.settle()\n"
        "assert seen == [7], seen\n"
    )
    assert ["reactivex"] == _loaded_after(statement, ("reactivex",))


def test_running_loop_is_none_without_asyncio_and_the_loop_inside_one() -> None:
    statement = (
        "import cells, sys\n"
        "assert cells.running_loop() is None and 'asyncio' not in sys.modules\n"
        "import asyncio\n"
        "async def main():\n"
        "    return cells.running_loop() is asyncio.get_running_loop()\n"
        "assert asyncio.run(main())\n"
        "assert cells.running_loop() is None\n"
    )
    assert ["asyncio"] == _loaded_after(statement, ("asyncio",))
