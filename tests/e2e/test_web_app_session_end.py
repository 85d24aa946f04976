"""S33 in the browser: a session that ends takes its open question off the screen."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from playwright.async_api import expect

from tests.api.gql import SET_STATE
from tests.e2e.webapp import Api, open_app, question
from tests.servers import Server, drop_database, fresh_database

pytestmark = pytest.mark.browser
expect.set_options(timeout=10_000)


@pytest.fixture(scope="module")
def ending_server() -> Iterator[Server]:
    url = fresh_database("sqlite")
    server = Server(url).start()
    try:
        yield server
    finally:
        server.stop()
        drop_database(url)


@pytest.fixture
async def ending_api(ending_server: Server) -> AsyncIterator[Api]:
    client = Api(ending_server)
    yield client
    await client.aclose()


@pytest.mark.scenario("S33")
@pytest.mark.parametrize("state", ["COMPLETED", "FAILED", "CANCELLED"])
async def test_the_question_card_and_task_icon_leave_the_screen_when_the_session_ends(
    page: Any, ending_server: Server, ending_api: Api, state: str
) -> None:
    task_id, (session_id,) = await ending_api.task(f"Ends {state.lower()}")
    agent = await ending_api.ask(session_id, [question("Still wanted?")])
    network = await open_app(page, ending_server, f"/t/{task_id}/s/{session_id}")
    card = page.get_by_test_id("clarification-card")
    icon = page.get_by_test_id(f"task-row-{task_id}").get_by_test_id("task-question-icon")
    await expect(card).to_contain_text("Still wanted?")
    await expect(icon).to_be_visible()
    ended = await ending_api.client.execute(SET_STATE, {"s": session_id, "st": state})
    assert ended["setSessionState"]["state"] == state
    # The live page drops the card and the icon on the events alone, without a reload...
    await expect(card).to_have_count(0)
    await expect(icon).to_have_count(0)
    assert (await agent.outcome())["__typename"] == "ClarificationClosed"
    bundle = await ending_api.bundle(agent.pending_id)
    assert bundle["state"] == "TERMINAL"
    assert {q["status"] for q in bundle["questions"]} == {"EXPIRED"}
    # ...and a fresh load does not bring them back.
    await page.reload()
    await page.wait_for_selector("html[data-ready=true]", state="attached")
    await expect(page.locator(".transcript")).to_contain_text("Still wanted?")
    await expect(card).to_have_count(0)
    await expect(icon).to_have_count(0)
    assert network.outside == []
