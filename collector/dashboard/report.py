"""`ragpulse report`: the overview and the worst traces of a window as one self-contained HTML file.

The file carries its data (the JSON the dashboard's API would answer) and the dashboard's own
script, stylesheet and vendored uPlot inline, so it opens from disk, offline, and renders exactly
what the web page shows; it fetches nothing.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import orjson

from collector.dashboard.data import DashboardData, Params
from collector.dashboard.pages import STATIC

UPLOT = STATIC / "vendor" / "uplot-1.6.32"


def build_report(data: DashboardData, params: Params, worst: int, source: str) -> dict[str, Any]:
    """The report's data: the overview, regressions, the `worst` traces with the lowest scores
    (each in full: steps, documents, scores with their claims) and the alerts."""
    overview = data.overview(params)
    page = data.traces({**params, "sort": "worst", "order": "asc", "limit": str(worst)})
    lowest = [t for t in page["traces"] if t["worst"] is not None]
    details = [found for t in lowest if (found := data.trace(t["trace_id"])) is not None]
    return {
        "generated_at": datetime.now(UTC).replace(tzinfo=None),
        "source": source,
        "window": overview["window"],
        "service": overview["service"],
        "overview": overview,
        "regressions": data.regressions(params),
        "worst": lowest,
        "details": details,
        "alerts": data.alerts(),
    }


def render_report(report: dict[str, Any]) -> str:
    """One HTML page holding `report` and everything needed to draw it."""
    # In a <script>, "</script>" or "<!--" inside a string would end or change it: every "<" of
    # the data (text from spans included) is written as its JSON escape.
    payload = orjson.dumps(report).decode().replace("<", "\\u003c")
    page = (STATIC / "report.html").read_text()
    page = page.replace("{{STYLE}}", (UPLOT / "uPlot.min.css").read_text() + (STATIC / "app.css").read_text())
    page = page.replace("{{UPLOT}}", (UPLOT / "uPlot.iife.min.js").read_text())
    page = page.replace("{{APP}}", (STATIC / "app.js").read_text())
    return page.replace("{{DATA}}", payload)  # last: the data may hold any text
