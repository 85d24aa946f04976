"""The client kit's tests, run unchanged under MicroPython in Chromium (the runtime the web app uses)."""

import asyncio
import json
import re
import sys
import time
from typing import Any

import pytest

from .conftest import REPO, RESULTS, StaticServer

WEB = REPO / "frontend_py" / "web"
CONFIG = WEB / "kit-tests" / "pyscript.json"
# What the page may fetch under /src/: the kit and its tests, never the rest of the repository.
SOURCES = ["frontend_py/__init__.py", "frontend_py/kit/", "tests/kit/", "tests/fixtures/"]


def _served_sources() -> set[str]:
    wanted = {"frontend_py/__init__.py", "tests/fixtures/current_turn_resolution.json"}
    for folder in ["frontend_py/kit", "tests/kit"]:
        for path in (REPO / folder).glob("*.py"):
            if path.name != "conftest.py":
                wanted.add(folder + "/" + path.name)
    return wanted


async def _cpython_test_ids() -> set[str]:
    collect = await asyncio.create_subprocess_exec(
        *[sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "tests/kit"],
        cwd=REPO,
        stdout=asyncio.subprocess.PIPE,
    )
    stdout, _ = await collect.communicate()
    assert collect.returncode == 0, "collecting the kit tests on CPython failed"
    ids = set()
    for line in stdout.decode().splitlines():
        # A case per kind of pending action on CPython is one test under MicroPython (no pytest there).
        match = re.match(r"tests/kit/(test_\w+)\.py::(test_\w+)(?:\[[\w-]+\])?$", line.strip())
        if match:
            ids.add(match.group(1) + "::" + match.group(2))
    return ids


def test_kit_harness_config_ships_every_kit_module_test_file_and_the_fixture() -> None:
    config = json.loads(CONFIG.read_text())
    # A bare interpreter name would be read as a version and fetched from a CDN.
    assert config["interpreter"].startswith(("/", "./"))
    assert set(config["files"].values()) == _served_sources()
    for url, destination in config["files"].items():
        assert url == "/src/" + destination


def _serve() -> StaticServer:
    routes = {"/": WEB}
    for source in SOURCES:
        routes["/src/" + source] = REPO / source
    return StaticServer(routes)


@pytest.mark.browser
async def test_every_kit_test_passes_under_micropython_in_chromium(page: Any) -> None:
    if not (WEB / "vendor" / "micropython" / "micropython.mjs").exists():
        pytest.fail("browser runtimes are missing: run scripts/install-assets.sh")
    expected = await _cpython_test_ids()
    assert expected, "no kit tests collected on CPython"
    outside: list[str] = []
    console_errors: list[str] = []
    with _serve() as server:

        def note_request(request: Any) -> None:
            if not request.url.startswith((server.origin, "data:")):
                outside.append(request.url)

        def note_console(message: Any) -> None:
            if message.type == "error":
                console_errors.append(message.text)

        page.on("request", note_request)
        page.on("console", note_console)
        started = time.monotonic()
        await page.goto(server.origin + "/kit-tests.html")
        done = "document.getElementById('results').dataset.done === 'true'"
        await page.wait_for_function(done, timeout=60_000)
        elapsed = time.monotonic() - started
        report = json.loads(await page.inner_text("#results"))
        missing = [(path, status) for path, status in server.requests if status >= 400]

    RESULTS.mkdir(exist_ok=True)
    report["page_seconds"] = round(elapsed, 3)
    (RESULTS / "kit-micropython.json").write_text(json.dumps(report, indent=2))
    total, suite_ms = report["total"], report["elapsed_ms"]
    print(f"kit tests under MicroPython: {total}, page {elapsed:.2f}s, suite {suite_ms} ms")

    assert report["implementation"] == "micropython"
    assert report["failed"] == [], "\n\n".join(f["test"] + "\n" + f["error"] for f in report["failed"])
    assert set(report["passed"]) == expected, "MicroPython ran other tests than CPython collected"
    assert report["total"] == len(expected)
    assert outside == [], "the page loaded something from outside the local server"
    assert missing == [], "the page requested files the server does not have"
    assert console_errors == []
