"""What a reminder and an escalation say (pure): how long an action has waited, and the first notice
retitled."""

from __future__ import annotations

import pytest

from backend.domain.reminders import escalation_chat, reminder_chat, reminder_push, waited


@pytest.mark.parametrize(
    ("seconds", "says"),
    [
        (0.2, "1 s"),
        (59.9, "59 s"),
        (60, "1 min"),
        (12 * 60 + 30, "12 min"),
        (3600, "1 h"),
        (2 * 3600 + 5 * 60, "2 h 5 min"),
        (86400, "1 d"),
        (3 * 86400 + 4 * 3600 + 59, "3 d 4 h"),
    ],
)
def test_how_long_an_action_has_waited_reads_as_a_person_says_it(seconds: float, says: str) -> None:
    assert waited(seconds) == says


def test_a_reminder_and_an_escalation_say_what_they_are_and_how_long() -> None:
    title, body = "Turnwise: a question for you", "Task: Release 2.4\nWhich database?"
    assert reminder_chat(title, body, "12 min") == (
        "Turnwise reminder: a question for you (waiting 12 min)",
        "Reminder: still waiting for an answer after 12 min.\nTask: Release 2.4\nWhich database?",
    )
    assert escalation_chat(title, body, "1 h", "dana") == (
        "Turnwise escalation: a question for you (waiting 1 h)",
        "Escalation: waiting 1 h for an answer from dana; nobody has answered yet.\n"
        "Task: Release 2.4\nWhich database?",
    )
    assert reminder_push("Release 2.4: may the agent use Bash?", "make deploy", "5 min") == (
        "Reminder: Release 2.4: may the agent use Bash?",
        "Waiting 5 min · make deploy",
    )
