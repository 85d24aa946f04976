"""Where the person is: routes, the sheet the task list sits in (sidebar or phone drawer), activation."""

from pyscript import document, window  # type: ignore[import-not-found]

from frontend_py.app.page import Page, attr, spawn
from frontend_py.app.slot import Slot
from frontend_py.app.sync import Sync
from frontend_py.kit import (
    OPENED_TASK,
    ActivationController,
    Navigator,
    session_route,
    sole_session,
    task_route,
)

try:
    from collections.abc import Callable
    from typing import Any
except ImportError:  # MicroPython: annotations are never evaluated there
    pass

PHONE_MEDIA = "(max-width: 767px)"


def parse_route(path: str) -> tuple[str | None, str | None]:
    """``/t/<task>`` and ``/t/<task>/s/<session>``; anything else (``/``, ``/inbox``) is the inbox."""
    parts = [p for p in path.split("/") if p]
    if len(parts) >= 2 and parts[0] == "t":
        if len(parts) >= 4 and parts[2] == "s":
            return (parts[1], parts[3])
        return (parts[1], None)
    return (None, None)


class _SheetNavigator(Navigator):
    """What a mounted sheet's activation may do; the kit calls it only for live continuations."""

    def __init__(self, navigation: "Navigation") -> None:
        self.navigation = navigation

    def navigate(self, route: str) -> None:
        self.navigation.go(route)

    def release_session_layout(self) -> None:
        self.navigation.release_session()

    def close_sheet(self) -> None:
        self.navigation.set_drawer(False)


class Navigation:
    def __init__(self, page: Page, sync: Sync, slot: Slot) -> None:
        self.page = page
        self.sync = sync
        self.slot = slot
        self.media = window.matchMedia(PHONE_MEDIA)
        self.phone = bool(self.media.matches)
        self.drawer_open = False
        self.controller = self._mount_controller()
        self.activations = 0

    def actions(self) -> dict[str, Callable[[Any], None]]:
        return {
            "task": self._on_task,
            "tab": self._on_tab,
            "drawer-toggle": lambda _target: self.set_drawer(not self.drawer_open),
            "drawer-close": lambda _target: self.set_drawer(False),
            "task-home": self._on_task_home,
            "inbox": self._on_inbox,
        }

    def _on_task(self, target: Any) -> None:
        task_id = attr(target, "data-task-id")
        if task_id:
            spawn(self.activate(task_id))

    def _on_tab(self, target: Any) -> None:
        task_id = attr(target, "data-task-id")
        session_id = attr(target, "data-session-id")
        if task_id and session_id:
            self.go(session_route(task_id, session_id))

    def _on_inbox(self, _target: Any) -> None:
        self.set_drawer(False)
        self.go("/")

    def _on_task_home(self, _target: Any) -> None:
        if self.page.route_task:
            self.go(task_route(self.page.route_task))

    # --- activation, per sheet -----------------------------------------------------------------

    def _mount_controller(self) -> ActivationController:
        # One controller per mounted sheet: the phone drawer closes itself, the sidebar does not.
        return ActivationController(
            self.page.store, self.sync.load_sessions, _SheetNavigator(self), closes_sheet=self.phone
        )

    async def activate(self, task_id: str) -> None:
        """What a task row's click does (and a notification's, from the page or the worker)."""
        result = await self.controller.activate(task_id)
        only = sole_session(self.page.store, task_id) if result == OPENED_TASK else None
        if only is not None and self.page.route_task == task_id and self.page.route_session is None:
            # The task-only fallback of a task with one session: there is nothing to choose, so it
            # opens (in place of the task route, which Back would only return to).
            window.history.replaceState(None, "", session_route(task_id, only))
            self.set_route(session_route(task_id, only))
        # Every finished activation is counted on the page, a stale one included, so its end is visible.
        self.activations += 1
        root = document.documentElement
        root.setAttribute("data-activations", str(self.activations))
        root.setAttribute("data-last-activation", result)

    def apply_layout(self) -> None:
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

    # --- routes --------------------------------------------------------------------------------

    def go(self, route: str) -> None:
        if str(window.location.pathname) != route:
            window.history.pushState(None, "", route)
        self.set_route(route)

    def set_route(self, path: str) -> None:
        page = self.page
        task_id, session_id = parse_route(path)
        if task_id is not None and session_id is not None:
            page.store.remember_session(task_id, session_id)
        self.sync.follow(task_id, session_id)
        self.slot.route_opened(session_id != page.route_session)
        page.route_task, page.route_session = task_id, session_id
        page.render(True)
        if task_id is not None:
            spawn(self.sync.load_route(task_id, session_id))

    def release_session(self) -> None:
        """Let go of the open session's layout (subscription, card draft) before it is cleared."""
        self.sync.unfollow_session()
        self.page.route_session = None
        self.slot.release()
        self.page.render()
