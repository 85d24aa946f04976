"""The permission card's HTML: a tool call with the person's draft, its notices and the session's rules."""

from frontend_py.app.views import tools
from frontend_py.app.views.parts import DISMISS, PERMISSION_ICON, card_close, card_open, esc

try:
    from typing import Any
except ImportError:  # MicroPython: annotations are never evaluated there
    pass


def card(request: dict[str, Any], draft: dict[str, Any], busy: bool, error: str | None) -> str:
    """The card for a session's active permission request.

    ``draft`` is the person's: ``reason`` (for a deny), ``editing`` with ``edited`` (the input's
    text), ``any`` (remember any input of the tool, not only this one).
    """
    return (
        card_open(
            "permission",
            str(request.get("pendingId") or ""),
            PERMISSION_ICON,
            "The agent asks to use a tool",
            "Hide the request (Esc); it keeps waiting",
        )
        + body(request, draft, busy, error)
        + card_close(buttons(bool(draft.get("editing")), busy))
    )


def body(
    request: dict[str, Any],
    draft: dict[str, Any],
    busy: bool,
    error: str | None,
    ns: str = "perm",
    detached_note: bool = True,
) -> str:
    """A request's tool, input, the deny reason and "always allow", wherever it is shown (a card, an
    inbox item); ``ns`` prefixes the element ids, ``detached_note`` as in ``question.body``."""
    tool = str(request.get("toolName") or "")
    editing = bool(draft.get("editing"))
    disabled = " disabled" if busy else ""
    parts = [
        '<p class="perm-tool"><span class="perm-label">Tool</span>'
        '<code class="perm-name" data-testid="permission-tool">' + esc(tool) + "</code></p>"
    ]
    context = request.get("context")
    if context:
        parts.append('<p class="card-context">' + esc(context) + "</p>")
    if request.get("agentDisconnected") and detached_note:
        parts.append(
            '<p class="card-detached" data-testid="permission-detached">The agent stopped waiting and '
            "went on as if denied. Allow resumes it with this tool call; Deny only closes the request.</p>"
        )
    error_html = ""
    if error:
        error_html = (
            '<p class="card-error" id="'
            + ns
            + '-error" role="alert" data-testid="permission-error">'
            + esc(error)
            + "</p>"
        )
    if editing:
        # The error sits under the editor it is about.
        parts.append(_editor(draft, disabled, error_html, ns))
        error_html = ""
    else:
        parts.append(_input(request, tool, draft, disabled, ns))
    parts.append(
        '<label class="perm-field" for="'
        + ns
        + '-reason">Reason, if you deny <span class="perm-hint">(optional; the agent sees it)</span></label>'
        '<textarea id="'
        + ns
        + '-reason" class="custom perm-reason" rows="1" data-testid="permission-reason" '
        'placeholder="Why not?">' + esc(draft.get("reason") or "") + "</textarea>"
    )
    parts.append(error_html)
    return "".join(parts)


def _editor(draft: dict[str, Any], disabled: str, error_html: str, ns: str) -> str:
    """The input as JSON in a text box, while the person edits it before allowing."""
    return (
        '<div class="perm-input-head"><label class="perm-label" for="' + ns + '-edited">Input as JSON</label>'
        '<button type="button" class="btn ghost small" data-action="perm-edit-cancel" '
        'data-testid="permission-edit-cancel"' + disabled + ">Cancel edit</button></div>"
        '<textarea id="' + ns + '-edited" class="custom perm-editor" rows="6" spellcheck="false" '
        'autocapitalize="off" data-testid="permission-edited-input"'
        + (' aria-invalid="true" aria-describedby="' + ns + '-error"' if error_html else "")
        + ">"
        + esc(draft.get("edited") or "")
        + "</textarea>"
        + error_html
    )


def _input(request: dict[str, Any], tool: str, draft: dict[str, Any], disabled: str, ns: str) -> str:
    """The input as asked, with Edit and the "always allow" choice."""
    return (
        '<div class="perm-input-head"><span class="perm-label" id="' + ns + '-input-label">Input</span>'
        '<button type="button" class="btn ghost small" data-action="perm-edit" '
        'data-testid="permission-edit"' + disabled + ">Edit, then allow</button></div>"
        '<div class="perm-input" role="group" aria-labelledby="'
        + ns
        + '-input-label" data-testid="permission-input">'
        + tools.html(request.get("input"))
        + "</div>"
        '<div class="perm-always">'
        '<button type="button" class="btn ghost" data-action="perm-always" '
        'data-testid="permission-always"' + disabled + ">Always allow this in this session</button>"
        '<label class="perm-any"><input type="checkbox" data-action="perm-any" '
        'data-testid="permission-always-any"'
        + (" checked" if draft.get("any") else "")
        + disabled
        + "><span>For any input of <code>"
        + esc(tool)
        + "</code>, not only this one</span></label></div>"
    )


def buttons(editing: bool, busy: bool) -> str:
    """Deny and Allow (Allow edited while the input is being edited)."""
    disabled = " disabled" if busy else ""
    deny = (
        '<button type="button" class="btn ghost danger" data-action="perm-deny" data-testid="permission-deny"'
        + disabled
        + ">Deny</button>"
    )
    if editing:
        return (
            deny + '<button type="button" class="btn primary" data-action="perm-allow-edited" '
            'data-testid="permission-allow-edited"'
            + disabled
            + ">"
            + ("Sending…" if busy else "Allow edited")
            + "</button>"
        )
    return (
        deny + '<button type="button" class="btn primary" data-action="perm-allow" '
        'data-testid="permission-allow"' + disabled + ">" + ("Sending…" if busy else "Allow") + "</button>"
    )


def queued_notice() -> str:
    return (
        '<div class="notice" role="status" data-testid="permission-queued"><p>Your decision is saved and '
        "waiting for the agent: it gets it once, as soon as it comes back.</p>" + DISMISS + "</div>"
    )


def _decision_text(request: dict[str, Any] | None) -> str:
    decision = (request or {}).get("decision") or {}
    behavior = decision.get("behavior")
    if behavior == "ALLOW":
        text = "Allowed"
        if decision.get("auto"):
            text += " by a rule of this session"
        elif decision.get("remember"):
            text += " and remembered for this session"
        if decision.get("updatedInput") is not None and decision.get("updatedInput") != (request or {}).get(
            "input"
        ):
            text += ", with an edited input"
        return text + "."
    if behavior == "DENY":
        message = decision.get("message")
        return "Denied" + (": “" + str(message) + "”" if message else ".")
    return ""


def notice(reason: str | None, request: dict[str, Any] | None) -> str:
    """Shown when the card closed without this page's decision taking effect: why, and the decision
    that was taken instead when it is known."""
    if reason == "SUPERSEDED":
        headline = "This permission request is no longer current: the agent has moved on."
    elif reason == "DELIVERY_CLAIMED":
        headline = "A decision for this request is already on its way to the agent."
    elif reason == "ELSEWHERE":
        headline = "This permission request was decided elsewhere."
    elif reason == "CLOSED":
        headline = "This permission request is no longer waiting."
    else:
        headline = "This permission request was already decided or closed."
    decided = _decision_text(request)
    if decided and reason in ("TERMINAL", "ELSEWHERE", "CLOSED", None):
        headline = "Someone else decided this permission request first."
    return (
        '<div class="notice" role="status" data-testid="permission-conflict"><p>'
        + esc(headline)
        + "</p>"
        + (
            '<p class="notice-detail" data-testid="permission-winner">' + esc(decided) + "</p>"
            if decided
            else ""
        )
        + DISMISS
        + "</div>"
    )


def rules(held: list[dict[str, Any]], busy: str | None) -> str:
    """The session's remembered rules ("Allowed in this session"), each with its Revoke button."""
    if not held:
        return ""
    items = []
    for rule in held:
        rule_id = str(rule.get("id") or "")
        value = rule.get("input")
        scope = "any input" if value is None else tools.input_summary(value)
        items.append(
            '<li class="rule" data-testid="permission-rule-'
            + esc(rule_id)
            + '"><code class="perm-name">'
            + esc(rule.get("toolName"))
            + '</code><span class="rule-input" title="'
            + esc(scope)
            + '">'
            + esc(scope)
            + '</span><button type="button" class="btn ghost small" data-action="perm-revoke" '
            'data-rule-id="'
            + esc(rule_id)
            + '" data-testid="permission-rule-revoke" aria-label="Revoke: '
            + esc(rule.get("toolName"))
            + ", "
            + esc(scope)
            + '"'
            + (" disabled" if busy == rule_id else "")
            + ">Revoke</button></li>"
        )
    return (
        '<section class="rules" data-testid="permission-rules" aria-labelledby="rules-title">'
        '<h2 id="rules-title" class="rules-title">Allowed in this session</h2>'
        '<ul class="rule-list">' + "".join(items) + "</ul></section>"
    )
