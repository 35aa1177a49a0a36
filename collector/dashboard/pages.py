"""The web dashboard: `/` is one page (static HTML, CSS and JavaScript in `static/`, uPlot vendored
beside them) that draws everything from the JSON API. Nothing is loaded from outside the server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

STATIC = Path(__file__).parent / "static"
# The page may load its own files and call its own API, nothing else; span text is never markup,
# and this makes sure of it again should a bug let some through. Inline style attributes are allowed
# (uPlot and the timeline position elements with them); inline scripts are not.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'"
)
# Revalidate every time (an ETag answer is cheap): after an upgrade, no stale script beside a new page.
HEADERS = {"Cache-Control": "no-cache", "Content-Security-Policy": CONTENT_SECURITY_POLICY}


class _Files(StaticFiles):
    def file_response(self, *args: Any, **kwargs: Any) -> Response:
        response = super().file_response(*args, **kwargs)
        response.headers.update(HEADERS)
        return response


async def index(request: Request) -> Response:
    return FileResponse(STATIC / "index.html", headers=HEADERS)


def routes() -> list[BaseRoute]:
    """`GET /` (the page) and `GET /ui/...` (its files)."""
    return [
        Route("/", index, methods=["GET"]),
        Mount("/ui", _Files(directory=STATIC), name="ui"),
    ]
