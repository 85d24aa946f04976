"""The web app in Chromium against a real server: every client scenario of the spec, desktop and phone."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from playwright.async_api import expect

from tests.e2e.conftest import RESULTS
from tests.e2e.support import (
    Relay,
    by_dialect,
    card,
    no_outside_requests,
    question_icon,
    reload_app,
    serve,
    wrap_up,
)
from tests.e2e.test_web_permissions import BASH, PERMISSION, RESPOND_PERMISSION, ToolAgent, perm_card
from tests.e2e.webapp import (
    DESKTOP,
    Agent,
    Api,
    Held,
    Network,
    activate,
    activations_finished,
    open_app,
    path_of,
    question,
    runner,
)
from tests.servers import ADMIN_TOKEN, Server

pytestmark = pytest.mark.browser
expect.set_options(timeout=10_000)

FLAVOURS = [pytest.param(False, id="desktop"), pytest.param(True, id="phone")]


@dataclass(frozen=True)
class WebKind:
    """One kind of pending action as the web app's scenarios drive it: an agent asks (a question whose
    prompt is the text, or leave to run ``echo <text>``), the page shows its card, a person ends it on
    the card (Skip, Deny) or answers it elsewhere (an answer, ALLOW)."""

    name: str

    def __str__(self) -> str:
        return self.name

    @property
    def is_permission(self) -> bool:
        return self.name == "permission"

    async def ask(
        self,
        api: Api,
        session_id: str,
        text: str | None = None,
        *,
        context: str | None = None,
        wait_seconds: float | None = None,
    ) -> Agent | ToolAgent:
        if self.is_permission:
            tool_input = None if text is None else dict(BASH, command="echo " + text)
            return await ToolAgent.ask(
                api, session_id, tool_input, context=context, wait_seconds=wait_seconds
            )
        questions = None if text is None else [question(text)]
        return await api.ask(session_id, questions, context=context, wait_seconds=wait_seconds)

    def asked(self, text: str | None = None) -> str:
        """What the card shows of what ``ask`` asked."""
        if text is not None:
            return text
        return str(BASH["command"]) if self.is_permission else question()["prompt"]

    def card(self, page: Any) -> Any:
        return perm_card(page) if self.is_permission else card(page)

    def control(self, page: Any, name: str) -> Any:
        return page.get_by_test_id(f"{self.name}-{name}")

    def end_on_card(self, page: Any) -> Any:
        """The card's button that ends the request without an answer."""
        return self.control(page, "deny" if self.is_permission else "skip")

    def ended(self, outcome: dict[str, Any]) -> bool:
        """Whether the agent heard that the person ended its request without an answer."""
        if self.is_permission:
            return bool(
                outcome["__typename"] == "PermissionDecided" and outcome["decision"]["behavior"] == "DENY"
            )
        return bool(outcome["__typename"] == "ClarificationRejected")

    def detached(self, outcome: dict[str, Any]) -> bool:
        return bool(
            outcome["__typename"] == ("PermissionDetached" if self.is_permission else "ClarificationDetached")
        )

    def history(self, page: Any) -> Any:
        """The transcript's rows of this kind."""
        return page.locator(
            "#transcript .msg." + ("permission_request" if self.is_permission else "question")
        )

    async def answer_elsewhere(self, api: Api, pending_id: str) -> None:
        """Someone answers through the API (the second option; ALLOW as asked)."""
        if self.is_permission:
            data = await api.client.execute(RESPOND_PERMISSION, {"p": pending_id, "b": "ALLOW", "m": None})
            assert data["respondToPermission"]["__typename"] == "PermissionResponded"
            return
        answers = [{"questionId": "policy", "selectedOptionIds": ["policy_opt2"]}]
        assert await api.respond(pending_id, answers) == "ClarificationResponded"

    async def state(self, api: Api, pending_id: str) -> str:
        if self.is_permission:
            return str((await api.client.execute(PERMISSION, {"p": pending_id}))["permission"]["state"])
        return str((await api.bundle(pending_id))["state"])


WEB_KINDS = [WebKind("clarification"), WebKind("permission")]


# Web app scenarios that run on PostgreSQL as well as SQLite (S07, S11, S12, S13); the rest run once.
BOTH_DIALECTS = frozenset(
    {
        "test_an_older_detached_question_stays_superseded_after_a_newer_bundle_is_skipped_and_reloaded",
        "test_stale_owner_choice_is_discarded_when_the_summary_changes_mid_load",
        "test_two_overlapping_loads_the_older_finishing_last_change_nothing",
        "test_a_load_from_an_unmounted_phone_sheet_cannot_navigate_after_a_layout_change",
    }
)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if metafunc.function.__name__ in BOTH_DIALECTS:
        metafunc.parametrize("web_server", ["sqlite", "postgresql"], indirect=True, scope="session")


@pytest.fixture(scope="session")
def web_server(request: pytest.FixtureRequest) -> Iterator[Server]:
    """SQLite, unless a test in BOTH_DIALECTS asks for PostgreSQL."""
    if getattr(request, "param", "sqlite") == "postgresql":
        yield request.getfixturevalue("pg_web_server")
        return
    yield from serve("sqlite")


@pytest.fixture(scope="session")
def pg_web_server(request: pytest.FixtureRequest) -> Iterator[Server]:
    yield from serve("postgresql", request)


@pytest.fixture(params=["sqlite", "postgresql"])
def any_server(request: pytest.FixtureRequest) -> Server:
    """The core scenarios run on both dialects."""
    return by_dialect(request, "web_server", "pg_web_server")


@pytest.fixture
async def api(web_server: Server) -> AsyncIterator[Api]:
    async with contextlib.aclosing(Api(web_server)) as client:
        yield client


@pytest.fixture
async def any_api(any_server: Server) -> AsyncIterator[Api]:
    async with contextlib.aclosing(Api(any_server)) as client:
        yield client


# --- the question icon, activation and the pending owner ---------------------------------------


@pytest.mark.parametrize("phone", FLAVOURS)
async def test_the_question_icon_shows_on_a_fresh_load(
    page: Any, any_server: Server, any_api: Api, phone: bool
) -> None:
    asking, (session_id,) = await any_api.task("Asks a question")
    clean, _ = await any_api.task("Nothing to ask")
    agent = await any_api.ask(session_id)
    network = await open_app(page, any_server, phone=phone)
    if phone:
        await page.get_by_test_id("task-drawer-toggle").click()
    await expect(question_icon(page, asking)).to_be_visible()
    await expect(question_icon(page, clean)).to_have_count(0)
    await wrap_up(network, agent)


@pytest.mark.parametrize("kind", WEB_KINDS, ids=str)
@pytest.mark.parametrize("phone", FLAVOURS)
@pytest.mark.scenario("S09")
async def test_secondary_session_owning_the_question_opens_on_activation(
    page: Any, any_server: Server, any_api: Api, phone: bool, kind: WebKind
) -> None:
    task_id, (primary, secondary) = await any_api.task("Two sessions", sessions=2)
    # The browser has the clean session list cached and the primary session remembered.
    network = await open_app(page, any_server, f"/t/{task_id}/s/{primary}", phone=phone)
    await expect(page.get_by_test_id(f"session-tab-{primary}")).to_have_attribute("aria-selected", "true")
    agent = await kind.ask(any_api, secondary, context="The webhook fails under load.")
    # The page has seen the ask (on a phone too, whose task list is in the closed drawer) before the
    # activation: a summary that changed mid-load would rightly discard its owner choice (S11).
    await expect(page.get_by_test_id(f"session-tab-{secondary}").locator(".tab-dot")).to_be_visible()
    if not phone:
        await expect(question_icon(page, task_id)).to_be_visible()
    await activate(page, task_id, phone=phone)
    await expect(page.get_by_test_id(f"session-tab-{secondary}")).to_have_attribute("aria-selected", "true")
    assert path_of(page) == f"/t/{task_id}/s/{secondary}"
    await expect(kind.card(page)).to_be_visible()
    await expect(kind.card(page)).to_contain_text(kind.asked())
    if phone:
        await expect(page.get_by_test_id("task-drawer")).to_be_hidden()
    await wrap_up(network, agent)


@pytest.mark.parametrize("kind", WEB_KINDS, ids=str)
@pytest.mark.parametrize("phone", FLAVOURS)
@pytest.mark.scenario("S11", "S38")
async def test_stale_owner_choice_is_discarded_when_the_summary_changes_mid_load(
    page: Any, web_server: Server, api: Api, phone: bool, kind: WebKind
) -> None:
    task_id, (_primary, secondary) = await api.task("Owner moves", sessions=2)
    agent = await kind.ask(api, secondary)
    network = await open_app(page, web_server, phone=phone)
    held = Held("ActivationSessions")
    await page.route("**/graphql", held.handle)
    await activate(page, task_id, phone=phone)
    await asyncio.wait_for(held.seen.wait(), 10)
    # Meanwhile someone answers through the API: the summary changes before the load settles.
    await kind.answer_elsewhere(api, agent.pending_id)
    await expect(question_icon(page, task_id)).to_have_count(0)
    held.release()
    await expect(page).to_have_url(f"{web_server.base_url}/t/{task_id}")
    await expect(page.locator('[role="tab"][aria-selected="true"]')).to_have_count(0)
    await expect(kind.card(page)).to_have_count(0)
    if phone:
        await expect(page.get_by_test_id("task-drawer")).to_be_hidden()
    assert held.delivered == [True], "the delayed response reached the page and was discarded"
    no_outside_requests(network)


@pytest.mark.scenario("S12")
async def test_two_overlapping_loads_the_older_finishing_last_change_nothing(
    page: Any, web_server: Server, api: Api
) -> None:
    task_id, (primary, secondary) = await api.task("Overlapping loads", sessions=2)
    first = await api.ask(secondary, [question("First question?")])
    network = await open_app(page, web_server)
    held = Held("ActivationSessions")
    await page.route("**/graphql", held.handle)
    await activate(page, task_id, phone=False)
    await asyncio.wait_for(held.seen.wait(), 10)
    # The older load's snapshot names the secondary session; by now the primary owns the question.
    await api.respond(first.pending_id, [{"questionId": "policy", "customText": "done"}])
    await expect(question_icon(page, task_id)).to_have_count(0)
    second = await api.ask(primary, [question("Second question?")])
    # The page has seen the second ask before the newer activation starts: a summary that changed
    # mid-load would rightly discard that activation's owner choice too (S11).
    await expect(question_icon(page, task_id)).to_be_visible()
    await activate(page, task_id, phone=False)
    await expect(page.get_by_test_id(f"session-tab-{primary}")).to_have_attribute("aria-selected", "true")
    await expect(card(page)).to_contain_text("Second question?")
    held.release()
    # Both activations ended, the older one included, and its held response was handed over.
    await activations_finished(page, 2)
    await asyncio.wait_for(held.done.wait(), 10)
    assert len(held.delivered) == 1
    assert path_of(page) == f"/t/{task_id}/s/{primary}"
    await expect(page.get_by_test_id(f"session-tab-{primary}")).to_have_attribute("aria-selected", "true")
    await expect(page.get_by_test_id(f"session-tab-{secondary}").locator(".tab-dot")).to_have_count(0)
    await expect(card(page)).to_contain_text("Second question?")
    await wrap_up(network, second)


@pytest.mark.scenario("S13")
async def test_a_load_from_an_unmounted_phone_sheet_cannot_navigate_after_a_layout_change(
    page: Any, web_server: Server, api: Api
) -> None:
    task_id, (_primary, secondary) = await api.task("Resized mid-load", sessions=2)
    agent = await api.ask(secondary)
    network = await open_app(page, web_server, phone=True)
    held = Held("ActivationSessions")
    await page.route("**/graphql", held.handle)
    await activate(page, task_id, phone=True)
    await asyncio.wait_for(held.seen.wait(), 10)
    await page.set_viewport_size(DESKTOP)
    await expect(page.get_by_test_id("task-sidebar")).to_be_visible()
    held.release()
    # The unmounted sheet's activation ended inert, and its held response was handed over.
    assert await activations_finished(page, 1) == "inert"
    await asyncio.wait_for(held.done.wait(), 10)
    assert len(held.delivered) == 1
    # It did not navigate, select a session, or close the sheet that replaced it.
    assert path_of(page) == "/"
    await expect(page.locator('[role="tab"][aria-selected="true"]')).to_have_count(0)
    await expect(page.get_by_test_id("task-sidebar")).to_be_visible()
    await expect(card(page)).to_have_count(0)
    await wrap_up(network, agent)


# --- answering ------------------------------------------------------------------------------------


async def test_answering_from_the_card_delivers_to_the_waiting_agent(
    page: Any, web_server: Server, api: Api
) -> None:
    task_id, (session_id,) = await api.task("Multi-select")
    agent = await api.ask(
        session_id,
        [question("Which checks should run?", qid="checks", options=("Lint", "Types", "Tests"), multi=True)],
    )
    network = await open_app(page, web_server, f"/t/{task_id}/s/{session_id}")
    await page.get_by_test_id("clarification-option-checks_opt1").click()
    await page.get_by_test_id("clarification-option-checks_opt3").click()
    await expect(page.get_by_test_id("clarification-option-checks_opt3")).to_have_attribute(
        "aria-pressed", "true"
    )
    await page.get_by_test_id("clarification-custom-text").fill("and the e2e suite")
    await page.get_by_test_id("clarification-submit").click()
    outcome = await agent.outcome()
    assert outcome["__typename"] == "ClarificationAnswered"
    assert outcome["answers"] == [
        {
            "questionId": "checks",
            "selectedOptionIds": ["checks_opt1", "checks_opt3"],
            "customText": "and the e2e suite",
        }
    ]
    await expect(card(page)).to_have_count(0)
    await expect(question_icon(page, task_id)).to_have_count(0)
    no_outside_requests(network)


@pytest.mark.parametrize("phone", FLAVOURS)
async def test_skip_rejects_the_visible_bundle(page: Any, web_server: Server, api: Api, phone: bool) -> None:
    task_id, (session_id,) = await api.task("Skip me")
    agent = await api.ask(session_id)
    network = await open_app(page, web_server, f"/t/{task_id}/s/{session_id}", phone=phone)
    await page.get_by_test_id("clarification-skip").click()
    outcome = await agent.outcome()
    assert outcome == {"__typename": "ClarificationRejected", "pendingId": agent.pending_id}
    await expect(card(page)).to_have_count(0)
    assert (await api.bundle(agent.pending_id))["state"] == "TERMINAL"
    no_outside_requests(network)


async def test_escape_after_detach_closes_the_card_without_rejecting(
    page: Any, web_server: Server, api: Api
) -> None:
    task_id, (session_id,) = await api.task("Escape is not Skip")
    agent = await api.ask(session_id, wait_seconds=0.3)
    assert (await agent.outcome())["__typename"] == "ClarificationDetached"
    network = await open_app(page, web_server, f"/t/{task_id}/s/{session_id}")
    sent: list[str] = []
    page.on("request", lambda request: sent.append(request.post_data or ""))
    await expect(card(page)).to_be_visible()
    await expect(page.get_by_test_id("clarification-detached")).to_be_visible()
    await page.keyboard.press("Escape")
    await expect(card(page)).to_have_count(0)
    await expect(page.get_by_test_id("clarification-reopen")).to_be_visible()
    await expect(page.get_by_test_id("clarification-reopen")).to_be_focused()
    await page.reload()
    # The reloaded page found the question still active: Escape sent nothing that rejected it.
    await expect(card(page)).to_be_visible()
    assert (await api.bundle(agent.pending_id))["state"] == "ACTIVE_DETACHED"
    assert not [body for body in sent if "respondToClarification" in body]
    await expect(question_icon(page, task_id)).to_be_visible()
    no_outside_requests(network)


async def test_a_timed_out_question_accepts_a_deferred_custom_answer(
    page: Any, web_server: Server, api: Api
) -> None:
    task_id, (session_id,) = await api.task("Deferred answer")
    agent = await api.ask(session_id, wait_seconds=0.3)
    assert (await agent.outcome())["__typename"] == "ClarificationDetached"
    async with runner(api, session_id) as prompts:
        network = await open_app(page, web_server, f"/t/{task_id}/s/{session_id}")
        await expect(page.get_by_test_id("clarification-detached")).to_contain_text("resumed")
        await page.get_by_test_id("clarification-custom-text").fill("Use a circuit breaker instead")
        await page.get_by_test_id("clarification-submit").click()
        await expect(card(page)).to_have_count(0)
        await expect(page.get_by_test_id("clarification-error")).to_have_count(0)
        assert len(prompts) == 1
        assert "Use a circuit breaker instead" in prompts[0]["prompt"]
        # The prompt reaches the runner before it acknowledges it, and the claim settles only after
        # that: keep the runner until the bundle is TERMINAL.
        assert await _bundle_state_becomes(api, agent.pending_id, "TERMINAL") == "TERMINAL"
    bundle = await api.bundle(agent.pending_id)
    assert bundle["state"] == "TERMINAL"
    assert bundle["questions"][0]["response"]["customText"] == "Use a circuit breaker instead"
    await expect(page.locator(".transcript")).to_contain_text("Use a circuit breaker instead")
    no_outside_requests(network)


async def test_an_answer_for_an_agent_that_is_gone_says_it_waits_for_the_agent(
    page: Any, web_server: Server, api: Api
) -> None:
    task_id, (session_id,) = await api.task("Answer waits in the inbox")
    agent = await api.ask(session_id, wait_seconds=0.3)
    assert (await agent.outcome())["__typename"] == "ClarificationDetached"
    network = await open_app(page, web_server, f"/t/{task_id}/s/{session_id}")
    await page.get_by_test_id("clarification-custom-text").fill("Ship it on Friday")
    await page.get_by_test_id("clarification-submit").click()
    await expect(card(page)).to_have_count(0)
    await expect(page.get_by_test_id("clarification-queued")).to_contain_text("waiting for the agent")
    await expect(page.locator(".transcript")).to_contain_text("answered · waiting for the agent")
    bundle = await api.bundle(agent.pending_id)
    assert bundle["state"] == "TERMINAL"
    assert bundle["questions"][0]["response"]["customText"] == "Ship it on Friday"
    # The agent comes back: the answer is delivered once, and the card no longer says it waits. The
    # runner sees the prompt before it acknowledges it, and the delivery settles only with that
    # acknowledgement: keep the runner until the card says so.
    async with runner(api, session_id) as prompts:
        for _ in range(200):
            if prompts:
                break
            await asyncio.sleep(0.05)
        await expect(page.locator(".transcript")).not_to_contain_text("waiting for the agent")
    assert len(prompts) == 1
    assert "Ship it on Friday" in prompts[0]["prompt"]
    no_outside_requests(network)


async def test_losing_a_race_shows_the_winners_answer(page: Any, web_server: Server, api: Api) -> None:
    task_id, (session_id,) = await api.task("Race")
    agent = await api.ask(session_id)
    relay = await Relay().install(page)
    network = await open_app(page, web_server, f"/t/{task_id}/s/{session_id}")
    await expect(card(page)).to_be_visible()
    relay.cut.set()  # the page stops hearing the server: its card goes stale
    winner = [{"questionId": "policy", "selectedOptionIds": ["policy_opt2"], "customText": "every 30s"}]
    assert await api.respond(agent.pending_id, winner) == "ClarificationResponded"
    await page.get_by_test_id("clarification-option-policy_opt1").click()
    await page.get_by_test_id("clarification-submit").click()
    conflict = page.get_by_test_id("clarification-conflict")
    await expect(conflict).to_be_visible()
    await expect(conflict).to_contain_text("Fixed delay")
    await expect(conflict).to_contain_text("every 30s")
    await expect(card(page)).to_have_count(0)
    outcome = await agent.outcome()
    assert outcome["answers"][0]["selectedOptionIds"] == ["policy_opt2"], "the stale answer changed nothing"
    no_outside_requests(network)


# --- superseded history, live updates, reconnects ----------------------------------------------------


@pytest.mark.parametrize("kind", WEB_KINDS, ids=str)
@pytest.mark.scenario("S07")
async def test_an_older_detached_question_stays_superseded_after_a_newer_bundle_is_skipped_and_reloaded(
    page: Any, web_server: Server, api: Api, kind: WebKind
) -> None:
    task_id, (session_id,) = await api.task("Superseded history")
    old = await kind.ask(api, session_id, "Old question?", wait_seconds=0.3)
    assert kind.detached(await old.outcome())
    newer_turn = await api.start_turn(session_id)
    newer = await kind.ask(api, session_id, "Newer question?")
    network = await open_app(page, web_server, f"/t/{task_id}/s/{session_id}")
    await expect(kind.card(page)).to_contain_text("Newer question?")
    await kind.end_on_card(page).click()
    assert kind.ended(await newer.outcome())
    await expect(kind.card(page)).to_have_count(0)
    await reload_app(page)
    # Both stay in the history, and neither comes back as a card (shown or hidden).
    await expect(kind.history(page)).to_have_count(2)
    await expect(kind.card(page)).to_have_count(0)
    await expect(kind.control(page, "reopen")).to_have_count(0)
    await expect(question_icon(page, task_id)).to_have_count(0)
    # Later turn completion cannot re-arm the old bundle.
    await api.complete_turn(newer_turn)
    await reload_app(page)
    await expect(kind.history(page)).to_have_count(2)
    await expect(kind.card(page)).to_have_count(0)
    await expect(kind.control(page, "reopen")).to_have_count(0)
    await expect(question_icon(page, task_id)).to_have_count(0)
    assert await kind.state(api, old.pending_id) == "SUPERSEDED_HISTORY"
    assert await kind.state(api, newer.pending_id) == "TERMINAL"
    no_outside_requests(network)


@pytest.mark.parametrize("kind", WEB_KINDS, ids=str)
@pytest.mark.scenario("S05")
async def test_a_new_question_shows_live_in_the_open_session_and_on_the_task_row(
    page: Any, web_server: Server, api: Api, kind: WebKind
) -> None:
    task_id, (session_id,) = await api.task("Live question")
    network = await open_app(page, web_server, f"/t/{task_id}/s/{session_id}")
    await expect(page.locator(".transcript")).to_contain_text("Working on step 1.")
    agent = await kind.ask(api, session_id, "Asked while you watch?")
    await expect(kind.card(page)).to_contain_text("Asked while you watch?")
    await expect(kind.end_on_card(page)).to_be_enabled()
    await expect(question_icon(page, task_id)).to_be_visible()
    await wrap_up(network, agent)


async def test_after_a_reconnect_the_app_resyncs_from_snapshots(
    page: Any, web_server: Server, api: Api
) -> None:
    task_id, (session_id,) = await api.task("Reconnect")
    relay = await Relay().install(page)
    network = await open_app(page, web_server, f"/t/{task_id}/s/{session_id}")
    await expect(page.locator(".transcript")).to_contain_text("Working on step 1.")
    relay.cut.set()  # the page hears nothing of what happens next
    agent = await api.ask(session_id, [question("Asked while you were away?")])
    await asyncio.wait_for(relay.withheld.wait(), 10)  # the server published a change the page did not hear
    await expect(card(page)).to_have_count(0)
    await relay.reconnect()
    await expect(card(page)).to_contain_text("Asked while you were away?", timeout=15_000)
    await expect(question_icon(page, task_id)).to_be_visible()
    assert len(relay.connections) >= 2, "the app reconnected"
    await wrap_up(network, agent)


# --- sign-in -----------------------------------------------------------------------------------------


async def test_a_token_in_the_address_signs_in_and_leaves_the_address_bar(
    page: Any, web_server: Server
) -> None:
    network = await open_app(page, web_server)
    assert "token" not in page.url
    assert await page.evaluate("localStorage.getItem('turnwise.token')") == ADMIN_TOKEN
    no_outside_requests(network)


async def test_without_a_stored_token_the_sign_in_form_signs_in(
    page: Any, web_server: Server, api: Api
) -> None:
    task_id, _ = await api.task("Visible after sign-in")
    network = Network(web_server.base_url)
    await page.context.route("**/*", network.guard)
    await page.goto(web_server.base_url + "/")
    await page.get_by_test_id("signin-token").fill("not-a-token")
    await page.get_by_test_id("signin-submit").click()
    await expect(page.get_by_test_id("signin-token")).to_be_visible()
    await expect(page.locator("#signin-note")).to_contain_text("not accepted")
    # The refused token stays in the field, marked, to be corrected rather than typed again.
    await expect(page.get_by_test_id("signin-token")).to_have_value("not-a-token")
    await expect(page.get_by_test_id("signin-token")).to_have_attribute("aria-invalid", "true")
    await expect(page.get_by_test_id("signin-token")).to_be_focused()
    assert await page.evaluate("localStorage.getItem('turnwise.token')") is None
    await page.get_by_test_id("signin-token").fill(ADMIN_TOKEN)
    await page.get_by_test_id("signin-submit").click()
    await expect(page.get_by_test_id(f"task-row-{task_id}")).to_be_visible()
    no_outside_requests(network)


async def test_every_app_route_serves_the_app(page: Any, web_server: Server, api: Api) -> None:
    task_id, (session_id,) = await api.task("Deep link")
    network = await open_app(page, web_server, f"/t/{task_id}")
    await expect(page.locator(".task-head h1")).to_have_text("Deep link")
    await expect(page.get_by_test_id(f"session-tab-{session_id}")).to_have_attribute("aria-selected", "false")
    await page.get_by_test_id(f"session-tab-{session_id}").click()
    await expect(page).to_have_url(f"{web_server.base_url}/t/{task_id}/s/{session_id}")
    await page.go_back()
    await expect(page).to_have_url(f"{web_server.base_url}/t/{task_id}")
    await expect(page.get_by_test_id(f"session-tab-{session_id}")).to_have_attribute("aria-selected", "false")
    no_outside_requests(network)


# --- layout --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("phone", FLAVOURS)
async def test_the_card_keeps_submit_and_skip_in_view_at_desktop_and_phone_sizes(
    page: Any, web_server: Server, api: Api, phone: bool
) -> None:
    task_id, (_primary, secondary) = await api.task("Layout check", sessions=2)
    questions = [
        question(),
        question(
            "Which failures should be retried?", qid="fails", options=("Timeouts", "5xx", "429"), multi=True
        ),
    ]
    agent = await api.ask(secondary, questions, context="The webhook times out under load.")
    network = await open_app(page, web_server, f"/t/{task_id}/s/{secondary}", phone=phone)
    await expect(card(page)).to_be_visible()
    for test_id in ("clarification-submit", "clarification-skip"):
        await expect(page.get_by_test_id(test_id)).to_be_in_viewport()
    if phone:
        await expect(page.get_by_test_id("task-drawer")).to_be_hidden()
        await expect(page.get_by_test_id("task-drawer-toggle")).to_be_visible()
    else:
        await expect(page.get_by_test_id("task-sidebar")).to_be_visible()
        await expect(page.get_by_test_id("task-drawer-toggle")).to_be_hidden()
    RESULTS.mkdir(exist_ok=True)
    await page.screenshot(path=str(RESULTS / f"web-app-{'phone' if phone else 'desktop'}.png"))
    await wrap_up(network, agent)


async def _bundle_state_becomes(api: Api, pending_id: str, wanted: str, seconds: float = 15.0) -> str:
    """The bundle's state once it is `wanted`, or the last one seen when `seconds` ran out."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while True:
        state = str((await api.bundle(pending_id))["state"])
        if state == wanted or loop.time() > deadline:
            return state
        await asyncio.sleep(0.1)
