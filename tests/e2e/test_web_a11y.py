"""Accessibility of the web app: axe-core in the page, the card by keyboard and by touch, the phone layout.

axe-core comes from the npm registry at the version frontend_py/package.json pins (a devDependency
that scripts/install-assets.sh installs); it is injected into the page from node_modules, so nothing
is fetched while the tests run.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from playwright.async_api import expect

from tests.e2e.conftest import REPO
from tests.e2e.webapp import DESKTOP, PHONE, Api, Network, open_app, question
from tests.servers import ADMIN_TOKEN, Server, drop_database, fresh_database

pytestmark = pytest.mark.browser
expect.set_options(timeout=10_000)

AXE = REPO / "frontend_py" / "node_modules" / "axe-core" / "axe.min.js"
FLAVOURS = [pytest.param(False, id="desktop"), pytest.param(True, id="phone")]
TOUCH = 44  # px: the smallest comfortable touch target (WCAG 2.5.5)

SINGLE = question()  # "Which retry policy should the webhook use?", choose one of two
FREE_TEXT: dict[str, Any] = {
    "id": "notes",
    "title": "Notes",
    "prompt": "Anything the retry loop must log? Write it in your own words if none fits.",
    "multiSelect": True,
    "options": [
        {"id": "notes_attempts", "label": "Attempt count", "description": "One line per try"},
        {"id": "notes_body", "label": "Response body", "description": "Truncated to 1 KB"},
        {"id": "notes_none", "label": "Nothing extra"},
    ],
}
CONTEXT = "The webhook times out under load; the retry policy decides how often we hit the partner again."


@pytest.fixture(scope="module")
def server() -> Any:
    url = fresh_database("sqlite")
    started = Server(url, env={"TURNWISE_DISPATCH_SECONDS": "5"}).start()
    try:
        yield started
    finally:
        started.stop()
        drop_database(url)


@pytest.fixture
async def api(server: Server) -> AsyncIterator[Api]:
    client = Api(server)
    yield client
    await client.aclose()


async def _two_question_session(api: Api, title: str) -> tuple[str, str, Any]:
    """A session with some conversation and a waiting two-question card; the asking agent."""
    task_id, (session_id,) = await api.task(title)
    for n in range(6):
        await api.client.execute(
            "mutation($s: ID!, $c: String!, $a: String!) {"
            " postMessage(sessionId: $s, content: $c, author: $a) { id } }",
            {"s": session_id, "c": f"Step {n}: reading the delivery worker's retry loop.", "a": "agent"},
        )
    agent = await api.ask(session_id, [SINGLE, FREE_TEXT], context=CONTEXT)
    return task_id, session_id, agent


async def _serious_violations(page: Any) -> list[str]:
    """axe-core's serious and critical violations on the page as it is now: ``id (impact): targets``."""
    if not AXE.exists():
        pytest.fail(f"{AXE.relative_to(REPO)} is missing: run scripts/install-assets.sh")
    await page.add_script_tag(path=str(AXE))
    violations = await page.evaluate(
        """async () => {
            const result = await axe.run(document, { resultTypes: ["violations"] });
            return result.violations.map(v => ({
                id: v.id, impact: v.impact, targets: v.nodes.map(n => n.target.join(" ")) }));
        }"""
    )
    return [
        f"{v['id']} ({v['impact']}): {', '.join(v['targets'])}"
        for v in violations
        if v["impact"] in ("serious", "critical")
    ]


async def _box(locator: Any) -> dict[str, float]:
    box = await locator.bounding_box()
    assert box is not None, "not rendered"
    return dict(box)


def _card(page: Any) -> Any:
    return page.get_by_test_id("clarification-card")


# --- axe ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("phone", FLAVOURS)
async def test_axe_finds_nothing_serious_on_sign_in_the_session_view_and_the_card(
    page: Any, server: Server, api: Api, phone: bool
) -> None:
    task_id, session_id, agent = await _two_question_session(api, "Axe")
    quiet_id, (quiet_session,) = await api.task("Nothing asked")

    network = Network(server.base_url)
    await page.context.route("**/*", network.guard)
    await page.set_viewport_size(PHONE if phone else DESKTOP)
    await page.goto(server.base_url + "/")
    await expect(page.get_by_test_id("signin-token")).to_be_visible()
    assert await _serious_violations(page) == [], "sign-in page"
    await expect(page.get_by_role("main")).to_have_count(1)  # axe rates a missing landmark moderate

    await page.goto(server.base_url + f"/t/{quiet_id}/s/{quiet_session}#token=" + ADMIN_TOKEN)
    await expect(page.locator("#transcript .msg").first).to_be_visible()
    assert await _serious_violations(page) == [], "session view"
    await expect(page.get_by_role("main")).to_have_count(1)
    # The transcript scrolls, so it takes focus: keyboards scroll it in every browser.
    await expect(page.locator("#transcript")).to_have_attribute("tabindex", "0")

    await page.goto(server.base_url + f"/t/{task_id}/s/{session_id}")
    await expect(_card(page)).to_be_visible()
    assert await _serious_violations(page) == [], "session view with a question card"

    await page.get_by_test_id("clarification-hide").click()
    await expect(page.get_by_test_id("clarification-reopen")).to_be_visible()
    assert await _serious_violations(page) == [], "session view with the card hidden"
    assert network.outside == []
    await agent.disconnect()


# --- the card: never cut off, hidden by a real control, focus where it belongs -------------------------


@pytest.mark.parametrize("phone", FLAVOURS)
async def test_every_part_of_the_card_scrolls_into_view_inside_it(
    page: Any, server: Server, api: Api, phone: bool
) -> None:
    task_id, session_id, agent = await _two_question_session(api, "Nothing cut off")
    await open_app(page, server, f"/t/{task_id}/s/{session_id}", phone=phone)
    card = _card(page)
    await expect(card).to_be_visible()
    body = card.locator(".card-body")
    assert await body.evaluate("b => getComputedStyle(b).overflowY") in ("auto", "scroll")
    parts = [
        *[page.get_by_test_id(f"clarification-option-{o['id']}") for o in SINGLE["options"]],
        *[page.get_by_test_id(f"clarification-option-{o['id']}") for o in FREE_TEXT["options"]],
        *[page.get_by_test_id("clarification-custom-text").nth(n) for n in range(2)],
    ]
    for part in parts:
        await part.scroll_into_view_if_needed()
        await expect(part).to_be_in_viewport(ratio=0.95)  # sub-pixel edges aside
        inner, outer = await _box(part), await _box(body)
        assert inner["y"] >= outer["y"] - 1
        assert inner["y"] + inner["height"] <= outer["y"] + outer["height"] + 1
        # Skip and Submit stay in view wherever the body is scrolled to.
        for test_id in ("clarification-submit", "clarification-skip"):
            await expect(page.get_by_test_id(test_id)).to_be_in_viewport(ratio=1)
    await agent.disconnect()


async def test_on_a_phone_the_transcript_keeps_room_and_the_card_hides_and_comes_back_by_touch(
    browser: Any, server: Server, api: Api
) -> None:
    task_id, session_id, agent = await _two_question_session(api, "Phone card")
    context = await browser.new_context(viewport=PHONE, has_touch=True)
    try:
        page = await context.new_page()
        network = await open_app(page, server, f"/t/{task_id}/s/{session_id}", phone=True)
        card = _card(page)
        await expect(card).to_be_visible()
        transcript = await _box(page.locator("#transcript"))
        assert transcript["height"] >= 0.4 * PHONE["height"] - 1, transcript  # 40%, to the pixel

        hide = card.get_by_role("button", name="Hide", exact=True)
        await expect(hide).to_be_visible()
        assert await hide.get_attribute("data-testid") == "clarification-hide"
        size = await _box(hide)
        assert size["width"] >= TOUCH, size
        assert size["height"] >= TOUCH, size
        controls = card.locator("button, textarea")
        for n in range(await controls.count()):
            assert (await _box(controls.nth(n)))["height"] >= TOUCH - 0.5, await controls.nth(n).inner_html()

        await hide.tap()
        await expect(card).to_have_count(0)
        reopen = page.get_by_test_id("clarification-reopen")
        await expect(reopen).to_be_focused()
        assert (await _box(reopen))["height"] >= TOUCH
        shown = await _box(page.locator("#transcript"))
        assert shown["height"] > transcript["height"]

        await reopen.tap()
        await expect(card).to_be_visible()
        await expect(card).to_be_focused()
        assert network.outside == []
    finally:
        await context.close()
    await agent.disconnect()


@pytest.mark.parametrize("phone", FLAVOURS)
async def test_escape_hides_the_card_and_focus_goes_to_the_control_that_reopens_it(
    page: Any, server: Server, api: Api, phone: bool
) -> None:
    task_id, session_id, agent = await _two_question_session(api, "Escape and focus")
    await open_app(page, server, f"/t/{task_id}/s/{session_id}", phone=phone)
    option = page.get_by_test_id("clarification-option-policy_opt1")
    await option.focus()
    await page.keyboard.press("Space")
    await expect(option).to_have_attribute("aria-checked", "true")
    await expect(option).to_be_focused()  # choosing re-renders the card; the focus stays put
    await page.keyboard.press("Escape")
    await expect(_card(page)).to_have_count(0)
    await expect(page.get_by_test_id("clarification-reopen")).to_be_focused()
    await page.keyboard.press("Enter")
    await expect(_card(page)).to_be_focused()
    # The draft survived hiding, and the question was not answered.
    await expect(option).to_have_attribute("aria-checked", "true")
    assert (await api.bundle(agent.pending_id))["state"] == "ACTIVE_LIVE"
    await agent.disconnect()


# --- semantics -----------------------------------------------------------------------------------------


async def test_choose_one_is_a_radio_group_and_each_text_box_is_named_after_its_question(
    page: Any, server: Server, api: Api
) -> None:
    task_id, session_id, agent = await _two_question_session(api, "Semantics")
    await open_app(page, server, f"/t/{task_id}/s/{session_id}")
    await expect(_card(page)).to_be_visible()
    group = page.get_by_role("radiogroup", name=SINGLE["prompt"], exact=True)
    await expect(group.get_by_role("radio")).to_have_count(2)
    first, second = (page.get_by_test_id(f"clarification-option-{o['id']}") for o in SINGLE["options"])
    # One tab stop for the group; arrows move the choice and the focus.
    await expect(first).to_have_attribute("tabindex", "0")
    await expect(second).to_have_attribute("tabindex", "-1")
    await first.focus()
    await page.keyboard.press("ArrowDown")
    await expect(second).to_have_attribute("aria-checked", "true")
    await expect(first).to_have_attribute("aria-checked", "false")
    await expect(second).to_be_focused()
    await expect(second).to_have_attribute("tabindex", "0")
    await page.keyboard.press("ArrowDown")  # wraps around
    await expect(first).to_be_focused()
    await expect(first).to_have_attribute("aria-checked", "true")
    # "Choose any" stays a set of toggle buttons.
    await expect(page.get_by_test_id("clarification-option-notes_body")).to_have_attribute(
        "aria-pressed", "false"
    )
    for prompt in (SINGLE["prompt"], FREE_TEXT["prompt"]):
        box = page.get_by_role("textbox", name=f"Your own answer to {prompt}", exact=True)
        await expect(box).to_have_count(1)
    # Typing keeps its place when the card re-renders under it (a choice in the other question).
    notes = page.get_by_role("textbox", name=f"Your own answer to {FREE_TEXT['prompt']}", exact=True)
    await notes.fill("the partner's request id")
    await page.get_by_test_id("clarification-option-notes_attempts").click()
    await page.get_by_test_id("clarification-submit").click()
    outcome = await agent.outcome()
    assert outcome["__typename"] == "ClarificationAnswered"
    assert sorted(outcome["answers"], key=lambda a: str(a["questionId"])) == [
        {
            "questionId": "notes",
            "selectedOptionIds": ["notes_attempts"],
            "customText": "the partner's request id",
        },
        {"questionId": "policy", "selectedOptionIds": ["policy_opt1"], "customText": None},
    ]
