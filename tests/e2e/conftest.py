"""Browser test plumbing: Debian's Chromium through Playwright, local static serving, failure shots.

``browser`` (session) launches /usr/bin/chromium once; ``page`` gives each test a fresh context and
saves a screenshot to ``test-results/`` when the test fails. Without Chromium the browser tests skip,
unless ``CI`` is set, where a missing browser is a failure. ``StaticServer`` serves local folders on
127.0.0.1 on a random port for pages that need no backend.

Playwright's async API on the suite's session event loop, not the sync one: sync Playwright keeps
its own loop marked running on the main thread for as long as the browser lives, which breaks
every asyncio test that runs after it. Browser tests are therefore ``async def``.
"""

import http.server
import os
import re
import shutil
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
import pytest_asyncio
from playwright.async_api import Error as PlaywrightError

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "test-results"


def chromium_path() -> str | None:
    path = os.environ.get("TURNWISE_CHROMIUM", CHROMIUM)
    return path if os.path.exists(path) or shutil.which(path) else None


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def browser() -> AsyncIterator[Any]:
    executable = chromium_path()
    if executable is None:
        message = f"{CHROMIUM} is missing (run: bash scripts/ensure-apt.sh /usr/bin/chromium chromium)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            await launched.close()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item) -> Iterator[None]:
    # Keep each phase's report on the item so the page fixture knows, at teardown, if the test failed.
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    setattr(item, "report_" + report.when, report)


@pytest_asyncio.fixture(loop_scope="session")
async def page(browser: Any, request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    context = await browser.new_context()
    opened = await context.new_page()
    try:
        yield opened
    finally:
        report = getattr(request.node, "report_call", None)
        if report is not None and report.failed:
            RESULTS.mkdir(exist_ok=True)
            name = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.nodeid)
            try:
                await opened.screenshot(path=str(RESULTS / (name + ".png")), full_page=True)
            except (PlaywrightError, OSError) as error:  # a broken page must not hide the test's own failure
                print("screenshot failed:", error)
        await context.close()


class StaticServer:
    """Serve ``routes`` (URL prefix -> folder, longest prefix wins) on 127.0.0.1, random port.

    Records every request as ``(path, status)`` so a test can assert that nothing was missing.
    """

    TYPES: ClassVar[dict[str, str]] = {
        ".mjs": "text/javascript",
        ".js": "text/javascript",
        ".wasm": "application/wasm",
        ".py": "text/x-python",
        ".json": "application/json",
        ".css": "text/css",
        ".html": "text/html",
    }

    def __init__(self, routes: dict[str, Path]) -> None:
        self.routes = sorted(routes.items(), key=lambda item: -len(item[0]))
        self.requests: list[tuple[str, int]] = []
        server = self

        class Handler(http.server.SimpleHTTPRequestHandler):
            extensions_map: ClassVar[dict[str, str]] = {  # type: ignore[misc]
                **http.server.SimpleHTTPRequestHandler.extensions_map,
                **StaticServer.TYPES,
            }

            def translate_path(self, path: str) -> str:
                return server.resolve(path)

            def log_request(self, code: Any = "-", _size: Any = "-") -> None:
                server.requests.append((self.path, int(code) if str(code).isdigit() else 0))

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def end_headers(self) -> None:
                self.send_header("Cache-Control", "no-store")
                super().end_headers()

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def resolve(self, url_path: str) -> str:
        path = url_path.split("?", 1)[0].split("#", 1)[0]
        for prefix, folder in self.routes:
            if path.startswith(prefix):
                target = (folder / path[len(prefix) :].lstrip("/")).resolve()
                if target == folder.resolve() or folder.resolve() in target.parents:
                    return str(target)
        return str(REPO / ".not-served")

    def __enter__(self) -> "StaticServer":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)
