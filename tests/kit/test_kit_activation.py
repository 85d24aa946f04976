"""Task activation on desktop (sidebar) and phone (drawer): one controller, the phone closes its sheet.

Every test runs both flavours, and the spec's scenarios each kind of pending action a task can wait
on; loads are settled by hand so each interleaving is exact.
"""

from kit_support import (
    Loads,
    Log,
    Run,
    SheetNavigator,
    active_ids,
    each_kind,
    other_kind,
    rev,
    scenario,
    session,
    settle,
    store_with,
    summary,
    task,
)

from frontend_py.kit import (
    CLARIFICATION,
    INERT,
    OPENED_SESSION,
    OPENED_TASK,
    PERMISSION,
    ActivationController,
    Store,
    sole_session,
)

try:
    from typing import Any
except ImportError:
    pass

FLAVOURS = [("desktop", False), ("phone", True)]


def _sheet(store: Store, loads: Loads, log: Log, name: str, closes: bool) -> ActivationController:
    return ActivationController(store, loads, SheetNavigator(log, name), closes_sheet=closes)


def _then_close(entries: list[tuple[str, str]], name: str, closes: bool) -> list[tuple[str, str]]:
    # No ``[*a, b]`` here or below: MicroPython cannot unpack inside a list display.
    if closes:
        entries.append(("close", name))
    return entries


def _pending_task(kind: str = CLARIFICATION, task_summary: Any = None) -> Store:
    # The cached list says the primary session holds nothing and the secondary one is clean too: a
    # cached answer would open the primary session.
    sessions = [
        session("primary", primary=True, revision=rev("1", "1")),
        session("secondary", created="2026-08-14T10:05:00Z", revision=rev("1", "1")),
    ]
    return store_with([task("T", sessions, task_summary or summary("T", 7, kind), primary="primary")])


def _loaded_owner(action: str = CLARIFICATION) -> list[dict[str, Any]]:
    # The secondary session holds the task's pending action, request p1 of that kind.
    return [
        session("primary", primary=True, revision=rev("1", "2")),
        session(
            "secondary", created="2026-08-14T10:05:00Z", revision=rev("1", "2"), pending=action, active="p1"
        ),
    ]


def test_a_clean_task_opens_the_remembered_session_then_the_primary_then_the_newest() -> None:
    for name, closes in FLAVOURS:
        sessions = [
            session("old", created="2026-08-14T09:00:00Z"),
            session("primary", created="2026-08-14T09:30:00Z", primary=True),
            session("new", created="2026-08-14T11:00:00Z"),
        ]
        store = store_with([task("T", sessions, summary("T", 1, None), primary="primary")])
        loads, log = Loads(), Log()
        sheet = _sheet(store, loads, log, name, closes)
        assert Run(sheet.activate("T")).result == OPENED_SESSION
        assert log.entries == _then_close([("navigate", "/t/T/s/primary")], name, closes), name
        store.remember_session("T", "old")
        log.entries = []
        Run(sheet.activate("T"))
        assert log.entries[0] == ("navigate", "/t/T/s/old"), name
        store.apply_task_sessions("T", [sessions[0], session("new", created="2026-08-14T11:00:00Z")])
        store.remember_session("T", "gone")
        store.apply_tasks([task("T", store.task_sessions("T"), summary("T", 1, None), primary="gone")])
        log.entries = []
        Run(sheet.activate("T"))
        assert log.entries[0] == ("navigate", "/t/T/s/new"), name
        assert loads.calls == [], "a clean task never forces a load"


def test_a_clean_task_without_sessions_opens_the_task_route() -> None:
    for name, closes in FLAVOURS:
        store = store_with([task("T", [], summary("T", 1, None))])
        log = Log()
        assert Run(_sheet(store, Loads(), log, name, closes).activate("T")).result == OPENED_TASK
        assert ("navigate", "/t/T") in log.entries, name


@scenario("S09")
@each_kind
def test_a_secondary_session_owning_the_question_is_opened_bypassing_the_cached_list(kind: str) -> None:
    for name, closes in FLAVOURS:
        store = _pending_task(kind)
        store.remember_session("T", "primary")
        loads, log = Loads(), Log()
        run = Run(_sheet(store, loads, log, name, closes).activate("T"))
        assert [c[0] for c in loads.calls] == ["T"], "a pending task forces an authoritative load"
        assert log.entries == [], "nothing happens before the load settles"
        loads.resolve(0, _loaded_owner(kind))
        settle(run)
        assert run.result == OPENED_SESSION
        assert log.entries == _then_close([("navigate", "/t/T/s/secondary")], name, closes), name
        assert store.remembered_session("T") == "secondary", name
        found = store.session("secondary")
        assert found is not None
        assert found["pendingAction"] == kind
        assert store.session_pending("secondary") == (kind, active_ids(kind, "p1")), name


def test_the_newest_input_capable_session_with_the_matching_action_is_the_owner() -> None:
    for name, closes in FLAVOURS:
        store = _pending_task(PERMISSION)
        loads, log = Loads(), Log()
        run = Run(_sheet(store, loads, log, name, closes).activate("T"))
        loads.resolve(
            0,
            [
                session("a", created="2026-08-14T10:00:00Z", pending=PERMISSION, revision=rev("1", "2")),
                session("b", created="2026-08-14T10:01:00Z", pending=PERMISSION, revision=rev("1", "2")),
                session("c", created="2026-08-14T10:01:00Z", pending=PERMISSION, revision=rev("1", "2")),
                session("d", created="2026-08-14T10:09:00Z", pending=PERMISSION, input_capable=False),
                session("e", created="2026-08-14T10:10:00Z", pending=CLARIFICATION, revision=rev("1", "2")),
            ],
        )
        settle(run)
        assert log.entries[0] == ("navigate", "/t/T/s/c"), name


@scenario("S11", "S38")
@each_kind
def test_a_changed_summary_revision_during_the_load_discards_the_owner_and_opens_the_task_route(
    kind: str,
) -> None:
    for name, closes in FLAVOURS:
        store = _pending_task(kind)
        loads, log = Loads(), Log()
        run = Run(_sheet(store, loads, log, name, closes).activate("T"))
        store.apply_task_summary(summary("T", 8, kind))
        loads.resolve(0, _loaded_owner(kind))
        settle(run)
        assert run.result == OPENED_TASK
        assert log.entries == _then_close([("release", name), ("navigate", "/t/T")], name, closes), name


@scenario("S11", "S38")
@each_kind
def test_a_changed_pending_action_during_the_load_discards_the_owner_and_opens_the_task_route(
    kind: str,
) -> None:
    for name, closes in FLAVOURS:
        for newer in [summary("T", 8, other_kind(kind)), None]:
            store = _pending_task(kind)
            loads, log = Loads(), Log()
            run = Run(_sheet(store, loads, log, name, closes).activate("T"))
            if newer is None:
                # A task read that could not repair the summary invalidates it.
                store.apply_tasks([task("T", store.task_sessions("T"), None)], store.begin_read())
            else:
                store.apply_task_summary(newer)
            loads.resolve(0, _loaded_owner(kind))
            settle(run)
            assert run.result == OPENED_TASK, name
            assert log.entries == _then_close([("release", name), ("navigate", "/t/T")], name, closes), name


@scenario("S41")
@each_kind
def test_a_task_that_disappears_during_the_load_leaves_selection_inert(kind: str) -> None:
    for name, closes in FLAVOURS:
        store = _pending_task(kind)
        loads, log = Loads(), Log()
        run = Run(_sheet(store, loads, log, name, closes).activate("T"))
        store.apply_tasks([])
        loads.resolve(0, _loaded_owner(kind))
        settle(run)
        assert run.result == INERT
        assert log.entries == [], name
        assert store.session("secondary") is None, "the delayed load is not applied to a deleted task"


@scenario("S12")
@each_kind
def test_older_forced_load_finishing_last_changes_nothing(kind: str) -> None:
    for name, closes in FLAVOURS:
        store = _pending_task(kind)
        loads, log = Loads(honour_abort=False), Log()
        sheet = _sheet(store, loads, log, name, closes)
        older = Run(sheet.activate("T"))
        newer = Run(sheet.activate("T"))
        loads.resolve(1, _loaded_owner(kind))
        settle(newer)
        before = store.snapshot()
        entries = list(log.entries)
        loads.resolve(
            0,
            [
                session("primary", primary=True, pending=kind, revision=rev("1", "1")),
                session("stale", created="2026-08-14T12:00:00Z", pending=kind, revision=rev("1", "3")),
            ],
        )
        settle(older, newer)
        assert older.result == INERT
        assert newer.result == OPENED_SESSION
        assert log.entries == entries, name
        assert store.snapshot() == before, "the older snapshot cannot replace the newer one"
        assert store.session("stale") is None
        assert store.remembered_session("T") == "secondary", "nor revive an obsolete pending owner"


@scenario("S42")
@each_kind
def test_a_forced_load_aborted_by_a_newer_load_is_inert_not_a_failure(kind: str) -> None:
    for name, closes in FLAVOURS:
        store = _pending_task(kind)
        loads, log = Loads(), Log()
        sheet = _sheet(store, loads, log, name, closes)
        older = Run(sheet.activate("T"))
        newer = Run(sheet.activate("T"))
        assert loads.calls[0][2].aborted, "the newer load aborts the older request"
        settle(older, newer)
        assert older.result == INERT
        assert log.entries == [], "an abort is not a failure: no task-only fallback"
        loads.resolve(1, _loaded_owner(kind))
        settle(older, newer)
        assert newer.result == OPENED_SESSION
        assert log.entries == _then_close([("navigate", "/t/T/s/secondary")], name, closes), name
        assert store.remembered_session("T") == "secondary", name


def test_a_failed_session_load_falls_back_to_the_task_route() -> None:
    for name, closes in FLAVOURS:
        store = _pending_task()
        loads, log = Loads(), Log()
        run = Run(_sheet(store, loads, log, name, closes).activate("T"))
        loads.fail(0)
        settle(run)
        assert run.result == OPENED_TASK
        assert log.entries == _then_close([("release", name), ("navigate", "/t/T")], name, closes), name


@scenario("S14")
@each_kind
def test_without_a_matching_owner_the_layout_is_released_before_the_task_route_opens(kind: str) -> None:
    for name, closes in FLAVOURS:
        store = _pending_task(kind)
        loads, log = Loads(), Log()
        run = Run(_sheet(store, loads, log, name, closes).activate("T"))
        loads.resolve(
            0,
            [
                session("primary", primary=True, revision=rev("1", "2")),
                session("readonly", pending=kind, input_capable=False, revision=rev("1", "2")),
                session("other", pending=other_kind(kind), revision=rev("1", "2")),
            ],
        )
        settle(run)
        assert run.result == OPENED_TASK
        assert log.entries == _then_close([("release", name), ("navigate", "/t/T")], name, closes), name


@scenario("S13")
@each_kind
def test_an_unmounted_sheet_cannot_navigate_select_or_close_the_replacement_sheet(kind: str) -> None:
    store = _pending_task(kind)
    loads, log = Loads(honour_abort=False), Log()
    phone = _sheet(store, loads, log, "phone", True)
    stale = Run(phone.activate("T"))
    phone.unmount()
    tablet = _sheet(store, loads, log, "tablet", True)
    assert loads.calls[0][2].aborted
    # The response arrives anyway (it was already on its way): the continuation must stay inert.
    loads.resolve(0, _loaded_owner(kind))
    settle(stale)
    assert stale.result == INERT
    assert log.entries == []
    assert store.remembered_session("T") is None
    fresh = Run(tablet.activate("T"))
    loads.resolve(1, _loaded_owner(kind))
    settle(stale, fresh)
    assert log.entries == [("navigate", "/t/T/s/secondary"), ("close", "tablet")]
    assert Run(phone.activate("T")).result == INERT


@scenario("S43")
@each_kind
def test_two_mounted_sheets_never_invalidate_each_others_selection(kind: str) -> None:
    store = _pending_task(kind)
    loads, log = Loads(), Log()
    first = _sheet(store, loads, log, "first", True)
    second = _sheet(store, loads, log, "second", True)
    one = Run(first.activate("T"))
    two = Run(second.activate("T"))
    assert not loads.calls[0][2].aborted, "another sheet's load does not abort this one"
    loads.resolve(1, _loaded_owner(kind))
    settle(one, two)
    second.unmount()
    loads.resolve(0, _loaded_owner(kind))
    settle(one, two)
    assert one.result == OPENED_SESSION
    assert two.result == OPENED_SESSION
    assert log.entries == [
        ("navigate", "/t/T/s/secondary"),
        ("close", "second"),
        ("navigate", "/t/T/s/secondary"),
        ("close", "first"),
    ]


def test_a_newer_activation_in_the_same_sheet_makes_an_older_task_choice_inert() -> None:
    for name, closes in FLAVOURS:
        store = _pending_task()
        store.apply_task("U", task("U", [session("u1", "U")], summary("U", 1, None)))
        loads, log = Loads(), Log()
        sheet = _sheet(store, loads, log, name, closes)
        pending = Run(sheet.activate("T"))
        Run(sheet.activate("U"))
        loads.resolve(0, _loaded_owner())
        settle(pending)
        assert pending.result == INERT
        assert log.entries == _then_close([("navigate", "/t/U/s/u1")], name, closes), name


def test_a_task_that_is_not_present_is_inert() -> None:
    for name, closes in FLAVOURS:
        log = Log()
        assert Run(_sheet(Store(), Loads(), log, name, closes).activate("nope")).result == INERT
        assert log.entries == [], name


async def test_activation_completes_on_a_real_event_loop() -> None:
    import asyncio

    store = _pending_task()
    log = Log()
    released = asyncio.Event()

    async def load(_task_id: str, _signal: Any) -> list[dict[str, Any]]:
        await released.wait()
        return _loaded_owner()

    sheet = ActivationController(store, load, SheetNavigator(log, "phone"), closes_sheet=True)
    pending = asyncio.create_task(sheet.activate("T"))
    await asyncio.sleep(0)
    assert log.entries == []
    released.set()
    assert await pending == OPENED_SESSION
    assert log.entries == [("navigate", "/t/T/s/secondary"), ("close", "phone")]


def test_a_task_without_a_summary_uses_the_legacy_projection_to_find_the_pending_owner() -> None:
    for name, closes in FLAVOURS:
        sessions = [
            session("primary", primary=True, revision=rev("1", "1")),
            session(
                "secondary", created="2026-08-14T10:05:00Z", pending=CLARIFICATION, revision=rev("1", "1")
            ),
        ]
        store = store_with([task("T", sessions, None, primary="primary", with_summary=False)])
        loads, log = Loads(), Log()
        run = Run(_sheet(store, loads, log, name, closes).activate("T"))
        assert [c[0] for c in loads.calls] == ["T"], "a legacy pending task still forces the load"
        loads.resolve(0, _loaded_owner())
        settle(run)
        assert run.result == OPENED_SESSION
        assert log.entries == _then_close([("navigate", "/t/T/s/secondary")], name, closes), name


@scenario("S11", "S38")
@each_kind
def test_a_summary_arriving_during_a_legacy_load_discards_the_owner_and_opens_the_task_route(
    kind: str,
) -> None:
    for name, closes in FLAVOURS:
        sessions = [
            session("primary", primary=True),
            session("secondary", created="2026-08-14T10:05:00Z", pending=kind),
        ]
        store = store_with([task("T", sessions, None, primary="primary", with_summary=False)])
        loads, log = Loads(), Log()
        run = Run(_sheet(store, loads, log, name, closes).activate("T"))
        store.apply_task_summary(summary("T", 1, kind))
        loads.resolve(0, _loaded_owner(kind))
        settle(run)
        assert run.result == OPENED_TASK, name
        assert log.entries == _then_close([("release", name), ("navigate", "/t/T")], name, closes), name


def test_the_sole_session_of_a_task_is_where_its_task_only_fallback_goes_next() -> None:
    one = store_with([task("T", [session("only")])])
    assert sole_session(one, "T") == "only"
    two = store_with([task("T", [session("a"), session("b")])])
    assert sole_session(two, "T") is None
    assert sole_session(store_with([task("T", [])]), "T") is None
