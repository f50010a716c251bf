"""Views: one element edited in a 10,000-row mapped list, until the browser shows it.

A real web shell (uvicorn on loopback) serves `Rows(items)`: N inline items
mapped to a row pattern each (`BENCH_VIEWS_N`, default 10,000). A real
headless chromium (Debian's, driven by Playwright) shows it. Each op brings
one row into view (untimed in the page: a windowed table draws it), edits its
title from the page (a `set` message, as a person editing the leaf sends it)
and waits until the row shows it. The page itself times two things from the
moment it sends the edit (`performance.now()`):

- edit -> DOM mutation: a MutationObserver sees the row's title cell hold the
  new text (browser -> server -> transaction -> propagation -> patch ->
  websocket -> DOM);
- edit -> next frame rendered: then a requestAnimationFrame callback (it runs
  before the next frame's style, layout and paint) posts a message, and the
  time is taken when that message is handled, after the frame was rendered.
  It includes the wait for the next frame (up to a display interval).

Each is reported at exit (stderr) as the median over samples of each sample's
median edit, with the spread (max - min) / median over samples; their sums
per sample are in the counts (`dom_us`, `frame_us`). The harness's own time
per op is the whole loop seen from Python, including bringing the row into
view and two frames before the edit. Counted work: edits, characters received
by the page over the websocket, table rows the page redrew.

Rows:
- `patches, windowed table`: the shell as it ships: JSON Patch operations
  under the changed row; tables longer than 300 rows drawn windowed;
- `patches, every row drawn`: the same with windowing off
  (`?window_above=Infinity`): what the shell did before windowing;
- `whole value resent (naive)` (baseline): the watch asks for the whole
  value on every change (`"full": true`), re-rendered whole, every row drawn.

Wall clock only (the work is mostly in other processes). The setup (N rows
mapped, served and rendered once) is shared by the samples of a row and not
timed. Needs chromium (`make test` installs it).
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import shutil
import statistics
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

from bench.harness import Counts, Run, bench
from cells import Cell
from runner import Ref, lift, pattern

N = int(os.environ.get("BENCH_VIEWS_N", "10000"))
"""Rows in the served list (`BENCH_VIEWS_N`; the goal is stated at 10,000)."""
EDITS = 20


def _line(item: Any) -> str:
    return f"#{(item or {}).get('n')} {(item or {}).get('title')}"


@pattern
def Row(element: Ref) -> Any:
    return {"title": element["title"], "line": lift(_line)(element)}


@pattern
def Rows(items: Ref) -> Any:
    return {"rows": items.map(Row)}


def rows_app(rt: Any, tx: Any) -> Cell:
    """The served app: 10,000 inline items mapped to rows."""
    items = rt.get_cell("bench-items", tx=tx)
    items.set([{"n": i, "title": f"item {i}"} for i in range(N)])
    result = rt.get_cell("bench-rows", tx=tx)
    made: Cell = rt.run(tx, Rows, {"items": items}, result)
    return made


# One edit from the page: bring the row into view (untimed: the window draws
# it), send the set, and note in the page when a MutationObserver sees the new
# text in that row (the DOM mutation) and when the next frame after it has
# been rendered (a requestAnimationFrame callback runs before the frame's
# style, layout and paint; a message posted from it is handled after them).
EDIT_JS = """
async ([i, title]) => {
  const shell = window.cellweave;
  const frame = () => new Promise((resolve) => requestAnimationFrame(() => resolve()));
  const rendered = () => new Promise((resolve) => requestAnimationFrame(() => {
    const ch = new MessageChannel();
    ch.port1.onmessage = () => resolve(performance.now());
    ch.port2.postMessage(null);
  }));
  const at = `/rows/${i}/title`;
  if (shell.view.reveal(at) === null) throw new Error(`row ${i} is not drawn`);
  await frame();
  await frame();
  const basis = shell.view.nodes.get(at).textContent;
  const before = shell.bytesIn;
  let redrawn = 0;
  let mutated = 0;
  const seen = new Promise((resolve, reject) => {
    setTimeout(() => reject(new Error(`row ${i} did not show ${title} within 60 s`)), 60000);
    const obs = new MutationObserver((records) => {
      for (const r of records) {
        for (const n of r.addedNodes) {
          if (n.nodeName === "TR") redrawn += 1;
          if (n.querySelectorAll) redrawn += n.querySelectorAll("tr").length;
        }
      }
      const cell = shell.view.nodes.get(at);
      if (cell && cell.isConnected && cell.textContent === title) {
        mutated = performance.now();
        obs.disconnect();
        resolve(rendered());
      }
    });
    const all = {childList: true, subtree: true, characterData: true};
    obs.observe(document.querySelector(".cw-content"), all);
  });
  const sent = performance.now();
  shell.ask({op: "set", cell: "root", path: ["rows", i, "title"], value: title, basis});
  const painted = await seen;
  return [shell.bytesIn - before, redrawn, Math.round((mutated - sent) * 1000),
          Math.round((painted - sent) * 1000)];
}
"""


@functools.cache
def _browser() -> Any:
    """One playwright and one chromium for the whole run (Playwright's sync API
    allows one per thread), closed at exit."""
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium")
    if chromium is None:
        raise RuntimeError("bench views: chromium is missing (make test installs it)")
    stack = contextlib.ExitStack()
    p = stack.enter_context(sync_playwright())
    browser = p.chromium.launch(
        executable_path=chromium,
        headless=True,
        args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
    )
    stack.callback(browser.close)
    atexit.register(stack.close)
    return browser


@contextlib.contextmanager
def _served(full: bool, windowed: bool) -> Iterator[Any]:
    import uvicorn

    from cellweave._shell import make_app, serving

    token = "bench-token-0123456789abcdef"
    app = make_app(lambda: serving("bench.bench_views:rows_app", None, {token: "bench"}))
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", ws_max_size=1 << 26)
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    end = time.monotonic() + 120
    while not server.started:
        if time.monotonic() > end:
            raise RuntimeError("bench: the web shell did not start")
        time.sleep(0.05)
    port = server.servers[0].sockets[0].getsockname()[1]
    page = _browser().new_page()
    page.set_default_timeout(120_000)
    above = "" if windowed else "&window_above=Infinity"
    page.goto(f"http://127.0.0.1:{port}/?token={token}{above}")
    page.wait_for_selector("[data-ptr='/rows/0/title']")
    if full:
        # Re-watch the root asking for whole values on every change.
        # Waits for the new watch's snapshot to be drawn (the shell draws a snapshot only
        # for its current watch), not for the last message's type: other messages
        # ("results", "events") may follow the snapshot, as they do for a short list.
        page.evaluate(
            """() => {
              const s = window.cellweave;
              const draw = s.view.snapshot.bind(s.view);
              window.benchSnapshots = 0;
              s.view.snapshot = (value) => { draw(value); window.benchSnapshots += 1; };
              s.send({op: "unwatch", watch: s.watchId});
              s.watchId += 1;
              s.send({op: "watch", watch: s.watchId, cell: "root", full: true});
            }"""
        )
        page.wait_for_function("() => window.benchSnapshots > 0")
        page.wait_for_selector("[data-ptr='/rows/0/title']")
    try:
        yield page
    finally:
        page.close()
        server.should_exit = True
        thread.join(30)


_in_page: dict[str, list[tuple[float, float]]] = {}
"""Per kind, per sample: the medians (ms) of edit -> DOM mutation and edit ->
next rendered frame over that sample's edits, as the page timed them."""


def _edits(kind: str, page: Any, start: int) -> Counts:
    received = redrawn = 0
    dom: list[int] = []
    frame: list[int] = []
    for k in range(EDITS):
        i = (start * 7919 + k * 104_729) % N
        got, drawn, dom_us, frame_us = page.evaluate(EDIT_JS, [i, f"edited {start}.{k}"])
        received += got
        redrawn += drawn
        dom.append(dom_us)
        frame.append(frame_us)
    _in_page.setdefault(kind, []).append(
        (statistics.median(dom) / 1000, statistics.median(frame) / 1000)
    )
    return {
        "edits": EDITS,
        "chars_received": received,
        "rows_redrawn": redrawn,
        "dom_us": sum(dom),
        "frame_us": sum(frame),
    }


def _summary() -> None:
    """The in-page times: median over samples of each sample's median edit, with
    the spread (max - min) / median over samples, as the harness reports time."""
    for kind, samples in _in_page.items():
        for name, values in (
            ("edit -> DOM mutation", [d for d, _ in samples]),
            ("edit -> next frame rendered", [f for _, f in samples]),
        ):
            med = statistics.median(values)
            spread = (max(values) - min(values)) / med if med > 0 else 0.0
            print(
                f"views in page, {kind} N={N}: {name}: median {med:.1f} ms "
                f"over {len(values)} samples, spread {spread:.0%}",
                file=sys.stderr,
            )


atexit.register(_summary)

KINDS = {
    "windowed": (False, True),
    "not windowed": (False, False),
    # Re-rendering the whole value draws every row (a windowed table would
    # come back scrolled to the top, without the edited row).
    "full": (True, False),
}


@functools.cache
def _session(kind: str) -> Any:
    """One served app and page per row, shared by its samples, closed at exit."""
    stack = contextlib.ExitStack()
    page = stack.enter_context(_served(*KINDS[kind]))
    atexit.register(stack.close)
    return page, stack


_samples = dict.fromkeys(KINDS, 0)


def _run(kind: str) -> Run:
    page, _stack = _session(kind)
    _samples[kind] += 1
    start = _samples[kind]

    def run() -> Counts:
        return _edits(kind, page, start)

    return run


@bench(group="views", name=f"patches, windowed table N={N}", ops=EDITS)
def view_patches() -> Run:
    return _run("windowed")


@bench(group="views", name=f"patches, every row drawn N={N}", ops=EDITS)
def view_patches_unwindowed() -> Run:
    return _run("not windowed")


@bench(group="views", name=f"whole value resent (naive) N={N}", ops=EDITS, baseline=True)
def view_full() -> Run:
    return _run("full")
