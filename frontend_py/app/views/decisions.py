"""The history's decision lines: each settled pending action says who decided what, under its ask.

From ``decisions(sessionId)``: a person's name, or a rule, or (expired, superseded, cancelled) no
one; and what: the answer, skipped, allowed, allowed with an edit (the diff), denied with the reason.
"""

from frontend_py.app.views import tools
from frontend_py.app.views.parts import clock, esc
from frontend_py.kit import parse_timestamp

try:
    from typing import Any
except ImportError:  # MicroPython: annotations are never evaluated there
    pass

SYSTEM = "system"
UNKNOWN = "unknown"
# What an action nobody decided reads as: its outcome in words, then what was asked.
CLOSED = {
    "EXPIRED": "Expired, nobody answered in time",
    "SUPERSEDED": "No longer current, the agent moved on",
    "CANCELLED": "Cancelled",
}


def _micros(value: Any) -> int | None:
    try:
        return parse_timestamp(value)
    except ValueError:
        return None


def _asked(summary: str) -> str:
    """What a summary says after its verb ("expired: Which policy?" -> "Which policy?")."""
    head, sep, rest = summary.partition(": ")
    return rest if sep and " " not in head else summary


RULE_SUFFIX = " (rule "


def _rule_named(summary: str) -> tuple[str, str | None]:
    """A rule's decision names the rule and its scope at the end of its summary ("... (rule
    Bash(npm test:*), task scope)"): the summary without it, and it."""
    at = summary.rfind(RULE_SUFFIX)
    if at < 0 or not summary.endswith(")"):
        return summary, None
    return summary[:at], summary[at + len(RULE_SUFFIX) : -1]


def line(decision: dict[str, Any], original: Any, rule: str | None) -> str:
    """One decision: who, what, when; ``original`` is the input an edited allow changed (None until
    it is known), ``rule`` the deciding rule in words when this page has it."""
    pending_id = str(decision.get("pendingId") or "")
    outcome = str(decision.get("outcome") or "")
    by = str(decision.get("decidedBy") or "")
    summary = str(decision.get("summary") or outcome.lower())
    if by == SYSTEM or outcome in CLOSED:
        who = ""
        what = CLOSED.get(outcome, outcome[:1] + outcome[1:].lower()) + ": " + _asked(summary)
    elif by.startswith("rule "):
        what, named = _rule_named(summary)
        rule = named or rule
        who = "A rule" + (" (" + rule + ")" if rule else "")
    else:
        who = "Someone" if by == UNKNOWN else by
        what = summary
    message = decision.get("message")
    if outcome == "DENIED" and message:
        what += " — “" + str(message) + "”"
    diff = ""
    if decision.get("edited") and original is not None:
        diff = (
            '<div class="decision-diff">'
            + tools.input_diff(original, decision.get("updatedInput"))
            + "</div>"
        )
    return (
        '<li class="decision '
        + esc(outcome.lower())
        + '" data-testid="decision-'
        + esc(pending_id)
        + '">'
        + ('<span class="decision-who">' + esc(who) + "</span> " if who else "")
        + '<span class="decision-what">'
        + esc(what)
        + "</span> "
        '<span class="time">' + esc(clock(decision.get("decidedAt"))) + "</span>" + diff + "</li>"
    )


def placed(
    messages: list[dict[str, Any]], decisions: list[dict[str, Any]], lines: dict[str, str]
) -> tuple[dict[str, list[str]], list[str]]:
    """Where each decision line goes: after the message that asked (a question's last one; a
    permission request's, asked at the same instant), else after the last message before it was
    decided, else at the end. Returns (lines after each message id, lines at the end)."""
    asked_by_bundle: dict[str, str] = {}
    asked_at: dict[int, str] = {}
    times: list[tuple[int, str]] = []
    for message in messages:
        message_id = str(message.get("id") or "")
        question = message.get("clarification")
        if isinstance(question, dict) and question.get("pendingId"):
            asked_by_bundle[str(question["pendingId"])] = message_id
        created = _micros(message.get("createdAt"))
        if created is not None:
            times.append((created, message_id))
            if message.get("kind") == "permission_request":
                asked_at[created] = message_id
    after: dict[str, list[str]] = {}
    tail: list[str] = []
    for decision in reversed(decisions):  # oldest first, so two under one message read in order
        pending_id = str(decision.get("pendingId") or "")
        html = lines.get(pending_id)
        if html is None:
            continue
        target = asked_by_bundle.get(pending_id)
        asked = _micros(decision.get("askedAt"))
        if target is None and decision.get("kind") == "PERMISSION" and asked is not None:
            target = asked_at.get(asked)
        if target is None:
            decided = _micros(decision.get("decidedAt"))
            for created, message_id in times:
                if decided is not None and created <= decided:
                    target = message_id
        if target is None:
            tail.append(html)
        else:
            after.setdefault(target, []).append(html)
    return after, tail
