"""The card slot under the conversation: which card shows, hiding and showing it, its notices, focus."""

from pyscript import document, window  # type: ignore[import-not-found]

from frontend_py.app import queries
from frontend_py.app.cards import PERMISSION, QUESTION, Card, Holder, notice_html
from frontend_py.app.page import Page, attr, js_none, spawn
from frontend_py.app.permission import PermissionCard, closed_reason, live_request
from frontend_py.app.question import QuestionCard, find
from frontend_py.app.rules import Rules
from frontend_py.app.sync import Sync
from frontend_py.app.views import parts

try:
    from collections.abc import Callable
    from typing import Any
except ImportError:  # MicroPython: annotations are never evaluated there
    pass

# Focus requests for the card slot's next render: the control that reopens a hidden card, the card.
REOPEN_KEYS = (QUESTION + "-reopen|", PERMISSION + "-reopen|")
NOTICE_KEYS = (
    "clarification-conflict|",
    "clarification-queued|",
    "permission-conflict|",
    "permission-queued|",
)
DECISIONS = ("perm-allow", "perm-deny", "perm-always", "perm-allow-edited")


def _focus_key(element: Any) -> str | None:
    """What names a control across renders: its test id and its question."""
    if js_none(element) or str(element.nodeType) != "1":
        return None
    test_id = attr(element, "data-testid")
    return None if test_id is None else test_id + "|" + (attr(element, "data-question-id") or "")


def _find(root: Any, key: str) -> Any:
    if _focus_key(root) == key:
        return root
    nodes = root.querySelectorAll("[data-testid]")
    for position in range(int(nodes.length)):
        node = nodes.item(position)
        if _focus_key(node) == key:
            return node
    return None


class Slot(Holder):
    """One card at a time: the open session's first live question bundle, else its live permission
    request. Hidden cards, settled actions and the notice are the slot's, the draft is the card's."""

    def __init__(self, page: Page, sync: Sync, rules: Rules) -> None:
        self.page = page
        self.sync = sync
        self.rules = rules
        self.card: Card | None = None
        self.hidden: set[str] = set()
        self.resolved: set[str] = set()
        self.decided_here: set[str] = set()
        # (reason, what won, card kind) of the notice above the card, or None.
        self.notice: tuple[str | None, Any, str] | None = None
        # What takes focus after the slot's next render (a ``_focus_key``), when not where it was.
        self.focus_request: str | None = None
        # The permission card last shown (session, pending id): when it closes without this page's
        # decision, a notice says what happened to it.
        self.shown_permission: tuple[str, str] | None = None

    # --- what a card asks of the slot ----------------------------------------------------------

    def focus(self, key: str) -> None:
        self.focus_request = key

    def closed(self, pending_id: str, notice: tuple[str | None, Any, str] | None) -> None:
        self.resolved.add(pending_id)
        if notice is not None:
            self.notice = notice

    def explain(self, pending_id: str, reason: str | None) -> None:
        spawn(self._explain(pending_id, reason))

    async def _explain(self, pending_id: str, reason: str | None) -> None:
        """Fill the notice of a request that closed under the card with what was decided instead."""
        session_id = self.page.route_session
        try:
            data = await self.page.http.query(queries.PERMISSION, {"pendingId": pending_id})
        except Exception as error:  # noqa: BLE001 - the notice says what it knows without it
            window.console.warn("looking up a decided request failed: " + str(error))
            data = {}
        if session_id != self.page.route_session:
            return
        request = data.get("permission") if isinstance(data, dict) else None
        if reason is None:
            if pending_id in self.decided_here:
                return
            reason = closed_reason(request)
            if reason is None:
                return
        current = self.notice
        live_close = reason in ("ELSEWHERE", "SUPERSEDED", "CLOSED")
        if live_close and current is not None and current[2] != PERMISSION:
            return  # a question's notice is up: it stays
        self.notice = (reason, request, PERMISSION)
        self.page.render()

    # --- the person's actions ------------------------------------------------------------------

    def actions(self) -> dict[str, Callable[[Any], None]]:
        handlers: dict[str, Callable[[Any], None]] = {
            "option": self._on_option,
            "submit": lambda _target: self._respond(False),
            "skip": lambda _target: self._respond(True),
            "perm-edit": lambda _target: self._permission_card(PermissionCard.edit),
            "perm-edit-cancel": lambda _target: self._permission_card(PermissionCard.cancel_edit),
            "perm-suggest": lambda target: self._permission_card(
                lambda card: card.choose(int(attr(target, "data-index") or 0))
            ),
            "perm-scope": lambda target: self._permission_card(
                lambda card: card.scope(attr(target, "data-scope") or "SESSION")
            ),
            "perm-broad-cancel": lambda _target: self._permission_card(PermissionCard.cancel_broad),
            "show-card": lambda _target: self.show(),
            "hide-card": lambda _target: self.hide(),
            "dismiss-notice": lambda _target: self.dismiss(),
        }
        for action in DECISIONS:
            handlers[action] = self._on_decision
        return handlers

    def _on_option(self, target: Any) -> None:
        if isinstance(self.card, QuestionCard):
            self.card.toggle(attr(target, "data-question-id") or "", attr(target, "data-option-id") or "")

    def _respond(self, rejected: bool) -> None:
        if isinstance(self.card, QuestionCard):
            spawn(self.card.respond(rejected))

    def _on_decision(self, target: Any) -> None:
        if isinstance(self.card, PermissionCard):
            confirmed = attr(target, "data-confirmed") == "true"
            spawn(self.card.decide(attr(target, "data-action") or "", confirmed))

    def _permission_card(self, method: Callable[[PermissionCard], None]) -> None:
        if isinstance(self.card, PermissionCard):
            method(self.card)

    def on_input(self, box: Any) -> None:
        if self.card is not None:
            self.card.write(box)
        self.update_more()  # the box grows with its text

    def on_arrow(self, radio: Any, step: int) -> None:
        if isinstance(self.card, QuestionCard):
            self.card.move(radio, step)

    def show(self) -> None:
        if self.card is not None:
            self.hidden.discard(self.card.pending_id)
            self.focus_request = self.card.kind + "-card|"
        self.page.render()

    def hide(self) -> None:
        """Hide the card (the action keeps waiting); focus moves to the control that reopens it."""
        if self.card is not None and self.card.pending_id not in self.hidden:
            self.hidden.add(self.card.pending_id)
            self.focus_request = self.card.kind + "-reopen|"
            self.page.render()

    def dismiss(self) -> None:
        self.notice = None
        self.page.render()

    # --- which card ----------------------------------------------------------------------------

    def reset(self, pending_id: str | None, kind: str = QUESTION) -> None:
        """Make the card the one for ``pending_id``: a new action starts a clean draft."""
        if pending_id == (None if self.card is None else self.card.pending_id):
            return
        if pending_id is None:
            self.card = None
        elif kind == PERMISSION:
            self.card = PermissionCard(self.page, self.sync, self, pending_id, self.rules, self.decided_here)
        else:
            self.card = QuestionCard(self.page, self.sync, self, pending_id)

    def route_opened(self, new_session: bool) -> None:
        """The notice was about the route left; a card closed in another session owes none."""
        if new_session:
            self.shown_permission = None
        self.notice = None

    def release(self) -> None:
        """The open session is let go of: no card, and no closed-card notice owed for it."""
        self.shown_permission = None
        self.reset(None)

    def render_empty(self, html: str) -> None:
        """No session open: the slot shows ``html`` (a notice, or nothing) and no card."""
        self._set_html(html)
        self.reset(None)

    def render(self, session_id: str, active_ids: list[str], action: str | None) -> bool:
        """The session's card (or the pill of a hidden one) under the notice; whether it changed."""
        store, bundles = self.page.store, self.sync.bundles
        pending_id = None
        for candidate in active_ids:
            if candidate not in self.resolved and find(store, bundles, session_id, candidate):
                pending_id = candidate
                break
        request = None
        if pending_id is None:
            request = live_request(self.sync.permissions, self.resolved, session_id, action)
        if request is not None:
            pending_id = str(request["pendingId"])
        shown = self.shown_permission
        # The card closed under the person (decided elsewhere, superseded, closed): say so.
        closed = shown is not None and shown[0] == session_id and shown[1] != pending_id
        if closed and shown is not None and shown[1] not in self.resolved | self.decided_here:
            self.explain(shown[1], None)
        self.shown_permission = (session_id, pending_id) if request is not None and pending_id else None
        self.reset(pending_id, PERMISSION if request is not None else QUESTION)
        html = self.notice_html()
        if self.card is not None:
            if self.card.pending_id in self.hidden:
                html += parts.reopen_pill(self.card.kind)
            else:
                html += self.card.html()
        return self._set_html(html)

    def notice_html(self) -> str:
        return notice_html(self.notice)

    # --- drawing, keeping the focus and the scroll position ------------------------------------

    def _set_html(self, html: str) -> bool:
        """Render the slot, keeping the card body's scroll position and the focus.

        Every choice re-renders the card: the focused control (or the caret in a text box) and the
        scrolled-to question stay where they were. When the focused control is gone (the card was
        hidden or answered), focus goes to the control that reopens it, a notice, or the transcript.
        """
        slot = document.getElementById("card-slot")
        active = document.activeElement
        inside = not js_none(active) and bool(slot.contains(active))
        key = _focus_key(active) if inside else None
        caret = None
        if inside and str(active.tagName) == "TEXTAREA":
            caret = (int(active.selectionStart), int(active.selectionEnd))
        old_card = slot.querySelector(".card")
        old_pending = None if js_none(old_card) else attr(old_card, "data-pending-id")
        old_body = slot.querySelector(".card-body")
        top = 0 if js_none(old_body) else int(old_body.scrollTop)
        changed = self.page.set_html("card-slot", html)
        card = slot.querySelector(".card")
        if changed and not js_none(card) and old_pending == attr(card, "data-pending-id"):
            card.querySelector(".card-body").scrollTop = top
        request, self.focus_request = self.focus_request, None
        target = None
        if request is not None:
            target = _find(slot, request)
        elif changed and inside:
            target = self._refocus(slot, card, key)
        if target is not None and not js_none(target):
            target.focus()
            if caret is not None and str(target.tagName) == "TEXTAREA":
                target.setSelectionRange(caret[0], caret[1])
        self.update_more()
        return changed

    def _refocus(self, slot: Any, card: Any, key: str | None) -> Any:
        """Where the focus goes when a render replaced the focused control of the slot."""
        target = _find(slot, key) if key is not None else None
        if target is not None and attr(target, "disabled") is not None:
            target = card  # Submit while the answer is on its way: the card keeps the focus
        for reopen in REOPEN_KEYS:
            if target is None:
                target = _find(slot, reopen)
        if target is None:
            for notice in NOTICE_KEYS:
                found = _find(slot, notice)
                if target is None and found is not None:
                    target = found.querySelector("button")
        if target is None or js_none(target):
            target = document.getElementById("transcript")
        return target

    def update_more(self) -> None:
        """Mark the card while its body has more above or below (a shadow and "More below")."""
        card = document.querySelector("#card-slot .card")
        if js_none(card):
            return
        body = card.querySelector(".card-body")
        top = float(body.scrollTop)
        more = []
        if top > 1:
            more.append("above")
        if top + float(body.clientHeight) < float(body.scrollHeight) - 1:
            more.append("below")
        value = " ".join(more)
        if attr(card, "data-more") != value:
            card.setAttribute("data-more", value)
