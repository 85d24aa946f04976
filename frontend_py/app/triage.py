"""Keyboard triage in the inbox: the keys of ``kit.inbox.command`` applied to the selected item.

Keys act while the focus is in the inbox (on an item or one of its buttons) or nowhere in
particular; in a text box they type, except Enter (sends: the own answer, or the deny reason),
Ctrl+Enter in the input editor (allows the edited input) and Escape (back to the item).
"""

from pyscript import document  # type: ignore[import-not-found]

from frontend_py.app.inbox import InboxView
from frontend_py.app.page import attr, js_none, spawn
from frontend_py.app.permission import PermissionCard
from frontend_py.app.question import QuestionCard
from frontend_py.kit.inbox import (
    ALLOW,
    CHECK,
    DENY,
    EDIT,
    HELP,
    NEXT,
    OPEN,
    OPTION,
    PREVIOUS,
    SEND,
    SKIP,
    command,
)

try:
    from typing import Any
except ImportError:  # MicroPython: annotations are never evaluated there
    pass

ARROW_KEYS = ("ArrowDown", "ArrowUp")


def _typing(target: Any) -> bool:
    tag = str(target.tagName)
    if tag in ("TEXTAREA", "SELECT"):
        return True
    return tag == "INPUT" and attr(target, "type") not in ("checkbox", "radio", "button")


def on_key(view: InboxView, event: Any) -> bool:
    """Apply a key pressed while the inbox is shown; whether it was the inbox's."""
    if not view.shown:
        return False
    key = str(event.key)
    if view.help_open:
        if key in ("Escape", "?"):
            event.preventDefault()
            view.show_help(False)
            return True
        if key == "Tab":  # the dialog is modal: its one control keeps the focus
            event.preventDefault()
            document.querySelector("[data-testid=inbox-keys-close]").focus()
            return True
        return False
    target = event.target
    nowhere = js_none(target) or target == document.body or target == document.documentElement
    if not nowhere and not bool(document.getElementById("inbox-view").contains(target)):
        return False
    if bool(event.altKey):
        return False
    ctrl = bool(event.ctrlKey) or bool(event.metaKey)
    row = None if nowhere else target.closest("[data-pending-id]")
    pending_id = view.inbox.selected if row is None or js_none(row) else attr(row, "data-pending-id")
    if not nowhere and _typing(target):
        return _typing_key(view, event, key, ctrl, pending_id)
    found = command(key)
    if ctrl or found is None:
        return False
    tag = "" if nowhere else str(target.tagName)
    if key == "Enter" and tag in ("BUTTON", "INPUT", "A"):
        return False  # the focused control's own Enter
    if key in ARROW_KEYS and not (nowhere or target == row):
        return False  # arrows move within a radio group, or scroll
    event.preventDefault()
    run(view, found[0], found[1], pending_id)
    return True


def _typing_key(view: InboxView, event: Any, key: str, ctrl: bool, pending_id: str | None) -> bool:
    if pending_id is None:
        return False
    test_id = attr(event.target, "data-testid")
    if key == "Escape":
        view.focus_request = pending_id + "|row|"
    elif key != "Enter" or bool(event.shiftKey):
        return False
    elif test_id == "permission-reason":
        view.decide(pending_id, "perm-deny")
    elif test_id == "clarification-custom-text":
        view.respond(pending_id, False)
    elif test_id == "permission-edited-input" and ctrl:
        view.decide(pending_id, "perm-allow-edited")
    else:
        return False
    event.preventDefault()
    view.page.render()
    return True


def run(view: InboxView, name: str, number: int, pending_id: str | None) -> None:
    """One command on the item ``pending_id`` (the selected one unless the focus is in another)."""
    if name in (NEXT, PREVIOUS):
        view.inbox.move(1 if name == NEXT else -1)
        view.focus_selected()
        view.page.render()
        return
    if name == HELP:
        view.show_help(True)
        return
    item = view.inbox.item(pending_id)
    if item is None or pending_id is None:
        return
    view.inbox.select(pending_id)
    card = view.card(item)
    if name == OPEN:
        view.open(pending_id)
    elif name == CHECK:
        view.toggle_check(pending_id)
    elif isinstance(card, QuestionCard):
        _question(card, name, number)
    elif isinstance(card, PermissionCard):
        _permission(view, card, name)


def _question(card: QuestionCard, name: str, number: int) -> None:
    if name == OPTION:
        _choose(card, number)
    elif name in (SEND, SKIP):
        spawn(card.respond(name == SKIP))


def _choose(card: QuestionCard, number: int) -> None:
    """Option ``number`` of the question in focus, else the first one without a choice; a bundle of
    one choose-one question is then sent."""
    questions = card.questions()
    if not questions:
        return
    focused = document.activeElement
    fieldset = None if js_none(focused) or str(focused.nodeType) != "1" else focused.closest("fieldset")
    in_focus = None if fieldset is None or js_none(fieldset) else attr(fieldset, "data-question-id")
    question = None
    for candidate in questions:
        question_id = str(candidate.get("questionId") or "")
        if question is None and (
            question_id == in_focus or (in_focus is None and not card.selections.get(question_id))
        ):
            question = candidate
    question = question or questions[0]
    options = question.get("options") or []
    if number > len(options):
        return
    question_id = str(question.get("questionId") or "")
    option_id = str(options[number - 1].get("id") or "")
    multi = bool(question.get("multiSelect"))
    if multi or option_id not in (card.selections.get(question_id) or []):
        card.toggle(question_id, option_id)
    if len(questions) == 1 and not multi:
        spawn(card.respond(False))


def _permission(view: InboxView, card: PermissionCard, name: str) -> None:
    pending_id = card.pending_id
    editing = bool(card.draft.get("editing"))
    if name == ALLOW or (name == SEND and editing):
        if editing:
            view.decide(pending_id, "perm-allow-edited")
        else:
            view.allow(pending_id, True)
    elif name == DENY:
        view.focus_request = pending_id + "|permission-reason|"
        view.page.render()
    elif name == EDIT:
        card.edit()
