"""Noticing a question without watching the page: title count, favicon badge, desktop notifications,
the installable app (manifest, service worker, offline shell). Chromium against real servers."""

from __future__ import annotations

import asyncio
import contextlib
import json
import struct
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from playwright.async_api import expect

from tests.e2e.conftest import RESULTS
from tests.e2e.support import Relay, card, no_outside_requests, question_icon, reload_app, serve, wrap_up
from tests.e2e.webapp import PHONE, Api, Held, Network, open_app, path_of, question
from tests.servers import Server

pytestmark = pytest.mark.browser
expect.set_options(timeout=10_000)

FLAVOURS = [pytest.param(False, id="desktop"), pytest.param(True, id="phone")]

# Every notification the page constructs is recorded (and still shown); ``__hidden`` lets a test put
# the page in the background, as a switched-away tab is, without a second window.
OBSERVE = """
(() => {
  const Original = window.Notification;
  window.__notes = [];
  window.__hidden = false;
  if (Original) {
    class Observed extends Original {
      constructor(title, options) {
        super(title, options);
        const seen = options || {};
        window.__notes.push({ title: title, body: seen.body, tag: seen.tag, note: this });
      }
      static get permission() { return Original.permission; }
      static requestPermission() { return Original.requestPermission.apply(Original, arguments); }
    }
    window.Notification = Observed;
  }
  Object.defineProperty(Document.prototype, "visibilityState", {
    configurable: true,
    get() { return window.__hidden ? "hidden" : "visible"; },
  });
})();
"""


@pytest.fixture
def web_server() -> Iterator[Server]:
    """A server and database per test: the waiting count starts at zero, and a test may stop it."""
    yield from serve("sqlite")


@pytest.fixture
async def api(web_server: Server) -> AsyncIterator[Api]:
    async with contextlib.aclosing(Api(web_server)) as client:
        yield client


async def _notes(page: Any) -> list[dict[str, Any]]:
    notes: list[dict[str, Any]] = await page.evaluate(
        "window.__notes.map(n => ({title: n.title, body: n.body, tag: n.tag}))"
    )
    return notes


async def _wait_notes(page: Any, count: int) -> list[dict[str, Any]]:
    await page.wait_for_function(f"window.__notes.length >= {count}", timeout=15_000)
    return await _notes(page)


async def _badge(page: Any) -> str:
    return str(await page.locator('link[rel="icon"]').get_attribute("data-badge"))


async def _expect_waiting(page: Any, count: int) -> None:
    await expect(page).to_have_title(f"({count}) Turnwise" if count else "Turnwise")
    href = await page.locator('link[rel="icon"]').get_attribute("href")
    if count:
        assert await _badge(page) == str(count)
        assert str(href).startswith("data:image/svg+xml,"), "the favicon carries the badge"
    else:
        assert await _badge(page) == ""
        assert href == "/favicon.ico"


async def _open_observed(page: Any, server: Server, path: str = "/", *, phone: bool = False) -> Network:
    """Open the app with notifications permitted and every notification it raises recorded."""
    await page.context.grant_permissions(["notifications"], origin=server.base_url)
    await page.add_init_script(OBSERVE)
    return await open_app(page, server, path, phone=phone)


async def _open_notifying(page: Any, server: Server, path: str = "/", *, phone: bool = False) -> Network:
    """Open the app with notifications permitted, then opt in through the app's control."""
    network = await _open_observed(page, server, path, phone=phone)
    if phone:
        await page.get_by_test_id("task-drawer-toggle").click()
    toggle = page.get_by_test_id("notifications-toggle")
    await expect(toggle).to_have_text("Turn on notifications")
    await toggle.click()
    await expect(toggle).to_have_attribute("aria-pressed", "true")
    await expect(toggle).to_have_text("Notifications on")
    if phone:
        await page.keyboard.press("Escape")
        await expect(page.get_by_test_id("task-drawer")).to_be_hidden()
    return network


# --- title and favicon ---------------------------------------------------------------------------


async def test_title_and_badge_follow_questions_asked_answered_and_superseded_across_a_reconnect(
    page: Any, web_server: Server, api: Api
) -> None:
    first, (first_session,) = await api.task("Title one")
    second, (second_session,) = await api.task("Title two")
    relay = await Relay().install(page)
    network = await open_app(page, web_server)
    await _expect_waiting(page, 0)
    asked = await api.ask(first_session)
    await _expect_waiting(page, 1)
    other = await api.ask(second_session, [question("Second?")])
    await _expect_waiting(page, 2)
    assert await api.respond(asked.pending_id, [{"questionId": "policy", "customText": "fine"}]) == (
        "ClarificationResponded"
    )
    await _expect_waiting(page, 1)
    # A new turn supersedes the second task's question: nothing waits any more.
    await api.start_turn(second_session)
    await _expect_waiting(page, 0)
    await expect(question_icon(page, second)).to_have_count(0)
    await other.disconnect()
    # While the page hears nothing, a question arrives; the reconnect's snapshot brings the count.
    relay.cut.set()
    away = await api.ask(first_session, [question("Asked while away?")])
    await asyncio.sleep(0.3)
    await _expect_waiting(page, 0)
    await relay.reconnect()
    await _expect_waiting(page, 1)
    await expect(question_icon(page, first)).to_be_visible()
    assert len(relay.connections) >= 2, "the app reconnected"
    await wrap_up(network, away)


# --- notifications -------------------------------------------------------------------------------


@pytest.mark.parametrize("phone", FLAVOURS)
async def test_one_notification_per_question_and_its_click_opens_the_owner_session(
    page: Any, web_server: Server, api: Api, phone: bool
) -> None:
    _waiting, (waiting_session,) = await api.task("Already waiting")
    before = await api.ask(waiting_session, [question("Pending before the page opened?")])
    task_id, (_primary, secondary) = await api.task("Webhook retries", sessions=2)
    _later, (later_session,) = await api.task("Another task")
    network = await _open_notifying(page, web_server, phone=phone)
    await _expect_waiting(page, 1)
    agent = await api.ask(
        secondary, [question("Which retry policy should the webhook use?"), question("And?", qid="b")]
    )
    notes = await _wait_notes(page, 1)
    assert notes == [
        {
            "title": "Webhook retries",
            "body": "Which retry policy should the webhook use?",
            "tag": agent.pending_id,
        }
    ]
    # A second question elsewhere arrives as its own notification; the first is not raised again.
    second = await api.ask(later_session, [question("Deploy now?")])
    notes = await _wait_notes(page, 2)
    await _expect_waiting(page, 3)
    await asyncio.sleep(0.5)
    notes = await _notes(page)
    assert [n["tag"] for n in notes] == [agent.pending_id, second.pending_id]
    assert before.pending_id not in [n["tag"] for n in notes], "a question pending at load is no news"
    await page.evaluate("window.__notes[0].note.dispatchEvent(new Event('click'))")
    await expect(page.get_by_test_id(f"session-tab-{secondary}")).to_have_attribute("aria-selected", "true")
    assert path_of(page) == f"/t/{task_id}/s/{secondary}"
    await expect(card(page)).to_contain_text("Which retry policy")
    if phone:
        await expect(page.get_by_test_id("task-drawer")).to_be_hidden()
    await wrap_up(network, before, agent, second)


async def test_a_question_answered_before_its_lookup_returns_raises_nothing(
    page: Any, web_server: Server, api: Api
) -> None:
    _task_id, (session_id,) = await api.task("Answered quickly")
    _other, (other_session,) = await api.task("Asked later")
    network = await _open_notifying(page, web_server)
    held = Held("NotifySessions")
    await page.route("**/graphql", held.handle)
    agent = await api.ask(session_id)
    await asyncio.wait_for(held.seen.wait(), 10)
    # The lookup's answer names the pending bundle, but the question is answered before it lands.
    assert await api.respond(agent.pending_id, [{"questionId": "policy", "customText": "done"}]) == (
        "ClarificationResponded"
    )
    await _expect_waiting(page, 0)
    held.release()
    for _ in range(100):  # the route handler fulfils the request on its own task
        if held.delivered:
            break
        await asyncio.sleep(0.1)
    assert held.delivered == [True], "the stale lookup result reached the page"
    # The pipeline works: the next question notifies, and it is the only notification.
    fresh = await api.ask(other_session, [question("Still there?")])
    notes = await _wait_notes(page, 1)
    assert [n["tag"] for n in notes] == [fresh.pending_id]
    await wrap_up(network, fresh)


async def test_nothing_while_the_owner_session_is_open_and_visible(
    page: Any, web_server: Server, api: Api
) -> None:
    task_id, (session_id,) = await api.task("Watched")
    _other, (other_session,) = await api.task("Not watched")
    network = await _open_notifying(page, web_server, f"/t/{task_id}/s/{session_id}")
    watched = await api.ask(session_id, [question("Seen in the page?")])
    await expect(card(page)).to_contain_text("Seen in the page?")
    elsewhere = await api.ask(other_session, [question("Elsewhere?")])
    notes = await _wait_notes(page, 1)
    assert [n["tag"] for n in notes] == [elsewhere.pending_id], "only the question not on screen notifies"
    # The same session open in a page the person switched away from does notify.
    await page.evaluate("window.__hidden = true")
    await api.respond(watched.pending_id, [{"questionId": "policy", "customText": "ok"}])
    await api.start_turn(session_id)
    hidden = await api.ask(session_id, [question("Asked in the background?")])
    notes = await _wait_notes(page, 2)
    assert [n["tag"] for n in notes] == [elsewhere.pending_id, hidden.pending_id]
    assert notes[1]["body"] == "Asked in the background?"
    await wrap_up(network, watched, elsewhere, hidden)


async def test_a_reconnect_snapshot_raises_nothing_for_questions_already_notified(
    page: Any, web_server: Server, api: Api
) -> None:
    _first, (first_session,) = await api.task("Before the cut")
    _second, (second_session,) = await api.task("During the cut")
    relay = await Relay().install(page)
    network = await _open_notifying(page, web_server)
    notified = await api.ask(first_session, [question("Before?")])
    await _wait_notes(page, 1)
    relay.cut.set()
    away = await api.ask(second_session, [question("While away?")])
    await asyncio.sleep(0.3)
    await relay.reconnect()
    notes = await _wait_notes(page, 2)
    await _expect_waiting(page, 2)
    await asyncio.sleep(0.5)
    notes = await _notes(page)
    assert [n["tag"] for n in notes] == [notified.pending_id, away.pending_id]
    assert len(relay.connections) >= 2, "the app reconnected"
    await wrap_up(network, notified, away)


async def test_a_replayed_older_summary_neither_raises_the_count_nor_notifies_again(
    page: Any, web_server: Server, api: Api
) -> None:
    first, (first_session,) = await api.task("Replayed")
    _second, (second_session,) = await api.task("Fresh")
    summaries: list[tuple[Any, str]] = []

    async def relay(ws: Any) -> None:
        server = ws.connect_to_server()

        def forward(message: str | bytes) -> None:
            if isinstance(message, str) and "taskSummaryChanged" in message:
                summaries.append((ws, message))
            ws.send(message)

        server.on_message(forward)

    await page.route_web_socket("**/graphql", relay)
    network = await _open_notifying(page, web_server)
    asked = await api.ask(first_session, [question("First?")])
    await _wait_notes(page, 1)
    await _expect_waiting(page, 1)
    await api.respond(asked.pending_id, [{"questionId": "policy", "customText": "done"}])
    await _expect_waiting(page, 0)
    stale = [
        (ws, text)
        for ws, text in summaries
        if first in text and json.loads(text)["payload"]["data"]["taskSummaryChanged"]["pendingAction"]
    ]
    assert stale, "the pending summary of the first question was seen on the wire"
    ws, text = stale[-1]
    ws.send(text)  # delivered again, late: older than the summary the page holds
    # Messages on one connection are handled in order: once the fresh question shows, the stale
    # summary has been applied (and ignored).
    fresh = await api.ask(second_session, [question("Second?")])
    notes = await _wait_notes(page, 2)
    await _expect_waiting(page, 1)
    assert [n["tag"] for n in notes] == [asked.pending_id, fresh.pending_id]
    await expect(question_icon(page, first)).to_have_count(0)
    await wrap_up(network, asked, fresh)


async def test_notifications_stay_off_until_the_person_opts_in(
    page: Any, web_server: Server, api: Api
) -> None:
    _task_id, (session_id,) = await api.task("No opt-in")
    _other, (other_session,) = await api.task("After opt-in")
    network = await _open_observed(page, web_server)
    quiet = await api.ask(session_id)
    await _expect_waiting(page, 1)
    await page.get_by_test_id("notifications-toggle").click()
    await expect(page.get_by_test_id("notifications-toggle")).to_have_attribute("aria-pressed", "true")
    loud = await api.ask(other_session, [question("Now?")])
    notes = await _wait_notes(page, 1)
    assert [n["tag"] for n in notes] == [loud.pending_id], "the earlier question is baseline, not news"
    # Turning them off again is kept across a reload.
    await page.get_by_test_id("notifications-toggle").click()
    await expect(page.get_by_test_id("notifications-toggle")).to_have_attribute("aria-pressed", "false")
    await reload_app(page)
    await expect(page.get_by_test_id("notifications-toggle")).to_have_text("Turn on notifications")
    await wrap_up(network, quiet, loud)


# Android's browsers refuse ``new Notification`` in a page; only a service worker may show one.
PAGE_CANNOT_NOTIFY = """
(() => {
  const Original = window.Notification;
  class Refusing extends Original {
    constructor() { throw new TypeError("Illegal constructor: use showNotification()"); }
    static get permission() { return Original.permission; }
    static requestPermission() { return Original.requestPermission.apply(Original, arguments); }
  }
  window.Notification = Refusing;
})();
"""


async def test_where_a_page_cannot_notify_the_service_worker_shows_the_notification(
    page: Any, web_server: Server, api: Api
) -> None:
    task_id, (session_id,) = await api.task("From the worker")
    await page.context.grant_permissions(["notifications"], origin=web_server.base_url)
    await page.add_init_script(PAGE_CANNOT_NOTIFY)
    network = await open_app(page, web_server, phone=True)
    await page.wait_for_function("navigator.serviceWorker.controller !== null", timeout=20_000)
    await page.get_by_test_id("task-drawer-toggle").click()
    await page.get_by_test_id("notifications-toggle").click()
    await expect(page.get_by_test_id("notifications-toggle")).to_have_attribute("aria-pressed", "true")
    agent = await api.ask(session_id, [question("Shown by the worker?")])
    shown = (
        "navigator.serviceWorker.ready.then(r => r.getNotifications())"
        ".then(list => list.map(n => ({title: n.title, body: n.body, tag: n.tag, data: n.data})))"
    )
    notes: list[dict[str, Any]] = []
    for _ in range(100):
        notes = await page.evaluate(shown)
        if notes:
            break
        await asyncio.sleep(0.1)
    assert notes == [
        {
            "title": "From the worker",
            "body": "Shown by the worker?",
            "tag": agent.pending_id,
            "data": {"taskId": task_id, "sessionId": session_id},
        }
    ]
    await wrap_up(network, agent)


# --- installable app --------------------------------------------------------------------------------


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


async def test_the_manifest_and_the_service_worker_are_served_and_valid(web_server: Server) -> None:
    async with httpx.AsyncClient(base_url=web_server.base_url) as http:
        response = await http.get("/manifest.webmanifest")
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("application/manifest+json")
        manifest = json.loads(response.text)
        assert manifest["name"] == "Turnwise"
        assert manifest["short_name"]
        assert manifest["display"] == "standalone"
        assert manifest["start_url"] == "/"
        assert manifest["scope"] == "/"
        assert manifest["theme_color"].startswith("#")
        assert manifest["background_color"].startswith("#")
        sizes = set()
        for icon in manifest["icons"]:
            got = await http.get(icon["src"])
            assert got.status_code == 200, icon["src"]
            assert got.headers["content-type"].startswith(icon["type"])
            if icon["type"] == "image/png":
                width, height = _png_size(got.content)
                assert icon["sizes"] == f"{width}x{height}"
                sizes.add((width, icon["purpose"]))
        assert {(192, "any"), (512, "any"), (512, "maskable")} <= sizes
        worker = await http.get("/sw.js")
        assert worker.status_code == 200
        assert worker.headers["content-type"].startswith("text/javascript")
        assert worker.headers["cache-control"] == "no-cache"
        assert "__PRECACHE__" not in worker.text
        assert "__VERSION__" not in worker.text
        listed = json.loads(worker.text.split("const PRECACHE = ", 1)[1].split(";\n", 1)[0])
        for url in ("/", "/app/app.css", "/vendor/pyscript/core.js", "/vendor/micropython/micropython.wasm"):
            assert url in listed
        for url in listed:
            assert url.startswith("/"), "only the app's own files"
            assert not url.startswith("//"), "only the app's own files"
            assert not url.startswith(("/graphql", "/mcp", "/metrics", "/healthz", "/readyz"))
            assert (await http.head(url)).status_code == 200, url


async def test_the_app_shell_loads_with_the_server_stopped_and_recovers(
    page: Any, web_server: Server
) -> None:
    api = Api(web_server)
    try:
        task_id, _ = await api.task("Survives a restart")
    finally:
        await api.aclose()
    requests: list[str] = []
    page.context.on("request", lambda request: requests.append(request.url))
    network = await open_app(page, web_server, phone=True)
    await page.set_viewport_size(PHONE)
    await page.wait_for_function("navigator.serviceWorker.controller !== null", timeout=20_000)
    cached: list[str] = await page.evaluate(
        "caches.keys().then(names => Promise.all(names.map(n => caches.open(n).then(c => c.keys()))))"
        ".then(lists => lists.flat().map(r => new URL(r.url).pathname))"
    )
    assert "/" in cached
    assert "/vendor/micropython/micropython.wasm" in cached
    assert not [u for u in cached if u.startswith(("/graphql", "/mcp", "/metrics", "/healthz", "/readyz"))]
    web_server.stop()
    await page.reload()
    offline = page.get_by_test_id("offline")
    await expect(offline).to_be_visible(timeout=20_000)
    await expect(offline).to_contain_text("cannot be reached")
    await expect(page).to_have_title("Turnwise")
    # A deep link opened from the home screen gets the shell too, not a browser error page.
    await page.goto(web_server.base_url + f"/t/{task_id}")
    await expect(page.get_by_test_id("offline")).to_be_visible(timeout=20_000)
    RESULTS.mkdir(exist_ok=True)
    await page.screenshot(path=str(RESULTS / "web-app-offline-phone.png"))
    web_server.start()
    await expect(page.locator(".task-head h1")).to_have_text("Survives a restart", timeout=20_000)
    await page.wait_for_selector("html[data-ready=true]", state="attached")
    assert all(url.startswith((web_server.base_url, "data:", "blob:")) for url in requests), requests
    no_outside_requests(network)


# --- how it looks -----------------------------------------------------------------------------------


@pytest.mark.parametrize("phone", FLAVOURS)
async def test_screenshot_with_a_question_pending_and_the_opt_in_control(
    page: Any, web_server: Server, api: Api, phone: bool
) -> None:
    task_id, (session_id,) = await api.task("Webhook retries")
    await api.task("Docs pass")
    agent = await api.ask(session_id, [question("Which retry policy should the webhook use?")])
    await page.context.grant_permissions(["notifications"], origin=web_server.base_url)
    network = await open_app(page, web_server, f"/t/{task_id}/s/{session_id}", phone=phone)
    await expect(card(page)).to_be_visible()
    if phone:
        await page.get_by_test_id("task-drawer-toggle").click()
        await page.wait_for_timeout(400)  # let the drawer finish sliding in before the picture
    await expect(page.get_by_test_id("notifications-toggle")).to_be_visible()
    await expect(page).to_have_title("(1) Turnwise")
    RESULTS.mkdir(exist_ok=True)
    await page.screenshot(path=str(RESULTS / f"web-attention-{'phone' if phone else 'desktop'}.png"))
    # The badged favicon as the tab strip shows it, enlarged.
    href = await page.locator('link[rel="icon"]').get_attribute("href")
    await page.set_content(f"<img src='{href}' width='128' height='128'>")
    await page.locator("img").screenshot(path=str(RESULTS / "web-attention-favicon.png"))
    await wrap_up(network, agent)
