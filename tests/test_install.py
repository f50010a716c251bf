"""cellweave installs as users install it: a non-editable `pip install .` into a clean venv.

The installed copy (not this checkout) must import every package, ship the
web shell's static files and type markers, and provide the `cellweave`
command. The venv gets the project's own dependencies from the package
index (or pip's cache); nothing from this checkout's venv leaks in.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import venv
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parent.parent

CHECK = """
import importlib.resources as r, pathlib, sys
import cellweave, cells, runner, scheduler
for pkg in (cellweave, cells, runner, scheduler):
    where = pathlib.Path(pkg.__file__).resolve()
    assert "site-packages" in where.parts, where
    assert r.files(pkg.__name__).joinpath("py.typed").is_file(), pkg
static = r.files("cellweave").joinpath("static")
for name in ("index.html", "cellweave.js", "cellweave.css",
             "vendor/fast-json-patch/core.mjs", "vendor/fast-json-patch/LICENSE.txt"):
    assert static.joinpath(name).is_file(), name
from cellweave import Runtime, pattern, lift, handler, navigate_to, MemoryStore, SQLiteStore
print("ok")
"""


def test_a_clean_venv_gets_working_packages_cli_and_static_files(tmp_path: Any) -> None:
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True, clear=True).create(env_dir)
    py = env_dir / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    build = tmp_path / "build"
    subprocess.run(
        [str(py), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", str(ROOT)],
        check=True,
        cwd=tmp_path,
        env={**env, "TMPDIR": str(tmp_path), "PIP_BUILD": str(build)},
        timeout=600,
    )
    out = subprocess.run(
        [str(py), "-c", CHECK], check=True, cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert "ok" == out.stdout.strip()
    cli = env_dir / "bin" / "cellweave"
    usage = subprocess.run(
        [str(cli), "--help"], check=True, cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert "serve" in usage.stdout and "inspect" in usage.stdout
    # Without the web extra, serve says what to install instead of a traceback.
    serve = subprocess.run(
        [str(cli), "serve", "examples.todo:board"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert 2 == serve.returncode
    assert "pip install 'cellweave[web]'" in serve.stderr
    assert sys.version_info >= (3, 11)
