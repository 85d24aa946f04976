"""What both cards share: one pending action's state, and what a card may ask of where it is shown."""

from frontend_py.app.page import Page, spawn
from frontend_py.app.sync import Sync
from frontend_py.app.views import parts
from frontend_py.app.views import permission as permission_view
from frontend_py.app.views import question as question_view

try:
    from typing import Any
except ImportError:  # MicroPython: annotations are never evaluated there
    pass

# The card kinds; each names its test ids (``<kind>-card``, ``<kind>-reopen``, ``<kind>-conflict``).
QUESTION = "clarification"
PERMISSION = "permission"


def notice_html(notice: tuple[str | None, Any, str] | None) -> str:
    """What a holder says about an action that closed: (reason, what won, card kind)."""
    if notice is None:
        return ""
    reason, won, kind = notice
    if reason == "QUEUED":
        return permission_view.queued_notice() if kind == PERMISSION else question_view.queued_notice()
    if reason == "FAILED":
        return parts.failed_notice(kind, "decision" if kind == PERMISSION else "answer")
    if kind == PERMISSION:
        return permission_view.notice(reason, won)
    return question_view.conflict_notice(reason, won)


class Holder:
    """Where a card is shown: the card slot of the session view (a list of cards could be another).

    A card draws itself and sends its own answer; what happens around it (which control takes the
    focus, the notice that replaces it) is the holder's.
    """

    def focus(self, key: str) -> None:
        """After the next render, focus the control ``key`` names (``<test id>|<question id>``)."""
        raise NotImplementedError

    def closed(self, pending_id: str, notice: tuple[str | None, Any, str] | None) -> None:
        """The action will not take an answer from this page again; ``notice`` is (reason, what
        won, card kind) of what to say about it, if anything."""
        raise NotImplementedError

    def explain(self, pending_id: str, reason: str | None) -> None:
        """Find out what was decided instead of this page's decision, and say it."""
        raise NotImplementedError


class Card:
    """One pending action's card: its draft, whether its answer is on its way, what went wrong."""

    kind = ""

    def __init__(
        self,
        page: Page,
        sync: Sync,
        holder: Holder,
        pending_id: str,
        where: tuple[str | None, str | None] | None = None,
    ) -> None:
        self.page = page
        self.sync = sync
        self.holder = holder
        self.pending_id = pending_id
        # The card belongs to the session open when it was drawn (a new route draws a new card), or
        # to the (task, session) ``where`` names when it is shown outside its session.
        self.task_id, self.session_id = (page.route_task, page.route_session) if where is None else where
        self.busy = False
        self.error: str | None = None

    def html(self) -> str:
        """The whole card: its frame around ``body`` and ``buttons``."""
        raise NotImplementedError

    def body(self, ns: str, detached_note: bool = True) -> str:
        """The card's content with its draft (element ids prefixed with ``ns``); empty when the action
        is no longer the card's to show."""
        raise NotImplementedError

    def buttons(self) -> str:
        raise NotImplementedError

    def refresh(self) -> None:
        """After an answer was sent: read the session again (the transcript shows the outcome)."""
        if self.task_id is not None and self.session_id is not None:
            spawn(self.sync.refresh_session(self.task_id, self.session_id))

    def write(self, box: Any) -> None:
        """A text box of the card changed: keep its text in the draft."""
        raise NotImplementedError
