"""Turn-scoped pending derivation: the shared fixture, the flag test, and how projections combine."""

from kit_support import each_kind, load_fixture, pending_message, question, scenario, turn

from frontend_py.kit import (
    CLARIFICATION,
    PERMISSION,
    active_pending_ids,
    current_turn,
    is_truthy,
    message_row,
    pending_action,
    session_pending,
    turn_row,
    visible_turns,
)

try:
    from typing import Any
except ImportError:
    pass


def _cases() -> list[dict[str, Any]]:
    cases: list[dict[str, Any]] = load_fixture("current_turn_resolution.json")["cases"]
    assert len(cases) >= 30
    return cases


@scenario("S02", "S03")
def test_current_turn_matches_every_fixture_case() -> None:
    for case in _cases():
        found = current_turn(case["turns"], case["messages"])
        assert (found["id"] if found else None) == case["expect"]["current_turn"], case["name"]


@scenario("S27")
def test_visible_turns_match_every_fixture_case() -> None:
    for case in _cases():
        shown = [t["id"] for t in visible_turns(case["turns"], case["messages"])]
        assert shown == case["expect"]["visible_turns"], case["name"]


def test_active_pending_ids_match_every_fixture_case() -> None:
    for case in _cases():
        ids = active_pending_ids(case["session_state"], case["turns"], case["messages"])
        assert ids == case["expect"]["active_pending_ids"], case["name"]


@scenario("S02", "S03")
def test_pending_action_matches_every_fixture_case() -> None:
    for case in _cases():
        action = pending_action(case["session_state"], case["turns"], case["messages"])
        expected = case["expect"]["pending_action"]
        assert action == (expected.upper() if expected else None), case["name"]


def test_fixture_cases_hold_in_any_input_order() -> None:
    for case in _cases():
        turns = list(reversed(case["turns"]))
        messages = list(reversed(case["messages"]))
        found = current_turn(turns, messages)
        assert (found["id"] if found else None) == case["expect"]["current_turn"], case["name"]
        assert [t["id"] for t in visible_turns(turns, messages)] == case["expect"]["visible_turns"], case[
            "name"
        ]


def test_flags_are_truthy_only_as_json_true_string_true_string_one_or_number_one() -> None:
    for value in [True, "true", "1", 1]:
        assert is_truthy(value), repr(value)
    for value in [False, None, 0, 2, -1, 1.0, "TRUE", "True", "yes", "on", " 1", "", [], {}, [1]]:
        assert not is_truthy(value), repr(value)


def test_api_turns_and_messages_derive_like_durable_rows() -> None:
    turns = [turn("t1", "2026-08-14T10:00:00Z", "2026-08-14T10:01:00Z"), turn("t2", "2026-08-14T10:02:00Z")]
    messages = [
        question("m1", "t1", "p1"),
        question("m2", "t2", "p2"),
        question("m3", "t2", "p3", "ANSWERED"),
    ]
    rows = [turn_row(t) for t in turns]
    message_rows = [message_row(m) for m in messages]
    found = current_turn(rows, message_rows)
    assert found is not None
    assert found["id"] == "t2"
    assert active_pending_ids("RUNNING", rows, message_rows) == ["p2"]
    lifecycle = dict(turns[1])
    lifecycle["lifecycleOnly"] = True
    rows = [turn_row(turns[0]), turn_row(lifecycle)]
    found = current_turn(rows, message_rows)
    assert found is not None
    assert found["id"] == "t1"


def _hidden_successor_case(kind: str = CLARIFICATION) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    # The client's view of "an attempted reservation is authority but stays hidden": the server
    # omits the attempted successor, so the predecessor with its pending row looks current.
    turns = [turn_row(turn("t1", "2026-08-14T10:00:00Z", "2026-08-14T10:01:00Z"))]
    messages = [message_row(pending_message(kind, "m1", "t1", "p1"))]
    return turns, messages


@scenario("S04")
@each_kind
def test_explicit_clean_projection_keeps_a_question_on_the_visible_predecessor_inert(kind: str) -> None:
    turns, messages = _hidden_successor_case(kind)
    assert pending_action("RUNNING", turns, messages) == kind, "the rows alone look pending"
    clean = {"pendingAction": None, "revision": {"epoch": "1", "sequence": "9"}}
    assert session_pending("RUNNING", clean, turns, messages) == (None, [])
    assert session_pending("RUNNING", clean, turns, messages, ["p1"]) == (None, [])


def test_without_a_projection_the_derivation_answers() -> None:
    turns, messages = _hidden_successor_case()
    assert session_pending("RUNNING", None, turns, messages) == (CLARIFICATION, ["p1"])
    assert session_pending("RUNNING", None, None, messages) == (None, [])


def test_a_permission_projection_makes_clarification_bundles_inert() -> None:
    turns, messages = _hidden_successor_case()
    permission = {"pendingAction": PERMISSION, "revision": {"epoch": "1", "sequence": "9"}}
    assert session_pending("RUNNING", permission, turns, messages) == (PERMISSION, [])


def test_a_clarification_projection_is_narrowed_to_the_current_turn_bundle() -> None:
    turns = [
        turn_row(turn("t1", "2026-08-14T10:00:00Z", "2026-08-14T10:01:00Z")),
        turn_row(turn("t2", "2026-08-14T10:02:00Z")),
    ]
    messages = [message_row(question("m1", "t1", "old")), message_row(question("m2", "t2", "new"))]
    pending = {"pendingAction": CLARIFICATION, "revision": {"epoch": "1", "sequence": "9"}}
    assert session_pending("RUNNING", pending, turns, messages, ["stale"]) == (CLARIFICATION, ["new"])


def test_while_turn_history_is_unavailable_the_server_projection_answers() -> None:
    messages = [message_row(question("m1", "t1", "p1"))]
    pending = {"pendingAction": CLARIFICATION, "revision": {"epoch": "1", "sequence": "9"}}
    assert session_pending("RUNNING", pending, None, messages, ["p1"]) == (CLARIFICATION, ["p1"])
    assert session_pending("RUNNING", pending, None, messages) == (CLARIFICATION, [])
    clean = {"pendingAction": None, "revision": {"epoch": "1", "sequence": "9"}}
    assert session_pending("RUNNING", clean, None, messages, ["p1"]) == (None, [])


def test_a_question_in_a_turn_not_yet_loaded_is_found_when_the_projection_says_clarification() -> None:
    turns = [turn_row(turn("t1", "2026-08-14T10:00:00Z", "2026-08-14T10:01:00Z"))]
    messages = [
        message_row(question("m1", "t1", "old", "ANSWERED")),
        message_row(question("m2", "t2", "new")),
    ]
    pending = {"pendingAction": CLARIFICATION, "revision": {"epoch": "1", "sequence": "9"}}
    assert active_pending_ids("RUNNING", turns, messages) == []
    assert session_pending("RUNNING", pending, turns, messages) == (CLARIFICATION, ["new"])


def test_a_terminal_session_has_nothing_pending_whatever_the_projection_says() -> None:
    turns, messages = _hidden_successor_case()
    pending = {"pendingAction": CLARIFICATION, "revision": {"epoch": "1", "sequence": "9"}}
    for state in ["COMPLETED", "FAILED", "CANCELLED"]:
        assert session_pending(state, pending, turns, messages, ["p1"]) == (None, []), state
        assert session_pending(state, None, turns, messages) == (None, []), state
