"""Keeping the store in step with the server: the loads, the live subscriptions, the resync."""

from pyscript import window  # type: ignore[import-not-found]

from frontend_py.app import loads, net, queries
from frontend_py.app.decisions import Decisions
from frontend_py.app.page import REFUSED, Page, spawn
from frontend_py.app.rules import Rules
from frontend_py.kit import PERMISSION

try:
    from collections.abc import Callable
    from typing import Any
except ImportError:  # MicroPython: annotations are never evaluated there
    pass


def failure(error: Exception) -> str:
    """Why a load failed, in words: the server's own, else that the server could not be reached."""
    if isinstance(error, net.GraphQLError):
        return "The server answered with an error: " + str(error) + "."
    # Only the request runs inside a load's ``try``: any other error is the network failing it.
    return "The server could not be reached. Check the connection, then retry."


def revision_key(revision: Any) -> str:
    if not isinstance(revision, dict):
        return ""
    return str(revision.get("epoch")) + ":" + str(revision.get("sequence"))


class Sync:
    """What the page holds besides the store: the pending actions the loads named, which loads are
    on their way or failed (``loads``), and the subscriptions of the open route."""

    def __init__(self, page: Page, rules: Rules) -> None:
        self.page = page
        self.rules = rules
        self.decisions = Decisions(page, rules)
        self.task_order: list[str] = []
        # Active question bundles by pending id, as the session loads named them (the cards' fallback
        # while the session's messages are still loading).
        self.bundles: dict[str, dict[str, Any]] = {}
        # Per session: its active permission request as the last session load named it, and the
        # projection revision that load was made for (a newer PERMISSION revision loads it again).
        self.permissions: dict[str, dict[str, Any]] = {}
        self.permission_seen: dict[str, str] = {}
        self.permission_loading: set[str] = set()
        self.session_loads: dict[str, int] = {}
        self.history_loads: dict[str, int] = {}
        # Session events that arrived while a history load of their session was on its way: the
        # snapshot may have been read before them, so they are applied again on top of it.
        self.history_events: dict[str, list[dict[str, Any]]] = {}
        self.loads = loads.Loads()
        self.refetching = False
        self.booted = False
        self.summary_sub: str | None = None
        self.projection_sub: tuple[str, str] | None = None
        self.events_sub: tuple[str, str] | None = None

    def actions(self) -> dict[str, Callable[[Any], None]]:
        return {
            "retry-sessions": lambda _target: self.retry(True),
            "retry-history": lambda _target: self.retry(False),
        }

    # --- loads ---------------------------------------------------------------------------------

    async def load_tasks(self) -> None:
        store = self.page.store
        token = store.begin_read()
        data = await self.page.http.query(queries.TASKS)
        tasks = data["tasks"]
        self.task_order = [t["id"] for t in tasks]
        store.apply_tasks(tasks, token)
        for task in tasks:
            if task.get("summary") is None:
                spawn(self.load_task_sessions(task["id"]))

    async def load_sessions(self, task_id: str, signal: Any) -> list[dict[str, Any]]:
        """The kit's forced, authoritative session load (aborted through ``signal``)."""
        data = await self.page.http.query(queries.ACTIVATION_SESSIONS, {"taskId": task_id}, signal)
        sessions: list[dict[str, Any]] = data["taskSessions"]
        self._note_pending(sessions)
        return sessions

    def _note_pending(self, sessions: list[dict[str, Any]]) -> None:
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
            self.permission_seen[session_id] = revision_key(session.get("pendingActionRevision"))

    async def load_route(self, task_id: str, session_id: str | None) -> None:
        if session_id is not None:
            spawn(self.load_history(session_id))
            spawn(self.rules.load(session_id))
        await self.load_task_sessions(task_id)

    def check_permission(self, task_id: str, session_id: str, action: str | None) -> None:
        """Load the session's permission request when its projection moved to a PERMISSION revision
        no load has looked at (a new request's event carries the projection, not the request)."""
        if action != PERMISSION or session_id in self.permission_loading:
            return
        key = revision_key((self.page.store.projection(session_id) or {}).get("revision"))
        if self.permission_seen.get(session_id) != key:
            self.permission_seen[session_id] = key
            spawn(self._load_permission(task_id, session_id))

    async def _load_permission(self, task_id: str, session_id: str) -> None:
        self.permission_loading.add(session_id)
        try:
            await self.load_task_sessions(task_id)
        finally:
            self.permission_loading.discard(session_id)
        # Whatever the load found, this revision was looked at: no second load for it.
        held = self.page.store.projection(session_id) or {}
        self.permission_seen[session_id] = revision_key(held.get("revision"))
        self.page.render()

    async def load_task_sessions(self, task_id: str) -> None:
        # Only a task's newest list applies: an older one could drop a session created since.
        load = self.session_loads.get(task_id, 0) + 1
        self.session_loads[task_id] = load
        key = self._start_load(loads.sessions_key(task_id))
        try:
            data = await self.page.http.query(queries.ROUTE_SESSIONS, {"taskId": task_id})
        except net.Unauthorized:
            self.loads.finish(key, False)
            self.page.sign_out(REFUSED)
            return
        except Exception as error:  # noqa: BLE001 - the page says it failed and offers to retry
            window.console.warn("loading sessions failed: " + str(error))
            self.loads.finish(key, self.session_loads.get(task_id) == load, failure(error))
            self.page.render()
            return
        newest = self.session_loads.get(task_id) == load
        self.loads.finish(key, newest)
        if self.page.store.task(task_id) is None or not newest:
            return
        sessions = data["taskSessions"]
        self._note_pending(sessions)
        self.page.store.apply_task_sessions(task_id, sessions)
        self.page.render()

    def _start_load(self, key: str) -> str:
        self.loads.start(key)
        if self.loads.failure(key) is not None:
            self.page.render()  # the failure's Retry now says it is retrying
        return key

    def retry(self, sessions: bool) -> None:
        """Load again what the open route failed to load (its session list too when ``sessions``);
        the route itself stays as it is."""
        task_id, session_id = self.page.route_task, self.page.route_session
        if task_id is None:
            return
        if sessions and not self.loads.running(loads.sessions_key(task_id)):
            spawn(self.load_task_sessions(task_id))
        if session_id is not None:
            key = loads.history_key(session_id)
            if self.loads.failure(key) is not None and not self.loads.running(key):
                spawn(self.load_history(session_id))

    async def load_history(self, session_id: str) -> None:
        load = self.history_loads.get(session_id, 0) + 1
        self.history_loads[session_id] = load
        self.history_events.setdefault(session_id, [])
        key = self._start_load(loads.history_key(session_id))
        try:
            data = await self.page.http.query(queries.SESSION_HISTORY, {"sessionId": session_id})
        except Exception as error:  # noqa: BLE001 - the page says it failed and offers to retry
            window.console.warn("loading the session failed: " + str(error))
            newest = self.history_loads.get(session_id) == load
            if newest:
                self.history_events.pop(session_id, None)
            self.loads.finish(key, newest, failure(error))
            self.page.render()
            return
        # Applied even before the session list arrives: opening a deep link loads both at once.
        newest = self.history_loads.get(session_id) == load
        self.loads.finish(key, newest)
        if not newest:
            return
        store = self.page.store
        store.apply_session_turns(session_id, data["sessionTurns"])
        store.apply_session_messages(session_id, data["sessionMessages"])
        # A change the snapshot was read before (an answer's delivery, say) arrived as an event
        # meanwhile: the snapshot must not take it back. Events come in order, so applying them again
        # ends on the newest state.
        for event in self.history_events.pop(session_id, []):
            store.apply_session_event(session_id, event)
        self.page.render(True)
        spawn(self.decisions.load(session_id))

    async def reload_turns(self, session_id: str) -> None:
        try:
            data = await self.page.http.query(queries.SESSION_TURNS, {"sessionId": session_id})
        except Exception:  # noqa: BLE001 - the next event or resync reloads the turns
            return
        self.page.store.apply_session_turns(session_id, data["sessionTurns"])
        self.page.render()

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
            self.page.render()
            if self.page.route_task is not None:
                await self.load_route(self.page.route_task, self.page.route_session)
        except Exception as error:  # noqa: BLE001 - a failed background load is logged, the page lives on
            window.console.warn("resync failed: " + str(error))
        finally:
            self.refetching = False

    # --- live updates --------------------------------------------------------------------------

    def start(self) -> None:
        """Task summaries (the icons) for the page's whole life."""
        self.summary_sub = self.page.socket.subscribe(queries.TASK_SUMMARIES, {}, self._on_summary)

    def follow(self, task_id: str | None, session_id: str | None) -> None:
        """Subscribe to what the route about to open shows: its task's projections, its session's events."""
        socket = self.page.socket
        if task_id != self.page.route_task:
            self._unsubscribe_projection()
            if task_id is not None:
                sub = socket.subscribe(queries.TASK_PROJECTIONS, {"taskId": task_id}, self._on_projection)
                self.projection_sub = (task_id, sub)
        if session_id != self.page.route_session:
            self.unfollow_session()
            if session_id is not None:
                opened = session_id

                def on_event(data: Any) -> None:
                    self._on_session_event(opened, data)

                variables = {"sessionId": opened}
                self.events_sub = (session_id, socket.subscribe(queries.SESSION_EVENTS, variables, on_event))

    def unfollow_session(self) -> None:
        if self.events_sub is not None:
            self.page.socket.unsubscribe(self.events_sub[1])
            self.events_sub = None

    def _unsubscribe_projection(self) -> None:
        if self.projection_sub is not None:
            self.page.socket.unsubscribe(self.projection_sub[1])
            self.projection_sub = None

    def _on_summary(self, data: Any) -> None:
        summary = data.get("taskSummaryChanged")
        if not isinstance(summary, dict):
            return
        store = self.page.store
        known = store.task(str(summary.get("taskId"))) is not None
        changed = store.apply_task_summary(summary)
        if not self.booted:
            return  # the first task list is on its way and renders everything at once
        if not known:
            # A task this client has not listed yet: the list is the authority on what exists.
            spawn(self.resync())
        elif changed:
            self.page.render()

    def _on_projection(self, data: Any) -> None:
        projection = data.get("pendingActionChanged")
        if isinstance(projection, dict) and self.page.store.apply_projection(projection):
            self.page.render()

    def _on_session_event(self, session_id: str, data: Any) -> None:
        event = data.get("sessionEvents")
        if not isinstance(event, dict) or session_id != self.page.route_session:
            return
        store = self.page.store
        store.apply_session_event(session_id, event)
        held = self.history_events.get(session_id)
        if held is not None:
            held.append(event)
        if store.turns_stale(session_id):
            spawn(self.reload_turns(session_id))
        message = event.get("message")
        if isinstance(message, dict) and message.get("kind") == "permission_request":
            # A decision here or elsewhere may have remembered a rule (or a rule decided this one).
            spawn(self.rules.load(session_id))
        # Any event may settle a pending action (an answer, a supersede): its decision line follows.
        spawn(self.decisions.load(session_id))
        self.page.render(True)
