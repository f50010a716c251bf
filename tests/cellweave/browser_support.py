"""Debian's chromium for Playwright, and screenshots for the docs."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from playwright.sync_api import Page

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
"""Debian's package; Playwright never downloads a browser here."""
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def shot(page: Page, name: str) -> None:
    """Save a screenshot to $CELLWEAVE_SCREENSHOTS (the docs' pictures) when it is set."""
    folder = os.environ.get("CELLWEAVE_SCREENSHOTS")
    if folder:
        os.makedirs(folder, exist_ok=True)
        page.screenshot(path=os.path.join(folder, f"{name}.png"), full_page=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def served(
    argv: Sequence[str],
    ready_url: str,
    *,
    what: str,
    deadline: float = 60.0,
    **popen: object,
) -> Iterator[subprocess.Popen[bytes]]:
    """Start a server process (its output discarded), wait until `ready_url` answers
    (polled with a deadline: another process), yield it, and end it afterwards."""
    proc = subprocess.Popen(  # type: ignore[call-overload]
        list(argv), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **popen
    )
    end = time.monotonic() + deadline
    while True:
        try:
            urllib.request.urlopen(ready_url, timeout=2)
            break
        except OSError:
            if time.monotonic() > end or proc.poll() is not None:
                proc.kill()
                raise AssertionError(f"{what} did not start") from None
            time.sleep(0.2)
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
