"""The permission card's HTML: a tool call with the person's draft (and the rule to remember it by)
and its notices."""

from frontend_py.app.views import tools
from frontend_py.app.views.parts import DISMISS, PERMISSION_ICON, card_close, card_open, esc

try:
    from typing import Any
except ImportError:  # MicroPython: annotations are never evaluated there
    pass


def card(request: dict[str, Any], draft: dict[str, Any], busy: bool, error: str | None) -> str:
    """The card for a session's active permission request.

    ``draft`` is the person's: ``reason`` (for a deny), ``editing`` with ``edited`` (the input's
    text), the rule to remember (``choice``, ``scope``, ``confirming``; see ``remember``).
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
        parts.append(_input(request, draft, disabled, ns))
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


def _input(request: dict[str, Any], draft: dict[str, Any], disabled: str, ns: str) -> str:
    """The input as asked, with Edit and the rule to remember it by."""
    return (
        '<div class="perm-input-head"><span class="perm-label" id="' + ns + '-input-label">Input</span>'
        '<button type="button" class="btn ghost small" data-action="perm-edit" '
        'data-testid="permission-edit"' + disabled + ">Edit, then allow</button></div>"
        '<div class="perm-input" role="group" aria-labelledby="'
        + ns
        + '-input-label" data-testid="permission-input">'
        + tools.html(request.get("input"))
        + "</div>"
        + remember(request, draft, disabled, ns)
    )


# Where a remembered rule applies, as the card offers it (a project only for a task that has one).
SCOPES = (("SESSION", "This session"), ("TASK", "This task"), ("PROJECT", "This project"))


def chosen(request: dict[str, Any], draft: dict[str, Any]) -> dict[str, Any] | None:
    """The suggestion the person chose to remember (the narrowest, until they choose another)."""
    suggestions = request.get("suggestions") or []
    index = int(draft.get("choice") or 0)
    return suggestions[index] if 0 <= index < len(suggestions) else None


def scope_buttons(action: str, prefix: str, chosen_scope: str, has_project: bool, disabled: str) -> str:
    """One pressed button per scope a rule may have here (``<prefix>-<scope>`` test ids)."""
    buttons = []
    for value, label in SCOPES:
        if value == "PROJECT" and not has_project:
            continue
        buttons.append(
            '<button type="button" class="perm-scope" data-action="'
            + action
            + '" data-scope="'
            + value
            + '" data-testid="'
            + prefix
            + "-"
            + value.lower()
            + '" aria-pressed="'
            + ("true" if value == chosen_scope else "false")
            + '"'
            + disabled
            + ">"
            + label
            + "</button>"
        )
    return "".join(buttons)


def _choices(suggestions: list[dict[str, Any]], choice: int, disabled: str) -> str:
    options = []
    for index, suggestion in enumerate(suggestions):
        options.append(
            '<button type="button" class="perm-choice" data-action="perm-suggest" data-index="'
            + str(index)
            + '" data-testid="permission-suggestion-'
            + str(index)
            + '" data-pattern="'
            + esc(suggestion.get("pattern"))
            + '" aria-pressed="'
            + ("true" if index == choice else "false")
            + '"'
            + disabled
            + '><code class="perm-pattern">'
            + esc(suggestion.get("pattern"))
            + '</code><span class="perm-choice-label">'
            + esc(suggestion.get("label"))
            + "</span>"
            + ('<span class="perm-broad">any input</span>' if suggestion.get("broad") else "")
            + "</button>"
        )
    return "".join(options)


def remember(request: dict[str, Any], draft: dict[str, Any], disabled: str, ns: str = "perm") -> str:
    """ "Always allow": the rules this request suggests (this exact call, the command's prefix, the
    file's folder, the tool), where it applies, and for a rule that lets any input of a tool through,
    the warning that asks once more. In an inbox item (``ns`` other than the card's) it is one
    button until it is opened, so the item's Allow and Deny stay in view on a phone."""
    if ns != "perm" and not draft.get("remembering"):
        return (
            '<div class="perm-always" data-testid="permission-remember">'
            '<button type="button" class="btn ghost" data-action="perm-remember-open" '
            'data-testid="permission-always" aria-expanded="false"'
            + disabled
            + ">Always allow…</button></div>"
        )
    suggestions = request.get("suggestions") or []
    options = _choices(suggestions, int(draft.get("choice") or 0), disabled)
    scope = str(draft.get("scope") or "SESSION")
    scopes = scope_buttons("perm-scope", "permission-scope", scope, bool(draft.get("project")), disabled)
    picked = chosen(request, draft)
    where = dict(SCOPES).get(scope, "This session").lower()
    if picked is not None and picked.get("broad") and draft.get("confirming"):
        action = _broad_warning(request, picked, where, disabled)
    else:
        action = (
            '<button type="button" class="btn ghost" data-action="perm-always" '
            'data-testid="permission-always"' + disabled + ">Always allow in " + esc(where) + "</button>"
        )
    return (
        '<div class="perm-always" data-testid="permission-remember">'
        '<p class="perm-label" id="'
        + ns
        + '-rules-label">Always allow</p>'
        + (
            '<div class="perm-choices" role="group" aria-labelledby="' + ns + '-rules-label" '
            'data-testid="permission-suggestions">' + options + "</div>"
            if options
            else ""
        )
        + '<div class="perm-scopes" role="group" aria-labelledby="'
        + ns
        + '-scopes-label" data-testid="permission-scopes"><span class="perm-hint" id="'
        + ns
        + '-scopes-label">Where:</span>'
        + scopes
        + "</div>"
        + action
        + "</div>"
    )


def _broad_warning(request: dict[str, Any], picked: dict[str, Any], where: str, disabled: str) -> str:
    """Asked once more before a rule that lets any input of a tool through is remembered."""
    tool = str(request.get("toolName") or "")
    return (
        '<div class="perm-warning" role="alert" data-testid="permission-broad-warning">'
        "<p><strong>Allow any input of "
        + esc(tool)
        + " in "
        + esc(where)
        + "?</strong> "
        + esc(picked.get("warning") or "Every call of this tool will run without asking.")
        + '</p><div class="perm-warning-actions">'
        '<button type="button" class="btn ghost" data-action="perm-broad-cancel" '
        'data-testid="permission-broad-cancel"' + disabled + ">Back</button>"
        '<button type="button" class="btn danger" data-action="perm-always" data-confirmed="true" '
        'data-testid="permission-broad-confirm"' + disabled + ">Allow any input</button></div></div>"
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
            text += " by " + rule_named(decision.get("rule"))
        elif decision.get("remember"):
            text += " and remembered for this session"
        if decision.get("updatedInput") is not None and decision.get("updatedInput") != (request or {}).get(
            "input"
        ):
            text += ", with an edited input"
        return text + "."
    if behavior == "DENY":
        if decision.get("auto"):
            return "Denied by " + rule_named(decision.get("rule")) + "."
        message = decision.get("message")
        return "Denied" + (": “" + str(message) + "”" if message else ".")
    return ""


SCOPE_NAMES = {
    "SESSION": "this session",
    "TASK": "this task",
    "PROJECT": "this project",
    "GLOBAL": "everywhere",
}


def rule_named(rule: dict[str, Any] | None) -> str:
    """A rule as a decision names it: "the rule Bash(npm test:*) of this task"."""
    if not rule or not rule.get("pattern"):
        return "a rule of this session"
    return "the rule " + str(rule["pattern"]) + " (" + SCOPE_NAMES.get(str(rule.get("scope")), "") + ")"


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
