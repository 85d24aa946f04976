"""The web app against server states only real dispatches and races produce.

An attempted, still hidden resume successor (S04); a new question whose own session event makes it
answerable while the projection stream says nothing (S05); an answer from a card a newer turn
superseded (S15); Skip on a question whose agent stopped waiting.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from playwright.async_api import expect
from sqlalchemy import select

from backend.db.engine import Database
from backend.db.tables import task_session_turns as T
from backend.repository import reservations, turns
from tests.e2e.support import Relay, by_dialect, card, no_outside_requests, question_icon, reload_app, serve
from tests.e2e.webapp import ACK, PROMPTS, Api, open_app, question, runner
from tests.servers import Server

pytestmark = pytest.mark.browser
expect.set_options(timeout=10_000)

SESSIONS = """query($t: ID!) { taskSessions(taskId: $t) {
  id pendingAction pendingActionRevision { epoch sequence } activeClarification { pendingId } } }"""
TURNS = "query($s: ID!) { sessionTurns(sessionId: $s) { id } }"
SUMMARY = "query($t: ID!) { task(id: $t) { summary { pendingAction } } }"
BUNDLE = """query($p: ID!) { clarification(pendingId: $p) { state
  questions { status response { selectedOptionIds customText } } } }"""
PICK = [{"questionId": "policy", "selectedOptionIds": ["policy_opt1"]}]


# A resume dispatch waits this long for the runner's acknowledgement: the tests decide when.
DISPATCH_SECONDS = 60


@pytest.fixture(scope="module")
def lifecycle_server() -> Iterator[Server]:
    yield from serve("sqlite", dispatch_seconds=DISPATCH_SECONDS)


@pytest.fixture(scope="module")
def pg_lifecycle_server(request: pytest.FixtureRequest) -> Iterator[Server]:
    yield from serve("postgresql", request, dispatch_seconds=DISPATCH_SECONDS)


@pytest.fixture(params=["sqlite", "postgresql"])
def any_lifecycle_server(request: pytest.FixtureRequest) -> Server:
    return by_dialect(request, "lifecycle_server", "pg_lifecycle_server")


@pytest.fixture
async def api(lifecycle_server: Server) -> AsyncIterator[Api]:
    async with contextlib.aclosing(Api(lifecycle_server)) as client:
        yield client


def _dot(page: Any, session_id: str) -> Any:
    return page.get_by_test_id(f"session-tab-{session_id}").locator(".tab-dot")


def _question_entry(page: Any, prompt: str) -> Any:
    return page.locator(".transcript li.msg.question", has_text=prompt)


class HeldRunner:
    """An agent runner holding the session's prompt channel that acknowledges a prompt only when
    the test says so: until then the resume successor is attempted and unpublished."""

    def __init__(self, api: Api, session_id: str) -> None:
        self.api = api
        self.session_id = session_id
        self.prompts: list[dict[str, Any]] = []
        self.arrived = asyncio.Event()
        self.released = asyncio.Event()

    async def serve(self) -> None:
        async with self.api.client.subscribe(PROMPTS, {"s": self.session_id}) as sub:
            while True:
                dispatch = (await sub.next(timeout=300))["agentPrompts"]
                self.prompts.append(dispatch)
                self.arrived.set()
                await self.released.wait()
                await self.api.client.execute(ACK, {"t": dispatch["turnId"]})


@contextlib.asynccontextmanager
async def held_runner(api: Api, session_id: str) -> AsyncIterator[HeldRunner]:
    held = HeldRunner(api, session_id)
    task = asyncio.create_task(held.serve())
    await asyncio.sleep(1.5)  # the channel is held once the subscription ran its first step
    try:
        yield held
    finally:
        held.released.set()
        await asyncio.sleep(0.5)
        task.cancel()
        with contextlib.suppress(BaseException):
            await task


async def _stored_turns(server: Server, session_id: str) -> tuple[str | None, dict[str, dict[str, Any]]]:
    """The session's current turn by the one rule, and every stored turn's metadata."""
    db = Database(server.database_url)
    try:
        async with db.read() as conn:
            current = await turns.current_turn(conn, session_id)
            found = await conn.execute(select(T.c.id, T.c.metadata).where(T.c.session_id == session_id))
            stored = {
                r.id: (r.metadata if isinstance(r.metadata, dict) else json.loads(r.metadata)) for r in found
            }
        return current, stored
    finally:
        await db.dispose()


# --- S04 ---------------------------------------------------------------------------------------


@pytest.mark.scenario("S04")
async def test_a_question_on_the_visible_predecessor_of_an_attempted_hidden_successor_shows_nowhere(
    page: Any, any_lifecycle_server: Server
) -> None:
    server = any_lifecycle_server
    api = Api(server)
    try:
        task_id, (session_id,) = await api.task("Hidden successor")
        answered = await api.ask(session_id, [question("Resume with this answer?")], wait_seconds=0.3)
        assert (await answered.outcome())["__typename"] == "ClarificationDetached"
        left = await api.ask(session_id, [question("Left on the predecessor?", qid="left")], wait_seconds=0.3)
        assert (await left.outcome())["__typename"] == "ClarificationDetached"
        predecessor = str((await api.client.execute(TURNS, {"s": session_id}))["sessionTurns"][-1]["id"])
        async with held_runner(api, session_id) as held:
            # The answer to one question resumes the agent: its successor is reserved, marked
            # attempted and dispatched, and the runner has not acknowledged it yet.
            responding = asyncio.create_task(api.respond(answered.pending_id, PICK))
            await asyncio.wait_for(held.arrived.wait(), 20)
            successor = str(held.prompts[0]["turnId"])
            current, stored = await _stored_turns(server, session_id)
            assert current == successor, "the attempted successor is the current turn"
            assert stored[successor].get(reservations.ATTEMPTED) is True
            assert stored[successor].get(reservations.PENDING) is True
            # The server's explicit clean projection, while turn history still hides the successor.
            (listed,) = (await api.client.execute(SESSIONS, {"t": task_id}))["taskSessions"]
            assert listed["pendingAction"] is None
            assert listed["pendingActionRevision"] is not None
            assert listed["activeClarification"] is None
            visible = [t["id"] for t in (await api.client.execute(TURNS, {"s": session_id}))["sessionTurns"]]
            assert visible[-1] == predecessor
            assert successor not in visible
            assert (await api.client.execute(SUMMARY, {"t": task_id}))["task"]["summary"] == {
                "pendingAction": None
            }
            # The question left on the visible predecessor is pending history, inert by the one rule.
            left_bundle = await api.bundle(left.pending_id)
            assert left_bundle["state"] == "SUPERSEDED_HISTORY"
            assert [q["status"] for q in left_bundle["questions"]] == ["PENDING"]

            network = await open_app(page, server, f"/t/{task_id}/s/{session_id}")
            entry = _question_entry(page, "Left on the predecessor?")
            await expect(entry).to_be_visible()
            # The chat shows it as history, not as a question to answer: no card, no reopen pill.
            await expect(entry).to_contain_text("no longer current")
            await expect(page.locator(".transcript li.msg.question.live")).to_have_count(0)
            await expect(card(page)).to_have_count(0)
            await expect(page.get_by_test_id("clarification-reopen")).to_have_count(0)
            # Nor does any pending-input indicator: the session tab's dot, the task's icon.
            await expect(page.get_by_test_id(f"session-tab-{session_id}")).to_be_visible()
            await expect(_dot(page, session_id)).to_have_count(0)
            await expect(question_icon(page, task_id)).to_have_count(0)
            assert not responding.done()
            held.released.set()
            assert await asyncio.wait_for(responding, 20) == "ClarificationResponded"
        # Published: the successor joins the history, and the old question stays inert.
        visible = [t["id"] for t in (await api.client.execute(TURNS, {"s": session_id}))["sessionTurns"]]
        assert visible[-2:] == [predecessor, successor]
        await reload_app(page)
        await expect(page.locator(f'.transcript [data-turn-id="{successor}"]')).to_have_count(1)
        await expect(entry).to_contain_text("no longer current")
        await expect(card(page)).to_have_count(0)
        await expect(_dot(page, session_id)).to_have_count(0)
        await expect(question_icon(page, task_id)).to_have_count(0)
        no_outside_requests(network)
    finally:
        await api.aclose()


# --- S05 ---------------------------------------------------------------------------------------


class ProjectionsUnheard:
    """Relays the app's socket, except that nothing of its `pendingActionChanged` subscription
    reaches the page (the snapshot included): the session projection can only come from elsewhere."""

    def __init__(self) -> None:
        self.projection_ids: set[str] = set()
        self.dropped: list[dict[str, Any]] = []

    async def route(self, ws: Any) -> None:
        server = ws.connect_to_server()

        def from_page(message: Any) -> None:
            with contextlib.suppress(ValueError, TypeError, AttributeError):
                data = json.loads(message)
                if data.get("type") == "subscribe" and "pendingActionChanged" in data["payload"]["query"]:
                    self.projection_ids.add(data["id"])
            server.send(message)

        def from_server(message: Any) -> None:
            with contextlib.suppress(ValueError, TypeError, AttributeError):
                data = json.loads(message)
                if data.get("type") == "next" and data.get("id") in self.projection_ids:
                    self.dropped.append(data["payload"]["data"]["pendingActionChanged"])
                    return
            ws.send(message)

        ws.on_message(from_page)
        server.on_message(from_server)


@pytest.mark.scenario("S05")
async def test_a_new_questions_own_session_event_makes_it_answerable_without_the_projection_stream(
    page: Any, lifecycle_server: Server, api: Api
) -> None:
    task_id, (session_id,) = await api.task("Same event")
    unheard = ProjectionsUnheard()
    await page.route_web_socket("**/graphql", unheard.route)
    network = await open_app(page, lifecycle_server, f"/t/{task_id}/s/{session_id}")
    await expect(page.locator(".transcript")).to_contain_text("Working on step 1.")
    # The page holds the session list's explicit clean projection.
    await expect(page.get_by_test_id(f"session-tab-{session_id}")).to_be_visible()
    await expect(_dot(page, session_id)).to_have_count(0)
    assert unheard.projection_ids, "the app subscribed to pendingActionChanged"
    reloads: list[str] = []
    page.on("request", lambda request: reloads.append(request.post_data or ""))
    agent = await api.ask(session_id, [question("Answerable from its own event?")])
    await expect(card(page)).to_contain_text("Answerable from its own event?")
    await expect(_dot(page, session_id)).to_have_count(1)
    # The projection stream did carry the change, and the page never heard it; nor did it reload
    # the session list: the question's ADDED event alone advanced the projection.
    for _ in range(100):
        if any(p["pendingAction"] == "CLARIFICATION" for p in unheard.dropped):
            break
        await asyncio.sleep(0.05)
    assert any(p == {**p, "sessionId": session_id, "pendingAction": "CLARIFICATION"} for p in unheard.dropped)
    assert not [body for body in reloads if "taskSessions" in body]
    # Answerable: the answer from the card reaches the waiting agent.
    await page.get_by_test_id("clarification-option-policy_opt2").click()
    await page.get_by_test_id("clarification-submit").click()
    outcome = await agent.outcome()
    assert outcome["__typename"] == "ClarificationAnswered"
    assert outcome["answers"][0]["selectedOptionIds"] == ["policy_opt2"]
    await expect(card(page)).to_have_count(0)
    no_outside_requests(network)


# --- S15 in the browser: a superseded card -----------------------------------------------------------


@pytest.mark.scenario("S15")
async def test_an_answer_from_a_card_a_newer_turn_superseded_closes_it_and_prompts_nobody(
    page: Any, lifecycle_server: Server, api: Api
) -> None:
    task_id, (session_id,) = await api.task("Superseded card")
    agent = await api.ask(session_id, [question("Still the current question?")])
    relay = await Relay().install(page)  # cut, the page stops hearing the server: its card goes stale
    network = await open_app(page, lifecycle_server, f"/t/{task_id}/s/{session_id}")
    await expect(card(page)).to_contain_text("Still the current question?")
    # Nor does it reload the session afterwards: only the conflict handling can close the card.
    refused: list[str] = []

    async def refuse_reloads(route: Any) -> None:
        body = route.request.post_data or ""
        if "query RouteSessions" in body or "query SessionHistory" in body:
            refused.append(body)
            await route.abort()
        else:
            await route.fallback()

    async with runner(api, session_id) as prompts:
        relay.cut.set()
        await page.route("**/graphql", refuse_reloads)
        # The agent ends its turn and starts a newer one: the question on the card is history now.
        newer = await api.start_turn(session_id)
        assert (await agent.outcome())["__typename"] != "ClarificationAnswered"
        assert (await api.bundle(agent.pending_id))["state"] == "SUPERSEDED_HISTORY"
        turns_before = (await api.client.execute(TURNS, {"s": session_id}))["sessionTurns"]
        await page.get_by_test_id("clarification-option-policy_opt1").click()
        await page.get_by_test_id("clarification-submit").click()
        # The conflict closes the obsolete card and says why.
        conflict = page.get_by_test_id("clarification-conflict")
        await expect(conflict).to_contain_text("no longer current")
        await expect(card(page)).to_have_count(0)
        await expect(page.get_by_test_id("clarification-error")).to_have_count(0)
        await asyncio.sleep(1.0)
        # No write, no resume: the question is untouched history and the runner got no prompt.
        assert prompts == []
        bundle = await api.bundle(agent.pending_id)
        assert bundle["state"] == "SUPERSEDED_HISTORY"
        assert bundle["questions"] == [{"status": "PENDING", "response": None}]
        assert (await api.client.execute(TURNS, {"s": session_id}))["sessionTurns"] == turns_before
        assert turns_before[-1]["id"] == newer
        assert refused, "the page tried to reload the session after the conflict"
    relay.cut.clear()
    await page.unroute("**/graphql", refuse_reloads)
    await reload_app(page)
    await expect(_question_entry(page, "Still the current question?")).to_contain_text("no longer current")
    await expect(card(page)).to_have_count(0)
    await expect(question_icon(page, task_id)).to_have_count(0)
    no_outside_requests(network)


# --- Skip on a detached question ---------------------------------------------------------------------


async def test_skip_on_a_detached_question_rejects_it_without_resuming_the_agent(
    page: Any, lifecycle_server: Server, api: Api
) -> None:
    task_id, (session_id,) = await api.task("Skip while detached")
    agent = await api.ask(session_id, [question("Skip me after the agent left?")], wait_seconds=0.3)
    assert (await agent.outcome())["__typename"] == "ClarificationDetached"
    async with runner(api, session_id) as prompts:
        turns_before = (await api.client.execute(TURNS, {"s": session_id}))["sessionTurns"]
        network = await open_app(page, lifecycle_server, f"/t/{task_id}/s/{session_id}")
        await expect(card(page)).to_contain_text("Skip me after the agent left?")
        await expect(page.get_by_test_id("clarification-detached")).to_be_visible()
        await expect(question_icon(page, task_id)).to_be_visible()
        await page.get_by_test_id("clarification-skip").click()
        await expect(card(page)).to_have_count(0)
        await expect(page.get_by_test_id("clarification-error")).to_have_count(0)
        await expect(question_icon(page, task_id)).to_have_count(0)
        await expect(_dot(page, session_id)).to_have_count(0)
        await expect(_question_entry(page, "Skip me after the agent left?")).to_contain_text("skipped")
        # Persisted as rejected, and the agent is not resumed: no prompt, no successor turn.
        bundle = await api.bundle(agent.pending_id)
        assert bundle["state"] == "TERMINAL"
        assert bundle["questions"] == [{"status": "REJECTED", "response": None}]
        await asyncio.sleep(1.0)
        assert prompts == []
        assert (await api.client.execute(TURNS, {"s": session_id}))["sessionTurns"] == turns_before
    await reload_app(page)
    await expect(_question_entry(page, "Skip me after the agent left?")).to_contain_text("skipped")
    await expect(card(page)).to_have_count(0)
    await expect(question_icon(page, task_id)).to_have_count(0)
    no_outside_requests(network)
