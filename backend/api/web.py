"""The web app's routes: pages, static files, browser runtimes, favicon, manifest and service worker."""

from __future__ import annotations

import hashlib
import json
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
MANIFEST = APP / "manifest.webmanifest"
WORKER = APP / "sw.js"
VENDOR = WEB / "vendor"
# The shell the service worker keeps besides the app's sources: the page, its style and icons.
SHELL = [
    "/",
    "/favicon.ico",
    "/manifest.webmanifest",
    "/app/app.css",
    "/app/pyscript.json",
    "/app/icon.svg",
    "/app/icon-192.png",
    "/app/icon-512.png",
    "/app/icon-maskable-512.png",
]
# The runtimes the page loads (source maps and the unused interpreter variants stay out).
RUNTIME_FOLDERS = ("pyscript",)
RUNTIME_FILES = ("micropython/micropython.mjs", "micropython/micropython.wasm")

# Every route of the single-page app serves the same page; the app reads the path itself.
APP_PATHS = ("/", "/inbox", "/t/{task_id}", "/t/{task_id}/s/{session_id}")


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


async def _manifest(_: Request) -> Response:
    return FileResponse(
        MANIFEST, media_type="application/manifest+json", headers={"Cache-Control": "no-cache"}
    )


def precache_list() -> list[str]:
    """Every URL the service worker stores on install: the shell, the app's sources, the runtimes."""
    urls = list(SHELL)
    config = json.loads((APP / "pyscript.json").read_text())
    urls += sorted(config["files"])
    for folder in RUNTIME_FOLDERS:
        base = VENDOR / folder
        if base.is_dir():
            for path in sorted(base.iterdir()):
                # PyScript's own worker script is for its other interpreters; maps are for debugging.
                if path.is_file() and not path.name.endswith(".map") and path.name != "service-worker.js":
                    urls.append("/vendor/" + folder + "/" + path.name)
    for name in RUNTIME_FILES:
        if (VENDOR / name).is_file():
            urls.append("/vendor/" + name)
    return urls


def _served_file(url: str) -> Path | None:
    if url.startswith("/vendor/"):
        return VENDOR / url[len("/vendor/") :]
    if url.startswith("/src/"):
        return Path(__file__).resolve().parents[2] / url[len("/src/") :]
    if url.startswith("/app/"):
        return APP / url[len("/app/") :]
    return {"/": INDEX, "/favicon.ico": FAVICON, "/manifest.webmanifest": MANIFEST}.get(url)


def worker_script() -> str:
    """``sw.js`` with its list and a version that changes whenever a listed file changes."""
    urls = precache_list()
    digest = hashlib.sha256(WORKER.read_bytes())
    for url in urls:
        path = _served_file(url)
        if path is not None and path.is_file():
            stat = path.stat()
            digest.update(f"{url} {stat.st_size} {stat.st_mtime_ns}\n".encode())
    script = WORKER.read_text()
    script = script.replace("__VERSION__", digest.hexdigest()[:16])
    return script.replace("__PRECACHE__", json.dumps(urls))


async def _worker(_: Request) -> Response:
    # Served from the root so its scope covers every route; never cached, so updates reach browsers.
    return Response(
        worker_script(),
        media_type="text/javascript",
        headers={"Cache-Control": "no-cache", "Service-Worker-Allowed": "/"},
    )


def web_routes() -> list[BaseRoute]:
    """Routes for the app at `/`; the vendor folder holds what scripts/install-assets.sh installed."""
    routes: list[BaseRoute] = [Route(path, _index, methods=["GET", "HEAD"]) for path in APP_PATHS]
    routes += [
        Route("/favicon.ico", _favicon, methods=["GET", "HEAD"]),
        Route("/manifest.webmanifest", _manifest, methods=["GET", "HEAD"]),
        Route("/sw.js", _worker, methods=["GET", "HEAD"]),
        Route("/src/frontend_py/__init__.py", _package_init, methods=["GET", "HEAD"]),
        Mount("/src/frontend_py/kit", _PythonStatic(directory=FRONTEND / "kit")),
        Mount("/src/frontend_py/app", _PythonStatic(directory=FRONTEND / "app")),
        Mount("/app", _PythonStatic(directory=APP)),
        # check_dir=False: a checkout without installed assets still starts; the page says what is missing.
        Mount("/vendor", StaticFiles(directory=VENDOR, check_dir=False)),
    ]
    return routes
