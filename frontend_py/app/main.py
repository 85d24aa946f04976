"""The web app's start: sign-in, then the page's parts wired together and the DOM's events routed.

Each part (navigation, sync, sidebar, session pane, card slot, rules) owns its state; the DOM's
events go to the part that owns their ``data-action``. Thin by design: ordering, pending derivation
and activation live in the kit (``frontend_py.kit``); the parts move data between the transport,
the kit's ``Store`` and the DOM.
"""

import asyncio

import js  # type: ignore[import-not-found]
from pyscript import document, window  # type: ignore[import-not-found]
from pyscript.ffi import create_proxy  # type: ignore[import-not-found]

from frontend_py.app import net, notify, push, session, signin, triage
from frontend_py.app.inbox import InboxView
from frontend_py.app.navigation import Navigation
from frontend_py.app.page import LIFETIMES, REFUSED, Page, attr, js_none, spawn
from frontend_py.app.rules import Rules
from frontend_py.app.sidebar import Sidebar
from frontend_py.app.slot import Slot
from frontend_py.app.sync import Sync
from frontend_py.app.views import parts
from frontend_py.kit import Store

try:
    from collections.abc import Callable
    from typing import Any
except ImportError:  # MicroPython: annotations are never evaluated there
    pass

ARROWS = {"ArrowDown": 1, "ArrowRight": 1, "ArrowUp": -1, "ArrowLeft": -1}


class App:
    def __init__(self, token: str) -> None:
        origin = str(window.location.origin)
        http = net.Http(origin + "/graphql", token)
        ws_origin = "wss" + origin[5:] if origin.startswith("https") else "ws" + origin[4:]
        socket = net.Socket(ws_origin + "/graphql", token, on_reconnect=self._on_reconnect)
        self.page = Page(http, socket, Store(), self.render, self.sign_out)
        self.rules = Rules(self.page)
        self.sync = Sync(self.page, self.rules)
        self.slot = Slot(self.page, self.sync, self.rules)
        self.navigation = Navigation(self.page, self.sync, self.slot)
        self.sidebar = Sidebar(self.page, self.sync)
        self.session = session.SessionPane(self.page, self.sync, self.rules, self.slot)
        self.inbox = InboxView(self.page, self.sync, self.rules, self.navigation.go)
        self.actions: dict[str, Callable[[Any], None]] = {}
        for part in (self.navigation, self.sync, self.rules, self.slot):
            self.actions.update(part.actions())
        # What notify.Attention reads: the store, the transport, the route, the sign-out.
        self.store = self.page.store
        self.http = http
        self.attention = notify.Attention(self)

    @property
    def route_session(self) -> str | None:
        return self.page.route_session

    @property
    def signed_out(self) -> bool:
        return self.page.signed_out

    async def activate(self, task_id: str) -> None:
        """What a notification's click does (from the page or the worker): what a task row's does."""
        await self.navigation.activate(task_id)

    # --- start-up ------------------------------------------------------------------------------

    async def boot(self) -> None:
        document.getElementById("app").hidden = False
        document.getElementById("boot").hidden = True
        # The service worker answers from a notification's buttons with this token (push.py).
        spawn(push.store_token(self.http.token))
        self._listen()
        self.navigation.apply_layout()
        self.page.socket.start()
        self.sync.start()
        self.inbox.start()
        if not await self._first_tasks():
            return
        self.sync.booted = True
        self.render()
        self.attention.start()
        document.documentElement.setAttribute("data-ready-at", str(window.performance.now()))
        document.documentElement.setAttribute("data-ready", "true")
        self.navigation.set_route(str(window.location.pathname))
        location = window.location
        if str(location.search or "") == "?activate":
            # Opened by a notification's click with no page open: the task activates as its row does.
            window.history.replaceState(None, "", str(location.pathname))
            if self.page.route_task is not None:
                spawn(self.activate(self.page.route_task))

    async def _first_tasks(self) -> bool:
        """The first task list, however long the server takes to answer; False if the page gives up."""
        while True:
            try:
                await self.sync.load_tasks()
                return True
            except net.Unauthorized:
                self.sign_out(REFUSED)
                return False
            except net.GraphQLError as error:
                self.page.set_html(
                    "task-list", '<p class="empty error">Could not load tasks: ' + parts.esc(error) + "</p>"
                )
                return False
            except Exception:  # noqa: BLE001, RUF100 - no answer at all
                # No answer at all: the server is unreachable (the shell came from the service worker).
                self.page.set_html("task-head", notify.offline_html())
                self.page.set_html("task-list", '<p class="empty">Offline.</p>')
                await asyncio.sleep(3)

    def _listen(self) -> None:
        navigation = self.navigation
        handlers = [
            (document, "click", self.on_click, False),
            (document, "input", self.on_input, False),
            (document, "keydown", self.on_key, False),
            (document, "focusin", lambda event: self.inbox.on_focus(event.target), False),
            # Scroll events do not bubble: the card body's are caught on the way down.
            (document, "scroll", self.on_scroll, True),
            (js.window, "resize", lambda _event: self.slot.update_more(), False),
            # PyScript's ``window`` proxy cannot bind addEventListener under MicroPython; js.window can.
            (
                js.window,
                "popstate",
                lambda _event: navigation.set_route(str(window.location.pathname)),
                False,
            ),
            (navigation.media, "change", lambda _event: navigation.apply_layout(), False),
        ]
        for target, name, handler, capture in handlers:
            target.addEventListener(name, LIFETIMES.keep(create_proxy(handler)), capture)

    def _on_reconnect(self) -> None:
        spawn(self.sync.resync())

    def sign_out(self, message: str | None = None) -> None:
        self.page.signed_out = True
        signin.forget_token()
        # The worker can no longer answer for this person, and this device stops hearing for them.
        spawn(push.store_token(None))
        spawn(push.unsubscribe(None))
        self.page.socket.close()
        document.getElementById("app").hidden = True
        signin.show_signin(message)

    def render(self, scroll: bool = False) -> None:
        if self.page.signed_out:
            return
        retrying = session.focused_retry()
        self.sidebar.render()
        self.session.render(scroll)
        self.inbox.render()
        if retrying is not None:
            session.keep_retry_focus(retrying)
        self.attention.update()

    # --- DOM events ----------------------------------------------------------------------------

    def on_click(self, event: Any) -> None:
        target = event.target.closest("[data-action]")
        if js_none(target):
            return
        action = attr(target, "data-action") or ""
        if bool(document.getElementById("inbox-view").contains(target)) and self.inbox.on_action(
            action, target
        ):
            return
        handler = self.actions.get(action)
        if handler is not None:
            handler(target)

    def on_input(self, event: Any) -> None:
        target = event.target
        if str(target.tagName) != "TEXTAREA":
            return
        if bool(document.getElementById("rules").contains(target)):
            self.rules.write(target)
        elif bool(document.getElementById("inbox-view").contains(target)):
            self.inbox.on_input(target)
        else:
            self.slot.on_input(target)

    def on_key(self, event: Any) -> None:
        if triage.on_key(self.inbox, event):
            return
        key = str(event.key)
        if key in ARROWS:
            target = event.target
            if str(target.nodeType) == "1" and attr(target, "role") == "radio":
                event.preventDefault()
                self.slot.on_arrow(target, ARROWS[key])
            return
        if key != "Escape":
            return
        if self.navigation.drawer_open:
            self.navigation.set_drawer(False)
            document.getElementById("drawer-toggle").focus()
            return
        # Escape only hides the card: rejecting a question is an explicit Skip, never a side effect.
        self.slot.hide()

    def on_scroll(self, event: Any) -> None:
        target = event.target
        if str(target.nodeType) == "1" and target.classList.contains("card-body"):
            self.slot.update_more()


async def start() -> None:
    token = signin.read_token()
    if token is None:
        signin.show_signin()
        return
    await App(token).boot()


def run() -> None:
    """Entry point from the page's script tag."""
    spawn(start())
