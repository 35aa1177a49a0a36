"""The dashboard's browser tests' tools (tests/collector/dashboard/): Debian's `chromium` and its options,
`needs_chromium` (their `pytestmark`), `Page` (a tab that records what went wrong), `drawn_charts`,
and `SCREENSHOTS`, the directory `make screenshots` saves the pages in. The `browser` and `tab`
fixtures are in tests/collector/dashboard/conftest.py."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from playwright import sync_api as playwright_api

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# Chromium on a machine with no network: no background connections, no first-run or sync.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SCREENSHOTS = os.environ.get("RAGPULSE_SCREENSHOTS")

# Outside CI a machine without Chromium skips the browser tests (`apt-get install chromium`); in CI, where
# .ci/run installs it, a missing browser fails them instead of hiding them.
needs_chromium = pytest.mark.skipif(
    not Path(CHROMIUM).exists() and not os.environ.get("CI"),
    reason="needs Debian's chromium: apt-get install chromium",
)


class Page:
    """A browser tab that records console errors, page errors and failed requests."""

    def __init__(self, browser: Any, offline: bool = False) -> None:
        self.context = browser.new_context(viewport={"width": 1360, "height": 900}, offline=offline)
        self.page = self.context.new_page()
        self.problems: list[str] = []
        self.page.on("console", lambda m: m.type == "error" and self.problems.append(f"console: {m.text}"))
        self.page.on("pageerror", lambda e: self.problems.append(f"page error: {e}"))
        self.page.on("requestfailed", lambda r: self.problems.append(f"request failed: {r.url}"))

    def open(self, url: str) -> Any:
        self.page.goto(url)
        self.page.wait_for_selector("main[data-ready]", timeout=15_000)
        return self.page

    def shown(self, selector: str) -> Any:
        """The first element matching `selector`, once drawn; if it never is, the test fails with what
        the page showed instead and the problems it recorded (an API error, say), not a bare timeout."""
        try:
            self.page.wait_for_selector(selector, timeout=15_000)
        except playwright_api.TimeoutError:
            shown = self.page.inner_text("main")[:500]
            pytest.fail(f"{selector} never drawn; the page showed {shown!r}; problems: {self.problems}")
        return self.page.locator(selector).first

    def navigate(self, hash_route: str) -> Any:
        return self.after(lambda: self.page.evaluate("route => { location.hash = route; }", hash_route))

    def after(self, action: Callable[[], object]) -> Any:
        """Run `action` (a click, a change) and wait until the page has drawn what it led to."""
        before = self.page.get_attribute("main", "data-ready")
        action()
        self.page.wait_for_function(
            "before => document.querySelector('main').dataset.ready !== before", arg=before, timeout=15_000
        )
        return self.page

    def screenshot(self, name: str, full_page: bool = True) -> None:
        if SCREENSHOTS:
            Path(SCREENSHOTS).mkdir(parents=True, exist_ok=True)
            if full_page:  # from the top: the sticky bar is drawn where the page is scrolled to
                self.page.evaluate("window.scrollTo(0, 0)")
            self.page.screenshot(path=str(Path(SCREENSHOTS) / f"{name}.png"), full_page=full_page)

    def close(self) -> None:
        self.context.close()


def drawn_charts(page: Any) -> int:
    """Charts with data drawn: uPlot canvases with coloured pixels. Axes, grid and labels are grey
    or black, so only the series' colours count."""
    return int(
        page.evaluate(
            """() => [...document.querySelectorAll('.chart canvas')].filter(c => {
                const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
                for (let i = 0; i < d.length; i += 4) {
                    const [r, g, b, a] = [d[i], d[i + 1], d[i + 2], d[i + 3]];
                    if (a > 128 && Math.max(r, g, b) - Math.min(r, g, b) > 60) return true;
                }
                return false;
            }).length"""
        )
    )
