"""The cards of the inbox: the session view's own cards, reading their action from an inbox item
(``inboxChanged``) instead of the open session, and reading nothing again once they are answered
(the next list has the outcome)."""

from frontend_py.app.cards import Holder
from frontend_py.app.page import Page
from frontend_py.app.permission import PermissionCard
from frontend_py.app.question import QuestionCard
from frontend_py.app.rules import Rules
from frontend_py.app.sync import Sync

try:
    from typing import Any
except ImportError:  # MicroPython: annotations are never evaluated there
    pass


class InboxQuestion(QuestionCard):
    """A question card whose bundle is an inbox item's, not the open session's."""

    def __init__(self, page: Page, sync: Sync, holder: Holder, item: dict[str, Any]) -> None:
        super().__init__(
            page, sync, holder, str(item["pendingId"]), (item.get("taskId"), item.get("sessionId"))
        )
        self.item = item

    def questions(self) -> list[dict[str, Any]]:
        return list((self.item.get("clarification") or {}).get("questions") or [])

    def context(self) -> str | None:
        context = (self.item.get("clarification") or {}).get("context")
        return None if context is None else str(context)

    def refresh(self) -> None:
        """Nothing to read again: the next list from ``inboxChanged`` has the outcome."""


class InboxPermission(PermissionCard):
    """A permission card whose request is an inbox item's."""

    def __init__(
        self, page: Page, sync: Sync, holder: Holder, item: dict[str, Any], rules: Rules, decided: set[str]
    ) -> None:
        where = (item.get("taskId"), item.get("sessionId"))
        super().__init__(page, sync, holder, str(item["pendingId"]), rules, decided, where)
        self.item = item

    def request(self) -> dict[str, Any] | None:
        request = self.item.get("permission")
        return request if isinstance(request, dict) else None

    def refresh(self) -> None:
        """Nothing to read again: the next list from ``inboxChanged`` has the outcome."""
