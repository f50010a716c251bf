"""The scheduler's modules form no import circle (STYLE.md: a circle means two
modules are one concept, or a narrow interface is missing between them).

Every import counts: module level, inside functions, and under `TYPE_CHECKING`.
"""

from __future__ import annotations

import ast
from pathlib import Path

import scheduler

PACKAGE = Path(scheduler.__file__).parent


def _imports(path: Path) -> set[str]:
    """The sibling modules `path` imports, by module name (without the package)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level == 1:
                if node.module is None:  # from . import x
                    names.update(alias.name for alias in node.names)
                else:
                    names.add(node.module.split(".")[0])
            elif node.level == 0 and node.module is not None:
                parts = node.module.split(".")
                if parts[0] == "scheduler" and len(parts) > 1:
                    names.add(parts[1])
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "scheduler" and len(parts) > 1:
                    names.add(parts[1])
    return names


def _graph() -> dict[str, set[str]]:
    modules = {p.stem: p for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    return {name: _imports(path) & set(modules) for name, path in modules.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def visit(name: str) -> list[str] | None:
        state[name] = 1
        path.append(name)
        for dep in sorted(graph[name]):
            if state.get(dep) == 1:
                return [*path[path.index(dep) :], dep]
            if dep not in state:
                found = visit(dep)
                if found is not None:
                    return found
        path.pop()
        state[name] = 2
        return None

    for name in sorted(graph):
        if name not in state:
            found = visit(name)
            if found is not None:
                return found
    return None


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert ["a", "b", "a"] == _cycle({"a": {"b"}, "b": {"a"}, "c": set()})
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_scheduler_modules_form_no_import_circle() -> None:
    graph = _graph()
    assert {"_passes", "_scheduler", "_host", "_timers"} <= set(graph)
    assert _cycle(graph) is None, f"import circle: {' -> '.join(_cycle(graph) or [])}"
