"""The web app's routes: the app's pages, its static files, the browser runtimes and the favicon."""

from __future__ import annotations

import os
from pathlib import Path

from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import PathLike, StaticFiles
from starlette.types import Scope

# The kit and app sit beside the backend package, in the source tree and in an installed wheel alike.
FRONTEND = Path(__file__).resolve().parents[2] / "frontend_py"
WEB = FRONTEND / "web"
APP = WEB / "app"
INDEX = APP / "index.html"
FAVICON = APP / "favicon.svg"

# Every route of the single-page app serves the same page; the app reads the path itself.
APP_PATHS = ("/", "/t/{task_id}", "/t/{task_id}/s/{session_id}")


class _PythonStatic(StaticFiles):
    """Static files with a Python media type and revalidation on every load.

    The browser fetches the app's Python sources into MicroPython's file system on every page load;
    `no-cache` keeps a deploy from running yesterday's modules next to today's page.
    """

    def file_response(
        self, full_path: PathLike, stat_result: os.stat_result, scope: Scope, status_code: int = 200
    ) -> Response:
        response = super().file_response(full_path, stat_result, scope, status_code)
        response.headers["Cache-Control"] = "no-cache"
        if str(full_path).endswith(".py"):
            response.headers["Content-Type"] = "text/x-python; charset=utf-8"
        return response


async def _index(_: Request) -> Response:
    return FileResponse(INDEX, media_type="text/html", headers={"Cache-Control": "no-cache"})


async def _favicon(_: Request) -> Response:
    return FileResponse(FAVICON, media_type="image/svg+xml", headers={"Cache-Control": "max-age=86400"})


async def _package_init(_: Request) -> Response:
    return FileResponse(FRONTEND / "__init__.py", media_type="text/x-python")


def web_routes() -> list[BaseRoute]:
    """Routes for the app at `/`; the vendor folder holds what scripts/install-assets.sh installed."""
    routes: list[BaseRoute] = [Route(path, _index, methods=["GET", "HEAD"]) for path in APP_PATHS]
    routes += [
        Route("/favicon.ico", _favicon, methods=["GET", "HEAD"]),
        Route("/src/frontend_py/__init__.py", _package_init, methods=["GET", "HEAD"]),
        Mount("/src/frontend_py/kit", _PythonStatic(directory=FRONTEND / "kit")),
        Mount("/src/frontend_py/app", _PythonStatic(directory=FRONTEND / "app")),
        Mount("/app", _PythonStatic(directory=APP)),
        # check_dir=False: a checkout without installed assets still starts; the page says what is missing.
        Mount("/vendor", StaticFiles(directory=WEB / "vendor", check_dir=False)),
    ]
    return routes
