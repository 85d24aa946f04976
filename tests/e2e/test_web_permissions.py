"""The permission card in Chromium against a real server, desktop and phone: an agent asks to use a
tool (askPermission over the test GraphQL client), a person allows, denies, edits or always allows it
in the web app; remembered rules are listed and revoked; a stale card closes on its conflict."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from playwright.async_api import expect

from tests.api.client import Client
from tests.e2e.support import Relay, no_outside_requests, question_icon, serve
from tests.e2e.test_web_a11y import _serious_violations
from tests.e2e.test_web_attention import _expect_waiting, _open_notifying, _wait_notes
from tests.e2e.webapp import PHONE, Api, open_app, path_of, question, runner
from tests.servers import Server

pytestmark = pytest.mark.browser
expect.set_options(timeout=10_000)

FLAVOURS = [pytest.param(False, id="desktop"), pytest.param(True, id="phone")]
SHOTS = "/tmp/turnwise-permission-shots"

BASH = {"command": "alembic upgrade head", "description": "Migrate the staging database"}
EDIT = {
    "file_path": "backend/webhooks/retry.py",
    "old_string": "MAX_ATTEMPTS = 3\nDELAY = 1.0",
    "new_string": "MAX_ATTEMPTS = 5\nDELAY = 2.0",
}

ASK_PERMISSION = """subscription($s: ID!, $tool: String!, $input: JSON!, $c: String, $t: Float) {
  askPermission(sessionId: $s, toolName: $tool, input: $input, context: $c, timeoutSeconds: $t) {
    __typename
    ... on PermissionAsked { request { pendingId state toolName input } }
    ... on PermissionDecided { pendingId decision { behavior updatedInput message remember auto } }
    ... on PermissionDetached { pendingId }
    ... on PermissionClosed { pendingId }
  } }"""
RESPOND_PERMISSION = """mutation($p: ID!, $b: PermissionBehavior!, $m: String) {
  respondToPermission(pendingId: $p, behavior: $b, message: $m) { __typename } }"""
PERMISSION = "query($p: ID!) { permission(pendingId: $p) { state decision { behavior message } } }"
RULES = "query($s: ID!) { permissionRules(sessionId: $s) { id toolName input pattern behavior scope } }"


def _retrieve(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


class ToolAgent:
    """One askPermission call held open like a connected agent's tool call."""

    def __init__(self, client: Client, variables: dict[str, Any]) -> None:
        self.client = client
        self.variables = variables
        loop = asyncio.get_running_loop()
        self._first: asyncio.Future[dict[str, Any]] = loop.create_future()
        self._outcome: asyncio.Future[dict[str, Any]] = loop.create_future()
        for future in (self._first, self._outcome):
            future.add_done_callback(_retrieve)
        self._task: asyncio.Task[None] | None = None

    @classmethod
    async def ask(
        cls,
        api: Api,
        session_id: str,
        tool_input: Any = None,
        *,
        tool: str = "Bash",
        context: str | None = None,
        wait_seconds: float | None = None,
    ) -> ToolAgent:
        variables = {
            "s": session_id,
            "tool": tool,
            "input": BASH if tool_input is None else tool_input,
            "c": context,
            "t": wait_seconds,
        }
        agent = cls(api.client, variables)
        agent._task = asyncio.create_task(agent._run())
        await asyncio.wait_for(asyncio.shield(agent._first), 15)
        return agent

    async def _run(self) -> None:
        try:
            async with self.client.subscribe(ASK_PERMISSION, self.variables) as sub:
                first = (await sub.next(timeout=15))["askPermission"]
                self._first.set_result(first)
                if first["__typename"] == "PermissionDecided":
                    self._outcome.set_result(first)
                    return
                self._outcome.set_result((await sub.next(timeout=300))["askPermission"])
        except BaseException as error:
            for future in (self._first, self._outcome):
                if not future.done():
                    future.set_exception(error if isinstance(error, Exception) else RuntimeError("cancelled"))
            if isinstance(error, asyncio.CancelledError):
                raise

    @property
    def first(self) -> dict[str, Any]:
        return self._first.result()

    @property
    def pending_id(self) -> str:
        first = self.first
        return str(first["request"]["pendingId"] if "request" in first else first["pendingId"])

    async def outcome(self, seconds: float = 15) -> dict[str, Any]:
        return await asyncio.wait_for(asyncio.shield(self._outcome), seconds)

    async def disconnect(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task


@pytest.fixture(scope="module")
def web_server() -> Iterator[Server]:
    yield from serve("sqlite")


@pytest.fixture
async def api(web_server: Server) -> AsyncIterator[Api]:
    async with contextlib.aclosing(Api(web_server)) as client:
        yield client


def perm_card(page: Any) -> Any:
    return page.get_by_test_id("permission-card")


def _sent_decisions(page: Any) -> list[str]:
    """Every respondToPermission the page sends from now on (the request bodies)."""
    sent: list[str] = []
    page.on(
        "request",
        lambda request: (
            sent.append(request.post_data or "")
            if "respondToPermission" in (request.post_data or "")
            else None
        ),
    )
    return sent


async def _request_state(api: Api, pending_id: str) -> dict[str, Any]:
    return dict((await api.client.execute(PERMISSION, {"p": pending_id}))["permission"])


async def _rules(api: Api, session_id: str) -> list[dict[str, Any]]:
    return list((await api.client.execute(RULES, {"s": session_id}))["permissionRules"])


async def _open_card(api: Api, web_server: Server, page: Any, title: str, phone: bool, **ask: Any) -> Any:
    task_id, (session_id,) = await api.task(title)
    agent = await ToolAgent.ask(api, session_id, **ask)
    network = await open_app(page, web_server, f"/t/{task_id}/s/{session_id}", phone=phone)
    await expect(perm_card(page)).to_be_visible()
    return task_id, session_id, agent, network


# --- allow, deny, edit ------------------------------------------------------------------------------


@pytest.mark.parametrize("phone", FLAVOURS)
async def test_allow_from_the_card_reaches_the_waiting_agent_with_the_input_as_asked(
    page: Any, web_server: Server, api: Api, phone: bool
) -> None:
    task_id, _session_id, agent, network = await _open_card(api, web_server, page, "Allow", phone)
    await expect(page.get_by_test_id("permission-tool")).to_have_text("Bash")
    shown = page.get_by_test_id("permission-input")
    await expect(shown).to_contain_text("$ alembic upgrade head")
    await expect(shown).to_contain_text("Migrate the staging database")
    if not phone:
        await expect(question_icon(page, task_id)).to_be_visible()
    await _expect_waiting(page, 1)
    await page.get_by_test_id("permission-allow").click()
    outcome = await agent.outcome()
    assert outcome["__typename"] == "PermissionDecided"
    assert outcome["decision"] == {
        "behavior": "ALLOW",
        "updatedInput": BASH,
        "message": None,
        "remember": False,
        "auto": False,
    }
    await expect(perm_card(page)).to_have_count(0)
    await expect(page.get_by_test_id("permission-conflict")).to_have_count(0)
    await expect(question_icon(page, task_id)).to_have_count(0)
    await _expect_waiting(page, 0)
    no_outside_requests(network)


@pytest.mark.parametrize("phone", FLAVOURS)
async def test_deny_with_a_reason_gives_the_agent_the_reason(
    page: Any, web_server: Server, api: Api, phone: bool
) -> None:
    _task, _session, agent, network = await _open_card(api, web_server, page, "Deny", phone)
    await page.get_by_test_id("permission-reason").fill("Not on staging during the demo")
    await page.get_by_test_id("permission-deny").click()
    outcome = await agent.outcome()
    assert outcome["decision"]["behavior"] == "DENY"
    assert outcome["decision"]["message"] == "Not on staging during the demo"
    await expect(perm_card(page)).to_have_count(0)
    assert (await _request_state(api, agent.pending_id))["state"] == "TERMINAL"
    no_outside_requests(network)


@pytest.mark.parametrize("phone", FLAVOURS)
async def test_edit_then_allow_checks_the_json_in_the_page_and_sends_the_edited_input(
    page: Any, web_server: Server, api: Api, phone: bool
) -> None:
    _task, _session, agent, network = await _open_card(
        api, web_server, page, "Edit", phone, tool="Edit", tool_input=EDIT
    )
    diff = page.get_by_test_id("permission-input")
    await expect(diff.locator(".perm-line.del")).to_contain_text(["MAX_ATTEMPTS = 3", "DELAY = 1.0"])
    await expect(diff.locator(".perm-line.add")).to_contain_text(["MAX_ATTEMPTS = 5", "DELAY = 2.0"])
    await expect(diff).to_contain_text("backend/webhooks/retry.py")
    sent = _sent_decisions(page)
    await page.get_by_test_id("permission-edit").click()
    editor = page.get_by_test_id("permission-edited-input")
    await expect(editor).to_be_focused()
    assert '"new_string": "MAX_ATTEMPTS = 5\\nDELAY = 2.0"' in await editor.input_value()
    # A trailing comma: MicroPython's own parser would take it, the page refuses it.
    await editor.fill('{"file_path": "backend/webhooks/retry.py", "old_string": "a", "new_string": "b",}')
    await page.get_by_test_id("permission-allow-edited").click()
    error = page.get_by_test_id("permission-error")
    await expect(error).to_be_visible()
    await expect(error).to_contain_text("not valid JSON")
    await expect(editor).to_have_attribute("aria-invalid", "true")
    # Valid JSON of another type than the asked input is refused too.
    await editor.fill('["MAX_ATTEMPTS = 5"]')
    await page.get_by_test_id("permission-allow-edited").click()
    await expect(error).to_contain_text("must be a JSON object")
    await asyncio.sleep(0.3)
    assert sent == [], "nothing was sent while the input was refused"
    assert (await _request_state(api, agent.pending_id))["state"] == "ACTIVE_LIVE"
    edited = dict(EDIT, new_string="MAX_ATTEMPTS = 4\nDELAY = 1.5")
    await editor.fill(
        '{"file_path": "backend/webhooks/retry.py", "old_string": "MAX_ATTEMPTS = 3\\nDELAY = 1.0",'
        ' "new_string": "MAX_ATTEMPTS = 4\\nDELAY = 1.5"}'
    )
    await page.get_by_test_id("permission-allow-edited").click()
    outcome = await agent.outcome()
    assert outcome["decision"]["behavior"] == "ALLOW"
    assert outcome["decision"]["updatedInput"] == edited
    await expect(perm_card(page)).to_have_count(0)
    assert len(sent) == 1
    no_outside_requests(network)


# --- always allow, rules ---------------------------------------------------------------------------


@pytest.mark.parametrize("phone", FLAVOURS)
async def test_always_allow_decides_the_next_request_at_once_and_revoking_the_rule_asks_again(
    page: Any, web_server: Server, api: Api, phone: bool
) -> None:
    _task, session_id, agent, network = await _open_card(api, web_server, page, "Always", phone)
    await expect(page.get_by_test_id("permission-rules")).to_have_count(0)
    await page.get_by_test_id("permission-always").click()
    outcome = await agent.outcome()
    assert outcome["decision"]["behavior"] == "ALLOW"
    assert outcome["decision"]["remember"] is True
    await expect(perm_card(page)).to_have_count(0)
    (rule,) = await _rules(api, session_id)
    assert (rule["pattern"], rule["scope"]) == ("Bash(alembic upgrade head)", "SESSION"), "this exact call"
    listed = page.get_by_test_id(f"permission-rule-{rule['id']}")
    await expect(listed).to_be_visible()
    await expect(listed.get_by_test_id("permission-rule-pattern")).to_have_text("Bash(alembic upgrade head)")
    await expect(listed.get_by_test_id("permission-rule-scope")).to_have_text("this session")

    # The same request again: a rule decides it, no card appears, the transcript records it.
    again = await ToolAgent.ask(api, session_id)
    assert again.first["__typename"] == "PermissionDecided"
    assert again.first["decision"]["auto"] is True
    await expect(page.locator("#transcript .msg.permission_request")).to_have_count(2)
    await expect(listed.get_by_test_id("permission-rule-decided")).to_have_text("decided 1 request here")
    await asyncio.sleep(0.5)
    await expect(perm_card(page)).to_have_count(0)
    await expect(page.get_by_test_id("permission-reopen")).to_have_count(0)

    await listed.get_by_test_id("permission-rule-revoke").click()
    await expect(page.get_by_test_id("permission-rules")).to_have_count(0)
    assert await _rules(api, session_id) == []
    third = await ToolAgent.ask(api, session_id)
    assert third.first["__typename"] == "PermissionAsked", "without the rule, a person is asked again"
    await expect(perm_card(page)).to_be_visible()
    await third.disconnect()
    no_outside_requests(network)


# --- stale cards, decisions elsewhere ----------------------------------------------------------------


@pytest.mark.parametrize("phone", FLAVOURS)
async def test_a_decision_taken_elsewhere_closes_the_card_live_and_says_what_was_decided(
    page: Any, web_server: Server, api: Api, phone: bool
) -> None:
    task_id, _session, agent, network = await _open_card(api, web_server, page, "Elsewhere", phone)
    sent = _sent_decisions(page)
    data = await api.client.execute(
        RESPOND_PERMISSION, {"p": agent.pending_id, "b": "DENY", "m": "done by hand"}
    )
    assert data["respondToPermission"]["__typename"] == "PermissionResponded"
    await expect(perm_card(page)).to_have_count(0)
    notice = page.get_by_test_id("permission-conflict")
    await expect(notice).to_be_visible()
    await expect(notice).to_contain_text("Someone else decided")
    await expect(page.get_by_test_id("permission-winner")).to_contain_text("done by hand")
    await expect(question_icon(page, task_id)).to_have_count(0)
    assert (await agent.outcome())["decision"]["message"] == "done by hand"
    assert sent == []
    no_outside_requests(network)


@pytest.mark.scenario("S01")
@pytest.mark.parametrize("phone", FLAVOURS)
async def test_a_late_allow_from_the_card_resumes_the_detached_agent_once(
    page: Any, web_server: Server, api: Api, phone: bool
) -> None:
    task_id, (session_id,) = await api.task("Late allow")
    agent = await ToolAgent.ask(api, session_id, wait_seconds=0.3)
    assert (await agent.outcome())["__typename"] == "PermissionDetached"
    async with runner(api, session_id) as prompts:
        network = await open_app(page, web_server, f"/t/{task_id}/s/{session_id}", phone=phone)
        await expect(perm_card(page)).to_be_visible()
        await expect(page.get_by_test_id("permission-detached")).to_be_visible()
        await page.get_by_test_id("permission-allow").click()
        await expect(perm_card(page)).to_have_count(0)
        await expect(question_icon(page, task_id)).to_have_count(0)
        for _ in range(100):
            if prompts:
                break
            await asyncio.sleep(0.1)
        await asyncio.sleep(1)  # nothing follows the one resume prompt
        assert len(prompts) == 1, prompts
        assert "The user allowed it. Please run it now" in prompts[0]["prompt"]
        assert "alembic upgrade head" in prompts[0]["prompt"]
    state = await _request_state(api, agent.pending_id)
    assert state["decision"]["behavior"] == "ALLOW"
    no_outside_requests(network)


@pytest.mark.scenario("S15")
@pytest.mark.parametrize("phone", FLAVOURS)
async def test_a_stale_card_for_a_superseded_request_gets_its_conflict_and_prompts_nobody(
    page: Any, web_server: Server, api: Api, phone: bool
) -> None:
    task_id, (session_id,) = await api.task("Superseded request")
    agent = await ToolAgent.ask(api, session_id, wait_seconds=0.3)
    assert (await agent.outcome())["__typename"] == "PermissionDetached"
    async with runner(api, session_id) as prompts:
        relay = await Relay().install(page)
        network = await open_app(page, web_server, f"/t/{task_id}/s/{session_id}", phone=phone)
        await expect(perm_card(page)).to_be_visible()
        await expect(page.get_by_test_id("permission-detached")).to_be_visible()
        relay.cut.set()  # the page stops hearing the server: its card goes stale
        await api.start_turn(session_id)  # a newer turn supersedes the request
        await page.get_by_test_id("permission-allow").click()
        notice = page.get_by_test_id("permission-conflict")
        await expect(notice).to_be_visible()
        await expect(notice).to_contain_text("no longer current")
        await expect(perm_card(page)).to_have_count(0)
        await asyncio.sleep(1)
        assert prompts == [], "the stale decision resumed nobody"
    assert (await _request_state(api, agent.pending_id))["state"] == "SUPERSEDED_HISTORY"
    no_outside_requests(network)


# --- phone, navigation, notifications ------------------------------------------------------------------


async def test_on_a_phone_the_card_hides_and_the_conversation_stays_visible(
    browser: Any, web_server: Server, api: Api
) -> None:
    task_id, (session_id,) = await api.task("Phone permission")
    for n in range(5):
        await api.client.execute(
            "mutation($s: ID!, $c: String!) { postMessage(sessionId: $s, content: $c) { id } }",
            {"s": session_id, "c": f"Step {n}: preparing the migration."},
        )
    agent = await ToolAgent.ask(api, session_id, context="The schema changed in the last release.")
    context = await browser.new_context(viewport=PHONE, has_touch=True)
    try:
        page = await context.new_page()
        network = await open_app(page, web_server, f"/t/{task_id}/s/{session_id}", phone=True)
        await expect(perm_card(page)).to_be_visible()
        transcript = await page.locator("#transcript").bounding_box()
        assert transcript is not None
        assert transcript["height"] >= 0.4 * PHONE["height"] - 1, transcript
        for test_id in ("permission-allow", "permission-deny"):
            await expect(page.get_by_test_id(test_id)).to_be_in_viewport()
            box = await page.get_by_test_id(test_id).bounding_box()
            assert box is not None
            assert box["height"] >= 43.5, (test_id, box)
        await page.get_by_test_id("permission-hide").tap()
        await expect(perm_card(page)).to_have_count(0)
        reopen = page.get_by_test_id("permission-reopen")
        await expect(reopen).to_be_focused()
        shown = await page.locator("#transcript").bounding_box()
        assert shown is not None
        assert shown["height"] > transcript["height"]
        await reopen.tap()
        await expect(perm_card(page)).to_be_focused()
        assert (await _request_state(api, agent.pending_id))["state"] == "ACTIVE_LIVE", (
            "hiding decides nothing"
        )
        no_outside_requests(network)
    finally:
        await context.close()
    await agent.disconnect()


async def test_a_permission_request_notifies_once_and_its_click_opens_the_session(
    page: Any, web_server: Server, api: Api
) -> None:
    task_id, (_primary, secondary) = await api.task("Notify permission", sessions=2)
    _other, (other_session,) = await api.task("Somewhere else")
    network = await _open_notifying(page, web_server, f"/t/{_other}/s/{other_session}")
    agent = await ToolAgent.ask(api, secondary)
    notes = await _wait_notes(page, 1)
    assert notes == [
        {
            "title": "Notify permission",
            "body": "Asks to use Bash: alembic upgrade head",
            "tag": agent.pending_id,
        }
    ]
    await page.evaluate("window.__notes[0].note.dispatchEvent(new Event('click'))")
    await expect(page.get_by_test_id(f"session-tab-{secondary}")).to_have_attribute("aria-selected", "true")
    assert path_of(page) == f"/t/{task_id}/s/{secondary}"
    await expect(perm_card(page)).to_be_visible()
    await agent.disconnect()
    no_outside_requests(network)


async def test_a_question_outranks_a_permission_request_and_the_card_returns_after_it(
    page: Any, web_server: Server, api: Api
) -> None:
    task_id, (session_id,) = await api.task("Question first")
    agent = await ToolAgent.ask(api, session_id)
    network = await open_app(page, web_server, f"/t/{task_id}/s/{session_id}")
    await expect(perm_card(page)).to_be_visible()
    asking = await api.ask(session_id, [question("Which database first?")])
    await expect(page.get_by_test_id("clarification-card")).to_be_visible()
    await expect(perm_card(page)).to_have_count(0)
    await expect(page.get_by_test_id("permission-conflict")).to_have_count(0)
    assert await api.respond(asking.pending_id, [{"questionId": "policy", "customText": "staging"}]) == (
        "ClarificationResponded"
    )
    await expect(perm_card(page)).to_be_visible()
    await page.get_by_test_id("permission-allow").click()
    assert (await agent.outcome())["decision"]["behavior"] == "ALLOW"
    no_outside_requests(network)


# --- accessibility and a look at it -----------------------------------------------------------------


@pytest.mark.parametrize("phone", FLAVOURS)
async def test_axe_finds_nothing_serious_on_the_permission_card(
    page: Any, web_server: Server, api: Api, phone: bool
) -> None:
    name = "phone" if phone else "desktop"
    os.makedirs(SHOTS, exist_ok=True)
    task_id, (session_id,) = await api.task("Axe permission")
    first = await ToolAgent.ask(api, session_id, context="Needed before the webhook tests can run.")
    network = await open_app(page, web_server, f"/t/{task_id}/s/{session_id}", phone=phone)
    await expect(perm_card(page)).to_be_visible()
    await page.screenshot(path=f"{SHOTS}/command-{name}.png")
    await page.get_by_test_id("permission-always").click()
    assert (await first.outcome())["decision"]["remember"] is True
    agent = await ToolAgent.ask(api, session_id, EDIT, tool="Edit", context="Raise the retry limits.")
    await expect(perm_card(page)).to_be_visible()
    # On a phone the rules make room for the card while it is up; on a desktop they stay.
    rules = page.get_by_test_id("permission-rules")
    if phone:
        await expect(rules).to_be_hidden()
    else:
        await expect(rules).to_be_visible()
    await page.get_by_test_id("permission-reason").fill("Keep the old limits for now")
    assert await _serious_violations(page) == [], "the permission card, a rule listed"
    await page.screenshot(path=f"{SHOTS}/edit-{name}.png")
    await page.get_by_test_id("permission-edit").click()
    await page.get_by_test_id("permission-edited-input").fill("{not json")
    await page.get_by_test_id("permission-allow-edited").click()
    await expect(page.get_by_test_id("permission-error")).to_be_visible()
    assert await _serious_violations(page) == [], "the input editor with its error"
    await page.screenshot(path=f"{SHOTS}/editor-{name}.png")
    await page.get_by_test_id("permission-hide").click()
    await expect(page.get_by_test_id("permission-reopen")).to_be_visible()
    assert await _serious_violations(page) == [], "the card hidden"
    await page.get_by_test_id("permission-reopen").click()
    await api.client.execute(RESPOND_PERMISSION, {"p": agent.pending_id, "b": "DENY", "m": "not now"})
    await expect(page.get_by_test_id("permission-conflict")).to_be_visible()
    assert await _serious_violations(page) == [], "the notice of a decision taken elsewhere"
    await page.screenshot(path=f"{SHOTS}/elsewhere-{name}.png")
    no_outside_requests(network)
