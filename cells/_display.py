"""Rich display for notebooks: one MIME bundle shape for every object users print.

Jupyter, VS Code and marimo call `_repr_mimebundle_` on the value of a cell's
last expression. Each bundle has `text/plain` (a title and the value in
short), `text/html` (a static rendering: a list of records as a table, other
values as a tree; every string escaped) and `application/json` (the value as
plain data). Rendering is bounded: at most `MAX_ITEMS` elements per list or
dict and `MAX_DEPTH` levels are drawn, so a 10,000-row list displays at once.

`html` and `json` are imported by the functions that draw: `import cells` runs in
programs that never display anything.
"""

from __future__ import annotations

from typing import Any, Final

MAX_ITEMS: Final = 50
MAX_DEPTH: Final = 6
SHORT: Final = 80


def short(value: Any, limit: int = SHORT) -> str:
    """`value` as compact JSON, cut to `limit` characters with an ellipsis."""
    import json

    try:
        text = json.dumps(value, ensure_ascii=False, separators=(", ", ": "), default=repr)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _columns(items: list[Any]) -> list[str] | None:
    if not items or not all(isinstance(x, dict) and x for x in items):
        return None
    cols = list(items[0])
    return cols if all(list(x) == cols for x in items) else None


def value_html(value: Any, depth: int = 0) -> str:
    """A static, escaped HTML rendering of a JSON-like value."""
    import html

    esc = html.escape
    if depth >= MAX_DEPTH:
        return f"<code>{esc(short(value, 40))}</code>"
    if isinstance(value, list):
        more = (
            f"<div><em>… {len(value) - MAX_ITEMS} more</em></div>" if len(value) > MAX_ITEMS else ""
        )
        shown = value[:MAX_ITEMS]
        cols = _columns(shown)
        if cols is not None:
            head = "".join(f"<th>{esc(c)}</th>" for c in cols)
            rows = "".join(
                "<tr>" + "".join(f"<td>{value_html(x[c], depth + 1)}</td>" for c in cols) + "</tr>"
                for x in shown
            )
            return f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>{more}"
        items = "".join(f"<li>{value_html(x, depth + 1)}</li>" for x in shown)
        return f'<ol start="0">{items}</ol>{more}'
    if isinstance(value, dict):
        entries = list(value.items())
        more = (
            f"<dt>…</dt><dd>{len(entries) - MAX_ITEMS} more</dd>"
            if len(entries) > MAX_ITEMS
            else ""
        )
        body = "".join(
            f"<dt><b>{esc(str(k))}</b></dt><dd>{value_html(v, depth + 1)}</dd>"
            for k, v in entries[:MAX_ITEMS]
        )
        return f"<dl>{body}{more}</dl>"
    if isinstance(value, str):
        return f"<span>{esc(value)}</span>"
    return f"<code>{esc(short(value, 200))}</code>"


def plain_data(value: Any) -> Any:
    """`value` as JSON-serialisable data (anything else becomes its repr)."""
    import json

    return json.loads(json.dumps(value, default=repr, allow_nan=False))


def mimebundle(title: str, value: Any) -> dict[str, Any]:
    """The bundle every cellweave object displays as (see the module docstring)."""
    import html

    try:
        data = plain_data(value)
    except ValueError:
        data = repr(value)
    return {
        "text/plain": f"{title} = {short(data)}",
        "text/html": (
            f'<div class="cellweave"><div><b>{html.escape(title)}</b></div>{value_html(data)}</div>'
        ),
        "application/json": data,
    }
