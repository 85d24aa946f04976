"""The inbox: every pending action that waits for the person, oldest first, and triage over it.

The server sends the whole list (``inboxChanged``: the list now, then again after every change);
the ``Inbox`` holds it with what this page adds: the selected item, the permission requests checked
for a batch allow, and the actions this page settled before the server's next list says so. Keys
map to commands here (``command``), so the browser layer only applies them.
"""

try:
    from typing import Any
except ImportError:  # MicroPython: annotations are never evaluated there
    pass

import json

from frontend_py.kit.timestamps import parse_timestamp

CLARIFICATION_KIND = "CLARIFICATION"
PERMISSION_KIND = "PERMISSION"

# Commands of the keys (``command``); a digit is ("option", n).
NEXT = "next"
PREVIOUS = "previous"
SEND = "send"
SKIP = "skip"
ALLOW = "allow"
DENY = "deny"
EDIT = "edit"
OPEN = "open"
HELP = "help"
CHECK = "check"
OPTION = "option"

KEYS = {"j": NEXT, "k": PREVIOUS, "Enter": SEND, "s": SKIP, "a": ALLOW, "d": DENY, "e": EDIT}
KEYS.update({"o": OPEN, "?": HELP, "x": CHECK, "ArrowDown": NEXT, "ArrowUp": PREVIOUS})

# What ``?`` lists, in this order.
HELP_ROWS = [
    ("j / k", "Next / previous item"),
    ("1 – 9", "Choose that option (a single choose-one question is sent at once)"),
    ("Enter", "Send the answer"),
    ("s", "Skip the question"),
    ("a", "Allow the tool call (all checked ones, when this one is checked)"),
    ("d", "Deny: write a reason, then Enter"),
    ("e", "Edit the input, then allow (Ctrl+Enter sends)"),
    ("x", "Check this request for a batch allow"),
    ("o", "Open the session"),
    ("Esc", "Back to the list from a text box"),
    ("?", "Show these keys"),
]


def command(key: str) -> tuple[str, int] | None:
    """The command of a key pressed on the list (not while typing): (name, option number or 0)."""
    if len(key) == 1 and "1" <= key <= "9":
        return (OPTION, int(key))
    name = KEYS.get(key)
    return None if name is None else (name, 0)


def age_text(asked_micros: int, now_micros: int) -> str:
    """How long an action has waited, as a person reads it: "40 s", "12 min", "2 h 5 min", "3 d"."""
    seconds = max(0, (now_micros - asked_micros) // 1000000)
    if seconds < 60:
        return str(seconds) + " s"
    minutes = seconds // 60
    if minutes < 60:
        return str(minutes) + " min"
    hours = minutes // 60
    if hours < 24:
        rest = minutes % 60
        return str(hours) + " h" + (" " + str(rest) + " min" if rest else "")
    return str(hours // 24) + " d" + (" " + str(hours % 24) + " h" if hours % 24 else "")


def asked_micros(item: dict[str, Any]) -> int:
    """When the item was asked, in microseconds; 0 when the server did not say."""
    try:
        return parse_timestamp(item.get("askedAt"))
    except ValueError:
        return 0


def canonical_json(value: Any) -> str:
    """JSON with sorted keys and no spaces: equal values give equal text, on CPython and MicroPython
    (whose ``json.dumps`` neither sorts keys nor keeps insertion order)."""
    if isinstance(value, dict):
        keys = sorted([str(key) for key in value])
        return "{" + ",".join([json.dumps(key) + ":" + canonical_json(value[key]) for key in keys]) + "}"
    if isinstance(value, list):
        return "[" + ",".join([canonical_json(item) for item in value]) + "]"
    return json.dumps(value)


def batch_key(item: dict[str, Any] | None) -> str | None:
    """Permission requests with the same key (tool and input) can be allowed together; None for a
    question, which is never part of a batch."""
    if item is None or item.get("kind") != PERMISSION_KIND:
        return None
    request = item.get("permission") or {}
    return str(request.get("toolName") or "") + "\n" + canonical_json(request.get("input"))


def _ordered(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Oldest first (ties by pending id), whatever order the list came in."""
    keyed = [((asked_micros(item), str(item.get("pendingId") or "")), item) for item in items]
    keyed.sort(key=lambda pair: pair[0])
    return [pair[1] for pair in keyed]


class Inbox:
    """The list the server sent, less what this page settled; the selection and the batch."""

    def __init__(self) -> None:
        self.loaded = False
        self.selected: str | None = None
        self.checked: list[str] = []
        self._items: list[dict[str, Any]] = []
        self._settled: set[str] = set()
        self._index = 0  # where the selection was, for when its item leaves

    # --- what is shown ----------------------------------------------------------------------------

    def items(self) -> list[dict[str, Any]]:
        return [item for item in self._items if item.get("pendingId") not in self._settled]

    def ids(self) -> list[str]:
        return [str(item.get("pendingId")) for item in self.items()]

    def item(self, pending_id: str | None) -> dict[str, Any] | None:
        for item in self.items():
            if item.get("pendingId") == pending_id:
                return item
        return None

    def selected_item(self) -> dict[str, Any] | None:
        return self.item(self.selected)

    # --- what changes it --------------------------------------------------------------------------

    def apply(self, items: list[dict[str, Any]]) -> None:
        """The server's list now. An action settled here stays gone even if a list read before its
        decision still names it; once a list leaves it out, it need not be remembered."""
        self.loaded = True
        self._items = _ordered([item for item in items if isinstance(item, dict) and item.get("pendingId")])
        present = set([str(item.get("pendingId")) for item in self._items])
        self._settled = set([pending_id for pending_id in self._settled if pending_id in present])
        self._repair()

    def settle(self, pending_id: str) -> None:
        """This page's decision was taken: the item leaves at once, the selection moves on."""
        self._settled.add(pending_id)
        self._repair()

    def select(self, pending_id: str | None) -> bool:
        """Select an item that is shown; whether the selection changed."""
        if pending_id is None or self.item(pending_id) is None or pending_id == self.selected:
            return False
        self.selected = pending_id
        self._index = self.ids().index(pending_id)
        return True

    def move(self, step: int) -> bool:
        """``j`` / ``k``: the next or previous item, stopping at either end."""
        ids = self.ids()
        if not ids:
            return False
        index = ids.index(self.selected) if self.selected in ids else -1
        target = min(max(index + step, 0), len(ids) - 1) if index >= 0 else 0
        return self.select(ids[target])

    def _repair(self) -> None:
        """Keep a selection while anything is shown: where the old one was when its item left."""
        ids = self.ids()
        self.checked = [pending_id for pending_id in self.checked if pending_id in ids]
        if not ids:
            self.selected = None
            self._index = 0
            return
        if self.selected in ids:
            self._index = ids.index(self.selected)
            return
        self._index = min(self._index, len(ids) - 1)
        self.selected = ids[self._index]

    # --- batches ----------------------------------------------------------------------------------

    def alike(self, pending_id: str | None) -> list[str]:
        """The shown permission requests with the same tool and input as ``pending_id`` (itself too)."""
        key = batch_key(self.item(pending_id))
        if key is None:
            return []
        return [str(item.get("pendingId")) for item in self.items() if batch_key(item) == key]

    def can_check(self, pending_id: str) -> bool:
        """A request can join the batch when another like it is shown, and the batch holds its kind."""
        if len(self.alike(pending_id)) < 2:
            return False
        if not self.checked:
            return True
        return batch_key(self.item(pending_id)) == batch_key(self.item(self.checked[0]))

    def toggle_check(self, pending_id: str) -> bool:
        """Check or uncheck a request for the batch; whether anything changed."""
        if pending_id in self.checked:
            self.checked = [checked for checked in self.checked if checked != pending_id]
            return True
        if not self.can_check(pending_id):
            return False
        self.checked = [checked for checked in self.ids() if checked in self.checked or checked == pending_id]
        return True

    def check_alike(self, pending_id: str) -> bool:
        """Check every shown request like ``pending_id``."""
        alike = self.alike(pending_id)
        if len(alike) < 2:
            return False
        self.checked = alike
        return True

    def clear_checks(self) -> None:
        self.checked = []
