"""Shared fixtures of the cellweave tests: one headless chromium per test module.

Per module, not per session: Playwright's sync API holds an event loop on the
main thread while it runs, and later modules call `asyncio.run`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from browser_support import CHROMIUM, FLAGS
from playwright.sync_api import Browser, sync_playwright


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not os.path.exists(CHROMIUM):
        raise AssertionError(f"{CHROMIUM} is missing: run `make test` (it installs chromium)")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
        yield b
        b.close()
