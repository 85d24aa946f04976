"""The task list: a row per task, its pending-action icon, and the counts in the sidebar and top bar."""

from frontend_py.app.page import Page
from frontend_py.app.sync import Sync
from frontend_py.app.views import tasks as view

try:
    from typing import Any
except ImportError:  # MicroPython: annotations are never evaluated there
    pass


class Sidebar:
    def __init__(self, page: Page, sync: Sync) -> None:
        self.page = page
        self.sync = sync
        self._rows: dict[str, tuple[Any, str]] = {}

    def render(self) -> None:
        # 200 rows are rebuilt on every render; a row's HTML is reused while its inputs are unchanged,
        # which keeps a render under MicroPython to a few milliseconds.
        store = self.page.store
        rows = []
        waiting = 0
        seen = set()
        order = list(self.sync.task_order)
        if len(order) != len(store.task_ids()):
            for task_id in store.task_ids():
                if task_id not in self.sync.task_order:
                    order.append(task_id)
        cache = self._rows
        for task_id in order:
            task = store.task(task_id)
            if task is None or task_id in seen:
                continue
            seen.add(task_id)
            action = store.task_pending_action(task_id)
            if action:
                waiting += 1
            key = (task.get("title"), task.get("workflowStep"), action, task_id == self.page.route_task)
            held = cache.get(task_id)
            if held is None or held[0] != key:
                held = (key, view.task_row(task_id, key[0], key[1], key[2], key[3]))
                cache[task_id] = held
            rows.append(held[1])
        self.page.set_html("task-list", view.task_list(rows))
        self.page.set_html("task-count", str(len(rows)))
        self.page.set_html("waiting-count", str(waiting) if waiting else "")
