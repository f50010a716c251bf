"""Typed, stateful and conditional patterns the property tests run (module level)."""

from __future__ import annotations

import msgspec

from runner import handler, lift, pattern, state, when


class PItem(msgspec.Struct):
    title: str
    done: bool = False


@pattern
def PList(items: list[PItem], limit: int = 3):  # type: ignore[no-untyped-def]
    return {"items": items, "limit": limit}


def _text(name):  # type: ignore[no-untyped-def]
    return f"shows {name}"


@pattern
def PShow(name):  # type: ignore[no-untyped-def]
    return {"text": lift(_text)(name)}


@pattern
def PSwitch(flag):  # type: ignore[no-untyped-def]
    return {"shown": when(flag, PShow(name="then"), PShow(name="otherwise"))}


@handler
def padd(event, total):  # type: ignore[no-untyped-def]
    total.set((total.get() or 0) + event["by"])


@pattern
def PTally(label: str = "tally"):  # type: ignore[no-untyped-def]
    total = state(0, name="total")
    return {"label": label, "total": total, "add": padd(total=total)}
