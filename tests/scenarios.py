"""The numbered requirement scenarios and the `scenario` marker's rules.

`@pytest.mark.scenario("S01", ...)` ties a test to the scenarios whose THEN it checks. The ids are
copied here from the requirements' scenario index (S01-S45, in the order the requirements list
them); a marker naming anything else, or nothing, stops collection.

`@pytest.mark.scenario_note("S34", "ambiguous")` marks a test that pins a documented decision
departing from one scenario's THEN (it asserts another outcome on purpose). It is listed in the
matrix under that scenario as `S34-ambiguous`, and it does not count as checking the scenario.
"""

from __future__ import annotations

import re

import pytest

SCENARIO_IDS: tuple[str, ...] = (
    "S01", "S02", "S03", "S04", "S05", "S06", "S07", "S08", "S09", "S10",
    "S11", "S12", "S13", "S14", "S15", "S16", "S17", "S18", "S19", "S20",
    "S21", "S22", "S23", "S24", "S25", "S26", "S27", "S28", "S29", "S30",
    "S31", "S32", "S33", "S34", "S35", "S36", "S37", "S38", "S39", "S40",
    "S41", "S42", "S43", "S44", "S45",
)  # fmt: skip

# The kinds of pending action a scenario about one must run for, and the scenarios that concern no
# pending action's kind: a summary's revision against a message event (S06), how a reservation's
# attempted marker is read (S30), startup refusing an unreconciled reservation (S35), and projector
# refreshes racing events of two request identities (S45).
PENDING_KINDS: tuple[str, ...] = ("clarification", "permission")
KIND_NEUTRAL: frozenset[str] = frozenset({"S06", "S30", "S35", "S45"})
KINDS_MARKER = "kinds"

MARKER = "scenario"
NOTE_MARKER = "scenario_note"
NOTE_PATTERN = re.compile(r"[a-z][a-z0-9]*(-[a-z0-9]+)*")


def scenario_ids(item: pytest.Item) -> list[str]:
    """Every id the item's scenario markers name, in marker order."""
    return [str(i) for mark in item.iter_markers(MARKER) for i in mark.args]


def scenario_notes(item: pytest.Item) -> list[tuple[str, str]]:
    """Every (scenario id, note) the item's scenario_note markers name, in marker order."""
    return [(str(mark.args[0]), str(mark.args[1])) for mark in item.iter_markers(NOTE_MARKER)]


def item_kinds(item: pytest.Item) -> list[str]:
    """The kinds of pending action a test runs for: its `kind` parameter's (each parametrized case
    one), else its `kinds` marker's, else clarifications (the kind every test began with)."""
    callspec = getattr(item, "callspec", None)
    if callspec is not None and "kind" in callspec.params:
        value = str(callspec.params["kind"])
        return [k for k in PENDING_KINDS if k in value.lower()]
    marked = [str(k) for mark in item.iter_markers(KINDS_MARKER) for k in mark.args]
    return marked or ["clarification"]


def note_label(scenario_id: str, note: str) -> str:
    return f"{scenario_id}-{note}"


def marker_problems(item: pytest.Item) -> list[str]:
    problems = []
    for mark in item.iter_markers(MARKER):
        if not mark.args or mark.kwargs:
            problems.append(f"{item.nodeid}: scenario marker needs ids and nothing else, got {mark}")
        unknown = [i for i in mark.args if i not in SCENARIO_IDS]
        if unknown:
            problems.append(f"{item.nodeid}: unknown scenario ids {unknown!r} (known: S01-S45)")
    for mark in item.iter_markers(KINDS_MARKER):
        unknown = [k for k in mark.args if k not in PENDING_KINDS]
        if not mark.args or mark.kwargs or unknown:
            problems.append(f"{item.nodeid}: kinds marker names {PENDING_KINDS}, got {mark}")
    for mark in item.iter_markers(NOTE_MARKER):
        if len(mark.args) != 2 or mark.kwargs:
            problems.append(f"{item.nodeid}: scenario_note marker needs a scenario id and a note, got {mark}")
            continue
        sid, note = mark.args
        if sid not in SCENARIO_IDS:
            problems.append(f"{item.nodeid}: unknown scenario id {sid!r} in scenario_note (known: S01-S45)")
        if not isinstance(note, str) or not NOTE_PATTERN.fullmatch(note):
            problems.append(f"{item.nodeid}: scenario_note {note!r} must be lower-case words joined by '-'")
        if sid in scenario_ids(item):
            problems.append(f"{item.nodeid}: checks {sid} and departs from it (scenario and scenario_note)")
    return problems


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    problems = [p for item in items for p in marker_problems(item)]
    if problems:
        raise pytest.UsageError("invalid scenario markers:\n" + "\n".join(problems))
