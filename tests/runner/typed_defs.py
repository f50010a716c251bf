"""Typed, stateful and conditional patterns the runner tests run (module level, so a
restarted runtime can load them). Annotations are strings here (`from __future__
import annotations`): the runner resolves them with the module's globals."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Optional, TypedDict

import msgspec

from cells import Cell
from runner import Ref, handler, lift, pattern, state, unless, when

CALLS: dict[str, int] = {}


def count_call(name: str) -> None:
    CALLS[name] = CALLS.get(name, 0) + 1


class Item(msgspec.Struct):
    title: str
    done: bool = False


class AddItem(msgspec.Struct):
    title: str


class Point(TypedDict):
    x: int
    y: int


class Summary(TypedDict):
    title: str
    total: int


def total(items: Any) -> int:
    return len(items or [])


@handler
def add(event: AddItem, items):  # type: ignore[no-untyped-def]
    assert isinstance(event, AddItem)  # the handler receives the annotated type
    items.push({"title": event.title, "done": False})


@pattern
def Todo(
    items: list[Item],
    title: str = "Todo",
    mode: Literal["all", "open"] = "all",
    limit: Annotated[int, msgspec.Meta(ge=0)] = 10,
    where: Optional[Point] = None,  # noqa: UP045 - Optional is one of the forms to support
) -> Summary:
    # The body returns refs and a handler; `Summary` types the result the runner checks.
    return {"title": title, "total": lift(total)(items), "add": add(items=items)}  # type: ignore[typeddict-unknown-key, typeddict-item]


@pattern
def Counter(count: int = 0, title: str = "Counter"):  # type: ignore[no-untyped-def]
    return {"count": count, "title": title}


@pattern
def Wrapper(n):  # type: ignore[no-untyped-def]
    return {"inner": Counter(count=n)}


@handler
def bump(event, clicks):  # type: ignore[no-untyped-def]
    clicks.set((clicks.get() or 0) + event.get("by", 1))


def doubled(v: Any) -> Any:
    count_call("doubled")
    return (v or 0) * 2


@pattern
def Clicker(label: str = "clicks"):  # type: ignore[no-untyped-def]
    clicks = state(0, name="clicks")
    return {
        "label": label,
        "clicks": clicks,
        "doubled": lift(doubled)(clicks),
        "bump": bump(clicks=clicks),
    }


def detail_text(name: Any) -> Any:
    count_call(f"detail:{name}")
    return f"details of {name}"


@pattern
def Detail(name):  # type: ignore[no-untyped-def]
    return {"text": lift(detail_text)(name)}


def expensive(v: Any) -> Any:
    count_call("expensive")
    return v


@handler
def toggle(event, flag):  # type: ignore[no-untyped-def]
    flag.set(not flag.get())


@pattern
def Panel(open, name):  # type: ignore[no-untyped-def]
    shown = when(open, Detail(name=name), Detail(name="closed"))
    return {"shown": shown}


@pattern
def Values(flag, v):  # type: ignore[no-untyped-def]
    return {
        "picked": when(flag, "yes", "no"),
        "negated": unless(flag, "off"),
        "ref": when(flag, lift(expensive)(v), 0),
    }


@pattern
def Expander(name: str = "x"):  # type: ignore[no-untyped-def]
    open_ = state(False, name="open")
    return {"open": open_, "toggle": toggle(flag=open_), "detail": when(open_, Detail(name=name))}


@handler
def set_text(event, text):  # type: ignore[no-untyped-def]
    text.set(event["text"])


@pattern
def Note(text):  # type: ignore[no-untyped-def]
    return {"text": text, "edit": set_text(text=text)}


@pattern
def Editor(show, text):  # type: ignore[no-untyped-def]
    return {"note": when(show, Note(text=text))}


@handler
def note_add(event: Any, notes: Cell) -> None:
    notes.push(event)


@pattern
def Plain(name: Ref, notes: Ref) -> Any:
    """Annotated for a type checker only: the handles, not the values."""
    return {"name": name, "add": note_add(notes=notes)}


def title_of(element: Any) -> Any:
    return None if element is None else element.get("title")


@pattern
def TypedTitle(element: Item):  # type: ignore[no-untyped-def]
    return lift(title_of)(element)


@pattern
def Titles(items):  # type: ignore[no-untyped-def]
    return {"titles": items.map(TypedTitle)}
