"""The client store: query results, events, revision ordering, and the Zulip apply-events invariant."""

from kit_support import (
    active_ids,
    each_kind,
    pending_message,
    question,
    rev,
    scenario,
    session,
    store_with,
    summary,
    task,
    turn,
)

from frontend_py.kit import CLARIFICATION, PERMISSION, Store

try:
    from typing import Any
except ImportError:
    pass


def test_task_list_builds_tasks_summaries_and_sessions() -> None:
    store = store_with(
        [
            task(
                "T",
                [session("S2", created="2026-08-14T10:05:00Z"), session("S1", primary=True)],
                summary("T", 3, CLARIFICATION),
                primary="S1",
            )
        ]
    )
    found = store.task("T")
    assert found is not None
    assert found["summary"]["revision"] == 3
    assert [s["id"] for s in store.task_sessions("T")] == ["S1", "S2"]
    assert store.session("S1") is not None
    assert store.task("missing") is None


@scenario("S06")
def test_older_list_projection_cannot_replace_a_newer_event_projection_in_either_order() -> None:
    listed = task(
        "T", [session("S", pending=CLARIFICATION, revision=rev("3", "4"))], summary("T", 1, CLARIFICATION)
    )
    event = {
        "kind": "UPDATED",
        "messageId": "m1",
        "message": question("m1", "t1", "p1", "ANSWERED"),
        "projection": {"sessionId": "S", "pendingAction": None, "revision": rev("3", "5")},
    }
    list_then_event = store_with([listed])
    list_then_event.apply_session_event("S", event)
    event_then_list = Store()
    event_then_list.apply_session_event("S", event)
    event_then_list.apply_tasks([listed])
    for store in [list_then_event, event_then_list]:
        found = store.session("S")
        assert found is not None
        assert found["pendingAction"] is None
        assert found["pendingActionRevision"] == rev("3", "5")


def test_an_event_without_projection_keeps_the_held_projection() -> None:
    store = store_with([task("T", [session("S", pending=CLARIFICATION, revision=rev("1", "2"))])])
    store.apply_session_event(
        "S", {"kind": "UPDATED", "messageId": "m1", "message": question("m1", "t1", "p1"), "projection": None}
    )
    store.apply_session_event(
        "S", {"kind": "UPDATED", "messageId": "m1", "message": question("m1", "t1", "p1")}
    )
    found = store.session("S")
    assert found is not None
    assert found["pendingAction"] == CLARIFICATION


def test_a_projection_with_null_pending_action_is_an_explicit_clean() -> None:
    store = store_with([task("T", [session("S", pending=CLARIFICATION, revision=rev("1", "2"))])])
    store.apply_session_event(
        "S",
        {
            "kind": "DELETED",
            "messageId": "m1",
            "message": None,
            "projection": {"sessionId": "S", "pendingAction": None, "revision": rev("1", "3")},
        },
    )
    found = store.session("S")
    assert found is not None
    assert found["pendingAction"] is None


@scenario("S05")
@each_kind
def test_a_new_question_advances_a_cached_clean_projection_in_the_same_event(kind: str) -> None:
    store = store_with([task("T", [session("S", revision=rev("1", "2"))])])
    store.apply_session_turns("S", [turn("t1", "2026-08-14T10:00:00Z")])
    store.apply_session_messages("S", [])
    assert store.session_pending("S") == (None, [])
    store.apply_session_event(
        "S",
        {
            "kind": "ADDED",
            "messageId": "m1",
            "message": pending_message(kind, "m1", "t1", "p1"),
            "projection": {"sessionId": "S", "pendingAction": kind, "revision": rev("1", "3")},
        },
    )
    found = store.session("S")
    assert found is not None
    assert (found["pendingAction"], found["pendingActionRevision"]) == (kind, rev("1", "3"))
    assert store.session_pending("S") == (kind, active_ids(kind, "p1"))
    assert [m["id"] for m in store.messages("S")] == ["m1"]


@scenario("S04")
@each_kind
def test_attempted_hidden_successor_keeps_the_visible_predecessor_question_inert(kind: str) -> None:
    store = store_with([task("T", [session("S", revision=rev("2", "7"))], with_summary=False)])
    store.apply_session_turns("S", [turn("t1", "2026-08-14T10:00:00Z", "2026-08-14T10:01:00Z")])
    store.apply_session_messages("S", [pending_message(kind, "m1", "t1", "p1")])
    # Inert in chat (no active request) and in the pending-input indicators (the task's action).
    assert store.session_pending("S") == (None, [])
    assert store.task_pending_action("T") is None


def test_pending_projections_from_pending_action_changed_go_through_the_revision_merge() -> None:
    store = store_with([task("T", [session("S", revision=rev("2", "7"))])])
    assert not store.apply_projection(
        {"sessionId": "S", "pendingAction": CLARIFICATION, "revision": rev("2", "6")}
    )
    assert not store.apply_projection(
        {"sessionId": "S", "pendingAction": CLARIFICATION, "revision": rev("2", "x")}
    )
    assert store.apply_projection(
        {"sessionId": "S", "pendingAction": CLARIFICATION, "revision": rev("2", "8")}
    )
    found = store.session("S")
    assert found is not None
    assert found["pendingAction"] == CLARIFICATION


def test_unseen_older_epoch_after_rebuild_is_rejected_for_a_session_not_seen_yet() -> None:
    store = store_with([task("T", [session("S1", revision=rev("5", "1"))])])
    assert not store.apply_projection(
        {"sessionId": "S9", "pendingAction": CLARIFICATION, "revision": rev("4", "99")}
    )
    assert store.projection("S9") is None
    assert store.apply_projection(
        {"sessionId": "S9", "pendingAction": CLARIFICATION, "revision": rev("5", "0")}
    )


def test_task_summaries_are_replaced_only_by_a_newer_revision() -> None:
    store = store_with([task("T", [], summary("T", 5, CLARIFICATION))])
    assert not store.apply_task_summary(summary("T", 4, None))
    assert not store.apply_task_summary(summary("T", 5, None))
    assert store.apply_task_summary(summary("T", 6, None))
    found = store.summary("T")
    assert found is not None
    assert found["pendingAction"] is None
    assert found["revision"] == 6
    store.apply_tasks([task("T", [], summary("T", 5, CLARIFICATION))])
    found = store.summary("T")
    assert found is not None
    assert found["revision"] == 6


def test_a_null_summary_from_a_task_read_drops_the_cached_summary() -> None:
    store = store_with([task("T", [], summary("T", 5, CLARIFICATION))])
    token = store.begin_read()
    store.apply_tasks([task("T", [], None)], token)
    assert store.summary("T") is None
    store = store_with([task("T", [], summary("T", 5, CLARIFICATION))])
    store.apply_task("T", task("T", [], None), store.begin_read())
    assert store.summary("T") is None


def test_an_invalidating_read_cannot_erase_a_newer_live_summary_received_while_in_flight() -> None:
    store = store_with([task("T", [], summary("T", 5, CLARIFICATION)), task("U", [])])
    token = store.begin_read()
    store.apply_task_summary(summary("T", 6, None))
    store.apply_task_summary(summary("U", 1, CLARIFICATION))
    store.apply_tasks([task("T", [], None), task("U", [], None)], token)
    found = store.summary("T")
    assert found is not None
    assert found["revision"] == 6
    found = store.summary("U")
    assert found is not None
    assert found["revision"] == 1


def test_an_omitted_summary_is_a_no_op() -> None:
    store = store_with([task("T", [], summary("T", 5, CLARIFICATION))])
    store.apply_tasks([task("T", [], with_summary=False)], store.begin_read())
    found = store.summary("T")
    assert found is not None
    assert found["revision"] == 5


def test_a_task_missing_from_the_list_is_removed_with_its_sessions() -> None:
    store = store_with([task("T", [session("S")], summary("T", 1, None)), task("U", [session("V", "U")])])
    store.apply_session_messages("S", [question("m1", "t1", "p1")])
    store.apply_tasks([task("U", [session("V", "U")])])
    assert store.task("T") is None
    assert store.session("S") is None
    assert store.messages("S") == []
    assert store.summary("T") is None
    store.apply_task("U", None)
    assert store.task_ids() == []
    assert store.session("V") is None


def test_a_forced_session_load_drops_sessions_the_server_no_longer_lists() -> None:
    store = store_with([task("T", [session("S1"), session("S2")])])
    store.apply_task_sessions("T", [session("S2", pending=CLARIFICATION, revision=rev("1", "2"))])
    assert [s["id"] for s in store.task_sessions("T")] == ["S2"]


def test_a_deleted_message_leaves_the_session() -> None:
    store = store_with([task("T", [session("S")])])
    store.apply_session_messages("S", [question("m1", "t1", "p1"), question("m2", "t1", "p2")])
    store.apply_session_event(
        "S", {"kind": "DELETED", "messageId": "m1", "message": None, "projection": None}
    )
    assert [m["id"] for m in store.messages("S")] == ["m2"]


def test_a_message_in_a_turn_missing_from_history_marks_the_history_stale() -> None:
    store = store_with([task("T", [session("S")])])
    store.apply_session_turns("S", [turn("t1", "2026-08-14T10:00:00Z")])
    store.apply_session_event(
        "S", {"kind": "ADDED", "messageId": "m1", "message": question("m1", "t1", "p1")}
    )
    assert not store.turns_stale("S")
    store.apply_session_event(
        "S", {"kind": "ADDED", "messageId": "m2", "message": question("m2", "t2", "p2")}
    )
    assert store.turns_stale("S")
    store.apply_session_turns("S", [turn("t1", "2026-08-14T10:00:00Z"), turn("t2", "2026-08-14T10:01:00Z")])
    assert not store.turns_stale("S")


def test_turn_history_is_held_in_ascending_instant_order() -> None:
    store = store_with([task("T", [session("S")])])
    store.apply_session_turns(
        "S",
        [
            turn("late", "2026-08-14T10:00:00.1Z"),
            turn("mid", "2026-08-14T12:00:00.05+02:00"),
            turn("early", "2026-08-14T10:00:00Z"),
        ],
    )
    turns = store.turns("S")
    assert turns is not None
    assert [t["id"] for t in turns] == ["early", "mid", "late"]


# --- Zulip's invariant: events applied to old state == a fresh fetch --------------------------------


class FakeServer:
    """Durable state and the events its writes emit, shaped like the GraphQL API.

    Each session has its own sequence, bumped by every write that can change its projection, so a
    fresh read and the last event of a session carry the same revision.
    """

    def __init__(self) -> None:
        self.epoch = "3"
        self.sequences: dict[str, int] = {"S1": 1, "S2": 1}
        self.pending: dict[str, Any] = {"S1": None, "S2": None}
        self.turns: dict[str, list[dict[str, Any]]] = {
            "S1": [turn("t1", "2026-08-14T10:00:00Z", session_id="S1")],
            "S2": [],
        }
        self.messages: dict[str, list[dict[str, Any]]] = {"S1": [], "S2": []}
        self.task_pending: Any = None
        self.summary_revision = 1
        self.clock = 0

    def _write(self, session_id: str, pending: Any) -> dict[str, Any]:
        self.sequences[session_id] += 1
        self.pending[session_id] = pending
        return self._projection(session_id)

    def _projection(self, session_id: str) -> dict[str, Any]:
        revision = rev(self.epoch, str(self.sequences[session_id]))
        return {"sessionId": session_id, "pendingAction": self.pending[session_id], "revision": revision}

    def _summary_write(self, pending: Any) -> list[Any]:
        if pending == self.task_pending:
            return []
        self.task_pending = pending
        self.summary_revision += 1
        return [("summary", self._summary())]

    def _summary(self) -> dict[str, Any]:
        return summary("T", self.summary_revision, self.task_pending)

    def _replace(self, session_id: str, message_id: str, change: Any) -> dict[str, Any]:
        for index, message in enumerate(self.messages[session_id]):
            if message["id"] == message_id:
                updated: dict[str, Any] = change(message)
                self.messages[session_id][index] = updated
                return updated
        raise KeyError(message_id)

    def fetch(self) -> Store:
        store = Store()
        sessions = [
            session(
                "S1", pending=self.pending["S1"], revision=self._projection("S1")["revision"], primary=True
            ),
            session(
                "S2",
                created="2026-08-14T10:05:00Z",
                pending=self.pending["S2"],
                revision=self._projection("S2")["revision"],
            ),
        ]
        store.apply_tasks([task("T", sessions, self._summary(), primary="S1")])
        for session_id in ["S1", "S2"]:
            store.apply_session_turns(session_id, list(self.turns[session_id]))
            store.apply_session_messages(session_id, list(self.messages[session_id]))
        return store

    def ask(self, session_id: str, message_id: str, turn_id: str, pending_id: str) -> list[Any]:
        self.clock += 1
        message = question(message_id, turn_id, pending_id, session_id=session_id)
        message["createdAt"] = f"2026-08-14T10:00:{self.clock:02d}Z"
        self.messages[session_id].append(message)
        projection = self._write(session_id, CLARIFICATION)
        event = {"kind": "ADDED", "messageId": message_id, "message": message, "projection": projection}
        events: list[Any] = [("session", session_id, event), ("projection", projection)]
        events.extend(self._summary_write(CLARIFICATION))
        return events

    def answer(self, session_id: str, message_id: str) -> list[Any]:
        def answered(message: dict[str, Any]) -> dict[str, Any]:
            updated = dict(message)
            updated["clarification"] = dict(message["clarification"])
            updated["clarification"]["status"] = "ANSWERED"
            return updated

        updated = self._replace(session_id, message_id, answered)
        projection = self._write(session_id, None)
        task_pending = CLARIFICATION if [p for p in self.pending.values() if p] else None
        event = {"kind": "UPDATED", "messageId": message_id, "message": updated, "projection": projection}
        events: list[Any] = [("projection", projection), ("session", session_id, event)]
        events.extend(self._summary_write(task_pending))
        return events

    def edit(self, session_id: str, message_id: str, content: str) -> list[Any]:
        def edited(message: dict[str, Any]) -> dict[str, Any]:
            updated = dict(message)
            updated["content"] = content
            return updated

        updated = self._replace(session_id, message_id, edited)
        # A content-only update carries no projection: the client keeps the one it holds.
        return [("session", session_id, {"kind": "UPDATED", "messageId": message_id, "message": updated})]

    def delete(self, session_id: str, message_id: str) -> list[Any]:
        self.messages[session_id] = [m for m in self.messages[session_id] if m["id"] != message_id]
        projection = self._write(session_id, self.pending[session_id])
        event = {"kind": "DELETED", "messageId": message_id, "message": None, "projection": projection}
        return [("session", session_id, event), ("projection", projection)]

    def start_turn(self, session_id: str, turn_id: str, started: str) -> list[Any]:
        # The API has no turn event: a client reloads the history when a message names a new turn.
        self.turns[session_id].append(turn(turn_id, started, session_id=session_id))
        return [("turns", session_id, list(self.turns[session_id]))]

    def restart(self) -> None:
        self.epoch = str(int(self.epoch) + 1)


def _apply(store: Store, events: list[Any]) -> None:
    for event in events:
        if event[0] == "session":
            store.apply_session_event(event[1], event[2])
        elif event[0] == "projection":
            store.apply_projection(event[1])
        elif event[0] == "summary":
            store.apply_task_summary(event[1])
        elif event[0] == "turns":
            store.apply_session_turns(event[1], event[2])


def _steps(server: FakeServer) -> list[Any]:
    return [
        lambda: server.ask("S2", "m1", "t9", "p1"),
        lambda: server.start_turn("S2", "t9", "2026-08-14T10:06:00Z"),
        lambda: server.edit("S2", "m1", "Which database?"),
        lambda: server.ask("S1", "m2", "t1", "p2"),
        lambda: server.answer("S1", "m2"),
        lambda: server.answer("S2", "m1"),
        lambda: server.delete("S2", "m1"),
        lambda: server.ask("S1", "m3", "t1", "p3"),
    ]


def test_applying_emitted_events_to_old_state_equals_a_fresh_fetch() -> None:
    server = FakeServer()
    store = server.fetch()
    for number, step in enumerate(_steps(server)):
        _apply(store, step())
        assert store.snapshot() == server.fetch().snapshot(), "after step " + str(number)
    assert store.session_pending("S1") == (CLARIFICATION, ["p3"])
    assert store.session_pending("S2") == (None, [])


def test_separate_subscriptions_interleaving_in_any_order_converge_on_the_fresh_fetch() -> None:
    # sessionEvents, pendingActionChanged and taskSummaryChanged are separate streams: each is in
    # order, but one may run ahead of another, or replay its snapshot after a reconnect.
    for lagging in ["session", "projection", "summary"]:
        server = FakeServer()
        store = server.fetch()
        held_back: list[Any] = []
        for step in _steps(server):
            events = step()
            _apply(store, [e for e in events if e[0] != lagging])
            held_back.extend([e for e in events if e[0] == lagging])
        _apply(store, held_back)
        _apply(store, held_back)
        assert store.snapshot() == server.fetch().snapshot(), lagging


def test_after_a_restart_a_fresh_fetch_and_new_events_agree_and_old_epochs_are_ignored() -> None:
    server = FakeServer()
    before = server.ask("S1", "m1", "t1", "p1")
    server.restart()
    store = server.fetch()
    _apply(store, server.answer("S1", "m1"))
    _apply(store, [e for e in before if e[0] == "projection"])
    assert store.snapshot() == server.fetch().snapshot()
    assert store.session_pending("S1") == (None, [])


def test_task_pending_action_is_the_summary_else_the_legacy_projection_of_live_sessions() -> None:
    sessions = [
        session("a", pending=CLARIFICATION),
        session("b", pending=PERMISSION, state="COMPLETED"),
        session("c", pending=None),
    ]
    store = store_with([task("T", sessions, None, with_summary=False)])
    assert store.task_pending_action("T") == CLARIFICATION
    store.apply_task_sessions("T", [sessions[0], session("b", pending=PERMISSION, revision=rev("1", "2"))])
    assert store.task_pending_action("T") == PERMISSION, "a permission outranks at task level"
    store.apply_task_summary(summary("T", 3, None))
    assert store.task_pending_action("T") is None, "a held summary is the authority"
    assert store.task_pending_action("missing") is None
