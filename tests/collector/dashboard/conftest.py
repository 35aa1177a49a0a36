"""The dashboard's browser tests' fixtures: one headless Chromium per module, and a fresh tab per test
(tests/support/browser.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from playwright import sync_api as playwright_api

from tests.support.browser import CHROMIUM, CHROMIUM_ARGS, Page


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with playwright_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def tab(browser: Any) -> Iterator[Page]:
    page = Page(browser)
    yield page
    page.close()
