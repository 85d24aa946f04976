"""The inbox, "Needs you", in Chromium against a real server, desktop and phone.

Each test signs in as a person of its own (createUser, issueToken, grantTask), so its inbox holds
only the tasks it made, whatever the other tests of the module left waiting. Agents ask over the
test GraphQL client (askClarification, askPermission), live or detached; the person answers in the
web app, with the mouse or with the keyboard alone, and the API says what was decided.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import re
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from playwright.async_api import Locator, expect

from tests.api.client import Client
from tests.e2e.conftest import RESULTS
from tests.e2e.support import no_outside_requests, serve
from tests.e2e.test_web_a11y import _serious_violations
from tests.e2e.test_web_permissions import BASH, EDIT, ToolAgent
from tests.e2e.webapp import DESKTOP, PHONE, Api, Network, activate, activations_finished, path_of, question
from tests.servers import Server

pytestmark = pytest.mark.browser
expect.set_options(timeout=10_000)

AGE = re.compile(r"^\d+ (s|min)$")
FLAVOURS = [pytest.param(False, id="desktop"), pytest.param(True, id="phone")]
SHOTS = RESULTS / "inbox"

CREATE_USER = 'mutation($n: String!) { createUser(name: $n, role: "user") { id } }'
ISSUE_TOKEN = "mutation($u: ID!) { issueToken(userId: $u) { token } }"
GRANT = "mutation($u: ID!, $t: ID!) { grantTask(userId: $u, taskId: $t) }"
DECISIONS = """query($t: ID, $s: ID) { decisions(taskId: $t, sessionId: $s) {
  pendingId kind decidedBy outcome summary edited message updatedInput ruleId } }"""
RESPOND_PERMISSION = """mutation($p: ID!, $b: PermissionBehavior!, $m: String) {
  respondToPermission(pendingId: $p, behavior: $b, message: $m) { __typename } }"""


@pytest.fixture(scope="module")
def web_server() -> Iterator[Server]:
    yield from serve("sqlite")


@pytest.fixture
async def api(web_server: Server) -> AsyncIterator[Api]:
    async with contextlib.aclosing(Api(web_server)) as client:
        yield client


PEOPLE = itertools.count(1)


class Person:
    """A signed-in person who sees only the tasks granted to them (names are unique: a number is
    added after the first)."""

    def __init__(self, api: Api, name: str, user_id: str, token: str) -> None:
        self.api = api
        self.name = name
        self.user_id = user_id
        self.token = token

    @classmethod
    async def create(cls, api: Api, name: str) -> Person:
        number = next(PEOPLE)
        name = name if number == 1 else f"{name} {number}"
        user_id = (await api.client.execute(CREATE_USER, {"n": name}))["createUser"]["id"]
        token = (await api.client.execute(ISSUE_TOKEN, {"u": user_id}))["issueToken"]["token"]
        return cls(api, name, str(user_id), str(token))

    async def task(self, title: str, sessions: int = 1) -> tuple[str, list[str]]:
        """A task of ``sessions`` running sessions, granted to this person."""
        task_id, session_ids = await self.api.task(title, sessions)
        await self.api.client.execute(GRANT, {"u": self.user_id, "t": task_id})
        return task_id, session_ids

    async def open(self, page: Any, server: Server, path: str = "/", *, phone: bool = False) -> Network:
        """Sign in through ``#token=`` and wait until the page is interactive."""
        network = Network(server.base_url)
        await page.context.route("**/*", network.guard)
        await page.set_viewport_size(PHONE if phone else DESKTOP)
        await page.goto(server.base_url + path + "#token=" + self.token)
        await page.wait_for_selector("html[data-ready=true]", state="attached", timeout=20_000)
        return network


def item(page: Any, pending_id: str) -> Any:
    return page.get_by_test_id(f"inbox-item-{pending_id}")


async def _listed(page: Any) -> list[str]:
    """The pending ids of the inbox's items, top to bottom."""
    return list(
        await page.locator("[data-testid=inbox] [role=row]").evaluate_all(
            "rows => rows.map(row => row.dataset.pendingId)"
        )
    )


async def _decisions(api: Api, *, task_id: str | None = None, session_id: str | None = None) -> list[Any]:
    data = await api.client.execute(DECISIONS, {"t": task_id, "s": session_id})
    return list(data["decisions"])


async def _shot(page: Any, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    await page.screenshot(path=str(SHOTS / f"{name}.png"))


def _sent(page: Any) -> list[str]:
    """The pending id of every answer or decision the page sends from now on, in order."""
    sent: list[str] = []

    def note(request: Any) -> None:
        body = request.post_data or ""
        if "respondToClarification" in body or "respondToPermission" in body:
            sent.append(str(json.loads(body)["variables"]["pendingId"]))

    page.on("request", note)
    return sent


# --- the list ------------------------------------------------------------------------------------


@pytest.mark.parametrize("phone", FLAVOURS)
async def test_the_inbox_lists_every_waiting_action_oldest_first_with_its_task_age_and_agent(
    page: Any, web_server: Server, api: Api, phone: bool
) -> None:
    person = await Person.create(api, "Ada")
    _webhook, (webhook_session,) = await person.task("Webhook retries")
    _migrate, (migrate_session,) = await person.task("Staging migration")
    _docs, (docs_session,) = await person.task("Docs pass")
    tone = question("Which tone for the changelog?", options=("Plain", "Chatty"))
    away = await api.ask(docs_session, [tone], wait_seconds=0.3)
    assert (await away.outcome())["__typename"] == "ClarificationDetached"
    asking = await api.ask(webhook_session, [question()], context="The partner times out under load.")
    tool = await ToolAgent.ask(api, migrate_session, context="The schema changed in the last release.")
    network = await person.open(page, web_server, phone=phone)
    assert await _listed(page) == [away.pending_id, asking.pending_id, tool.pending_id]
    first = item(page, away.pending_id)
    await expect(first).to_have_attribute("data-kind", "clarification")
    await expect(first).to_have_attribute("aria-selected", "true")
    await expect(first).to_be_focused()
    await expect(first.get_by_test_id("inbox-item-task")).to_have_text("Docs pass")
    await expect(first.get_by_test_id("inbox-item-agent")).to_have_text("away")
    await expect(first.get_by_test_id("inbox-item-age")).to_have_text(AGE)
    await expect(item(page, asking.pending_id).get_by_test_id("inbox-item-agent")).to_have_text("waiting")
    await expect(item(page, asking.pending_id)).to_have_attribute("aria-selected", "false")
    request = item(page, tool.pending_id)
    await expect(request).to_have_attribute("data-kind", "permission")
    await expect(request.get_by_test_id("permission-tool")).to_have_text("Bash")
    await expect(request.get_by_test_id("permission-input")).to_contain_text("alembic upgrade head")
    await expect(page.get_by_test_id("inbox-empty")).to_have_count(0)
    assert path_of(page) == "/"
    name = "phone" if phone else "desktop"
    await _shot(page, f"list-{name}")
    assert await _serious_violations(page) == [], "the inbox with both kinds"
    await page.keyboard.press("?")
    keys = page.get_by_test_id("inbox-keys")
    await expect(keys).to_be_visible()
    await expect(keys).to_have_attribute("role", "dialog")
    await expect(keys).to_contain_text("Next / previous item")
    await expect(page.get_by_test_id("inbox-keys-close")).to_be_focused()
    assert await _serious_violations(page) == [], "the keys dialog"
    await _shot(page, f"keys-{name}")
    await page.keyboard.press("Escape")
    await expect(keys).to_have_count(0)
    await expect(first).to_be_focused()
    # /inbox is the same view.
    await page.goto(web_server.base_url + "/inbox")
    await page.wait_for_selector("html[data-ready=true]", state="attached")
    await expect(item(page, away.pending_id)).to_be_visible()
    assert await _listed(page) == [away.pending_id, asking.pending_id, tool.pending_id]
    await asking.disconnect()
    await tool.disconnect()
    no_outside_requests(network)


@pytest.mark.parametrize("phone", FLAVOURS)
async def test_with_nothing_waiting_the_inbox_says_so_and_what_will_show_up_there(
    page: Any, web_server: Server, api: Api, phone: bool
) -> None:
    person = await Person.create(api, "Bea")
    await person.task("Quiet work")
    network = await person.open(page, web_server, phone=phone)
    empty = page.get_by_test_id("inbox-empty")
    await expect(empty).to_be_visible()
    await expect(empty).to_contain_text("Nothing needs you right now")
    await expect(empty).to_contain_text("shows up here")
    await expect(page.locator("main.main")).not_to_contain_text("Choose a task")
    assert await _serious_violations(page) == [], "the empty inbox"
    await _shot(page, f"empty-{'phone' if phone else 'desktop'}")
    no_outside_requests(network)


async def test_the_age_ticks_while_the_inbox_is_open(page: Any, web_server: Server, api: Api) -> None:
    person = await Person.create(api, "Cy")
    _task, (session_id,) = await person.task("Ticking")
    agent = await api.ask(session_id)
    network = await person.open(page, web_server)
    age = item(page, agent.pending_id).get_by_test_id("inbox-item-age")
    await expect(age).to_have_text(AGE)
    before = await age.text_content()
    await expect(age).not_to_have_text(str(before), timeout=5_000)
    later = await age.text_content()
    assert int(str(later).split()[0]) > int(str(before).split()[0]), (before, later)
    await agent.disconnect()
    no_outside_requests(network)


@pytest.mark.parametrize("phone", FLAVOURS)
async def test_an_item_answered_in_another_tab_leaves_and_the_selection_moves_on(
    page: Any, browser: Any, web_server: Server, api: Api, phone: bool
) -> None:
    person = await Person.create(api, "Dee")
    _one, (first_session,) = await person.task("First")
    _two, (second_session,) = await person.task("Second")
    first = await api.ask(first_session)
    second = await ToolAgent.ask(api, second_session)
    network = await person.open(page, web_server, phone=phone)
    sent = _sent(page)
    await expect(item(page, first.pending_id)).to_have_attribute("aria-selected", "true")
    other = await browser.new_context()
    try:
        tab = await other.new_page()
        await person.open(tab, web_server)
        await item(tab, first.pending_id).get_by_test_id("clarification-option-policy_opt2").click()
        await item(tab, first.pending_id).get_by_test_id("clarification-submit").click()
        await expect(item(tab, first.pending_id)).to_have_count(0)
    finally:
        await other.close()
    await expect(item(page, first.pending_id)).to_have_count(0)
    selected = item(page, second.pending_id)
    await expect(selected).to_have_attribute("aria-selected", "true")
    await expect(selected).to_be_focused()
    # Decided through the API (no page at all): it leaves too, and the inbox is empty.
    await api.client.execute(RESPOND_PERMISSION, {"p": second.pending_id, "b": "DENY", "m": "by hand"})
    await expect(selected).to_have_count(0)
    await expect(page.get_by_test_id("inbox-empty")).to_be_visible()
    assert sent == [], "this page sent nothing"
    outcome = await first.outcome()
    assert outcome["answers"] == [
        {"questionId": "policy", "selectedOptionIds": ["policy_opt2"], "customText": None}
    ]
    assert (await second.outcome())["decision"]["message"] == "by hand"
    no_outside_requests(network)


@pytest.mark.parametrize("phone", FLAVOURS)
async def test_o_and_open_go_to_the_items_session_and_back_returns_to_the_inbox(
    page: Any, web_server: Server, api: Api, phone: bool
) -> None:
    person = await Person.create(api, "Eli")
    task_id, (_primary, secondary) = await person.task("Two sessions", sessions=2)
    agent = await api.ask(secondary)
    network = await person.open(page, web_server, phone=phone)
    await expect(item(page, agent.pending_id)).to_be_focused()
    await page.keyboard.press("o")
    await expect(page.get_by_test_id("clarification-card")).to_be_visible()
    assert path_of(page) == f"/t/{task_id}/s/{secondary}"
    await expect(page.get_by_test_id(f"session-tab-{secondary}")).to_have_attribute("aria-selected", "true")
    await page.go_back()
    await expect(item(page, agent.pending_id)).to_be_visible()
    await item(page, agent.pending_id).get_by_test_id("inbox-item-open").click()
    assert path_of(page) == f"/t/{task_id}/s/{secondary}"
    await expect(page.get_by_test_id("clarification-card")).to_be_visible()
    # The way back: "Needs you" (in the drawer on a phone).
    if phone:
        await page.get_by_test_id("task-drawer-toggle").click()
    await page.get_by_test_id("inbox-link").click()
    await expect(item(page, agent.pending_id)).to_be_visible()
    assert path_of(page) == "/"
    await agent.disconnect()
    no_outside_requests(network)


# --- triage by keyboard ---------------------------------------------------------------------------


EDITED = dict(EDIT, new_string="MAX_ATTEMPTS = 4\nDELAY = 1.5")
SINGLE = [question("Which retry policy?")]
MULTI = [question("Which failures to retry?", qid="fails", options=("Timeouts", "5xx", "429"), multi=True)]
PAIR = [
    question("Which queue?", qid="queue", options=("Redis", "SQS")),
    question("Which region?", qid="region"),
]
ALIKE = {"command": "npm test"}


class Step:
    """One pending action of the triage: how it is asked, and the keys that settle it."""

    def __init__(
        self, kind: str, keys: list[str], outcome: str, *, live: bool = True, tool_input: Any = None
    ) -> None:
        self.kind = kind
        self.keys = keys
        self.outcome = outcome
        self.live = live
        self.tool_input = tool_input
        self.agent: Any = None
        self.task_id = ""

    async def ask(self, api: Api, session_id: str) -> None:
        wait = None if self.live else 0.3
        if self.kind in ("single", "multi", "pair"):
            questions = {"single": SINGLE, "multi": MULTI, "pair": PAIR}[self.kind]
            self.agent = await api.ask(session_id, questions, wait_seconds=wait)
        else:
            tool, tool_input = ("Edit", EDIT) if self.kind == "edit" else ("Bash", self.tool_input)
            self.agent = await ToolAgent.ask(api, session_id, tool_input, tool=tool, wait_seconds=wait)
        if not self.live:
            assert (await self.agent.outcome())["__typename"] in (
                "ClarificationDetached",
                "PermissionDetached",
            )

    @property
    def pending_id(self) -> str:
        return str(self.agent.pending_id)


def _bash(n: int) -> dict[str, str]:
    return {"command": f"pytest -q tests/part{n}"}


def _plan() -> list[Step]:
    """20 actions, oldest first; a step with no keys was settled by the step before it."""
    edit_keys = ["e", "Control+a", "type:" + json.dumps(EDITED), "Control+Enter"]
    return [
        Step("single", ["1"], "ANSWERED"),
        Step("bash", ["a"], "ALLOWED", tool_input=_bash(1)),
        Step("single", ["s"], "SKIPPED", live=False),
        Step("bash", ["d", "type:Not on staging", "Enter"], "DENIED", live=False, tool_input=_bash(2)),
        Step("multi", ["1", "3", "Enter"], "ANSWERED"),
        Step("edit", edit_keys, "ALLOWED"),
        Step("bash", ["x", "j", "x", "a"], "ALLOWED", tool_input=ALIKE),  # a batch of two
        Step("bash", [], "ALLOWED", tool_input=ALIKE),
        Step("single", ["2"], "ANSWERED"),
        Step("bash", ["a"], "ALLOWED", live=False, tool_input=_bash(3)),
        Step("single", ["j", "a", "k", "2"], "ANSWERED"),  # the next one first, then back
        Step("bash", [], "ALLOWED", tool_input=_bash(4)),
        Step("pair", ["1", "2", "Enter"], "ANSWERED"),
        Step("bash", ["a"], "ALLOWED", tool_input=_bash(5)),
        Step("single", ["1"], "ANSWERED", live=False),
        Step("bash", ["d", "Enter"], "DENIED", tool_input=_bash(6)),
        Step("single", ["s"], "SKIPPED"),
        Step("bash", ["a"], "ALLOWED", tool_input=_bash(7)),
        Step("single", ["1"], "ANSWERED"),
        Step("bash", ["a"], "ALLOWED", tool_input=_bash(8)),
    ]


async def _press(page: Any, keys: list[str]) -> None:
    for key in keys:
        if key.startswith("type:"):
            await page.keyboard.type(key[5:])
        else:
            await page.keyboard.press(key)


@pytest.mark.parametrize("phone", FLAVOURS)
async def test_twenty_actions_across_five_tasks_are_triaged_with_the_keyboard_alone_each_once(
    page: Any, web_server: Server, api: Api, phone: bool
) -> None:
    person = await Person.create(api, "Flo")
    plan = _plan()
    tasks = [await person.task(f"Triage {n + 1}", sessions=4) for n in range(5)]
    for index, step in enumerate(plan):
        step.task_id, sessions = tasks[index % 5]
        await step.ask(api, sessions[index // 5])
    network = await person.open(page, web_server, phone=phone)
    sent = _sent(page)
    assert await _listed(page) == [step.pending_id for step in plan]
    await expect(item(page, plan[0].pending_id)).to_be_focused()
    await _shot(page, f"triage-{'phone' if phone else 'desktop'}")
    for index, step in enumerate(plan):
        if not step.keys:
            continue
        await _press(page, step.keys)
        settled = [step] if plan[index + 1 :][:1] == [] or plan[index + 1].keys else [step, plan[index + 1]]
        for done in settled:
            await expect(item(page, done.pending_id)).to_have_count(0)
    await expect(page.get_by_test_id("inbox-empty")).to_be_visible()
    assert sorted(sent) == sorted(step.pending_id for step in plan), "one answer or decision each"

    for step in plan:
        if step.live:
            outcome = await step.agent.outcome()
            assert outcome["__typename"] in (
                "ClarificationAnswered",
                "ClarificationRejected",
                "PermissionDecided",
            )
    decided: dict[str, list[dict[str, Any]]] = {}
    for task_id, _sessions in tasks:
        for decision in await _decisions(api, task_id=task_id):
            decided.setdefault(decision["pendingId"], []).append(decision)
    for step in plan:
        (decision,) = decided[step.pending_id]  # exactly one decision each
        assert decision["outcome"] == step.outcome, (step.kind, step.keys, decision)
        assert decision["decidedBy"] == person.name
    by_keys = {tuple(step.keys): decided[step.pending_id][0] for step in plan if step.keys}
    assert by_keys[("d", "type:Not on staging", "Enter")]["message"] == "Not on staging"
    edited = decided[plan[5].pending_id][0]
    assert edited["edited"] is True
    assert edited["updatedInput"] == EDITED
    assert (await plan[4].agent.outcome())["answers"][0]["selectedOptionIds"] == ["fails_opt1", "fails_opt3"]
    assert (await plan[12].agent.outcome())["answers"] == [
        {"questionId": "queue", "selectedOptionIds": ["queue_opt1"], "customText": None},
        {"questionId": "region", "selectedOptionIds": ["region_opt2"], "customText": None},
    ]
    no_outside_requests(network)


# --- batch ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("phone", FLAVOURS)
async def test_a_batch_allows_several_alike_requests_each_decided_and_delivered_once(
    page: Any, web_server: Server, api: Api, phone: bool
) -> None:
    person = await Person.create(api, "Gus")
    task_id, sessions = await person.task("Batch", sessions=4)
    alike = [await ToolAgent.ask(api, session_id, ALIKE) for session_id in sessions[:3]]
    other = await ToolAgent.ask(api, sessions[3], _bash(9))
    network = await person.open(page, web_server, phone=phone)
    sent = _sent(page)
    await expect(item(page, other.pending_id).get_by_test_id("inbox-item-check")).to_have_count(0)
    await item(page, alike[1].pending_id).get_by_test_id("inbox-item-check").check()
    batch = page.get_by_test_id("inbox-batch")
    await expect(batch).to_contain_text("1 checked")
    await expect(batch).to_contain_text("npm test")
    await page.get_by_test_id("inbox-batch-all").click()
    await expect(batch).to_contain_text("3 checked")
    for agent in alike:
        await expect(item(page, agent.pending_id).get_by_test_id("inbox-item-check")).to_be_checked()
    assert await _serious_violations(page) == [], "the batch bar"
    await _shot(page, f"batch-{'phone' if phone else 'desktop'}")
    await page.get_by_test_id("inbox-batch-allow").click()
    for agent in alike:
        await expect(item(page, agent.pending_id)).to_have_count(0)
        decision = (await agent.outcome())["decision"]
        assert decision["behavior"] == "ALLOW"
        assert decision["updatedInput"] == ALIKE
    await expect(item(page, other.pending_id)).to_be_visible()
    await expect(batch).to_have_count(0)
    assert sorted(sent) == sorted(agent.pending_id for agent in alike)
    decided = [d for d in await _decisions(api, task_id=task_id) if d["outcome"] == "ALLOWED"]
    assert sorted(d["pendingId"] for d in decided) == sorted(agent.pending_id for agent in alike)
    await other.disconnect()
    no_outside_requests(network)


# --- the phone --------------------------------------------------------------------------------------


async def _in_view(locator: Any) -> None:
    """Wholly on the screen as it is, without scrolling anything."""
    await expect(locator).to_be_in_viewport(ratio=1)
    box = await locator.bounding_box()
    assert box is not None
    assert box["y"] + box["height"] <= PHONE["height"], box


async def test_on_a_phone_the_first_options_and_allow_deny_show_without_scrolling(
    browser: Any, web_server: Server, api: Api
) -> None:
    person = await Person.create(api, "Hal")
    question_task, (question_session,) = await person.task("Phone question")
    tool_task, (tool_session,) = await person.task("Phone permission")
    for session_id in (question_session, tool_session):
        for n in range(8):
            await api.client.execute(
                "mutation($s: ID!, $c: String!) { postMessage(sessionId: $s, content: $c) { id } }",
                {"s": session_id, "c": f"Step {n}: reading the delivery worker's retry loop and its tests."},
            )
    long_context = (
        "The partner times out under load; the retry policy decides how often we hit it again. " * 2
    )
    asking = await api.ask(question_session, SINGLE + MULTI, context=long_context)
    tool = await ToolAgent.ask(api, tool_session, BASH, context=long_context)
    context = await browser.new_context(viewport=PHONE, has_touch=True)
    try:
        page = await context.new_page()
        network = await person.open(page, web_server, phone=True)
        first = item(page, asking.pending_id)
        await _in_view(first.get_by_test_id("clarification-option-policy_opt1"))
        await _in_view(first.get_by_test_id("clarification-option-policy_opt2"))
        await first.get_by_test_id("clarification-option-policy_opt1").tap()
        await first.get_by_test_id("clarification-option-fails_opt2").tap()
        await first.get_by_test_id("clarification-submit").tap()
        await expect(first).to_have_count(0)
        request = item(page, tool.pending_id)
        for test_id in ("permission-allow", "permission-deny", "permission-input"):
            await _in_view(request.get_by_test_id(test_id))
        await _shot(page, "phone-permission-item")
        # The session cards: the first options, and Allow/Deny with the command, without scrolling.
        await page.goto(f"{web_server.base_url}/t/{tool_task}/s/{tool_session}")
        card = page.get_by_test_id("permission-card")
        for test_id in ("permission-allow", "permission-deny", "permission-input"):
            await _in_view(card.get_by_test_id(test_id))
        await expect(card.get_by_test_id("permission-input")).to_contain_text("alembic upgrade head")
        await _shot(page, "phone-permission-card")
        again = await api.ask(question_session, SINGLE + MULTI, context=long_context)
        await page.goto(f"{web_server.base_url}/t/{question_task}/s/{question_session}")
        card = page.get_by_test_id("clarification-card")
        await _in_view(card.get_by_test_id("clarification-option-policy_opt1"))
        await _in_view(card.get_by_test_id("clarification-option-policy_opt2"))
        await _shot(page, "phone-question-card")
        await again.disconnect()
        await tool.disconnect()
        no_outside_requests(network)
    finally:
        await context.close()


# --- the history's decision lines ------------------------------------------------------------------

ANSWER = """mutation($p: ID!, $a: [ClarificationAnswerInput!]!, $r: Boolean!) {
  respondToClarification(pendingId: $p, answers: $a, rejected: $r) { __typename } }"""
DECIDE = """mutation($p: ID!, $b: PermissionBehavior!, $u: JSON, $m: String, $r: Boolean!) {
  respondToPermission(pendingId: $p, behavior: $b, updatedInput: $u, message: $m, remember: $r) {
    __typename } }"""
SET_STATE = "mutation($s: ID!, $st: SessionState!) { setSessionState(sessionId: $s, state: $st) { id } }"


async def _settled_session(api: Api, client: Client, session_id: str) -> dict[str, str]:
    """One session where a person answered, skipped, allowed, allowed an edit, denied with a reason
    and always allowed, then a rule allowed: the pending id of each, by what happened."""
    ids: dict[str, str] = {}
    for name, answer in (("answered", False), ("skipped", True)):
        agent = await api.ask(session_id, SINGLE)
        answers = [] if answer else [{"questionId": "policy", "selectedOptionIds": ["policy_opt1"]}]
        await client.execute(ANSWER, {"p": agent.pending_id, "a": answers, "r": answer})
        await agent.outcome()
        ids[name] = agent.pending_id
    decisions = [
        ("allowed", _bash(11), "ALLOW", None, None, False),
        ("edited", EDIT, "ALLOW", EDITED, None, False),
        ("denied", _bash(12), "DENY", None, "Not on staging", False),
        ("always", _bash(13), "ALLOW", None, None, True),
    ]
    for name, tool_input, behavior, updated, message, remember in decisions:
        tool = "Edit" if tool_input is EDIT else "Bash"
        tool_agent = await ToolAgent.ask(api, session_id, tool_input, tool=tool)
        variables = {"p": tool_agent.pending_id, "b": behavior, "u": updated, "m": message, "r": remember}
        await client.execute(DECIDE, variables)
        await tool_agent.outcome()
        ids[name] = tool_agent.pending_id
    by_rule = await ToolAgent.ask(api, session_id, _bash(13))
    assert by_rule.first["__typename"] == "PermissionDecided"
    ids["rule"] = by_rule.pending_id
    return ids


@pytest.mark.parametrize("phone", FLAVOURS)
async def test_the_history_says_who_decided_what_for_each_settled_action(
    page: Any, web_server: Server, api: Api, phone: bool
) -> None:
    person = await Person.create(api, "Ida")
    task_id, (main, moved_on, finished) = await person.task("Audit trail", sessions=3)
    async with contextlib.aclosing(Client(web_server.base_url, person.token)) as client:
        ids = await _settled_session(api, client, main)
    superseded = await api.ask(moved_on, SINGLE, wait_seconds=0.3)
    await api.start_turn(moved_on)
    expired = await api.ask(finished, SINGLE, wait_seconds=0.3)
    await api.client.execute(SET_STATE, {"s": finished, "st": "COMPLETED"})

    network = await person.open(page, web_server, f"/t/{task_id}/s/{main}", phone=phone)

    def line(name: str) -> Locator:
        found: Locator = page.get_by_test_id(f"decision-{ids[name]}")
        return found

    await expect(line("answered")).to_contain_text(f"{person.name} answered: Exponential backoff")
    await expect(line("skipped")).to_contain_text(f"{person.name} skipped")
    await expect(line("allowed")).to_contain_text(f"{person.name} allowed Bash: pytest -q tests/part11")
    edited = line("edited")
    await expect(edited).to_contain_text(f"{person.name} allowed Edit with an edit")
    await expect(edited.locator(".perm-line.del")).to_contain_text(["MAX_ATTEMPTS = 5", "DELAY = 2.0"])
    await expect(edited.locator(".perm-line.add")).to_contain_text(["MAX_ATTEMPTS = 4", "DELAY = 1.5"])
    await expect(line("denied")).to_contain_text(f"{person.name} denied Bash: pytest -q tests/part12")
    await expect(line("denied")).to_contain_text("“Not on staging”")
    await expect(line("always")).to_contain_text(f"{person.name} allowed Bash: pytest -q tests/part13")
    await expect(line("rule")).to_contain_text(
        "A rule (Bash(pytest -q tests/part13), session scope) allowed Bash"
    )
    # Each line sits under what it decided, in the order asked.
    order = await page.locator("#transcript [data-testid^=decision-]").evaluate_all(
        "lines => lines.map(line => line.dataset.testid.slice(9))"
    )
    assert order == [
        ids[name] for name in ("answered", "skipped", "allowed", "edited", "denied", "always", "rule")
    ]
    assert await _serious_violations(page) == [], "the decision lines"
    await _shot(page, f"decisions-{'phone' if phone else 'desktop'}")

    await page.goto(f"{web_server.base_url}/t/{task_id}/s/{moved_on}")
    await expect(page.get_by_test_id(f"decision-{superseded.pending_id}")).to_contain_text(
        "No longer current, the agent moved on: Which retry policy?"
    )
    await page.goto(f"{web_server.base_url}/t/{task_id}/s/{finished}")
    await expect(page.get_by_test_id(f"decision-{expired.pending_id}")).to_contain_text(
        "Expired, nobody answered in time: Which retry policy?"
    )
    no_outside_requests(network)


async def test_a_decision_taken_while_the_session_is_open_adds_its_line_live(
    page: Any, web_server: Server, api: Api
) -> None:
    person = await Person.create(api, "Jo")
    task_id, (session_id,) = await person.task("Live line")
    agent = await ToolAgent.ask(api, session_id, _bash(21))
    network = await person.open(page, web_server, f"/t/{task_id}/s/{session_id}")
    await page.get_by_test_id("permission-reason").fill("Wrong folder")
    await page.get_by_test_id("permission-deny").click()
    line = page.get_by_test_id(f"decision-{agent.pending_id}")
    await expect(line).to_contain_text(f"{person.name} denied Bash: pytest -q tests/part21 — “Wrong folder”")
    await agent.disconnect()
    no_outside_requests(network)


# --- opening a task ---------------------------------------------------------------------------------

CREATE_SESSION = (
    """mutation($t: ID!) { createSession(taskId: $t, isPrimary: true, inputCapable: false) { id } }"""
)


@pytest.mark.parametrize("phone", FLAVOURS)
async def test_a_task_with_one_session_opens_it_even_where_activation_falls_back_to_the_task(
    page: Any, web_server: Server, api: Api, phone: bool
) -> None:
    person = await Person.create(api, "Kit")
    task_id, _none = await person.task("Watched only", sessions=0)
    # Its one session cannot take input, so activation finds no owner and falls back to the task.
    session_id = (await api.client.execute(CREATE_SESSION, {"t": task_id}))["createSession"]["id"]
    await api.client.execute(SET_STATE, {"s": session_id, "st": "RUNNING"})
    await api.start_turn(session_id)
    agent = await api.ask(session_id)
    network = await person.open(page, web_server, phone=phone)
    await activate(page, task_id, phone=phone)
    assert await activations_finished(page, 1) == "task"
    await expect(page.get_by_test_id(f"session-tab-{session_id}")).to_have_attribute("aria-selected", "true")
    assert path_of(page) == f"/t/{task_id}/s/{session_id}"
    await expect(page.locator(".task-head .step")).to_have_count(0)  # "todo" says nothing
    await agent.disconnect()
    no_outside_requests(network)
