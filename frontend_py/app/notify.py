"""Getting attention while the page is not watched: tab title, favicon badge, desktop notifications.

The decisions live in the kit (``frontend_py.kit.attention``); this module applies them to the
document and the browser's Notification API:

* ``update`` runs after every render: the title becomes ``(N) Turnwise``, the favicon gains a badge,
  and tasks whose summary newly shows a question are looked up (their sessions with the active
  bundle) when notifications are on.
* The opt-in control (``notify-toggle``) asks for the browser's permission; the choice is kept in
  local storage. Notifications are on when the person opted in and the browser granted permission.
* A notification's click focuses the page and activates the task as its row does.
* ``start`` also registers the service worker (``/sw.js``: the installable app and offline shell).
* Where the page cannot construct a notification (Android's browsers), the service worker shows it;
  its click comes back as a message (or opens the owner session when no page is open).
* Turning notifications on also subscribes this browser to Web Push (``push.py``); off unsubscribes.
  The worker shows a push unless a page says it shows that session, visible and focused
  (``push-check``); a push it shows, or closes, closes this page's own notification of that action.
"""

import asyncio
import json

import js  # type: ignore[import-not-found]
from pyscript import document, window  # type: ignore[import-not-found]
from pyscript.ffi import create_proxy  # type: ignore[import-not-found]

from frontend_py.app import push
from frontend_py.kit.attention import Lookup, Notifier, badge_label, page_title, waiting_count
from frontend_py.kit.derivation import CLARIFICATION, PERMISSION

try:  # noqa: SIM105, RUF100 - MicroPython has no contextlib
    from typing import Any
except ImportError:  # MicroPython: annotations are never evaluated there
    pass

OPT_IN_KEY = "turnwise.notify"
FAVICON = "/favicon.ico"
ICON = "/app/icon-192.png"

# Its own operation name: tests that hold back the activation load leave this one alone.
LOOKUP = (
    "query NotifySessions($taskId: ID!) { taskSessions(taskId: $taskId) { id"
    " activeClarification { pendingId sessionId state questions { questionId title prompt } }"
    " activePermission { pendingId sessionId state toolName input } } }"
)

BELL = (
    '<svg viewBox="0 0 20 20" aria-hidden="true"><path d="M10 2.5a5 5 0 0 0-5 5v3.2L3.6 13.3h12.8L15 '
    '10.7V7.5a5 5 0 0 0-5-5zM8 15.5a2 2 0 0 0 4 0" stroke="currentColor" stroke-width="1.6" '
    'fill="none" stroke-linejoin="round"/></svg>'
)


def favicon_svg(label: str) -> str:
    """The app's icon with a badge in the corner carrying ``label``."""
    size = "15" if len(label) < 2 else "11"
    return (
        '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 32 32">'
        '<rect width="32" height="32" rx="8" fill="#4f46e5"/>'
        '<path d="M7 10h12M13 10v13" stroke="#fff" stroke-width="3.2" stroke-linecap="round"/>'
        '<circle cx="22.5" cy="22.5" r="9.5" fill="#dc2626" stroke="#fff" stroke-width="1.5"/>'
        '<text x="22.5" y="27.5" text-anchor="middle" font-family="Arial,Helvetica,sans-serif" '
        'font-weight="700" font-size="' + size + '" fill="#fff">' + label + "</text></svg>"
    )


class Attention:
    """Title, favicon and notifications for one signed-in page; ``app`` is the running ``App``."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.notifier = Notifier((CLARIFICATION, PERMISSION))
        self.count = -1
        self.supported = bool(js.Reflect.has(js.window, "Notification"))
        self.proxies: list[Any] = []  # event handlers: they must live as long as their target
        self.tasks: list[Any] = []
        # This page's own notifications by pending id, closed when the worker's push replaces them.
        self.shown: dict[str, Any] = {}
        # Why this browser is not subscribed to Web Push (None: subscribed, or not tried yet).
        self.push_problem: str | None = None
        self.push_busy = False

    # --- start-up ------------------------------------------------------------------------------

    def start(self) -> None:
        """After the first task list: show the control, arm when notifications are on."""
        button = document.getElementById("notify-toggle")
        if self.supported:
            handler = create_proxy(lambda _event: self._spawn(self.toggle()))
            self.proxies.append(handler)
            button.addEventListener("click", handler)
            button.hidden = False
        if self._has_worker():
            # Registered once the app is interactive, so installing the shell (about 2 MB) never
            # competes with the first load; a start without network needs an earlier visit anyway.
            js.navigator.serviceWorker.register("/sw.js")
            on_message = create_proxy(self._on_worker_message)
            self.proxies.append(on_message)
            js.navigator.serviceWorker.addEventListener("message", on_message)
            js.navigator.serviceWorker.startMessages()
        if self.enabled():
            self._run(self.notifier.arm(self.app.store))
            self._spawn(self._subscribe())
        self._show_control()

    # --- the opt-in ----------------------------------------------------------------------------

    def permission(self) -> str:
        return str(js.window.Notification.permission) if self.supported else "unsupported"

    def opted_in(self) -> bool:
        return str(window.localStorage.getItem(OPT_IN_KEY)) == "on"

    def enabled(self) -> bool:
        return self.supported and self.opted_in() and self.permission() == "granted"

    async def toggle(self) -> None:
        if self.enabled():
            window.localStorage.removeItem(OPT_IN_KEY)
            self.notifier.disarm()
            self.push_problem = None
            self._show_control()
            self._spawn(self._unsubscribe())
            return
        window.localStorage.setItem(OPT_IN_KEY, "on")
        if self.permission() == "default":
            self._show_control("Asking the browser…")
            try:
                await js.window.Notification.requestPermission()
            except Exception as error:  # noqa: BLE001, RUF100 - a refused prompt is shown, not raised
                window.console.warn("notification permission failed: " + str(error))
        if self.enabled():
            self._run(self.notifier.arm(self.app.store))
            self._spawn(self._subscribe())
        self._show_control()

    async def _subscribe(self) -> None:
        """Web Push for this browser: notifications while no Turnwise page is open."""
        self.push_busy = True
        self._show_control()
        problem = await push.subscribe(self.app.http)
        self.push_busy = False
        if not self.enabled():
            # Turned off while subscribing: the subscription just made must not outlive the choice.
            await push.unsubscribe(self.app.http)
            problem = None
        elif problem is not None:
            window.console.warn("Web Push subscription failed: " + problem)
        self.push_problem = problem
        self._show_control()

    async def _unsubscribe(self) -> None:
        problem = await push.unsubscribe(self.app.http)
        if problem is not None:
            window.console.warn("Web Push unsubscription failed: " + problem)

    def _show_control(self, busy: str | None = None) -> None:
        button = document.getElementById("notify-toggle")
        permission = self.permission()
        on = self.enabled()
        if busy is not None:
            label = busy
        elif on:
            label = "Notifications on"
        elif permission == "denied":
            label = "Notifications blocked"
        else:
            label = "Turn on notifications"
        button.setAttribute("aria-pressed", "true" if on else "false")
        button.setAttribute("data-state", "on" if on else ("blocked" if permission == "denied" else "off"))
        button.title = (
            "Click to stop desktop notifications"
            if on
            else "Allow notifications in the browser's site settings to turn them on"
            if permission == "denied"
            else "Get a desktop notification when an agent asks a question or a permission"
        )
        button.innerHTML = BELL + "<span>" + label + "</span>"
        note = document.getElementById("notify-note")
        if on and self.push_problem is not None and not self.push_busy:
            note.textContent = "Only while Turnwise is open: this browser could not subscribe to push."
            note.title = self.push_problem
            note.hidden = False
        else:
            note.textContent = ""
            note.hidden = True

    # --- title and favicon ---------------------------------------------------------------------

    def update(self) -> None:
        """After every render: title, favicon, and the lookups the kit asks for."""
        count = waiting_count(self.app.store)
        if count != self.count:
            self.count = count
            document.title = page_title(count)
            link = document.querySelector('link[rel="icon"]')
            label = badge_label(count)
            if label:
                link.setAttribute(
                    "href", "data:image/svg+xml," + str(js.encodeURIComponent(favicon_svg(label)))
                )
            else:
                link.setAttribute("href", FAVICON)
            link.setAttribute("data-badge", label)
        self._run(self.notifier.scan(self.app.store))

    # --- notifications -------------------------------------------------------------------------

    def _run(self, lookups: list[Lookup]) -> None:
        for lookup in lookups:
            self._spawn(self._look_up(lookup))

    def _spawn(self, coroutine: Any) -> None:
        self.tasks.append(asyncio.create_task(coroutine))
        if len(self.tasks) > 200:
            del self.tasks[:100]

    async def _look_up(self, lookup: Lookup) -> None:
        if not self.enabled():
            return  # turned off, or the permission was withdrawn in the browser's settings
        try:
            data = await self.app.http.query(LOOKUP, {"taskId": lookup.task_id})
        except Exception as error:  # noqa: BLE001, RUF100 - a failed lookup only costs this notification
            window.console.warn("looking up a question failed: " + str(error))
            return
        visible = str(document.visibilityState) == "visible"
        raised = self.notifier.resolve(
            self.app.store, lookup, data["taskSessions"] or [], self.app.route_session, visible
        )
        for note in raised:
            self._raise(note)

    def _raise(self, note: dict[str, Any]) -> None:
        options = {"body": note["body"], "tag": note["pendingId"], "icon": ICON}
        task_id = note["taskId"]
        # Constructed in JavaScript: a constructor's exception does not surface as a Python one.
        construct = js.Function.new(
            "title",
            "options",
            "try { return new Notification(title, options); } catch (error) { return null; }",
        )
        shown = construct(note["title"], window.JSON.parse(json.dumps(options)))
        if str(shown) in ("null", "undefined") or shown is None:
            # Android's browsers only show notifications from a service worker.
            self._raise_from_worker(note, options)
            return

        def clicked(_event: Any) -> None:
            self.open(task_id)
            shown.close()

        handler = create_proxy(clicked)
        self.proxies.append(handler)
        shown.onclick = handler
        self.shown[note["pendingId"]] = shown
        if len(self.shown) > 200:
            for pending_id in list(self.shown)[:100]:
                del self.shown[pending_id]

    def _raise_from_worker(self, note: dict[str, Any], options: dict[str, Any]) -> None:
        if not self._has_worker():
            return
        options["data"] = {"taskId": note["taskId"], "sessionId": note["sessionId"]}
        title = note["title"]
        payload = window.JSON.parse(json.dumps(options))

        async def show() -> None:
            registration = await js.navigator.serviceWorker.ready
            await registration.showNotification(title, payload)

        self._spawn(show())

    def _has_worker(self) -> bool:
        return bool(js.Reflect.has(js.navigator, "serviceWorker"))

    def _on_worker_message(self, event: Any) -> None:
        data = event.data
        if str(data) in ("undefined", "null") or not bool(js.Reflect.has(data, "type")):
            return
        kind = str(data.type)
        if kind == "notification-click":
            self.open(str(data.taskId))
        elif kind == "push-check":
            # The worker asks before showing a push: is the person looking at that session here?
            reply = window.JSON.parse(json.dumps({"showing": self.showing(str(data.sessionId))}))
            port = js.Reflect.get(event.ports, 0)
            if str(port) not in ("undefined", "null"):
                port.postMessage(reply)
        elif kind in ("push-shown", "push-closed"):
            note = self.shown.pop(str(data.pendingId), None)
            if note is not None:
                note.close()

    def showing(self, session_id: str) -> bool:
        """This page shows ``session_id`` where the person sees it (visible and focused)."""
        if self.app.signed_out or self.app.route_session != session_id:
            return False
        return str(document.visibilityState) == "visible" and bool(document.hasFocus())

    def open(self, task_id: str) -> None:
        """A notification was clicked: bring the page forward and activate the task like its row."""
        window.focus()
        self._spawn(self.app.activate(task_id))


def offline_html() -> str:
    """What the main pane says while the server cannot be reached."""
    return (
        '<div class="placeholder offline" role="status" data-testid="offline"><h1>Offline</h1>'
        "<p>The Turnwise server cannot be reached. The app will load your tasks as soon as it is "
        "back.</p></div>"
    )
