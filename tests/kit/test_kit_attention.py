"""The waiting count (title, favicon badge) and the notification decisions, read from the store."""

from kit_support import session, store_with, summary, task

from frontend_py.kit import CLARIFICATION, PERMISSION, Store
from frontend_py.kit.attention import Notifier, badge_label, first_question, page_title, waiting_count

try:  # noqa: SIM105, RUF100 - MicroPython has no contextlib
    from typing import Any
except ImportError:
    pass


def _asking(
    session_id: str, pending_id: str, prompt: str = "Which retry policy?", **extra: Any
) -> dict[str, Any]:
    """A session as the notification lookup returns it: its active bundle with the questions."""
    found: dict[str, Any] = session(session_id, pending=CLARIFICATION)
    bundle: dict[str, Any] = {"pendingId": pending_id, "sessionId": session_id, "state": "ACTIVE_LIVE"}
    bundle["questions"] = [{"questionId": "q1", "title": "Retry", "prompt": prompt}]
    for key in extra:
        bundle[key] = extra[key]
    found["activeClarification"] = bundle
    return found


def _armed(tasks: list[dict[str, Any]]) -> tuple[Store, Notifier]:
    store = store_with(tasks)
    notifier = Notifier()
    notifier.scan(store)
    notifier.arm(store)
    return store, notifier


# --- the waiting count ----------------------------------------------------------------------------


def test_the_count_is_the_tasks_waiting_for_input_of_either_kind() -> None:
    store = store_with(
        [
            task("A", [], summary("A", 1, CLARIFICATION)),
            task("B", [], summary("B", 1, PERMISSION)),
            task("C", [], summary("C", 1, None)),
        ]
    )
    assert waiting_count(store) == 2
    assert page_title(waiting_count(store)) == "(2) Turnwise"
    assert badge_label(waiting_count(store)) == "2"


def test_no_waiting_task_gives_the_bare_title_and_no_badge() -> None:
    store = store_with([task("A", [], summary("A", 1, None))])
    assert waiting_count(store) == 0
    assert page_title(0) == "Turnwise"
    assert badge_label(0) == ""
    assert badge_label(12) == "9+"


def test_a_task_without_summary_counts_through_the_legacy_session_rule() -> None:
    store = store_with([task("A", [session("S", task_id="A", pending=CLARIFICATION)], None)])
    assert waiting_count(store) == 1


def test_an_older_summary_can_neither_raise_nor_clear_the_count() -> None:
    store = store_with([task("A", [], summary("A", 5, CLARIFICATION)), task("B", [], summary("B", 5, None))])
    assert waiting_count(store) == 1
    assert not store.apply_task_summary(summary("A", 4, None))
    assert not store.apply_task_summary(summary("B", 3, CLARIFICATION))
    assert not store.apply_task_summary(summary("B", 5, CLARIFICATION))
    assert waiting_count(store) == 1
    assert store.apply_task_summary(summary("A", 6, None))
    assert waiting_count(store) == 0


def test_a_removed_task_no_longer_counts() -> None:
    store = store_with([task("A", [], summary("A", 1, CLARIFICATION))])
    store.apply_tasks([])
    assert waiting_count(store) == 0


# --- notifications ----------------------------------------------------------------------------------


def test_a_question_becoming_pending_raises_one_notification_with_title_and_first_question() -> None:
    store, notifier = _armed([task("A", [], summary("A", 1, None))])
    store.apply_task_summary(summary("A", 2, CLARIFICATION))
    lookups = notifier.scan(store)
    assert [(x.task_id, x.revision, x.baseline) for x in lookups] == [("A", 2, False)]
    raised = notifier.resolve(store, lookups[0], [_asking("S", "p1")], None, True)
    assert raised == [
        {"pendingId": "p1", "taskId": "A", "sessionId": "S", "title": "Task A", "body": "Which retry policy?"}
    ]
    assert notifier.scan(store) == []
    assert notifier.resolve(store, lookups[0], [_asking("S", "p1")], None, True) == []


def test_a_reconnect_snapshot_raises_nothing_for_a_bundle_already_notified() -> None:
    store, notifier = _armed([task("A", [], summary("A", 1, None))])
    store.apply_task_summary(summary("A", 2, CLARIFICATION))
    first = notifier.scan(store)[0]
    assert len(notifier.resolve(store, first, [_asking("S", "p1")], None, False)) == 1
    # The reconnect re-reads the list: the same revision changes nothing, a newer one (the bundle
    # detached while away) looks the task up again and finds the bundle already notified.
    store.apply_tasks([task("A", [], summary("A", 2, CLARIFICATION))])
    assert notifier.scan(store) == []
    store.apply_task_summary(summary("A", 3, CLARIFICATION))
    again = notifier.scan(store)
    assert len(again) == 1
    assert notifier.resolve(store, again[0], [_asking("S", "p1", state="ACTIVE_DETACHED")], None, False) == []


def test_a_lookup_overtaken_by_a_newer_summary_raises_nothing() -> None:
    store, notifier = _armed([task("A", [], summary("A", 1, None))])
    store.apply_task_summary(summary("A", 2, CLARIFICATION))
    stale = notifier.scan(store)[0]
    store.apply_task_summary(summary("A", 3, None))  # answered (or superseded) before the lookup returned
    assert notifier.scan(store) == []
    assert notifier.resolve(store, stale, [_asking("S", "p1")], None, False) == []
    assert not notifier.notified("p1")


def test_a_superseding_question_notifies_once_for_the_new_bundle_only() -> None:
    store, notifier = _armed([task("A", [], summary("A", 1, None))])
    store.apply_task_summary(summary("A", 2, CLARIFICATION))
    first = notifier.scan(store)[0]
    store.apply_task_summary(summary("A", 3, CLARIFICATION))
    second = notifier.scan(store)[0]
    # The first lookup returns after the second revision arrived: dropped, the second one decides.
    assert notifier.resolve(store, first, [_asking("S", "p1", "Old?")], None, False) == []
    raised = notifier.resolve(store, second, [_asking("S", "p2", "New?")], None, False)
    assert [(n["pendingId"], n["body"]) for n in raised] == [("p2", "New?")]


def test_an_older_summary_starts_no_lookup() -> None:
    store, notifier = _armed([task("A", [], summary("A", 5, None))])
    store.apply_task_summary(summary("A", 4, CLARIFICATION))
    assert notifier.scan(store) == []
    assert waiting_count(store) == 0


def test_nothing_while_the_owner_session_is_open_and_visible_and_it_stays_quiet_after() -> None:
    store, notifier = _armed([task("A", [], summary("A", 1, None))])
    store.apply_task_summary(summary("A", 2, CLARIFICATION))
    lookup = notifier.scan(store)[0]
    assert notifier.resolve(store, lookup, [_asking("S", "p1")], "S", True) == []
    assert notifier.notified("p1")
    store.apply_task_summary(summary("A", 3, CLARIFICATION))
    later = notifier.scan(store)[0]
    assert notifier.resolve(store, later, [_asking("S", "p1")], None, False) == []


def test_the_open_session_in_a_hidden_page_or_another_session_still_notifies() -> None:
    store, notifier = _armed([task("A", [], summary("A", 1, None)), task("B", [], summary("B", 1, None))])
    store.apply_task_summary(summary("A", 2, CLARIFICATION))
    store.apply_task_summary(summary("B", 2, CLARIFICATION))
    lookups = notifier.scan(store)
    by_task = {}
    for lookup in lookups:
        by_task[lookup.task_id] = lookup
    assert len(notifier.resolve(store, by_task["A"], [_asking("S", "p1")], "S", False)) == 1
    assert len(notifier.resolve(store, by_task["B"], [_asking("S2", "p2")], "S", True)) == 1


def test_questions_pending_when_armed_are_baseline_and_never_raise() -> None:
    store = store_with([task("A", [], summary("A", 4, CLARIFICATION)), task("B", [], summary("B", 1, None))])
    notifier = Notifier()
    assert notifier.scan(store) == []  # disarmed: revisions are recorded, nothing is looked up
    baseline = notifier.arm(store)
    assert [(x.task_id, x.revision, x.baseline) for x in baseline] == [("A", 4, True)]
    assert notifier.resolve(store, baseline[0], [_asking("S", "p0")], None, False) == []
    assert notifier.notified("p0")
    # A second question in the same task later notifies only itself.
    store.apply_task_summary(summary("A", 5, CLARIFICATION))
    lookup = notifier.scan(store)[0]
    raised = notifier.resolve(
        store, lookup, [_asking("S", "p0"), _asking("S2", "p9", "Second?")], None, False
    )
    assert [n["pendingId"] for n in raised] == ["p9"]


def test_disarmed_changes_are_not_replayed_when_armed() -> None:
    store = store_with([task("A", [], summary("A", 1, None))])
    notifier = Notifier()
    notifier.scan(store)
    store.apply_task_summary(summary("A", 2, CLARIFICATION))
    assert notifier.scan(store) == []
    assert [x.baseline for x in notifier.arm(store)] == [True]
    notifier.disarm()
    store.apply_task_summary(summary("A", 3, CLARIFICATION))
    assert notifier.scan(store) == []


def test_a_result_resolved_after_disarming_raises_nothing() -> None:
    store, notifier = _armed([task("A", [], summary("A", 1, None))])
    store.apply_task_summary(summary("A", 2, CLARIFICATION))
    lookup = notifier.scan(store)[0]
    notifier.disarm()
    assert notifier.resolve(store, lookup, [_asking("S", "p1")], None, False) == []


def test_a_task_listed_after_arming_with_a_question_notifies() -> None:
    store, notifier = _armed([task("A", [], summary("A", 1, None))])
    store.apply_tasks([task("A", [], summary("A", 1, None)), task("N", [], summary("N", 1, CLARIFICATION))])
    lookups = notifier.scan(store)
    assert [(x.task_id, x.baseline) for x in lookups] == [("N", False)]
    assert len(notifier.resolve(store, lookups[0], [_asking("S", "pn")], None, False)) == 1


def test_terminal_bundles_permissions_and_sessions_without_a_bundle_raise_nothing() -> None:
    store, notifier = _armed([task("A", [], summary("A", 1, None)), task("B", [], summary("B", 1, None))])
    store.apply_task_summary(summary("A", 2, CLARIFICATION))
    store.apply_task_summary(summary("B", 2, PERMISSION))
    lookups = notifier.scan(store)
    assert [x.task_id for x in lookups] == ["A"]
    sessions = [
        session("S0"),
        _asking("S", "p1", state="TERMINAL"),
        _asking("S3", "p3", state="SUPERSEDED_HISTORY"),
    ]
    assert notifier.resolve(store, lookups[0], sessions, None, False) == []


def test_the_notification_body_falls_back_to_the_title_then_a_generic_line() -> None:
    assert first_question({"questions": [{"prompt": "", "title": "Retry"}]}) == "Retry"
    assert first_question({"questions": []}) == "An agent is waiting for your answer."


def test_the_notified_memory_is_bounded() -> None:
    notifier = Notifier()
    for n in range(600):
        notifier.seen("p" + str(n))
    assert notifier.notified("p599")
    assert not notifier.notified("p0")
