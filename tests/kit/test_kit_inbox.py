"""The inbox's list, selection, batches, ages and keys, as the web app holds them."""

from frontend_py.kit.inbox import (
    ALLOW,
    HELP,
    NEXT,
    OPTION,
    PREVIOUS,
    Inbox,
    age_text,
    batch_key,
    canonical_json,
    command,
)
from frontend_py.kit.timestamps import parse_timestamp

try:
    from typing import Any
except ImportError:
    pass


def _question(pending_id: str, asked: str) -> dict[str, Any]:
    return {
        "pendingId": pending_id,
        "kind": "CLARIFICATION",
        "taskId": "T",
        "sessionId": "S",
        "askedAt": asked,
        "agentWaiting": True,
        "clarification": {"pendingId": pending_id, "questions": []},
        "permission": None,
    }


def _request(pending_id: str, asked: str, tool: str = "Bash", tool_input: Any = None) -> dict[str, Any]:
    return {
        "pendingId": pending_id,
        "kind": "PERMISSION",
        "taskId": "T",
        "sessionId": "S",
        "askedAt": asked,
        "agentWaiting": False,
        "clarification": None,
        "permission": {
            "pendingId": pending_id,
            "toolName": tool,
            "input": {"command": "npm test"} if tool_input is None else tool_input,
        },
    }


def _inbox(items: list[dict[str, Any]]) -> Inbox:
    inbox = Inbox()
    inbox.apply(items)
    return inbox


# --- the list ------------------------------------------------------------------------------------


def test_items_are_oldest_first_whatever_order_the_list_came_in() -> None:
    inbox = _inbox(
        [
            _question("late", "2026-08-14T10:05:00Z"),
            _request("early", "2026-08-14T12:00:00+02:00"),
            _question("middle", "2026-08-14T10:01:00.5Z"),
        ]
    )
    assert inbox.ids() == ["early", "middle", "late"]
    assert inbox.loaded


def test_an_empty_inbox_is_loaded_and_has_no_selection() -> None:
    inbox = Inbox()
    assert not inbox.loaded
    inbox.apply([])
    assert inbox.loaded
    assert inbox.items() == []
    assert inbox.selected is None
    assert not inbox.move(1)


def test_the_first_item_is_selected_and_the_selection_stays_on_its_item_when_older_ones_arrive() -> None:
    inbox = _inbox([_question("b", "2026-08-14T10:02:00Z"), _question("c", "2026-08-14T10:03:00Z")])
    assert inbox.selected == "b"
    inbox.apply(
        [
            _question("a", "2026-08-14T10:01:00Z"),
            _question("b", "2026-08-14T10:02:00Z"),
            _question("c", "2026-08-14T10:03:00Z"),
        ]
    )
    assert inbox.selected == "b"


def test_when_the_selected_item_leaves_the_one_in_its_place_is_selected() -> None:
    items = [_question(name, "2026-08-14T10:0" + str(n) + ":00Z") for n, name in enumerate("abcd")]
    inbox = _inbox(items)
    assert inbox.select("b")
    inbox.apply([items[0], items[2], items[3]])  # b settled elsewhere
    assert inbox.selected == "c"
    inbox.apply([items[0], items[2]])
    assert inbox.selected == "c"
    inbox.apply([items[0]])  # the last one left: the one before it
    assert inbox.selected == "a"
    inbox.apply([])
    assert inbox.selected is None


def test_an_action_settled_here_leaves_at_once_and_a_stale_list_does_not_bring_it_back() -> None:
    items = [_question("a", "2026-08-14T10:01:00Z"), _request("b", "2026-08-14T10:02:00Z")]
    inbox = _inbox(items)
    inbox.settle("a")
    assert inbox.ids() == ["b"]
    assert inbox.selected == "b"
    inbox.apply(items)  # read before the decision
    assert inbox.ids() == ["b"]
    inbox.apply(items[1:])  # the server's list without it: nothing more to remember
    inbox.apply(items)
    assert inbox.ids() == ["a", "b"], "only a list read before the decision could name it again"


def test_j_and_k_move_the_selection_and_stop_at_either_end() -> None:
    inbox = _inbox([_question(name, "2026-08-14T10:0" + str(n) + ":00Z") for n, name in enumerate("abc")])
    assert inbox.move(1)
    assert inbox.selected == "b"
    assert inbox.move(1)
    assert not inbox.move(1)
    assert inbox.selected == "c"
    assert inbox.move(-1)
    assert inbox.move(-1)
    assert not inbox.move(-1)
    assert inbox.selected == "a"
    assert not inbox.select("missing")


def test_an_item_without_an_asked_time_sorts_first_instead_of_failing() -> None:
    inbox = _inbox([_question("b", "2026-08-14T10:00:00Z"), _question("a", "not a time")])
    assert inbox.ids() == ["a", "b"]


# --- batches ------------------------------------------------------------------------------------


def test_requests_with_the_same_tool_and_input_are_alike_whatever_the_key_order() -> None:
    one = _request("a", "2026-08-14T10:01:00Z", tool_input={"command": "npm test", "timeout": 60})
    two = _request("b", "2026-08-14T10:02:00Z", tool_input={"timeout": 60, "command": "npm test"})
    other_input = _request("c", "2026-08-14T10:03:00Z", tool_input={"command": "rm -rf build"})
    other_tool = _request("d", "2026-08-14T10:04:00Z", tool="Shell", tool_input={"command": "npm test"})
    question = _question("e", "2026-08-14T10:05:00Z")
    inbox = _inbox([one, two, other_input, other_tool, question])
    assert batch_key(one) == batch_key(two)
    assert batch_key(question) is None
    assert inbox.alike("a") == ["a", "b"]
    assert inbox.alike("c") == ["c"]
    assert inbox.alike("e") == []


def test_only_requests_alike_the_first_checked_can_join_the_batch() -> None:
    inbox = _inbox(
        [
            _request("a", "2026-08-14T10:01:00Z"),
            _request("b", "2026-08-14T10:02:00Z", tool_input={"command": "make"}),
            _request("c", "2026-08-14T10:03:00Z"),
            _request("d", "2026-08-14T10:04:00Z", tool_input={"command": "make"}),
            _question("q", "2026-08-14T10:05:00Z"),
        ]
    )
    assert not inbox.toggle_check("q"), "a question is never part of a batch"
    assert inbox.toggle_check("c")
    assert inbox.toggle_check("a")
    assert inbox.checked == ["a", "c"], "in the list's order"
    assert not inbox.can_check("b")
    assert not inbox.toggle_check("b")
    assert inbox.toggle_check("a")
    assert inbox.checked == ["c"]
    inbox.clear_checks()
    assert inbox.check_alike("d")
    assert inbox.checked == ["b", "d"]


def test_a_checked_request_that_leaves_leaves_the_batch() -> None:
    items = [_request("a", "2026-08-14T10:01:00Z"), _request("b", "2026-08-14T10:02:00Z")]
    inbox = _inbox(items)
    assert inbox.check_alike("a")
    inbox.settle("a")
    assert inbox.checked == ["b"]
    inbox.apply([])
    assert inbox.checked == []


def test_a_request_alone_of_its_kind_cannot_be_checked() -> None:
    inbox = _inbox([_request("a", "2026-08-14T10:01:00Z"), _question("q", "2026-08-14T10:02:00Z")])
    assert not inbox.can_check("a")
    assert not inbox.check_alike("a")


def test_canonical_json_sorts_keys_at_every_depth() -> None:
    assert (
        canonical_json({"b": [1, {"d": None, "c": True}], "a": "x"})
        == '{"a":"x","b":[1,{"c":true,"d":null}]}'
    )


# --- ages and keys ------------------------------------------------------------------------------


def test_the_age_reads_in_seconds_then_minutes_hours_and_days() -> None:
    asked = parse_timestamp("2026-08-14T10:00:00Z")
    second = 1000000
    assert age_text(asked, asked - 5 * second) == "0 s", "a clock behind the server's is not negative"
    assert age_text(asked, asked + 40 * second) == "40 s"
    assert age_text(asked, asked + 12 * 60 * second + 59 * second) == "12 min"
    assert age_text(asked, asked + 2 * 3600 * second) == "2 h"
    assert age_text(asked, asked + (2 * 3600 + 5 * 60) * second) == "2 h 5 min"
    assert age_text(asked, asked + 3 * 86400 * second) == "3 d"
    assert age_text(asked, asked + (86400 + 4 * 3600) * second) == "1 d 4 h"


def test_keys_map_to_triage_commands() -> None:
    assert command("j") == (NEXT, 0)
    assert command("k") == (PREVIOUS, 0)
    assert command("a") == (ALLOW, 0)
    assert command("?") == (HELP, 0)
    assert command("3") == (OPTION, 3)
    assert command("0") is None
    assert command("z") is None
    assert command("Shift") is None
