"""What both cards share: one pending action's state, and what a card may ask of where it is shown."""

from frontend_py.app.page import Page
from frontend_py.app.sync import Sync

try:
    from typing import Any
except ImportError:  # MicroPython: annotations are never evaluated there
    pass

# The card kinds; each names its test ids (``<kind>-card``, ``<kind>-reopen``, ``<kind>-conflict``).
QUESTION = "clarification"
PERMISSION = "permission"


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

    def __init__(self, page: Page, sync: Sync, holder: Holder, pending_id: str) -> None:
        self.page = page
        self.sync = sync
        self.holder = holder
        self.pending_id = pending_id
        # The card belongs to the session open when it was drawn; a new route draws a new card.
        self.session_id = page.route_session
        self.task_id = page.route_task
        self.busy = False
        self.error: str | None = None

    def html(self) -> str:
        raise NotImplementedError

    def write(self, box: Any) -> None:
        """A text box of the card changed: keep its text in the draft."""
        raise NotImplementedError
