"""The inbox's HTML: "Needs you", every waiting action with its answer controls, the batch, the keys.

Each item reuses the cards' own content (``Card.body`` and ``Card.buttons``, from
``views/question.py`` and ``views/permission.py``) inside an item frame: its task, how long it has
waited, whether an agent waits for it now, and Open. The list is a one-column grid, so a row can be
selected (``aria-selected``) and still hold buttons and text boxes.
"""

from frontend_py.app.views.parts import PERMISSION_ICON, QUESTION_ICON, esc
from frontend_py.kit.inbox import HELP_ROWS, PERMISSION_KIND

try:
    from typing import Any
except ImportError:  # MicroPython: annotations are never evaluated there
    pass

CHECK_ICON = (
    '<svg viewBox="0 0 20 20" aria-hidden="true"><circle cx="10" cy="10" r="9" fill="currentColor"/>'
    '<path d="M6 10.2l2.6 2.6L14 7.4" stroke="#fff" stroke-width="1.9" fill="none" stroke-linecap="round" '
    'stroke-linejoin="round"/></svg>'
)
CLOCK_ICON = (
    '<svg viewBox="0 0 20 20" aria-hidden="true"><circle cx="10" cy="10" r="7.5" stroke="currentColor" '
    'stroke-width="1.7" fill="none"/><path d="M10 6v4.3l2.8 1.7" stroke="currentColor" stroke-width="1.7" '
    'fill="none" stroke-linecap="round"/></svg>'
)


class Row:
    """What one item shows: the item, its card's content and buttons, and this page's state of it."""

    def __init__(self, item: dict[str, Any], ns: str, body: str, buttons: str) -> None:
        self.item = item
        self.ns = ns
        self.body = body
        self.buttons = buttons
        self.selected = False
        self.checkable = False
        self.checked = False
        self.alike = 0
        self.age = ""


def _agent(waiting: bool) -> str:
    title = (
        "The agent is waiting for this answer now"
        if waiting
        else "No agent waits right now: your answer is kept and resumes it"
    )
    return (
        '<span class="ib-agent' + (" waiting" if waiting else "") + '" title="' + title + '">'
        '<span class="ib-dot" aria-hidden="true"></span>Agent <span data-testid="inbox-item-agent">'
        + ("waiting" if waiting else "away")
        + "</span></span>"
    )


def _check(row: Row) -> str:
    if not row.checkable and not row.checked:
        return ""
    return (
        '<label class="ib-check"><input type="checkbox" data-action="inbox-check" '
        'data-testid="inbox-item-check"'
        + (" checked" if row.checked else "")
        + '><span>Select <span class="ib-alike">('
        + str(row.alike)
        + " alike)</span></span></label>"
    )


def item(row: Row) -> str:
    """One waiting action: the frame with its task, age and agent, then the card's content."""
    data = row.item
    pending_id = str(data.get("pendingId") or "")
    permission = data.get("kind") == PERMISSION_KIND
    kind = "permission" if permission else "clarification"
    request = data.get("permission") or {}
    what = "Asks to use " + str(request.get("toolName") or "a tool") if permission else "Asks you"
    return (
        '<div role="row" class="ib-item ' + kind + (" selected" if row.selected else "") + '" '
        'data-testid="inbox-item-' + esc(pending_id) + '" data-pending-id="' + esc(pending_id) + '" '
        'data-kind="' + kind + '" aria-selected="' + ("true" if row.selected else "false") + '" '
        'tabindex="' + ("0" if row.selected else "-1") + '" aria-labelledby="' + row.ns + '-task">'
        '<div role="gridcell" class="ib-cell">'
        '<div class="ib-head"><span class="ib-kind" aria-hidden="true">'
        + (PERMISSION_ICON if permission else QUESTION_ICON)
        + '</span><span class="ib-title"><span class="ib-task" id="'
        + row.ns
        + '-task" data-testid="inbox-item-task">'
        + esc(data.get("taskTitle"))
        + '</span><span class="ib-what">'
        + esc(what)
        + '</span></span><span class="ib-meta"><span class="ib-age" title="How long it has waited">'
        + CLOCK_ICON
        + '<span class="visually-hidden">Waited </span><span data-testid="inbox-item-age" data-asked="'
        + esc(data.get("askedAt"))
        + '">'
        + esc(row.age)
        + "</span></span>"
        + _agent(bool(data.get("agentWaiting")))
        + "</span>"
        + _check(row)
        + '<button type="button" class="btn ghost small ib-open" data-action="inbox-open" '
        'data-testid="inbox-item-open" aria-keyshortcuts="o">Open<span class="visually-hidden"> the session'
        "</span></button></div>"
        '<div class="ib-body">' + row.body + "</div>"
        '<div class="ib-actions">' + row.buttons + "</div></div></div>"
    )


def batch(count: int, alike: int, request: dict[str, Any] | None, busy: bool) -> str:
    """The bar over the list while requests are checked: what they are, Allow them all, Clear."""
    if count == 0 or request is None:
        return ""
    command = (request.get("input") or {}).get("command") if isinstance(request.get("input"), dict) else None
    more = ""
    if alike > count:
        more = (
            '<button type="button" class="btn ghost small" data-action="inbox-check-alike" '
            'data-testid="inbox-batch-all">Select all ' + str(alike) + "</button>"
        )
    disabled = " disabled" if busy else ""
    return (
        '<div class="ib-batch" role="region" aria-label="Checked requests" data-testid="inbox-batch">'
        "<p><strong>"
        + str(count)
        + ' checked</strong> · <code class="perm-name">'
        + esc(request.get("toolName"))
        + "</code>"
        + (' <code class="ib-command">' + esc(command) + "</code>" if command else "")
        + "</p>"
        + more
        + '<button type="button" class="btn ghost small" data-action="inbox-clear-checks" '
        'data-testid="inbox-batch-clear"' + disabled + ">Clear</button>"
        '<button type="button" class="btn primary" data-action="inbox-batch-allow" '
        'data-testid="inbox-batch-allow"' + disabled + ">Allow " + str(count) + "</button></div>"
    )


def empty(tasks: int) -> str:
    """Nothing waits: say so, and what will show up here."""
    where = "the task list" if tasks else "a task, once an agent creates one"
    return (
        '<div class="ib-empty" data-testid="inbox-empty">'
        + CHECK_ICON
        + "<h2>Nothing needs you right now</h2>"
        "<p>When an agent asks a question or asks to use a tool, it shows up here, oldest first, and you "
        "answer it here without opening its task. To follow an agent at work, open "
        + esc(where)
        + '.</p><button type="button" class="btn ghost phone-only" data-action="drawer-toggle">'
        "Show tasks</button></div>"
    )


def pane(rows: list[str], count: int, loaded: bool, failure: str | None, tasks: int, top: str) -> str:
    """The whole inbox: its head, ``top`` (notice, batch bar), then the items or why there are none."""
    head = (
        '<header class="ib-pane-head"><h1 id="inbox-title">Needs you'
        + (' <span class="ib-count">' + str(count) + "</span>" if count else "")
        + '</h1><span class="ib-order">Oldest first</span>'
        '<button type="button" class="btn ghost small ib-keys-open" data-action="inbox-help" '
        'data-testid="inbox-help" aria-keyshortcuts="?" aria-haspopup="dialog">Keys '
        '<kbd class="card-key" aria-hidden="true">?</kbd></button></header>'
    )
    if failure is not None:
        body = (
            '<p class="empty error" role="alert">Could not load what waits for you: ' + esc(failure) + "</p>"
        )
    elif not loaded:
        body = '<p class="empty">Loading what waits for you…</p>'
    elif not rows:
        body = empty(tasks)
    else:
        body = (
            '<div role="grid" class="ib-list" aria-labelledby="inbox-title" aria-rowcount="'
            + str(count)
            + '">'
            + "".join(rows)
            + "</div>"
        )
    return (
        '<section class="ib-pane" aria-labelledby="inbox-title">'
        + head
        + top
        + '<div class="ib-scroll" data-testid="inbox">'
        + body
        + "</div></section>"
    )


def keys_dialog() -> str:
    """What ``?`` opens: every key of the inbox."""
    rows = []
    for key, meaning in HELP_ROWS:
        rows.append("<dt><kbd>" + esc(key) + "</kbd></dt><dd>" + esc(meaning) + "</dd>")
    return (
        '<div class="ib-keys-scrim"><div class="ib-keys" role="dialog" aria-modal="true" '
        'aria-labelledby="inbox-keys-title" data-testid="inbox-keys">'
        '<h2 id="inbox-keys-title">Keys in the inbox</h2><dl>'
        + "".join(rows)
        + '</dl><button type="button" class="btn primary" data-action="inbox-help-close" '
        'data-testid="inbox-keys-close">Close</button></div></div>'
    )
