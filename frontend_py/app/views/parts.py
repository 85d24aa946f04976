"""The HTML pieces every part of the page shares: escaping, times, icons, the card's frame, load failures."""

try:
    from typing import Any
except ImportError:  # MicroPython: annotations are never evaluated there
    pass

QUESTION_ICON = (
    '<svg viewBox="0 0 20 20" aria-hidden="true"><circle cx="10" cy="10" r="9" fill="currentColor"/>'
    '<path d="M7.6 7.4a2.5 2.5 0 1 1 3.4 2.3c-.6.3-1 .8-1 1.5v.5" stroke="#fff" stroke-width="1.7" '
    'fill="none" stroke-linecap="round"/><circle cx="10" cy="14.6" r="1.05" fill="#fff"/></svg>'
)
PERMISSION_ICON = (
    '<svg viewBox="0 0 20 20" aria-hidden="true"><path d="M10 1.5 2.5 4.5v5c0 4.3 3.1 7.7 7.5 9 '
    '4.4-1.3 7.5-4.7 7.5-9v-5z" fill="currentColor"/><path d="M10 6v4.6" stroke="#fff" '
    'stroke-width="1.8" stroke-linecap="round"/><circle cx="10" cy="13.6" r="1.05" fill="#fff"/></svg>'
)
ALERT_ICON = (
    '<svg viewBox="0 0 20 20" aria-hidden="true"><circle cx="10" cy="10" r="9" fill="currentColor"/>'
    '<path d="M10 5.6v5.2" stroke="#fff" stroke-width="1.9" stroke-linecap="round"/>'
    '<circle cx="10" cy="14.2" r="1.1" fill="#fff"/></svg>'
)
CHEVRON_ICON = (
    '<svg viewBox="0 0 20 20" aria-hidden="true"><path d="M5 8l5 5 5-5" stroke="currentColor" '
    'stroke-width="2" fill="none" stroke-linecap="round" stroke-linejoin="round"/></svg>'
)
DISMISS = '<button type="button" class="btn ghost small" data-action="dismiss-notice">Dismiss</button>'


def esc(value: Any) -> str:
    """Text and attribute escaping (MicroPython has no ``html`` module)."""
    text = "" if value is None else str(value)
    return (
        text.replace("&", "&amp;")
        .replace("<", "&lt;")
        .replace(">", "&gt;")
        .replace('"', "&quot;")
        .replace("'", "&#39;")
    )


def clock(timestamp: Any) -> str:
    """``HH:MM`` of an ISO timestamp (UTC, as the API sends it); empty when it is not one."""
    text = str(timestamp or "")
    return text[11:16] if len(text) >= 16 and text[10] in "T " else ""


# What failed to load -> (test id prefix, the headline); the action is ``retry-<what>``.
LOAD_FAILURES = {
    "sessions": ("task-sessions", "Couldn't load this task's sessions."),
    "history": ("session-history", "Couldn't load this session."),
}


def load_failed(what: str, reason: str, retrying: bool) -> str:
    """A load that failed, in place of what it would have shown: why, and Retry.

    An alert, so a screen reader says it when it appears. While the retry is on its way the button
    stays focusable (``aria-disabled``, not ``disabled``), so the keyboard's place is kept.
    """
    prefix, headline = LOAD_FAILURES[what]
    return (
        '<div class="load-failed" role="alert" data-testid="' + prefix + '-error">'
        '<span class="load-failed-icon">' + ALERT_ICON + "</span>"
        '<div class="load-failed-text"><p class="load-failed-title">' + esc(headline) + "</p>"
        '<p class="load-failed-reason">' + esc(reason) + "</p></div>"
        '<button type="button" class="btn ghost small" data-action="retry-' + what + '" '
        'data-testid="'
        + prefix
        + '-retry"'
        + (' aria-disabled="true"' if retrying else "")
        + ">"
        + ("Retrying…" if retrying else "Retry")
        + "</button></div>"
    )


def card_open(prefix: str, pending_id: str, icon: str, title: str, hide_title: str) -> str:
    """A card's frame up to its scrolling body: the header with its badge, title and Hide control.

    Both kinds share it (``prefix`` names the test ids: ``<prefix>-card``, ``<prefix>-hide``); the
    body scrolls, the header and the footer (``card_close``) stay in view however long the body.
    """
    return (
        '<section class="card ' + prefix + '" role="dialog" aria-modal="false" aria-labelledby="card-title" '
        'tabindex="-1" data-testid="' + prefix + '-card" data-pending-id="' + esc(pending_id) + '">'
        '<header class="card-head"><span class="card-badge">' + icon + "</span>"
        '<h2 id="card-title">' + esc(title) + "</h2>"
        '<button type="button" class="card-hide" data-action="hide-card" data-testid="' + prefix + '-hide" '
        'aria-keyshortcuts="Escape" title="'
        + esc(hide_title)
        + '">'
        + CHEVRON_ICON
        + '<span>Hide</span><kbd class="card-key" aria-hidden="true">Esc</kbd></button></header>'
        '<div class="card-body">'
    )


def card_close(buttons: str) -> str:
    """Ends the body and adds the footer: the "More below" cue and the card's ``buttons``."""
    return (
        '</div><footer class="card-actions"><span class="card-more" aria-hidden="true">'
        + CHEVRON_ICON
        + "More below</span>"
        + buttons
        + "</footer></section>"
    )


def failed_notice(prefix: str, what: str) -> str:
    """An answer or decision (``what``) that was accepted but may not have reached the agent."""
    return (
        '<div class="notice" role="status" data-testid="'
        + prefix
        + '-conflict"><p>The '
        + what
        + " was accepted but the agent may not have received it; it will not be sent twice.</p></div>"
    )


def reopen_pill(prefix: str = "clarification") -> str:
    """The pill that brings a hidden card back (``<prefix>-reopen``)."""
    if prefix == "permission":
        icon, text = PERMISSION_ICON, "A permission request is waiting · Show"
    else:
        icon, text = QUESTION_ICON, "A question is waiting · Show"
    return (
        '<button type="button" class="reopen '
        + prefix
        + '" data-action="show-card" data-testid="'
        + prefix
        + '-reopen">'
        + icon
        + "<span>"
        + text
        + "</span></button>"
    )
