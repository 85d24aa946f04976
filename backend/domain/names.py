"""What a stored name (a task title, a workflow step, a user name, a question title, an option label)
may hold: text a person reads on one line.

Names are shown in lists and written into log lines; a control character in one (a line break, a
terminal escape, a C1 control, a Unicode line or paragraph separator) could end that line early and
start what looks like another, or repaint a terminal. So a name holding one is refused, never
cleaned: a silently changed name would differ from what its client sent. Free text (question
prompts, option descriptions, context, answers, message bodies) may hold line breaks and is not
checked here.
"""

from __future__ import annotations

import re

from backend.domain.errors import InvalidInput

# C0 controls (tab, CR and LF among them), DEL, C1 controls (NEL among them), and U+2028/U+2029,
# which many viewers and JSON-in-JS readers break lines at.
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def plain_name(field: str, value: str) -> str:
    """`value` unchanged; InvalidInput naming `field` when it holds a control character. The message
    does not repeat the value: it is what a log line or a client would otherwise print."""
    if CONTROL.search(value) is not None:
        raise InvalidInput(field, "must not contain control characters or line breaks")
    return value
