"""The web dashboard: `/` is one page (static HTML, CSS and JavaScript in `static/`, uPlot vendored
beside them) that draws everything from the JSON API. Nothing is loaded from outside the server."""

from __future__ import annotations

from pathlib import Path

from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

STATIC = Path(__file__).parent / "static"


async def index(request: Request) -> Response:
    return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-cache"})


def routes() -> list[BaseRoute]:
    """`GET /` (the page) and `GET /ui/...` (its files)."""
    return [
        Route("/", index, methods=["GET"]),
        Mount("/ui", StaticFiles(directory=STATIC), name="ui"),
    ]
