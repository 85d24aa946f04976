"""A failed load in the web app says it failed, with the reason and a Retry, never an empty task."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from playwright.async_api import expect

from tests.dialects import served
from tests.e2e.support import no_outside_requests, serve
from tests.e2e.test_web_a11y import _serious_violations
from tests.e2e.webapp import Api, activate, activations_finished, open_app, path_of
from tests.servers import Server

pytestmark = pytest.mark.browser
expect.set_options(timeout=10_000)

FLAVOURS = [pytest.param(False, id="desktop"), pytest.param(True, id="phone")]
# What the page shows for a task whose sessions it has, and for one it knows has none.
EMPTY_TASK = ("This task has no sessions.", "Choose a session above.")


class Failing:
    """While ``armed``, every GraphQL request naming ``operation`` fails as a dropped connection would;
    ``failed`` counts them."""

    def __init__(self, operation: str) -> None:
        self.operation = operation
        self.armed = True
        self.failed = 0
        self._changed = asyncio.Event()

    async def handle(self, route: Any) -> None:
        if not self.armed or f"query {self.operation}" not in (route.request.post_data or ""):
            await route.fallback()
            return
        self.failed += 1
        self._changed.set()
        await route.abort("connectionfailed")

    async def failures(self, count: int) -> None:
        """Wait until ``count`` requests have failed."""
        async with asyncio.timeout(10):
            while self.failed < count:
                self._changed.clear()
                await self._changed.wait()


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    yield from serve("sqlite")


@pytest.fixture(scope="module")
def deriving_fails() -> Iterator[Server]:
    """A server whose task-session lists fail with an internal error (S44's fault point)."""
    with served("sqlite", env={"TURNWISE_FAULT_POINTS": "pending.derive"}) as started:
        yield started


@pytest.fixture
async def api(server: Server) -> AsyncIterator[Api]:
    async with contextlib.aclosing(Api(server)) as client:
        yield client


async def _reads_as_no_empty_task(page: Any) -> None:
    for text in EMPTY_TASK:
        await expect(page.locator("main.main")).not_to_contain_text(text)


@pytest.mark.parametrize("phone", FLAVOURS)
async def test_a_failed_session_list_says_so_and_retry_by_keyboard_shows_the_sessions(
    page: Any, server: Server, api: Api, phone: bool
) -> None:
    task_id, (primary, _secondary) = await api.task("Sessions fail to load", sessions=2)
    failing = Failing("RouteSessions")
    await page.route("**/graphql", failing.handle)
    route = f"/t/{task_id}/s/{primary}"
    network = await open_app(page, server, route, phone=phone)

    error = page.get_by_test_id("task-sessions-error")
    retry = page.get_by_test_id("task-sessions-retry")
    await expect(error).to_be_visible()
    await expect(error).to_have_attribute("role", "alert")
    await expect(error).to_contain_text("Couldn't load this task's sessions.")
    await expect(error).to_contain_text("The server could not be reached.")
    await _reads_as_no_empty_task(page)
    assert await _serious_violations(page) == [], "the failed load"
    # Reached by keyboard: it is the control before the conversation.
    await page.locator("#transcript").focus()
    await page.keyboard.press("Shift+Tab")
    await expect(retry).to_be_focused()

    # A retry that fails again says so again, and the keyboard stays on Retry.
    await page.keyboard.press("Enter")
    await failing.failures(2)
    await expect(retry).to_have_text("Retry")
    await expect(retry).to_be_focused()
    await expect(error).to_contain_text("The server could not be reached.")

    failing.armed = False
    await page.keyboard.press("Enter")
    opened = page.get_by_test_id(f"session-tab-{primary}")
    await expect(opened).to_have_attribute("aria-selected", "true")
    await expect(error).to_have_count(0)
    await expect(page.locator("#transcript")).to_contain_text("Working on step 1.")
    await expect(opened).to_be_focused()
    # Neither the failures nor the retries moved the route.
    assert path_of(page) == route
    assert failing.failed == 2
    no_outside_requests(network)


async def test_a_server_error_listing_sessions_shows_its_reason_instead_of_an_empty_task(
    page: Any, deriving_fails: Server
) -> None:
    async with contextlib.aclosing(Api(deriving_fails)) as api:
        task_id, (session_id,) = await api.task("The list fails on the server")
        agent = await api.ask(session_id)
        network = await open_app(page, deriving_fails)
        await expect(
            page.get_by_test_id(f"task-row-{task_id}").get_by_test_id("task-question-icon")
        ).to_be_visible()
        # The forced load of the activation fails, so the task opens alone; its list fails too.
        await activate(page, task_id, phone=False)
        assert await activations_finished(page, 1) == "task"
        assert path_of(page) == f"/t/{task_id}"
        error = page.get_by_test_id("task-sessions-error")
        await expect(error).to_contain_text("Couldn't load this task's sessions.")
        reason = error.locator(".load-failed-reason")
        await expect(reason).to_have_text(
            # The server's own words, with the id its log files the failure under.
            re.compile(r"^The server answered with an error: Internal error \(id \w+\)\.$")
        )
        await _reads_as_no_empty_task(page)
        first = await reason.text_content()
        # Retry asks the server again: a new failure, with its own id.
        await page.get_by_test_id("task-sessions-retry").click()
        await expect(reason).not_to_have_text(str(first))
        await expect(error).to_contain_text("Couldn't load this task's sessions.")
        await _reads_as_no_empty_task(page)
        assert path_of(page) == f"/t/{task_id}"
        await agent.disconnect()
        no_outside_requests(network)


async def test_a_failed_session_load_says_so_and_retry_shows_the_conversation(
    page: Any, server: Server, api: Api
) -> None:
    task_id, (session_id,) = await api.task("The session fails to load")
    failing = Failing("SessionHistory")
    await page.route("**/graphql", failing.handle)
    route = f"/t/{task_id}/s/{session_id}"
    network = await open_app(page, server, route)

    await expect(page.get_by_test_id(f"session-tab-{session_id}")).to_have_attribute("aria-selected", "true")
    error = page.get_by_test_id("session-history-error")
    await expect(error).to_have_attribute("role", "alert")
    await expect(error).to_contain_text("Couldn't load this session.")
    await expect(error).to_contain_text("The server could not be reached.")
    await expect(page.locator("#transcript")).not_to_contain_text("Loading the conversation")

    failing.armed = False
    await page.get_by_test_id("session-history-retry").click()
    await expect(page.locator("#transcript")).to_contain_text("Working on step 1.")
    await expect(error).to_have_count(0)
    await expect(page.locator("#transcript")).to_be_focused()
    assert path_of(page) == route
    assert failing.failed == 1
    no_outside_requests(network)
