"""The question card's HTML: a bundle's questions with the person's draft, and its notices."""

from frontend_py.app.views.parts import DISMISS, QUESTION_ICON, card_close, card_open, esc
from frontend_py.app.views.transcript import answer_text

try:
    from typing import Any
except ImportError:  # MicroPython: annotations are never evaluated there
    pass


def _option(question_id: str, option: dict[str, Any], multi: bool, pressed: bool, tabbable: bool) -> str:
    """One option: a toggle button in a "choose any" question, a radio in a "choose one" group."""
    option_id = option.get("id") or ""
    description = option.get("description")
    if multi:
        state = ' aria-pressed="' + ("true" if pressed else "false") + '"'
    else:
        # A radio group is one tab stop: the chosen radio (or the first) takes focus, arrows move.
        state = (
            ' role="radio" aria-checked="'
            + ("true" if pressed else "false")
            + '" tabindex="'
            + ("0" if tabbable else "-1")
            + '"'
        )
    return (
        '<button type="button" class="option'
        + (" chosen" if pressed else "")
        + (" multi" if multi else "")
        + '" data-action="option" data-question-id="'
        + esc(question_id)
        + '" data-option-id="'
        + esc(option_id)
        + '" data-testid="clarification-option-'
        + esc(option_id)
        + '"'
        + state
        + '><span class="mark" aria-hidden="true"></span><span class="option-text">'
        + '<span class="option-label">'
        + esc(option.get("label"))
        + "</span>"
        + ('<span class="option-desc">' + esc(description) + "</span>" if description else "")
        + "</span></button>"
    )


def card(
    pending_id: str,
    questions: list[dict[str, Any]],
    context: str | None,
    selections: dict[str, list[str]],
    custom: dict[str, str],
    busy: bool,
    error: str | None,
) -> str:
    """The question card for one active bundle; ``selections``/``custom`` are the user's draft."""
    # Hiding keeps the question waiting (Skip is the one that rejects it); Escape does the same.
    return (
        card_open(
            "clarification",
            pending_id,
            QUESTION_ICON,
            "The agent needs your input",
            "Hide the question (Esc); it keeps waiting",
        )
        + body(questions, context, selections, custom, error)
        + card_close(buttons(busy))
    )


def body(
    questions: list[dict[str, Any]],
    context: str | None,
    selections: dict[str, list[str]],
    custom: dict[str, str],
    error: str | None,
    ns: str = "card",
    detached_note: bool = True,
) -> str:
    """A bundle's questions with the draft, wherever they are shown (a card, an inbox item).

    ``ns`` prefixes the element ids, so several bundles can be on one page; ``detached_note`` says
    in words that the agent stopped waiting (an inbox item says it in its own header).
    """
    detached = False
    for question in questions:
        if question.get("agentDisconnected"):
            detached = True
    parts = []
    if context:
        parts.append('<p class="card-context">' + esc(context) + "</p>")
    if detached and detached_note:
        parts.append(
            '<p class="card-detached" data-testid="clarification-detached">The agent stopped waiting '
            "for this answer. It is resumed with your answer when you submit it, at once or "
            "when it comes back.</p>"
        )
    for number, question in enumerate(questions, 1):
        question_id = question.get("questionId") or ""
        parts.append(
            _question(number, question, selections.get(question_id) or [], custom.get(question_id), ns)
        )
    if error:
        parts.append(
            '<p class="card-error" role="alert" data-testid="clarification-error">' + esc(error) + "</p>"
        )
    return "".join(parts)


def buttons(busy: bool) -> str:
    """Skip and Submit."""
    disabled = " disabled" if busy else ""
    return (
        '<button type="button" class="btn ghost" data-action="skip" '
        'data-testid="clarification-skip"' + disabled + ">Skip</button>"
        '<button type="button" class="btn primary" data-action="submit" '
        'data-testid="clarification-submit"'
        + disabled
        + ">"
        + ("Sending…" if busy else "Submit")
        + "</button>"
    )


def _question(number: int, question: dict[str, Any], chosen: list[str], custom: str | None, ns: str) -> str:
    """One question of the card: its legend, its options and the box for an answer of one's own."""
    question_id = question.get("questionId") or ""
    multi = bool(question.get("multiSelect"))
    # Ids by position: question ids are the agent's strings, not safe inside id references.
    text_id = ns + "-q" + str(number) + "-text"
    parts = ['<fieldset class="q" data-question-id="' + esc(question_id) + '">']
    title = question.get("title")
    # The title and "Choose one/any" share a line above the prompt (a card is short of room).
    legend = '<legend class="q-legend"><span class="q-head">'
    if title:
        legend += '<span class="q-title">' + esc(title) + "</span>"
    legend += '<span class="q-mode">' + ("Choose any" if multi else "Choose one") + "</span></span>"
    legend += '<span class="q-text" id="' + text_id + '">' + esc(question.get("prompt"))
    legend += "</span></legend>"
    parts.append(legend)
    options = question.get("options") or []
    if multi:
        parts.append('<div class="options">')
    else:
        parts.append('<div class="options" role="radiogroup" aria-labelledby="' + text_id + '">')
    stop = ""
    for option in options:
        if (option.get("id") or "") in chosen:
            stop = option.get("id") or ""
    if not stop and options:
        stop = options[0].get("id") or ""
    for option in options:
        option_id = option.get("id") or ""
        parts.append(_option(question_id, option, multi, option_id in chosen, option_id == stop))
    parts.append("</div>")
    # Each box is named after its own question, so two boxes never share one label.
    own_id = ns + "-q" + str(number) + "-own"
    parts.append(
        '<span class="visually-hidden" id="'
        + own_id
        + '">Your own answer to</span><textarea class="custom" rows="2" data-question-id="'
        + esc(question_id)
        + '" data-testid="clarification-custom-text" placeholder="Or write your own answer" '
        + 'aria-labelledby="'
        + own_id
        + " "
        + text_id
        + '">'
        + esc(custom or "")
        + "</textarea></fieldset>"
    )
    return "".join(parts)


def queued_notice() -> str:
    """After answering a question whose agent is not connected: the answer waits for it."""
    return (
        '<div class="notice" role="status" data-testid="clarification-queued"><p>Your answer is saved '
        "and waiting for the agent: it gets it once, as soon as it comes back.</p>" + DISMISS + "</div>"
    )


def conflict_notice(reason: str | None, bundle: dict[str, Any] | None) -> str:
    """Shown after a stale card is closed: why, and the answer that won when there is one."""
    answers = []
    for question in (bundle or {}).get("questions") or []:
        text = answer_text(question)
        status = question.get("status")
        if text:
            answers.append(
                "<li><span class='q-text'>" + esc(question.get("prompt")) + "</span> " + esc(text) + "</li>"
            )
        elif status == "REJECTED":
            answers.append("<li><span class='q-text'>" + esc(question.get("prompt")) + "</span> skipped</li>")
    if reason == "SUPERSEDED":
        headline = "This question is no longer current: the agent has moved on."
    elif answers:
        headline = "Someone else answered this question first."
    else:
        headline = "This question was already answered or closed."
    return (
        '<div class="notice" role="status" data-testid="clarification-conflict"><p>'
        + esc(headline)
        + "</p>"
        + (
            '<ul class="winner" data-testid="clarification-winner">' + "".join(answers) + "</ul>"
            if answers
            else ""
        )
        + DISMISS
        + "</div>"
    )
