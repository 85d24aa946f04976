"""The inbox, "Needs you": every pending action the person may act on, answered in place.

The list comes from ``inboxChanged`` (the list now, then again after every change), held in the
kit's ``Inbox`` with the selection and the batch. Each item holds the same cards as the session view
(``question.QuestionCard``, ``permission.PermissionCard``), reading their action from the item
instead of the open session (``inbox_cards.py``); this module is their ``Holder``. The keys are
``triage.py``'s; the ages tick once a second.
"""

import asyncio

import js  # type: ignore[import-not-found]
from pyscript import document, window  # type: ignore[import-not-found]

from frontend_py.app import queries
from frontend_py.app.cards import PERMISSION, Card, Holder, notice_html
from frontend_py.app.inbox_cards import InboxPermission, InboxQuestion
from frontend_py.app.page import Page, attr, js_none, spawn
from frontend_py.app.permission import PermissionCard
from frontend_py.app.question import QuestionCard
from frontend_py.app.rules import Rules
from frontend_py.app.sync import Sync
from frontend_py.app.views import inbox as view
from frontend_py.kit import parse_timestamp, session_route
from frontend_py.kit.inbox import PERMISSION_KIND, Inbox, age_text, asked_micros

try:
    from collections.abc import Callable
    from typing import Any
except ImportError:  # MicroPython: annotations are never evaluated there
    pass

PANE = "inbox-pane"
TEXT_TAGS = ("TEXTAREA", "INPUT", "SELECT")


class _ItemHolder(Holder):
    """What one item's card asks of the inbox, naming the item."""

    def __init__(self, inbox: "InboxView", pending_id: str) -> None:
        self.inbox = inbox
        self.pending_id = pending_id

    def focus(self, key: str) -> None:
        self.inbox.focus_request = self.pending_id + "|" + key

    def closed(self, pending_id: str, notice: tuple[str | None, Any, str] | None) -> None:
        self.inbox.closed(pending_id, notice)

    def explain(self, pending_id: str, reason: str | None) -> None:
        spawn(self.inbox.explain(pending_id, reason))


def now_micros() -> int:
    """The browser's clock in microseconds, read as text: MicroPython's floats are too coarse for
    ``Date.now()`` (milliseconds since 1970 need more than their 24-bit mantissa)."""
    return parse_timestamp(str(js.Date.new().toISOString()))


def _row_of(element: Any) -> Any:
    return None if js_none(element) or str(element.nodeType) != "1" else element.closest("[data-pending-id]")


class InboxView:
    def __init__(self, page: Page, sync: Sync, rules: Rules, go: Callable[[str], None]) -> None:
        self.page = page
        self.sync = sync
        self.rules = rules
        self.go = go
        self.inbox = Inbox()
        self.cards: dict[str, Card] = {}
        self.numbers: dict[str, int] = {}  # a stable id prefix per item
        self.decided_here: set[str] = set()
        self.notice: tuple[str | None, Any, str] | None = None
        self.failure: str | None = None
        self.help_open = False
        self.shown = False
        self.focus_request: str | None = None
        self.sub: str | None = None
        self.lists = 0  # lists the subscription delivered: a read started before one is stale
        self.said = 0  # status lines said: only the last one is cleared

    # --- the list --------------------------------------------------------------------------------

    def start(self) -> None:
        """The inbox for the page's whole life (the sidebar counts it), and the ticking ages."""
        self.sub = self.page.socket.subscribe(queries.INBOX_CHANGED, {}, self._on_changed, self._on_error)
        spawn(self._load())
        spawn(self._tick())

    async def _load(self) -> None:
        """The first list over HTTP, applied unless the subscription's came first."""
        lists = self.lists
        try:
            data = await self.page.http.query(queries.INBOX)
        except Exception as error:  # noqa: BLE001 - the subscription brings the list anyway
            window.console.warn("loading the inbox failed: " + str(error))
            return
        if lists == self.lists:
            self._apply(data.get("inbox"))

    def _on_changed(self, data: Any) -> None:
        self.lists += 1
        self._apply(data.get("inboxChanged"))

    def _apply(self, items: Any) -> None:
        if not isinstance(items, list):
            return
        self.failure = None
        first = not self.inbox.loaded
        self.inbox.apply(items)
        active = document.activeElement
        if first and self.shown and (js_none(active) or active == document.body):
            self.focus_selected()  # the page opened on the inbox: the keyboard starts on its first item
        present = set(self.inbox.ids())
        for item in self.inbox.items():
            card = self.cards.get(str(item["pendingId"]))
            if isinstance(card, (InboxQuestion, InboxPermission)):
                card.item = item
        for pending_id in list(self.cards):
            if pending_id not in present:
                del self.cards[pending_id]
        self.page.render()

    def _on_error(self, message: str) -> None:
        if not self.inbox.loaded:
            self.failure = message
            self.page.render()

    def card(self, item: dict[str, Any]) -> Card:
        pending_id = str(item["pendingId"])
        card = self.cards.get(pending_id)
        if card is None:
            holder = _ItemHolder(self, pending_id)
            if item.get("kind") == PERMISSION_KIND:
                card = InboxPermission(self.page, self.sync, holder, item, self.rules, self.decided_here)
            else:
                card = InboxQuestion(self.page, self.sync, holder, item)
            self.cards[pending_id] = card
        return card

    def _card_at(self, pending_id: str | None) -> Card | None:
        item = self.inbox.item(pending_id)
        return None if item is None else self.card(item)

    # --- what the cards ask of it ----------------------------------------------------------------

    def closed(self, pending_id: str, notice: tuple[str | None, Any, str] | None) -> None:
        item = self.inbox.item(pending_id)
        self.inbox.settle(pending_id)
        if notice is not None and notice[0] != "QUEUED":
            self.notice = notice
        elif item is not None:
            what = "Decision" if item.get("kind") == PERMISSION_KIND else "Answer"
            title = "“" + str(item.get("taskTitle") or "") + "”"
            if notice is None:
                self._say(what + " sent to the agent of " + title + ".")
            else:
                self._say(what + " saved for the agent of " + title + ": it gets it when it comes back.")

    async def explain(self, pending_id: str, reason: str | None) -> None:
        try:
            data = await self.page.http.query(queries.PERMISSION, {"pendingId": pending_id})
        except Exception as error:  # noqa: BLE001 - the notice says what it knows without it
            window.console.warn("looking up a decided request failed: " + str(error))
            data = {}
        request = data.get("permission") if isinstance(data, dict) else None
        self.notice = (reason, request, PERMISSION)
        self.page.render()

    def _say(self, text: str) -> None:
        """Say what the last action did (a live region), for a few seconds."""
        self.said += 1
        document.getElementById("inbox-status").textContent = text
        spawn(self._unsay(self.said))

    async def _unsay(self, said: int) -> None:
        await asyncio.sleep(6)
        if said == self.said:
            document.getElementById("inbox-status").textContent = ""

    # --- drawing ---------------------------------------------------------------------------------

    def render(self) -> None:
        shown = self.page.route_task is None
        if shown != self.shown:
            self.shown = shown
            document.getElementById("inbox-view").hidden = not shown
            if shown:
                self.focus_selected()
                document.body.classList.add("inbox-route")
            else:
                document.body.classList.remove("inbox-route")
                self.help_open = False
        count = len(self.inbox.items())
        for node_id in ("inbox-count", "inbox-count-top"):
            self.page.set_html(node_id, str(count) if count else "")
        link = document.getElementById("inbox-link")
        if shown:
            link.setAttribute("aria-current", "page")
        else:
            link.removeAttribute("aria-current")
        # Hidden, it holds nothing: the session view's controls carry the same test ids.
        self._draw(self._html() if shown else "")

    def _html(self) -> str:
        inbox = self.inbox
        now = now_micros()
        rows = []
        for item in inbox.items():
            pending_id = str(item["pendingId"])
            if pending_id not in self.numbers:
                self.numbers[pending_id] = len(self.numbers) + 1
            ns = "ib" + str(self.numbers[pending_id])
            card = self.card(item)
            row = view.Row(item, ns, card.body(ns, False), card.buttons())
            row.selected = pending_id == inbox.selected
            row.checked = pending_id in inbox.checked
            row.checkable = inbox.can_check(pending_id)
            row.alike = len(inbox.alike(pending_id))
            row.age = age_text(asked_micros(item), now)
            rows.append(view.item(row))
        first = inbox.item(inbox.checked[0]) if inbox.checked else None
        busy = False
        for pending_id in inbox.checked:
            held = self.cards.get(pending_id)
            busy = busy or (held is not None and held.busy)
        top = notice_html(self.notice) + view.batch(
            len(inbox.checked),
            len(inbox.alike(inbox.checked[0])) if inbox.checked else 0,
            None if first is None else first.get("permission"),
            busy,
        )
        tasks = len(self.page.store.task_ids())
        html = view.pane(rows, len(rows), inbox.loaded, self.failure, tasks, top)
        return html + (view.keys_dialog() if self.help_open else "")

    def _key(self, element: Any) -> str | None:
        """What names a focused control across renders: its item, test id and question."""
        row = _row_of(element)
        if row is None or js_none(row):
            return None
        pending_id = attr(row, "data-pending-id") or ""
        if element == row:
            return pending_id + "|row|"
        test_id = attr(element, "data-testid") or ""
        return pending_id + "|" + test_id + "|" + (attr(element, "data-question-id") or "")

    def _find(self, container: Any, key: str) -> Any:
        pending_id, rest = key.split("|", 1)
        rows = container.querySelectorAll("[data-pending-id]")
        for position in range(int(rows.length)):
            row = rows.item(position)
            if attr(row, "data-pending-id") != pending_id:
                continue
            if rest == "row|":
                return row
            nodes = row.querySelectorAll("[data-testid]")
            for index in range(int(nodes.length)):
                node = nodes.item(index)
                if self._key(node) == key:
                    return node
        return None

    def _draw(self, html: str) -> None:
        """Render the pane, keeping the focus (and a text box's caret) and the list's scroll."""
        container = document.getElementById(PANE)
        active = document.activeElement
        inside = not js_none(active) and bool(container.contains(active))
        key = self._key(active) if inside else None
        caret = None
        if inside and str(active.tagName) == "TEXTAREA":
            caret = (int(active.selectionStart), int(active.selectionEnd))
        scroller = container.querySelector(".ib-scroll")
        top = 0 if js_none(scroller) else int(scroller.scrollTop)
        changed = self.page.set_html(PANE, html)
        if changed:
            scroller = container.querySelector(".ib-scroll")
            if not js_none(scroller):
                scroller.scrollTop = top
        request, self.focus_request = self.focus_request, None
        target = None
        if self.help_open:
            target = container.querySelector("[data-testid=inbox-keys-close]") if changed else None
        elif request is not None:
            target = self._find(container, request)
        elif changed and inside:
            target = self._find(container, key) if key is not None else None
            if target is None or attr(target, "disabled") is not None:
                target = self._selected_row(container)
        if target is not None and not js_none(target):
            target.focus()
            if caret is not None and str(target.tagName) == "TEXTAREA":
                target.setSelectionRange(caret[0], caret[1])

    def _selected_row(self, container: Any) -> Any:
        if self.inbox.selected is None:
            return container.querySelector(".ib-scroll")
        return self._find(container, self.inbox.selected + "|row|")

    def focus_selected(self) -> None:
        """Put the keyboard on the selected item (the inbox just opened)."""
        if self.inbox.selected is not None:
            self.focus_request = self.inbox.selected + "|row|"

    async def _tick(self) -> None:
        while not self.page.signed_out:
            await asyncio.sleep(1)
            if self.shown:
                self.tick()

    def tick(self) -> None:
        """Each age again, in place (the rest of the list is left as it is)."""
        now = now_micros()
        nodes = document.querySelectorAll("#inbox-pane [data-testid=inbox-item-age]")
        for index in range(int(nodes.length)):
            node = nodes.item(index)
            text = age_text(asked_micros({"askedAt": attr(node, "data-asked")}), now)
            if str(node.textContent) != text:
                node.textContent = text

    # --- the person's actions --------------------------------------------------------------------

    def on_focus(self, target: Any) -> None:
        """Focus moved into an item: it becomes the selected one (drawn in place, no render, so the
        click that moved the focus still lands)."""
        row = _row_of(target)
        if row is None or js_none(row) or not self.inbox.select(attr(row, "data-pending-id")):
            return
        rows = document.querySelectorAll("#inbox-pane [data-pending-id]")
        for index in range(int(rows.length)):
            node = rows.item(index)
            selected = attr(node, "data-pending-id") == self.inbox.selected
            node.setAttribute("aria-selected", "true" if selected else "false")
            node.setAttribute("tabindex", "0" if selected else "-1")
            if selected:
                node.classList.add("selected")
            else:
                node.classList.remove("selected")

    def on_action(self, action: str, target: Any) -> bool:
        """A click inside the inbox; False when the action is not the inbox's own."""
        handler = self._actions().get(action)
        if handler is None:
            return False
        row = _row_of(target)
        pending_id = None if row is None or js_none(row) else attr(row, "data-pending-id")
        handler(pending_id, target)
        return True

    def _actions(self) -> dict[str, Callable[[str | None, Any], None]]:
        return {
            "option": lambda pid, target: self._option(pid, target),
            "submit": lambda pid, _target: self.respond(pid, False),
            "skip": lambda pid, _target: self.respond(pid, True),
            "perm-allow": lambda pid, _target: self.allow(pid, False),
            "perm-deny": lambda pid, _target: self.decide(pid, "perm-deny"),
            "perm-always": lambda pid, target: self.decide(
                pid, "perm-always", attr(target, "data-confirmed") == "true"
            ),
            "perm-allow-edited": lambda pid, _target: self.decide(pid, "perm-allow-edited"),
            "perm-edit": lambda pid, _target: self._permission(pid, PermissionCard.edit),
            "perm-edit-cancel": lambda pid, _target: self._permission(pid, PermissionCard.cancel_edit),
            "perm-suggest": lambda pid, target: self._permission(
                pid, lambda card: card.choose(int(attr(target, "data-index") or 0))
            ),
            "perm-scope": lambda pid, target: self._permission(
                pid, lambda card: card.scope(attr(target, "data-scope") or "SESSION")
            ),
            "perm-broad-cancel": lambda pid, _target: self._permission(pid, PermissionCard.cancel_broad),
            "perm-remember-open": lambda pid, _target: self._permission(pid, PermissionCard.open_remember),
            "inbox-open": lambda pid, _target: self.open(pid),
            "inbox-check": lambda pid, _target: self.toggle_check(pid),
            "inbox-check-alike": lambda _pid, _target: self._check_alike(),
            "inbox-clear-checks": lambda _pid, _target: self._clear_checks(),
            "inbox-batch-allow": lambda _pid, _target: self.allow_batch(),
            "inbox-help": lambda _pid, _target: self.show_help(True),
            "inbox-help-close": lambda _pid, _target: self.show_help(False),
            "dismiss-notice": lambda _pid, _target: self._dismiss(),
        }

    def on_input(self, box: Any) -> None:
        card = self._card_at(attr(_row_of(box), "data-pending-id"))
        if card is not None:
            card.write(box)

    def _option(self, pending_id: str | None, target: Any) -> None:
        card = self._card_at(pending_id)
        if isinstance(card, QuestionCard):
            card.toggle(attr(target, "data-question-id") or "", attr(target, "data-option-id") or "")

    def respond(self, pending_id: str | None, rejected: bool) -> None:
        card = self._card_at(pending_id)
        if isinstance(card, QuestionCard):
            spawn(card.respond(rejected))

    def decide(self, pending_id: str | None, action: str, confirmed: bool = False) -> None:
        card = self._card_at(pending_id)
        if isinstance(card, PermissionCard):
            spawn(card.decide(action, confirmed))

    def allow(self, pending_id: str | None, batch: bool) -> None:
        """Allow one request, or (``batch``, from ``a`` on a checked one) every checked request."""
        if batch and pending_id in self.inbox.checked and len(self.inbox.checked) > 1:
            self.allow_batch()
        else:
            self.decide(pending_id, "perm-allow")

    def allow_batch(self) -> None:
        """Allow every checked request: each its own decision, each sent once."""
        checked = list(self.inbox.checked)
        for pending_id in checked:
            self.decide(pending_id, "perm-allow")
        self.inbox.clear_checks()
        self._say("Allowing " + str(len(checked)) + " requests…")
        self.page.render()

    def _permission(self, pending_id: str | None, method: Callable[[PermissionCard], None]) -> None:
        card = self._card_at(pending_id)
        if isinstance(card, PermissionCard):
            method(card)

    def toggle_check(self, pending_id: str | None) -> None:
        if pending_id is not None:
            self.inbox.toggle_check(pending_id)
        self.page.render()

    def _check_alike(self) -> None:
        if self.inbox.checked:
            self.inbox.check_alike(self.inbox.checked[0])
        self.page.render()

    def _clear_checks(self) -> None:
        self.inbox.clear_checks()
        self.page.render()

    def _dismiss(self) -> None:
        self.notice = None
        self.focus_selected()
        self.page.render()

    def open(self, pending_id: str | None) -> None:
        """The item's session, in the session view."""
        item = self.inbox.item(pending_id)
        if item is None:
            return
        task_id, session_id = str(item.get("taskId")), str(item.get("sessionId"))
        self.page.store.remember_session(task_id, session_id)
        self.go(session_route(task_id, session_id))

    def show_help(self, open_: bool) -> None:
        self.help_open = open_
        if not open_:
            self.focus_selected()
        self.page.render()
