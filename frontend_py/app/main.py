"""The web app: sign-in, routes, task activation per layout, live updates and the clarification card.

Thin by design: ordering, pending derivation and activation live in the kit (``frontend_py.kit``);
this module moves data between the transport, the kit's ``Store`` and the DOM.
"""

import asyncio

import js  # type: ignore[import-not-found]
from pyscript import document, window  # type: ignore[import-not-found]
from pyscript.ffi import create_proxy  # type: ignore[import-not-found]

from frontend_py.app import loads, net, notify, push, queries, view
from frontend_py.kit import (
    PERMISSION,
    ActivationController,
    Lifetimes,
    Navigator,
    Store,
    session_route,
    task_route,
)

try:
    from typing import Any
except ImportError:  # MicroPython: annotations are never evaluated there
    pass

PHONE_MEDIA = "(max-width: 767px)"
TOKEN_KEY = "turnwise.token"
ARROWS = {"ArrowDown": 1, "ArrowRight": 1, "ArrowUp": -1, "ArrowLeft": -1}
# The card kinds; each names its test ids (``<kind>-card``, ``<kind>-reopen``, ``<kind>-conflict``).
QUESTION_CARD = "clarification"
PERMISSION_CARD = "permission"
# Focus requests for the card slot's next render: the control that reopens a hidden card, the card.
REOPEN_KEYS = (QUESTION_CARD + "-reopen|", PERMISSION_CARD + "-reopen|")
NOTICE_KEYS = (
    "clarification-conflict|",
    "clarification-queued|",
    "permission-conflict|",
    "permission-queued|",
)
LIVE_REQUEST_STATES = ("ACTIVE_LIVE", "ACTIVE_DETACHED")
RETRY_ACTIONS = ("retry-sessions", "retry-history")
# Returns "" when the text is strict JSON, else the browser's reason (a thrown error never reaches
# MicroPython as a Python exception; MicroPython's own json.loads also takes trailing commas).
STRICT_JSON = "try { JSON.parse(text); return ''; } catch (error) { return String(error.message || error); }"
LIFETIMES = Lifetimes()  # listener proxies for the page, tasks until they end


def _js_none(value: Any) -> bool:
    return value is None or str(value) in ("null", "undefined")


def _attr(element: Any, name: str) -> str | None:
    value = element.getAttribute(name)
    return None if _js_none(value) else str(value)


def parse_route(path: str) -> tuple[str | None, str | None]:
    """``/t/<task>`` and ``/t/<task>/s/<session>``; anything else is the task list."""
    parts = [p for p in path.split("/") if p]
    if len(parts) >= 2 and parts[0] == "t":
        if len(parts) >= 4 and parts[2] == "s":
            return (parts[1], parts[3])
        return (parts[1], None)
    return (None, None)


def read_token() -> str | None:
    """``#token=...`` signs in: kept in local storage and removed from the address bar."""
    location = window.location
    fragment = str(location.hash or "")
    if fragment.startswith("#token="):
        token = str(window.decodeURIComponent(fragment[7:]))
        if token:
            window.localStorage.setItem(TOKEN_KEY, token)
        window.history.replaceState(None, "", str(location.pathname) + str(location.search or ""))
    stored = window.localStorage.getItem(TOKEN_KEY)
    return None if _js_none(stored) or not str(stored) else str(stored)


def _spawn(coroutine: Any) -> None:
    LIFETIMES.spawn(coroutine)


class _SheetNavigator(Navigator):
    """What a mounted sheet's activation may do; the kit calls it only for live continuations."""

    def __init__(self, app: "App") -> None:
        self.app = app

    def navigate(self, route: str) -> None:
        self.app.go(route)

    def release_session_layout(self) -> None:
        self.app.release_session()

    def close_sheet(self) -> None:
        self.app.set_drawer(False)


class App:
    def __init__(self, token: str) -> None:
        origin = str(window.location.origin)
        self.http = net.Http(origin + "/graphql", token)
        ws_origin = "wss" + origin[5:] if origin.startswith("https") else "ws" + origin[4:]
        self.socket = net.Socket(ws_origin + "/graphql", token, on_reconnect=self._on_reconnect)
        self.store = Store()
        self.task_order: list[str] = []
        self.route_task: str | None = None
        self.route_session: str | None = None
        self.media = window.matchMedia(PHONE_MEDIA)
        self.phone = bool(self.media.matches)
        self.drawer_open = False
        self.controller = self._mount_controller()
        self.activations = 0
        self.bundles: dict[str, dict[str, Any]] = {}
        # The card's draft belongs to one bundle; a new bundle starts a clean draft.
        self.card_pending: str | None = None
        self.card_kind: str | None = None
        # A permission card's draft: the deny reason, the input editor and the "any input" choice.
        self.perm_draft: dict[str, Any] = {}
        # Per session: its active permission request as the last session load named it, and the
        # projection revision that load was made for (a newer PERMISSION revision loads it again).
        self.permissions: dict[str, dict[str, Any]] = {}
        self.permission_seen: dict[str, str] = {}
        self.permission_loading: set[str] = set()
        # The permission card last shown (session, pending id): when it closes without this page's
        # decision, a notice says what happened to it.
        self.shown_permission: tuple[str, str] | None = None
        self.decided_here: set[str] = set()
        self.rules: dict[str, list[dict[str, Any]]] = {}
        self.rule_busy: str | None = None
        self.selections: dict[str, list[str]] = {}
        self.custom: dict[str, str] = {}
        self.card_busy = False
        self.card_error: str | None = None
        self.hidden: set[str] = set()
        # What takes focus after the card slot's next render (a ``_focus_key``), when not where it was.
        self.focus_request: str | None = None
        self.resolved: set[str] = set()
        # (reason, what won, card kind) of the notice above the card, or None.
        self.notice: tuple[str | None, Any, str] | None = None
        self.summary_sub: str | None = None
        self.projection_sub: tuple[str, str] | None = None
        self.events_sub: tuple[str, str] | None = None
        self.history_loads: dict[str, int] = {}
        # Session events that arrived while a history load of their session was on its way: the
        # snapshot may have been read before them, so they are applied again on top of it.
        self.history_events: dict[str, list[dict[str, Any]]] = {}
        self.session_loads: dict[str, int] = {}
        self.loads = loads.Loads()
        self.refetching = False
        self._html: dict[str, str] = {}
        self._rows: dict[str, tuple[Any, str]] = {}
        self.booted = False
        self.signed_out = False
        self.attention = notify.Attention(self)

    # --- start-up ------------------------------------------------------------------------------

    async def boot(self) -> None:
        document.getElementById("app").hidden = False
        document.getElementById("boot").hidden = True
        # The service worker answers from a notification's buttons with this token (push.py).
        _spawn(push.store_token(self.http.token))
        self._listen()
        self._apply_layout()
        self.socket.start()
        self.summary_sub = self.socket.subscribe(queries.TASK_SUMMARIES, {}, self._on_summary)
        while True:
            try:
                await self.load_tasks()
                break
            except net.Unauthorized:
                self.sign_out("That token was not accepted. Sign in again.")
                return
            except net.GraphQLError as error:
                self._set_html(
                    "task-list", '<p class="empty error">Could not load tasks: ' + view.esc(error) + "</p>"
                )
                return
            except Exception:  # noqa: BLE001, RUF100 - no answer at all
                # No answer at all: the server is unreachable (the shell came from the service worker).
                self._set_html("task-head", notify.offline_html())
                self._set_html("task-list", '<p class="empty">Offline.</p>')
                await asyncio.sleep(3)
        self.booted = True
        self.render()
        self.attention.start()
        document.documentElement.setAttribute("data-ready-at", str(window.performance.now()))
        document.documentElement.setAttribute("data-ready", "true")
        self.set_route(str(window.location.pathname))
        location = window.location
        if str(location.search or "") == "?activate":
            # Opened by a notification's click with no page open: the task activates as its row does.
            window.history.replaceState(None, "", str(location.pathname))
            if self.route_task is not None:
                _spawn(self.activate(self.route_task))

    def _listen(self) -> None:
        handlers = [
            (document, "click", self.on_click, False),
            (document, "input", self.on_input, False),
            (document, "keydown", self.on_key, False),
            # Scroll events do not bubble: the card body's are caught on the way down.
            (document, "scroll", self.on_scroll, True),
            (js.window, "resize", lambda _event: self._update_more(), False),
            # PyScript's ``window`` proxy cannot bind addEventListener under MicroPython; js.window can.
            (js.window, "popstate", lambda _event: self.set_route(str(window.location.pathname)), False),
            (self.media, "change", lambda _event: self._apply_layout(), False),
        ]
        for target, name, handler, capture in handlers:
            target.addEventListener(name, LIFETIMES.keep(create_proxy(handler)), capture)

    def _mount_controller(self) -> ActivationController:
        # One controller per mounted sheet: the phone drawer closes itself, the sidebar does not.
        return ActivationController(
            self.store, self.load_sessions, _SheetNavigator(self), closes_sheet=self.phone
        )

    async def activate(self, task_id: str) -> None:
        """What a task row's click does (and a notification's, from the page or the worker)."""
        await self._activate(self.controller, task_id)

    async def _activate(self, controller: ActivationController, task_id: str) -> None:
        result = await controller.activate(task_id)
        # Every finished activation is counted on the page, a stale one included, so its end is visible.
        self.activations += 1
        root = document.documentElement
        root.setAttribute("data-activations", str(self.activations))
        root.setAttribute("data-last-activation", result)

    def _apply_layout(self) -> None:
        phone = bool(self.media.matches)
        if phone != self.phone:
            # The old sheet is unmounted: its in-flight continuations become inert.
            self.controller.unmount()
            self.phone = phone
            self.controller = self._mount_controller()
            self.drawer_open = False
        aside = document.getElementById("tasks")
        aside.setAttribute("data-testid", "task-drawer" if phone else "task-sidebar")
        self._show_drawer()

    def sign_out(self, message: str | None = None) -> None:
        self.signed_out = True
        window.localStorage.removeItem(TOKEN_KEY)
        # The worker can no longer answer for this person, and this device stops hearing for them.
        _spawn(push.store_token(None))
        _spawn(push.unsubscribe(None))
        self.socket.close()
        document.getElementById("app").hidden = True
        show_signin(message)

    # --- loads ---------------------------------------------------------------------------------

    async def load_tasks(self) -> None:
        token = self.store.begin_read()
        data = await self.http.query(queries.TASKS)
        tasks = data["tasks"]
        self.task_order = [t["id"] for t in tasks]
        self.store.apply_tasks(tasks, token)
        for task in tasks:
            if task.get("summary") is None:
                _spawn(self.load_task_sessions(task["id"]))

    async def load_sessions(self, task_id: str, signal: Any) -> list[dict[str, Any]]:
        """The kit's forced, authoritative session load (aborted through ``signal``)."""
        data = await self.http.query(queries.ACTIVATION_SESSIONS, {"taskId": task_id}, signal)
        sessions: list[dict[str, Any]] = data["taskSessions"]
        self._note_bundles(sessions)
        return sessions

    def _note_bundles(self, sessions: list[dict[str, Any]]) -> None:
        for session in sessions:
            bundle = session.get("activeClarification")
            if isinstance(bundle, dict) and bundle.get("pendingId"):
                self.bundles[bundle["pendingId"]] = bundle
            session_id = session.get("id")
            if not session_id:
                continue
            request = session.get("activePermission")
            if isinstance(request, dict) and request.get("pendingId"):
                self.permissions[session_id] = request
            else:
                self.permissions.pop(session_id, None)
            self.permission_seen[session_id] = _revision_key(session.get("pendingActionRevision"))

    async def load_route(self, task_id: str, session_id: str | None) -> None:
        if session_id is not None:
            _spawn(self.load_history(session_id))
            _spawn(self.load_rules(session_id))
        await self.load_task_sessions(task_id)

    async def load_permission(self, task_id: str, session_id: str) -> None:
        """The session's active permission request, after its projection moved on to a new PERMISSION
        revision (a new request's event carries the projection, not the request)."""
        self.permission_loading.add(session_id)
        try:
            await self.load_task_sessions(task_id)
        finally:
            self.permission_loading.discard(session_id)
        # Whatever the load found, this revision was looked at: no second load for it.
        held = self.store.projection(session_id) or {}
        self.permission_seen[session_id] = _revision_key(held.get("revision"))
        self.render()

    async def load_rules(self, session_id: str) -> None:
        try:
            data = await self.http.query(queries.PERMISSION_RULES, {"sessionId": session_id})
        except Exception as error:  # noqa: BLE001 - a failed background load is logged, the page lives on
            window.console.warn("loading the session's rules failed: " + str(error))
            return
        self.rules[session_id] = list(data.get("permissionRules") or [])
        self.render()

    async def load_task_sessions(self, task_id: str) -> None:
        # Only a task's newest list applies: an older one could drop a session created since.
        load = self.session_loads.get(task_id, 0) + 1
        self.session_loads[task_id] = load
        key = self._start_load(loads.sessions_key(task_id))
        try:
            data = await self.http.query(queries.ROUTE_SESSIONS, {"taskId": task_id})
        except net.Unauthorized:
            self.loads.finish(key, False)
            self.sign_out("That token was not accepted. Sign in again.")
            return
        except Exception as error:  # noqa: BLE001 - the page says it failed and offers to retry
            window.console.warn("loading sessions failed: " + str(error))
            self.loads.finish(key, self.session_loads.get(task_id) == load, _failure(error))
            self.render()
            return
        newest = self.session_loads.get(task_id) == load
        self.loads.finish(key, newest)
        if self.store.task(task_id) is None or not newest:
            return
        sessions = data["taskSessions"]
        self._note_bundles(sessions)
        self.store.apply_task_sessions(task_id, sessions)
        self.render()

    def _start_load(self, key: str) -> str:
        self.loads.start(key)
        if self.loads.failure(key) is not None:
            self.render()  # the failure's Retry now says it is retrying
        return key

    def _retry(self, action: str) -> None:
        """Load again what the open route failed to load; the route itself stays as it is."""
        task_id, session_id = self.route_task, self.route_session
        if task_id is None:
            return
        if action == "retry-sessions" and not self.loads.running(loads.sessions_key(task_id)):
            _spawn(self.load_task_sessions(task_id))
        if session_id is not None:
            key = loads.history_key(session_id)
            if self.loads.failure(key) is not None and not self.loads.running(key):
                _spawn(self.load_history(session_id))

    async def load_history(self, session_id: str) -> None:
        load = self.history_loads.get(session_id, 0) + 1
        self.history_loads[session_id] = load
        self.history_events.setdefault(session_id, [])
        key = self._start_load(loads.history_key(session_id))
        try:
            data = await self.http.query(queries.SESSION_HISTORY, {"sessionId": session_id})
        except Exception as error:  # noqa: BLE001 - the page says it failed and offers to retry
            window.console.warn("loading the session failed: " + str(error))
            newest = self.history_loads.get(session_id) == load
            if newest:
                self.history_events.pop(session_id, None)
            self.loads.finish(key, newest, _failure(error))
            self.render()
            return
        # Applied even before the session list arrives: opening a deep link loads both at once.
        newest = self.history_loads.get(session_id) == load
        self.loads.finish(key, newest)
        if not newest:
            return
        self.store.apply_session_turns(session_id, data["sessionTurns"])
        self.store.apply_session_messages(session_id, data["sessionMessages"])
        # A change the snapshot was read before (an answer's delivery, say) arrived as an event
        # meanwhile: the snapshot must not take it back. Events come in order, so applying them again
        # ends on the newest state.
        for event in self.history_events.pop(session_id, []):
            self.store.apply_session_event(session_id, event)
        self.render(scroll=True)

    async def reload_turns(self, session_id: str) -> None:
        try:
            data = await self.http.query(queries.SESSION_TURNS, {"sessionId": session_id})
        except Exception:  # noqa: BLE001 - the next event or resync reloads the turns
            return
        self.store.apply_session_turns(session_id, data["sessionTurns"])
        self.render()

    async def refresh_session(self, task_id: str, session_id: str) -> None:
        await self.load_task_sessions(task_id)
        await self.load_history(session_id)

    async def resync(self) -> None:
        """After a reconnect: the task list again, then the open route (subscriptions resend snapshots)."""
        if self.refetching:
            return
        self.refetching = True
        try:
            await self.load_tasks()
            self.render()
            if self.route_task is not None:
                await self.load_route(self.route_task, self.route_session)
        except Exception as error:  # noqa: BLE001 - a failed background load is logged, the page lives on
            window.console.warn("resync failed: " + str(error))
        finally:
            self.refetching = False

    def _on_reconnect(self) -> None:
        _spawn(self.resync())

    # --- live updates --------------------------------------------------------------------------

    def _on_summary(self, data: Any) -> None:
        summary = data.get("taskSummaryChanged")
        if not isinstance(summary, dict):
            return
        known = self.store.task(str(summary.get("taskId"))) is not None
        changed = self.store.apply_task_summary(summary)
        if not self.booted:
            return  # the first task list is on its way and renders everything at once
        if not known:
            # A task this client has not listed yet: the list is the authority on what exists.
            _spawn(self.resync())
        elif changed:
            self.render()

    def _on_projection(self, data: Any) -> None:
        projection = data.get("pendingActionChanged")
        if isinstance(projection, dict) and self.store.apply_projection(projection):
            self.render()

    def _on_session_event(self, session_id: str, data: Any) -> None:
        event = data.get("sessionEvents")
        if not isinstance(event, dict) or session_id != self.route_session:
            return
        self.store.apply_session_event(session_id, event)
        held = self.history_events.get(session_id)
        if held is not None:
            held.append(event)
        if self.store.turns_stale(session_id):
            _spawn(self.reload_turns(session_id))
        message = event.get("message")
        if isinstance(message, dict) and message.get("kind") == "permission_request":
            # A decision here or elsewhere may have remembered a rule (or a rule decided this one).
            _spawn(self.load_rules(session_id))
        self.render(scroll=True)

    # --- routes --------------------------------------------------------------------------------

    def go(self, route: str) -> None:
        if str(window.location.pathname) != route:
            window.history.pushState(None, "", route)
        self.set_route(route)

    def set_route(self, path: str) -> None:
        task_id, session_id = parse_route(path)
        if task_id is not None and session_id is not None:
            self.store.remember_session(task_id, session_id)
        if task_id != self.route_task:
            self._unsubscribe_projection()
            if task_id is not None:
                sub = self.socket.subscribe(
                    queries.TASK_PROJECTIONS, {"taskId": task_id}, self._on_projection
                )
                self.projection_sub = (task_id, sub)
        if session_id != self.route_session:
            self._unsubscribe_events()
            self.shown_permission = None
            if session_id is not None:
                opened = session_id

                def on_event(data: Any) -> None:
                    self._on_session_event(opened, data)

                self.events_sub = (
                    session_id,
                    self.socket.subscribe(queries.SESSION_EVENTS, {"sessionId": opened}, on_event),
                )
        self.route_task, self.route_session = task_id, session_id
        self.notice = None
        self.render(scroll=True)
        if task_id is not None:
            _spawn(self.load_route(task_id, session_id))

    def release_session(self) -> None:
        """Let go of the open session's layout (subscription, card draft) before it is cleared."""
        self._unsubscribe_events()
        self.route_session = None
        self.shown_permission = None
        self._reset_draft(None)
        self.render()

    def _unsubscribe_events(self) -> None:
        if self.events_sub is not None:
            self.socket.unsubscribe(self.events_sub[1])
            self.events_sub = None

    def _unsubscribe_projection(self) -> None:
        if self.projection_sub is not None:
            self.socket.unsubscribe(self.projection_sub[1])
            self.projection_sub = None

    def set_drawer(self, open_: bool) -> None:
        self.drawer_open = open_ and self.phone
        self._show_drawer()

    def _show_drawer(self) -> None:
        body = document.body
        if self.drawer_open:
            body.classList.add("drawer-open")
        else:
            body.classList.remove("drawer-open")
        toggle = document.getElementById("drawer-toggle")
        toggle.setAttribute("aria-expanded", "true" if self.drawer_open else "false")

    # --- DOM events ----------------------------------------------------------------------------

    def on_click(self, event: Any) -> None:
        target = event.target.closest("[data-action]")
        if _js_none(target):
            return
        action = _attr(target, "data-action")
        if action == "task":
            task_id = _attr(target, "data-task-id")
            if task_id:
                _spawn(self.activate(task_id))
        elif action == "tab":
            task_id = _attr(target, "data-task-id")
            session_id = _attr(target, "data-session-id")
            if task_id and session_id:
                self.go(session_route(task_id, session_id))
        elif action == "option":
            self._toggle_option(
                _attr(target, "data-question-id") or "", _attr(target, "data-option-id") or ""
            )
        elif action == "submit":
            _spawn(self.respond(False))
        elif action == "skip":
            _spawn(self.respond(True))
        elif action in ("perm-allow", "perm-deny", "perm-always", "perm-allow-edited"):
            _spawn(self.decide(action))
        elif action == "perm-edit":
            request = self._permission_request()
            if request is not None:
                self.perm_draft["editing"] = True
                if self.perm_draft.get("edited") is None:
                    self.perm_draft["edited"] = view.pretty_json(request.get("input"))
                self.card_error = None
                self.focus_request = "permission-edited-input|"
                self.render()
        elif action == "perm-edit-cancel":
            self.perm_draft["editing"] = False
            self.card_error = None
            self.focus_request = "permission-edit|"
            self.render()
        elif action == "perm-any":
            self.perm_draft["any"] = bool(target.checked)
            self.render()
        elif action == "perm-revoke":
            rule_id = _attr(target, "data-rule-id")
            if rule_id and self.route_session:
                _spawn(self.revoke(self.route_session, rule_id))
        elif action == "show-card":
            if self.card_pending:
                self.hidden.discard(self.card_pending)
                self.focus_request = (self.card_kind or QUESTION_CARD) + "-card|"
            self.render()
        elif action == "hide-card":
            self._hide_card()
        elif action in RETRY_ACTIONS:
            self._retry(action)
        elif action == "dismiss-notice":
            self.notice = None
            self.render()
        elif action == "drawer-toggle":
            self.set_drawer(not self.drawer_open)
        elif action == "drawer-close":
            self.set_drawer(False)
        elif action == "task-home" and self.route_task:
            self.go(task_route(self.route_task))

    def on_input(self, event: Any) -> None:
        target = event.target
        if str(target.tagName) == "TEXTAREA":
            question_id = _attr(target, "data-question-id")
            test_id = _attr(target, "data-testid")
            if question_id is not None:
                self.custom[question_id] = str(target.value)
            elif test_id == "permission-reason":
                self.perm_draft["reason"] = str(target.value)
            elif test_id == "permission-edited-input":
                self.perm_draft["edited"] = str(target.value)
            self._update_more()  # the box grows with its text

    def on_key(self, event: Any) -> None:
        key = str(event.key)
        if key in ARROWS:
            target = event.target
            if str(target.nodeType) == "1" and _attr(target, "role") == "radio":
                event.preventDefault()
                self._move_radio(target, ARROWS[key])
            return
        if key != "Escape":
            return
        if self.drawer_open:
            self.set_drawer(False)
            document.getElementById("drawer-toggle").focus()
            return
        # Escape only hides the card: rejecting a question is an explicit Skip, never a side effect.
        self._hide_card()

    def on_scroll(self, event: Any) -> None:
        target = event.target
        if str(target.nodeType) == "1" and target.classList.contains("card-body"):
            self._update_more()

    def _hide_card(self) -> None:
        """Hide the card (the question keeps waiting); focus moves to the control that reopens it."""
        if self.card_pending and self.card_pending not in self.hidden:
            self.hidden.add(self.card_pending)
            self.focus_request = (self.card_kind or QUESTION_CARD) + "-reopen|"
            self.render()

    def _move_radio(self, radio: Any, step: int) -> None:
        """Arrow keys in a "choose one" group: the next (or previous) option is chosen and focused."""
        group = radio.closest("[role=radiogroup]")
        if _js_none(group):
            return
        radios = group.querySelectorAll("[role=radio]")
        count = int(radios.length)
        current = _attr(radio, "data-option-id")
        index = 0
        for position in range(count):
            if _attr(radios.item(position), "data-option-id") == current:
                index = position
        chosen = radios.item((index + step) % count)
        question_id = _attr(chosen, "data-question-id") or ""
        option_id = _attr(chosen, "data-option-id") or ""
        self.selections[question_id] = [option_id]
        self.card_error = None
        self.focus_request = "clarification-option-" + option_id + "|" + question_id
        self.render()

    def _toggle_option(self, question_id: str, option_id: str) -> None:
        question = None
        for candidate in self._questions(self.route_session, self.card_pending):
            if candidate.get("questionId") == question_id:
                question = candidate
        if question is None:
            return
        chosen = list(self.selections.get(question_id) or [])
        if question.get("multiSelect"):
            if option_id in chosen:
                chosen.remove(option_id)
            else:
                chosen.append(option_id)
        else:
            chosen = [] if chosen == [option_id] else [option_id]
        self.selections[question_id] = chosen
        self.card_error = None
        self.render()

    # --- answering -----------------------------------------------------------------------------

    async def respond(self, rejected: bool) -> None:
        pending_id = self.card_pending
        session_id = self.route_session
        task_id = self.route_task
        if pending_id is None or session_id is None or task_id is None or self.card_busy:
            return
        answers = []
        if not rejected:
            for question in self._questions(session_id, pending_id):
                question_id = str(question.get("questionId"))
                text = (self.custom.get(question_id) or "").strip()
                chosen = self.selections.get(question_id) or []
                if chosen or text:
                    answers.append(
                        {"questionId": question_id, "selectedOptionIds": chosen, "customText": text or None}
                    )
            if not answers:
                self.card_error = "Choose an option or write an answer first."
                self.render()
                return
        self.card_busy = True
        self.card_error = None
        self.render()
        variables = {"pendingId": pending_id, "answers": answers, "rejected": rejected}
        try:
            data = await self.http.query(queries.RESPOND, variables)
            result = data["respondToClarification"]
            self._apply_response(pending_id, result)
        except net.Unauthorized:
            self.sign_out("That token was not accepted. Sign in again.")
            return
        except Exception as error:  # noqa: BLE001 - the card shows whatever broke the send
            self.card_error = "Could not send the answer: " + str(error)
        self.card_busy = False
        self.render()
        _spawn(self.refresh_session(task_id, session_id))

    def _apply_response(self, pending_id: str, result: dict[str, Any]) -> None:
        kind = result.get("__typename")
        if kind == "ClarificationResponded":
            # A responded bundle is terminal: it can never become active again, so the card stays
            # closed even before the session's events catch up.
            self.resolved.add(pending_id)
            if result.get("queued"):
                self.notice = ("QUEUED", None, QUESTION_CARD)
        elif kind == "ClarificationConflict":
            self.resolved.add(pending_id)
            self.notice = (result.get("reason"), result.get("winner"), QUESTION_CARD)
        elif kind == "ClarificationDeliveryFailed":
            message = str(result.get("message") or "the agent could not be reached")
            if result.get("retryable"):
                self.card_error = "Not delivered: " + message + ". Your answer was kept; try again."
            else:
                self.resolved.add(pending_id)
                self.notice = ("FAILED", None, QUESTION_CARD)
                self.card_error = None

    # --- deciding a permission request ------------------------------------------------------------

    def _permission_request(self) -> dict[str, Any] | None:
        """The open session's permission request while its card is the one shown."""
        session_id = self.route_session
        if session_id is None or self.card_kind != PERMISSION_CARD:
            return None
        request = self.permissions.get(session_id)
        if request is None or request.get("pendingId") != self.card_pending:
            return None
        return request

    def _strict_json_error(self, text: str) -> str:
        check = js.Function.new("text", STRICT_JSON)
        return str(check(text) or "")

    async def decide(self, action: str) -> None:
        request = self._permission_request()
        session_id = self.route_session
        task_id = self.route_task
        if request is None or session_id is None or task_id is None or self.card_busy:
            return
        pending_id = str(request["pendingId"])
        variables: dict[str, Any] = {
            "pendingId": pending_id,
            "behavior": "DENY" if action == "perm-deny" else "ALLOW",
            "updatedInput": None,
            "message": None,
            "remember": action == "perm-always",
            "rememberAnyInput": action == "perm-always" and bool(self.perm_draft.get("any")),
        }
        if action == "perm-deny":
            variables["message"] = (self.perm_draft.get("reason") or "").strip() or None
        elif action == "perm-allow-edited":
            text = str(self.perm_draft.get("edited") or "")
            problem = self._strict_json_error(text) if text.strip() else ""
            value: Any = None
            error: str | None = None
            if problem:
                error = "That is not valid JSON (" + problem + "). Nothing was sent."
            else:
                value, error = view.check_edited(text, request.get("input"))
                if error is not None:
                    error += " Nothing was sent."
            if error is not None:
                self.card_error = error
                self.focus_request = "permission-edited-input|"
                self.render()
                return
            variables["updatedInput"] = value
        self.card_busy = True
        self.card_error = None
        # The card may close on this decision's own event before the response arrives: that close
        # is not "decided elsewhere".
        self.decided_here.add(pending_id)
        self.render()
        try:
            data = await self.http.query(queries.RESPOND_PERMISSION, variables)
            self._apply_permission_response(pending_id, data["respondToPermission"])
        except net.Unauthorized:
            self.sign_out("That token was not accepted. Sign in again.")
            return
        except net.GraphQLError as error:
            # INVALID_INPUT names the field; nothing was written, so the card stays as it was.
            self.decided_here.discard(pending_id)
            self.card_error = "Not sent: " + str(error)
        except Exception as error:  # noqa: BLE001 - the card shows whatever broke the send
            self.decided_here.discard(pending_id)
            self.card_error = "Could not send the decision: " + str(error)
        self.card_busy = False
        self.render()
        _spawn(self.refresh_session(task_id, session_id))
        if variables["remember"]:
            _spawn(self.load_rules(session_id))

    def _apply_permission_response(self, pending_id: str, result: dict[str, Any]) -> None:
        kind = result.get("__typename")
        if kind == "PermissionResponded":
            self.resolved.add(pending_id)
            if result.get("queued"):
                self.notice = ("QUEUED", None, PERMISSION_CARD)
        elif kind == "ClarificationConflict":
            self.resolved.add(pending_id)
            self.notice = (result.get("reason"), None, PERMISSION_CARD)
            _spawn(self._explain_permission(pending_id, result.get("reason")))
        elif kind == "ClarificationDeliveryFailed":
            message = str(result.get("message") or "the agent could not be reached")
            if result.get("retryable"):
                self.decided_here.discard(pending_id)
                self.card_error = "Not delivered: " + message + ". Your decision was kept; try again."
            else:
                self.resolved.add(pending_id)
                self.notice = ("FAILED", None, PERMISSION_CARD)
                self.card_error = None

    async def _explain_permission(self, pending_id: str, reason: str | None) -> None:
        """Fill the notice of a request that closed under the card with what was decided instead."""
        session_id = self.route_session
        try:
            data = await self.http.query(queries.PERMISSION, {"pendingId": pending_id})
        except Exception as error:  # noqa: BLE001 - the notice says what it knows without it
            window.console.warn("looking up a decided request failed: " + str(error))
            data = {}
        if session_id != self.route_session:
            return
        request = data.get("permission") if isinstance(data, dict) else None
        if reason is None:
            if pending_id in self.decided_here:
                return
            state = (request or {}).get("state")
            if state in LIVE_REQUEST_STATES and not (request or {}).get("decision"):
                return  # still waiting (a question outranks it for now): nothing to say
            if (request or {}).get("decision"):
                reason = "ELSEWHERE"
            elif state == "SUPERSEDED_HISTORY":
                reason = "SUPERSEDED"
            else:
                reason = "CLOSED"
        current = self.notice
        live_close = reason in ("ELSEWHERE", "SUPERSEDED", "CLOSED")
        if live_close and current is not None and current[2] != PERMISSION_CARD:
            return  # a question's notice is up: it stays
        self.notice = (reason, request, PERMISSION_CARD)
        self.render()

    async def revoke(self, session_id: str, rule_id: str) -> None:
        if self.rule_busy is not None:
            return
        self.rule_busy = rule_id
        self.render()
        try:
            await self.http.query(queries.REVOKE_RULE, {"ruleId": rule_id})
        except Exception as error:  # noqa: BLE001 - the list is reloaded either way
            window.console.warn("revoking a rule failed: " + str(error))
        self.rule_busy = None
        await self.load_rules(session_id)
        active = document.activeElement
        if _js_none(active) or active == document.body:
            document.getElementById("transcript").focus()  # the revoked rule's button is gone

    # --- rendering -----------------------------------------------------------------------------

    def _set_html(self, element_id: str, html: str) -> bool:
        if self._html.get(element_id) == html:
            return False
        self._html[element_id] = html
        document.getElementById(element_id).innerHTML = html
        return True

    @staticmethod
    def _focus_key(element: Any) -> str | None:
        """What names a control across renders: its test id and its question."""
        if _js_none(element) or str(element.nodeType) != "1":
            return None
        test_id = _attr(element, "data-testid")
        return None if test_id is None else test_id + "|" + (_attr(element, "data-question-id") or "")

    def _find(self, root: Any, key: str) -> Any:
        if self._focus_key(root) == key:
            return root
        nodes = root.querySelectorAll("[data-testid]")
        for position in range(int(nodes.length)):
            node = nodes.item(position)
            if self._focus_key(node) == key:
                return node
        return None

    def _set_card_slot(self, html: str) -> bool:
        """Render the card slot, keeping the card body's scroll position and the focus.

        Every choice re-renders the card: the focused control (or the caret in a text box) and the
        scrolled-to question stay where they were. When the focused control is gone (the card was
        hidden or answered), focus goes to the control that reopens it, a notice, or the transcript.
        """
        slot = document.getElementById("card-slot")
        active = document.activeElement
        inside = not _js_none(active) and bool(slot.contains(active))
        key = self._focus_key(active) if inside else None
        caret = None
        if inside and str(active.tagName) == "TEXTAREA":
            caret = (int(active.selectionStart), int(active.selectionEnd))
        old_card = slot.querySelector(".card")
        old_pending = None if _js_none(old_card) else _attr(old_card, "data-pending-id")
        old_body = slot.querySelector(".card-body")
        top = 0 if _js_none(old_body) else int(old_body.scrollTop)
        changed = self._set_html("card-slot", html)
        card = slot.querySelector(".card")
        if changed and not _js_none(card) and old_pending == _attr(card, "data-pending-id"):
            card.querySelector(".card-body").scrollTop = top
        request, self.focus_request = self.focus_request, None
        target = None
        if request is not None:
            target = self._find(slot, request)
        elif changed and inside:
            target = self._find(slot, key) if key is not None else None
            if target is not None and _attr(target, "disabled") is not None:
                target = card  # Submit while the answer is on its way: the card keeps the focus
            for reopen in REOPEN_KEYS:
                if target is None:
                    target = self._find(slot, reopen)
            if target is None:
                for notice in NOTICE_KEYS:
                    found = self._find(slot, notice)
                    if target is None and found is not None:
                        target = found.querySelector("button")
            if target is None or _js_none(target):
                target = document.getElementById("transcript")
        if target is not None and not _js_none(target):
            target.focus()
            if caret is not None and str(target.tagName) == "TEXTAREA":
                target.setSelectionRange(caret[0], caret[1])
        self._update_more()
        return changed

    def _update_more(self) -> None:
        """Mark the card while its body has more above or below (a shadow and "More below")."""
        card = document.querySelector("#card-slot .card")
        if _js_none(card):
            return
        body = card.querySelector(".card-body")
        top = float(body.scrollTop)
        more = []
        if top > 1:
            more.append("above")
        if top + float(body.clientHeight) < float(body.scrollHeight) - 1:
            more.append("below")
        value = " ".join(more)
        if _attr(card, "data-more") != value:
            card.setAttribute("data-more", value)

    def _questions(self, session_id: str | None, pending_id: str | None) -> list[dict[str, Any]]:
        if session_id is None or pending_id is None:
            return []
        found = []
        for message in self.store.messages(session_id):
            question = message.get("clarification")
            if isinstance(question, dict) and question.get("pendingId") == pending_id:
                found.append(question)
        if not found:
            # The session's messages are still loading: the forced load already named the bundle.
            bundle = self.bundles.get(pending_id) or {}
            if bundle.get("sessionId", session_id) == session_id:
                found = list(bundle.get("questions") or [])
        return found

    def _reset_draft(self, pending_id: str | None, kind: str | None = None) -> None:
        if pending_id != self.card_pending:
            self.card_pending = pending_id
            self.card_kind = kind if pending_id is not None else None
            self.selections = {}
            self.custom = {}
            self.perm_draft = {}
            self.card_error = None
            self.card_busy = False

    def render(self, scroll: bool = False) -> None:
        if self.signed_out:
            return
        retrying = self._focused_retry()
        self._render_tasks()
        self._render_main(scroll)
        if retrying is not None:
            self._keep_retry_focus(retrying)
        self.attention.update()

    def _focused_retry(self) -> str | None:
        active = document.activeElement
        if _js_none(active) or str(active.nodeType) != "1":
            return None
        action = _attr(active, "data-action")
        return action if action in RETRY_ACTIONS else None

    def _keep_retry_focus(self, action: str) -> None:
        """A render replaced the focused Retry: focus the new one, or what the retry brought."""
        active = document.activeElement
        if not _js_none(active) and active != document.body:
            return
        target = document.querySelector('[data-action="' + action + '"]')
        if _js_none(target) and action == "retry-sessions":
            target = document.querySelector('#tabs [aria-selected="true"]')
            if _js_none(target):
                target = document.querySelector("#tabs [role=tab]")
        if _js_none(target):
            target = document.getElementById("transcript")
        target.focus()

    def _render_tasks(self) -> None:
        # 200 rows are rebuilt on every render; a row's HTML is reused while its inputs are unchanged,
        # which keeps a render under MicroPython to a few milliseconds.
        rows = []
        waiting = 0
        seen = set()
        order = list(self.task_order)
        if len(order) != len(self.store.task_ids()):
            for task_id in self.store.task_ids():
                if task_id not in self.task_order:
                    order.append(task_id)
        cache = self._rows
        for task_id in order:
            task = self.store.task(task_id)
            if task is None or task_id in seen:
                continue
            seen.add(task_id)
            action = self.store.task_pending_action(task_id)
            if action:
                waiting += 1
            key = (task.get("title"), task.get("workflowStep"), action, task_id == self.route_task)
            held = cache.get(task_id)
            if held is None or held[0] != key:
                held = (key, view.task_row(task_id, key[0], key[1], key[2], key[3]))
                cache[task_id] = held
            rows.append(held[1])
        self._set_html("task-list", view.task_list(rows))
        self._set_html("task-count", str(len(rows)))
        self._set_html("waiting-count", str(waiting) if waiting else "")

    def _render_main(self, scroll: bool) -> None:
        task_id = self.route_task
        task = self.store.task(task_id) if task_id else None
        if task_id is None or task is None:
            message = "Choose a task to see its sessions." if not task_id else "This task is not available."
            home = (
                '<div class="placeholder"><h1>Turnwise</h1><p>'
                + view.esc(message)
                + '</p><button type="button" class="btn primary phone-only" data-action="drawer-toggle">'
                + "Show tasks</button></div>"
            )
            self._set_html("task-head", home)
            self._set_html("tabs", "")
            self._set_html("rules", "")
            self._set_html("transcript", "")
            self._set_card_slot("")
            self._reset_draft(None)
            return
        sessions = self.store.task_sessions(task_id)
        sessions_key = loads.sessions_key(task_id)
        # No list held: a failed or unfinished load must not read as a task without sessions.
        failure = None if sessions else self.loads.failure(sessions_key)
        listed = bool(sessions) or (failure is None and self.loads.arrived(sessions_key))
        head = (
            '<div class="task-head"><h1>'
            + view.esc(task.get("title"))
            + '</h1><span class="step">'
            + view.esc(task.get("workflowStep"))
            + "</span></div>"
        )
        self._set_html("task-head", head)
        if failure is not None:
            tabs = view.load_failed("sessions", failure, self.loads.running(sessions_key))
        elif not listed:
            tabs = view.SESSIONS_LOADING
        else:
            tabs = view.session_tabs(task_id, sessions, self.route_session)
        self._set_html("tabs", tabs)
        session_id = self.route_session
        if session_id is None or self.store.session(session_id) is None:
            owner = None
            for session in sessions:
                if session.get("pendingAction"):
                    owner = session
            hint = "Choose a session above."
            if owner is not None:
                hint = "A session of this task needs your input: it is marked with a dot above."
            self._set_html("rules", "")
            self._set_html("transcript", '<p class="empty">' + view.esc(hint) + "</p>" if listed else "")
            self._set_card_slot(self._notice_html())
            self._reset_draft(None)
            return
        action, active_ids = self.store.session_pending(session_id)
        self._set_html("rules", view.permission_rules(self.rules.get(session_id) or [], self.rule_busy))
        if action == PERMISSION and session_id not in self.permission_loading:
            revision_key = _revision_key((self.store.projection(session_id) or {}).get("revision"))
            if self.permission_seen.get(session_id) != revision_key:
                self.permission_seen[session_id] = revision_key
                _spawn(self.load_permission(task_id, session_id))
        node = document.getElementById("transcript")
        # Follow the conversation while the reader is at its end (a card appearing shrinks the view).
        at_end = node.scrollTop + node.clientHeight >= node.scrollHeight - 48
        turns = self.store.turns(session_id)
        history_key = loads.history_key(session_id)
        history_failure = self.loads.failure(history_key) if turns is None else None
        if history_failure is not None:
            html = view.load_failed("history", history_failure, self.loads.running(history_key))
        else:
            html = view.transcript(turns, self.store.messages(session_id), active_ids)
        changed = self._set_html("transcript", html)
        card_changed = self._render_card(session_id, active_ids, action)
        if (changed and scroll) or ((changed or card_changed) and at_end):
            node.scrollTop = node.scrollHeight

    def _notice_html(self) -> str:
        if self.notice is None:
            return ""
        reason, bundle, kind = self.notice
        if reason == "QUEUED":
            return view.permission_queued_notice() if kind == PERMISSION_CARD else view.queued_notice()
        if reason == "FAILED":
            what = "decision" if kind == PERMISSION_CARD else "answer"
            return (
                '<div class="notice" role="status" data-testid="'
                + kind
                + '-conflict"><p>The '
                + what
                + " was accepted but the agent may not have received it; it will not be sent twice.</p></div>"
            )
        if kind == PERMISSION_CARD:
            return view.permission_notice(reason, bundle)
        return view.conflict_notice(reason, bundle)

    def _live_permission(self, session_id: str, action: str | None) -> dict[str, Any] | None:
        """The session's permission request while its projection says PERMISSION and it is undecided."""
        if action != PERMISSION:
            return None
        request = self.permissions.get(session_id)
        if request is None or request.get("pendingId") in self.resolved:
            return None
        if request.get("sessionId", session_id) != session_id:
            return None
        if request.get("state") not in LIVE_REQUEST_STATES:
            return None
        return request

    def _render_card(self, session_id: str, active_ids: list[str], action: str | None = None) -> bool:
        pending_id = None
        for candidate in active_ids:
            if candidate not in self.resolved and self._questions(session_id, candidate):
                pending_id = candidate
                break
        request = None if pending_id is not None else self._live_permission(session_id, action)
        if request is not None:
            pending_id = str(request["pendingId"])
        shown = self.shown_permission
        # The card closed under the person (decided elsewhere, superseded, closed): say so.
        closed = shown is not None and shown[0] == session_id and shown[1] != pending_id
        if (
            closed
            and shown is not None
            and shown[1] not in self.resolved
            and shown[1] not in self.decided_here
        ):
            _spawn(self._explain_permission(shown[1], None))
        self.shown_permission = (session_id, pending_id) if request is not None and pending_id else None
        self._reset_draft(pending_id, PERMISSION_CARD if request is not None else QUESTION_CARD)
        html = self._notice_html()
        if request is not None and pending_id is not None:
            if pending_id in self.hidden:
                html += view.reopen_pill(PERMISSION_CARD)
            else:
                html += view.permission_card(request, self.perm_draft, self.card_busy, self.card_error)
        elif pending_id is not None:
            if pending_id in self.hidden:
                html += view.reopen_pill()
            else:
                bundle = self.bundles.get(pending_id) or {}
                html += view.card(
                    pending_id,
                    self._questions(session_id, pending_id),
                    bundle.get("context"),
                    self.selections,
                    self.custom,
                    self.card_busy,
                    self.card_error,
                )
        return self._set_card_slot(html)


def _failure(error: Exception) -> str:
    """Why a load failed, in words: the server's own, else that the server could not be reached."""
    if isinstance(error, net.GraphQLError):
        return "The server answered with an error: " + str(error) + "."
    # Only the request runs inside a load's ``try``: any other error is the network failing it.
    return "The server could not be reached. Check the connection, then retry."


def _revision_key(revision: Any) -> str:
    if not isinstance(revision, dict):
        return ""
    return str(revision.get("epoch")) + ":" + str(revision.get("sequence"))


def show_signin(message: str | None = None) -> None:
    document.getElementById("boot").hidden = True
    panel = document.getElementById("signin")
    panel.hidden = False
    note = document.getElementById("signin-note")
    note.textContent = message or ""
    form = document.getElementById("signin-form")
    field = document.getElementById("signin-token")
    button = form.querySelector("button[type=submit]")
    if message:
        field.setAttribute("aria-invalid", "true")

    async def check(value: str) -> None:
        # The token is tried before it is kept: a refused one stays in the field to be corrected.
        button.disabled = True
        note.textContent = ""
        refused = None
        try:
            await net.Http(str(window.location.origin) + "/graphql", value).query(queries.SIGN_IN_CHECK)
        except net.Unauthorized:
            refused = "That token was not accepted. Check it and try again."
        except Exception:  # noqa: BLE001 - no answer at all: the server cannot be reached
            refused = "Could not reach the server. Try again in a moment."
        button.disabled = False
        if refused is not None:
            note.textContent = refused
            field.setAttribute("aria-invalid", "true")
            field.focus()
            return
        window.localStorage.setItem(TOKEN_KEY, value)
        window.location.reload()

    def submit(event: Any) -> None:
        event.preventDefault()
        value = str(field.value).strip()
        if value and not button.disabled:
            _spawn(check(value))

    def edited(_event: Any) -> None:
        field.removeAttribute("aria-invalid")

    form.addEventListener("submit", LIFETIMES.keep(create_proxy(submit)))
    field.addEventListener("input", LIFETIMES.keep(create_proxy(edited)))


async def start() -> None:
    token = read_token()
    if token is None:
        show_signin()
        return
    await App(token).boot()


def run() -> None:
    """Entry point from the page's script tag."""
    _spawn(start())
