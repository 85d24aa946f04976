"""Permission rules in the web app, in Chromium against a real server, desktop (1280x800) and phone
(390x844): the permission card offers the rules a person means (this exact call, the command's prefix,
the file's folder, the tool), each at a scope, and "any input" of Bash asks once more, saying what it
lets through; the rules panel lists what applies (pattern, behavior, scope, what it decided), imports
a pasted Claude Code settings block whole or not at all, and shows a scope's block to copy; axe finds
nothing serious on any of it."""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from playwright.async_api import expect

from tests.e2e.support import no_outside_requests, serve
from tests.e2e.test_web_a11y import _serious_violations
from tests.e2e.test_web_permissions import FLAVOURS, ToolAgent, _rules, _sent_decisions, perm_card
from tests.e2e.webapp import Api, open_app
from tests.servers import Server

pytestmark = pytest.mark.browser
expect.set_options(timeout=10_000)

SHOTS = "/tmp/turnwise-rules-shots"
PUSH = {"command": "git push origin main"}
CREATE_TASK = "mutation($t: String!, $p: String) { createTask(title: $t, project: $p) { id } }"
CREATE_SESSION = "mutation($task: ID!) { createSession(taskId: $task, isPrimary: true) { id } }"
SET_STATE = "mutation($s: ID!) { setSessionState(sessionId: $s, state: RUNNING) { id } }"
ADD = """mutation($p: String!, $b: RuleBehavior!, $s: RuleScope!, $id: ID) {
  addPermissionRule(pattern: $p, behavior: $b, scope: $s, scopeId: $id) { id } }"""
SETTINGS = "query($s: RuleScope!, $id: ID) { permissionSettings(scope: $s, scopeId: $id) }"


@pytest.fixture(scope="module")
def web_server() -> Iterator[Server]:
    yield from serve("sqlite")


@pytest.fixture
async def api(web_server: Server) -> AsyncIterator[Api]:
    client = Api(web_server)
    try:
        yield client
    finally:
        await client.aclose()


async def project_session(api: Api, project: str) -> tuple[str, str]:
    """A task of `project` with one RUNNING session and an open turn."""
    task_id = str((await api.client.execute(CREATE_TASK, {"t": "Shop", "p": project}))["createTask"]["id"])
    session_id = str((await api.client.execute(CREATE_SESSION, {"task": task_id}))["createSession"]["id"])
    await api.client.execute(SET_STATE, {"s": session_id})
    await api.start_turn(session_id)
    return task_id, session_id


@pytest.mark.parametrize("phone", FLAVOURS)
async def test_the_card_offers_the_rules_a_person_means_and_any_input_asks_once_more(
    page: Any, web_server: Server, api: Api, phone: bool
) -> None:
    name = "phone" if phone else "desktop"
    os.makedirs(SHOTS, exist_ok=True)
    task_id, (session_id, sibling) = await api.task("Push", sessions=2)
    agent = await ToolAgent.ask(api, session_id, PUSH)
    network = await open_app(page, web_server, f"/t/{task_id}/s/{session_id}", phone=phone)
    await expect(perm_card(page)).to_be_visible()
    offered = page.get_by_test_id("permission-suggestions").get_by_role("button")
    await expect(offered).to_have_count(3)
    await expect(offered.nth(0)).to_contain_text("Bash(git push origin main)")
    await expect(offered.nth(1)).to_contain_text("Bash(git push:*)")
    await expect(offered.nth(2)).to_contain_text("any input")
    await expect(offered.nth(0)).to_have_attribute("aria-pressed", "true")
    await expect(page.get_by_test_id("permission-scope-session")).to_have_attribute("aria-pressed", "true")
    await expect(page.get_by_test_id("permission-scope-project")).to_have_count(0)  # a task without one
    sent = _sent_decisions(page)
    await offered.nth(2).click()
    await page.get_by_test_id("permission-scope-task").click()
    await page.get_by_test_id("permission-always").click()
    warning = page.get_by_test_id("permission-broad-warning")
    await expect(warning).to_be_visible()
    await expect(warning).to_contain_text("Allow any input of Bash in this task?")
    await expect(warning).to_contain_text("rm -rf")
    await expect(page.get_by_test_id("permission-broad-confirm")).to_be_focused()
    await page.screenshot(path=f"{SHOTS}/broad-warning-{name}.png")
    assert await _serious_violations(page) == [], "the card asking once more"
    await asyncio.sleep(0.3)
    assert sent == [], "nothing is remembered before the warning is confirmed"
    await page.get_by_test_id("permission-broad-cancel").click()
    await expect(warning).to_have_count(0)
    await expect(offered.nth(2)).to_be_focused()
    await page.get_by_test_id("permission-always").click()
    await page.get_by_test_id("permission-broad-confirm").click()
    outcome = await agent.outcome()
    assert (outcome["decision"]["behavior"], outcome["decision"]["remember"]) == ("ALLOW", True)
    (rule,) = await _rules(api, session_id)
    assert (rule["pattern"], rule["scope"]) == ("Bash", "TASK")
    other = await ToolAgent.ask(api, sibling, {"command": "pytest -q"})
    assert other.first["__typename"] == "PermissionDecided", "the task's other session"
    no_outside_requests(network)


@pytest.mark.parametrize("phone", FLAVOURS)
async def test_a_prefix_rule_is_remembered_without_a_warning(
    page: Any, web_server: Server, api: Api, phone: bool
) -> None:
    task_id, (session_id,) = await api.task("Prefix")
    agent = await ToolAgent.ask(api, session_id, PUSH)
    network = await open_app(page, web_server, f"/t/{task_id}/s/{session_id}", phone=phone)
    await page.get_by_test_id("permission-suggestion-1").click()
    await expect(page.get_by_test_id("permission-suggestion-1")).to_have_attribute("aria-pressed", "true")
    await page.get_by_test_id("permission-always").click()
    assert (await agent.outcome())["decision"]["remember"] is True
    await expect(page.get_by_test_id("permission-broad-warning")).to_have_count(0)
    (rule,) = await _rules(api, session_id)
    assert (rule["pattern"], rule["scope"]) == ("Bash(git push:*)", "SESSION")
    assert (await ToolAgent.ask(api, session_id, {"command": "git push --tags"})).first[
        "__typename"
    ] == "PermissionDecided"
    assert (await ToolAgent.ask(api, session_id, {"command": "git pull"})).first[
        "__typename"
    ] == "PermissionAsked"
    no_outside_requests(network)


async def test_the_folder_of_an_edit_is_offered_and_remembered_for_the_project(
    page: Any, web_server: Server, api: Api
) -> None:
    project = f"/srv/shop-{uuid.uuid4().hex[:6]}"
    task_id, session_id = await project_session(api, project)
    edit = {"file_path": f"{project}/backend/webhooks/retry.py", "old_string": "3", "new_string": "5"}
    agent = await ToolAgent.ask(api, session_id, edit, tool="Edit")
    network = await open_app(page, web_server, f"/t/{task_id}/s/{session_id}")
    folder = page.get_by_test_id("permission-suggestions").get_by_role(
        "button", name="Edit(backend/webhooks/**)"
    )
    await expect(folder).to_contain_text("Edits in backend/webhooks/")
    await folder.click()
    await page.get_by_test_id("permission-scope-project").click()
    await page.get_by_test_id("permission-always").click()
    assert (await agent.outcome())["decision"]["remember"] is True
    (rule,) = await _rules(api, session_id)
    assert (rule["pattern"], rule["scope"]) == ("Edit(backend/webhooks/**)", "PROJECT")
    _, elsewhere = await project_session(api, project)
    other = dict(edit, file_path=f"{project}/backend/webhooks/queue.py")
    assert (await ToolAgent.ask(api, elsewhere, other, tool="Edit")).first[
        "__typename"
    ] == "PermissionDecided"
    no_outside_requests(network)


BLOCK = {
    "permissions": {
        "allow": ["Bash(npm run test:*)", "Edit(src/**)"],
        "ask": ["Bash(git push *)"],
        "deny": ["Bash(rm -rf *)", "Read(./.env)"],
        "defaultMode": "acceptEdits",
    }
}


@pytest.mark.parametrize("phone", FLAVOURS)
async def test_the_rules_panel_lists_imports_and_shows_the_block_to_copy(
    page: Any, web_server: Server, api: Api, phone: bool
) -> None:
    name = "phone" if phone else "desktop"
    os.makedirs(SHOTS, exist_ok=True)
    task_id, (session_id,) = await api.task("Panel")
    network = await open_app(page, web_server, f"/t/{task_id}/s/{session_id}", phone=phone)
    await expect(page.get_by_test_id("permission-rules")).to_have_count(0)
    toggle = page.get_by_test_id("rules-manage")
    await expect(toggle).to_have_attribute("aria-expanded", "false")
    await toggle.click()
    await expect(toggle).to_have_attribute("aria-expanded", "true")
    await page.get_by_test_id("rules-scope-task").click()
    text = page.get_by_test_id("rules-import-text")
    # One entry it cannot read: refused by its place, nothing imported.
    bad = {"allow": ["Bash(npm test)", "Bash(unclosed"], "deny": ["Grep(secret)"]}
    await text.fill(json.dumps(bad))
    await page.get_by_test_id("rules-import-submit").click()
    error = page.get_by_test_id("rules-import-error")
    await expect(error).to_contain_text("allow[1]")
    await expect(error).to_contain_text("deny[0]")
    await expect(text).to_have_attribute("aria-invalid", "true")
    assert await _rules(api, session_id) == []
    assert await _serious_violations(page) == [], "the import refused"
    await text.fill(json.dumps(BLOCK, indent=2))
    await page.get_by_test_id("rules-import-submit").click()
    await expect(page.get_by_test_id("rules-import-done")).to_have_text("Imported 5 rules.")
    listed = page.get_by_test_id("permission-rules").locator("li")
    await expect(listed).to_have_count(5)
    await expect(listed.nth(0)).to_have_attribute("data-behavior", "DENY")
    await expect(listed.nth(2).get_by_test_id("permission-rule-pattern")).to_have_text("Bash(git push *)")
    await expect(listed.nth(4).get_by_test_id("permission-rule-scope")).to_have_text("this task")
    await expect(listed.nth(0).get_by_test_id("permission-rule-decided")).to_have_text(
        "nothing decided here yet"
    )
    # A rule decides: the panel says so.
    denied = await ToolAgent.ask(api, session_id, {"command": "rm -rf build"})
    assert denied.first["decision"]["behavior"] == "DENY"
    await expect(listed.nth(0).get_by_test_id("permission-rule-pattern")).to_have_text("Bash(rm -rf *)")
    await expect(listed.nth(0).get_by_test_id("permission-rule-decided")).to_have_text(
        "decided 1 request here"
    )
    await page.get_by_test_id("rules-export-show").click()
    block = page.get_by_test_id("rules-export-block")
    await expect(block).to_be_visible()
    shown = json.loads(await block.inner_text())
    expected = await api.client.execute(SETTINGS, {"s": "TASK", "id": task_id})
    assert shown == {"permissions": expected["permissionSettings"]}
    assert shown["permissions"]["deny"] == BLOCK["permissions"]["deny"]
    await page.screenshot(path=f"{SHOTS}/panel-{name}.png", full_page=True)
    assert await _serious_violations(page) == [], "the rules panel with its form and block"
    # Revoke from the panel.
    first = listed.nth(0)
    revoked_id = str(await first.get_attribute("data-testid")).removeprefix("permission-rule-")
    await first.get_by_test_id("permission-rule-revoke").click()
    await expect(page.get_by_test_id(f"permission-rule-{revoked_id}")).to_have_count(0)
    assert revoked_id not in [r["id"] for r in await _rules(api, session_id)]
    no_outside_requests(network)


async def test_an_inbox_item_keeps_its_rules_behind_one_button_until_opened(
    page: Any, web_server: Server, api: Api
) -> None:
    _task_id, (session_id,) = await api.task("Inbox rule")
    agent = await ToolAgent.ask(api, session_id, PUSH)
    network = await open_app(page, web_server, "/inbox")
    item = page.get_by_test_id(f"inbox-item-{agent.pending_id}")
    await expect(item.get_by_test_id("permission-suggestions")).to_have_count(0)
    await item.get_by_test_id("permission-always").click()
    await expect(item.get_by_test_id("permission-suggestion-0")).to_be_focused()
    await item.get_by_test_id("permission-suggestion-1").click()
    await item.get_by_test_id("permission-always").click()
    assert (await agent.outcome())["decision"]["remember"] is True
    (rule,) = await _rules(api, session_id)
    assert (rule["pattern"], rule["scope"]) == ("Bash(git push:*)", "SESSION")
    no_outside_requests(network)
