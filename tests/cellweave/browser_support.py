"""Debian's chromium for Playwright, and screenshots for the docs."""

from __future__ import annotations

import os
import shutil

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
