"""The todo board's patterns: a list of tasks shown as cards, filtered views and tags.

`examples/demo.py` runs them; `docs/howto/lists.md` explains the list builtins
they use. Module level, so a restarted runtime loads them again by identity.

Data: `tasks` is a cell holding a list of *links*, one per task, each to a
field of the `store` cell (a dict of task id -> `{"title", "done", "tags"}`).
Links give every task an identity of its own: the list builtins key an
element that is a link by its target, so a task keeps its card when other
tasks are added, removed or reordered, and a card opened as a page stays that
task's card after the task leaves the list.

- `Board(name, tasks, store)`: the board page. `tasks.map(Card)` the cards,
  `tasks.filter(IsOpen)` / `tasks.filter(IsDone)` the two views,
  `tasks.flat_map(Tags)` every tag; handlers `add`, `remove` and `open`.
- `Card(element)`: one task's card: its display line and a `toggle` handler.
"""

from __future__ import annotations

import collections
from typing import Any

from cells import Cell
from runner import Ref, handler, lift, navigate_to, pattern

COMPUTED: collections.Counter[str] = collections.Counter()
"""How often each card's line was computed, by title (the demo shows what re-runs)."""


def card_line(task: Any) -> str:
    task = task or {}
    COMPUTED[task.get("title", "?")] += 1
    box = "[x]" if task.get("done") else "[ ]"
    tags = "".join(f" #{tag}" for tag in task.get("tags") or [])
    return f"{box} {task.get('title', '?')}{tags}"


def is_open(task: Any) -> bool:
    return not (task or {}).get("done")


def is_done(task: Any) -> bool:
    return bool((task or {}).get("done"))


def tag_list(tags: Any) -> list[str]:
    return list(tags or [])


def tag_counts(tags: Any) -> str:
    counts = collections.Counter(tags or [])
    return ", ".join(f"#{tag} {n}" for tag, n in sorted(counts.items())) or "(no tags)"


def titles(tasks: Any) -> list[str]:
    return [task["title"] for task in tasks or []]


@handler
def toggle_done(event: Any, done: Cell) -> None:
    done.set(not done.get())


@pattern
def Card(element: Ref) -> Any:
    return {
        "title": element["title"],
        "line": lift(card_line)(element),
        "toggle": toggle_done(done=element["done"]),
    }


@pattern
def IsOpen(element: Ref) -> Any:
    return lift(is_open)(element)


@pattern
def IsDone(element: Ref) -> Any:
    return lift(is_done)(element)


@pattern
def Tags(element: Ref) -> Any:
    return lift(tag_list)(element["tags"])


def slug(title: str) -> str:
    return "-".join(title.lower().split())


@handler
def add_task(event: Any, tasks: Cell, store: Cell) -> None:
    task = store.key(slug(event["title"]))
    task.set({"title": event["title"], "done": False, "tags": event.get("tags", [])})
    tasks.push(task.link())


def position(tasks: Cell, title: str) -> int | None:
    for i, task in enumerate(tasks.get() or []):
        if task["title"] == title:
            return i
    return None


@handler
def remove_task(event: Any, tasks: Cell) -> None:
    # `get()` follows the links (it reads the tasks); rebuild the list from the
    # links themselves, so the tasks that stay keep their identity.
    gone = position(tasks, event["title"])
    n = len(tasks.get() or [])
    tasks.set([tasks.key(i).resolve().link() for i in range(n) if i != gone])


@handler
def open_card(event: Any, tasks: Cell, cards: Cell) -> Any:
    i = position(tasks, event["title"])
    # `cards` is the map's container: its slot i holds a link to the card's result.
    return None if i is None else navigate_to(cards.key(i).resolve())


@pattern
def Board(name: Ref, tasks: Ref, store: Ref) -> Any:
    cards = tasks.map(Card)
    open_tasks = tasks.filter(IsOpen)
    done_tasks = tasks.filter(IsDone)
    tags = tasks.flat_map(Tags)
    return {
        "name": name,
        "cards": cards,
        "open": lift(titles)(open_tasks),
        "done": lift(titles)(done_tasks),
        "tags": lift(tag_counts)(tags),
        "add": add_task(tasks=tasks, store=store),
        "remove": remove_task(tasks=tasks),
        "open_card": open_card(tasks=tasks, cards=cards),
    }


def board(rt: Any, tx: Any) -> Cell:
    """Set up an empty board in `tx` and return its result: the web shell's entry
    (`cellweave serve examples.todo:board`)."""
    store = rt.get_cell("todo-store", tx=tx)
    store.set({})
    tasks = rt.get_cell("todo-tasks", tx=tx)
    tasks.set([])
    result: Cell = rt.get_cell("todo-board", tx=tx)
    rt.run(tx, Board, {"name": "Todo", "tasks": tasks, "store": store}, result)
    return result
