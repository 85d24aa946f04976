"""The rules panel's HTML: every permission rule that applies to the open session (its pattern, what
it does, where it applies, what it decided here) with Revoke; and the form that imports a Claude Code
settings block into a scope or shows a scope's block to copy."""

from frontend_py.app.views.parts import esc
from frontend_py.app.views.permission import SCOPE_NAMES, scope_buttons

try:
    from typing import Any
except ImportError:  # MicroPython: annotations are never evaluated there
    pass

BEHAVIOR_NAMES = {"ALLOW": "Allow", "ASK": "Ask", "DENY": "Deny"}


def _decided(rule: dict[str, Any]) -> str:
    count = int(rule.get("decisions") or 0)
    if count == 0:
        return "nothing decided here yet"
    return "decided " + str(count) + (" request" if count == 1 else " requests") + " here"


def _scope(rule: dict[str, Any]) -> str:
    scope = str(rule.get("scope") or "SESSION")
    if scope == "PROJECT":
        return "project " + str(rule.get("scopeId") or "")
    return SCOPE_NAMES.get(scope, scope.lower())


def _rule(rule: dict[str, Any], busy: str | None) -> str:
    rule_id = str(rule.get("id") or "")
    behavior = str(rule.get("behavior") or "ALLOW")
    pattern = str(rule.get("pattern") or rule.get("toolName") or "")
    scope = _scope(rule)
    expires = rule.get("expiresAt")
    return (
        '<li class="rule" data-testid="permission-rule-'
        + esc(rule_id)
        + '" data-behavior="'
        + esc(behavior)
        + '" data-scope="'
        + esc(rule.get("scope"))
        + '"><span class="rule-behavior '
        + esc(behavior.lower())
        + '" data-testid="permission-rule-behavior">'
        + esc(BEHAVIOR_NAMES.get(behavior, behavior))
        + '</span><code class="rule-pattern" data-testid="permission-rule-pattern" title="'
        + esc(pattern)
        + '">'
        + esc(pattern)
        + '</code><span class="rule-meta"><span data-testid="permission-rule-scope">'
        + esc(scope)
        + '</span> · <span data-testid="permission-rule-decided">'
        + esc(_decided(rule))
        + "</span>"
        + (
            ' · <span class="rule-expires">until ' + esc(str(expires)[:16].replace("T", " ")) + " UTC</span>"
            if expires
            else ""
        )
        + '</span><button type="button" class="btn ghost small" data-action="perm-revoke" data-rule-id="'
        + esc(rule_id)
        + '" data-testid="permission-rule-revoke" aria-label="Revoke: '
        + esc(BEHAVIOR_NAMES.get(behavior, behavior))
        + " "
        + esc(pattern)
        + ", "
        + esc(scope)
        + '"'
        + (" disabled" if busy == rule_id else "")
        + ">Revoke</button></li>"
    )


def rules(held: list[dict[str, Any]], busy: str | None) -> str:
    """Every rule that applies to the session, in the order they are read (deny, ask, allow)."""
    if not held:
        return ""
    return (
        '<section class="rules" data-testid="permission-rules" aria-labelledby="rules-title">'
        '<h2 id="rules-title" class="rules-title">Permission rules here</h2>'
        '<ul class="rule-list">' + "".join(_rule(rule, busy) for rule in held) + "</ul></section>"
    )


def manage(state: dict[str, Any], has_project: bool) -> str:
    """The import and export form, behind one toggle so it takes one line until it is wanted."""
    opened = bool(state.get("open"))
    head = (
        '<button type="button" class="rules-toggle" data-action="rules-manage" data-testid="rules-manage" '
        'aria-expanded="' + ("true" if opened else "false") + '" aria-controls="rules-form">'
        "Import or copy permission rules</button>"
    )
    if not opened:
        return '<div class="rules-manage">' + head + "</div>"
    busy = " disabled" if state.get("busy") else ""
    scope = str(state.get("scope") or "SESSION")
    scopes = scope_buttons("rules-scope", "rules-scope", scope, has_project, busy)
    block = state.get("block")
    return (
        '<div class="rules-manage">' + head + '<div id="rules-form" class="rules-form">'
        '<div class="perm-scopes" role="group" aria-labelledby="rules-scopes-label" '
        'data-testid="rules-scopes">'
        '<span class="perm-hint" id="rules-scopes-label">Rules of:</span>'
        + scopes
        + "</div>"
        + _import(state)
        + '<div class="rules-actions"><button type="button" class="btn primary small" '
        'data-action="rules-import" data-testid="rules-import-submit"'
        + busy
        + '>Import</button><button type="button" class="btn ghost small" data-action="rules-export" '
        'data-testid="rules-export-show"'
        + busy
        + ">Show the block to copy</button></div>"
        + (
            '<pre class="rules-block" tabindex="0" aria-label="The settings block of these rules" '
            'data-testid="rules-export-block">' + esc(block) + "</pre>"
            if block is not None
            else ""
        )
        + "</div></div>"
    )


def _import(state: dict[str, Any]) -> str:
    """The box a settings block is pasted into, with what became of the last import."""
    error = state.get("error")
    done = state.get("done")
    return (
        '<label class="perm-field" for="rules-import">Paste a Claude Code settings block '
        '<span class="perm-hint">(its "permissions": allow, ask, deny)</span></label>'
        '<textarea id="rules-import" class="custom rules-import" rows="4" spellcheck="false" '
        'autocapitalize="off" data-testid="rules-import-text" placeholder=\'{"permissions": {"allow": '
        '["Bash(npm run test:*)"], "deny": ["Read(./.env)"]}}\''
        + (' aria-invalid="true" aria-describedby="rules-error"' if error else "")
        + ">"
        + esc(state.get("text") or "")
        + "</textarea>"
        + (
            '<p class="card-error" id="rules-error" role="alert" data-testid="rules-import-error">'
            + esc(error)
            + "</p>"
            if error
            else ""
        )
        + (
            '<p class="rules-done" role="status" data-testid="rules-import-done">' + esc(done) + "</p>"
            if done
            else ""
        )
    )


def settings_text(block: dict[str, Any]) -> str:
    """A scope's block as it is pasted into .claude/settings.json."""
    lines = []
    for key in ("allow", "ask", "deny"):
        entries = block.get(key) or []
        inner = ", ".join(_quoted(str(e)) for e in entries)
        lines.append('    "' + key + '": [' + inner + "]")
    return '{\n  "permissions": {\n' + ",\n".join(lines) + "\n  }\n}"


def _quoted(text: str) -> str:
    out = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t")
    return '"' + out + '"'
