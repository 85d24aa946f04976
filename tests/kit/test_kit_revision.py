"""The one revision comparison: epoch, then sequence, as decimal strings of any size."""

from kit_support import raises, rev

from frontend_py.kit import EpochFloor, is_newer_or_equal, merge
from frontend_py.kit.revision import compare, parse


def test_revisions_compare_epoch_first_then_sequence() -> None:
    assert compare(rev("2", "1"), rev("1", "99")) == 1
    assert compare(rev("1", "99"), rev("2", "1")) == -1
    assert compare(rev("3", "10"), rev("3", "9")) == 1
    assert compare(rev("3", "9"), rev("3", "9")) == 0


def test_huge_epochs_and_sequences_compare_as_integers() -> None:
    huge = "1" + "0" * 40
    assert compare(rev(huge, "0"), rev("9" * 40, "9" * 60)) == 1
    assert compare(rev(huge, "1" + "0" * 80), rev(huge, "9" * 80)) == 1
    assert compare(rev("0007", "010"), rev("7", "10")) == 0
    assert parse(rev("000", "000")) == ("0", "0")
    assert parse(rev(huge, "00" + huge)) == (huge, huge)


def test_unparseable_revisions_are_rejected() -> None:
    garbage = [
        None,
        "1:2",
        {},
        {"epoch": "1"},
        {"sequence": "1"},
        rev("", "1"),
        rev("1", ""),
        rev("-1", "1"),
        rev("1", "+2"),
        rev("1.0", "1"),
        rev(" 1", "1"),
        rev("1e3", "1"),
        rev("١", "1"),
        rev("０", "1"),
        {"epoch": 1, "sequence": "1"},
        {"epoch": "1", "sequence": None},
    ]
    for candidate in garbage:
        assert parse(candidate) is None, repr(candidate)
        assert not is_newer_or_equal(candidate, rev("1", "1")), repr(candidate)
        assert not is_newer_or_equal(candidate, None), repr(candidate)
        assert raises(ValueError, compare, candidate, rev("1", "1")), repr(candidate)
        held = {"pendingAction": "CLARIFICATION", "revision": rev("1", "1")}
        assert merge(held, {"pendingAction": None, "revision": candidate}) is held, repr(candidate)
        assert merge(None, {"pendingAction": None, "revision": candidate}) is None, repr(candidate)


def test_a_result_is_kept_only_if_its_revision_is_not_older() -> None:
    held = {"pendingAction": "CLARIFICATION", "revision": rev("4", "10")}
    older = {"pendingAction": None, "revision": rev("4", "9")}
    equal = {"pendingAction": "CLARIFICATION", "revision": rev("4", "10")}
    newer = {"pendingAction": None, "revision": rev("4", "11")}
    next_epoch = {"pendingAction": None, "revision": rev("5", "0")}
    assert merge(held, older) is held
    assert merge(held, equal) is equal
    assert merge(held, newer) is newer
    assert merge(held, next_epoch) is next_epoch
    assert merge(None, older) is older
    assert merge(held, None) is held
    assert is_newer_or_equal(rev("4", "10"), None)
    assert is_newer_or_equal(rev("4", "10"), rev("4", "10"))
    assert not is_newer_or_equal(rev("3", "99"), rev("4", "0"))


def test_task_session_revisions_compare_against_projection_revisions() -> None:
    from_list = {"id": "S", "pendingAction": "CLARIFICATION", "pendingActionRevision": rev("2", "5")}
    from_event = {"sessionId": "S", "pendingAction": None, "revision": rev("2", "6")}
    assert merge(from_list, from_event) is from_event
    assert merge(from_event, from_list) is from_event


def test_unseen_older_epoch_delivered_after_client_state_was_rebuilt_is_rejected() -> None:
    floor = EpochFloor()
    rebuilt = {"pendingAction": None, "revision": rev("5", "1")}
    assert merge(None, rebuilt, floor) is rebuilt
    delayed = {"pendingAction": "CLARIFICATION", "revision": rev("4", "900")}
    # The delayed result is for a session the client has not seen since the rebuild.
    assert merge(None, delayed, floor) is None
    assert merge(None, delayed) is delayed
    same_epoch = {"pendingAction": "CLARIFICATION", "revision": rev("5", "0")}
    assert merge(None, same_epoch, floor) is same_epoch
    assert floor.epoch == "5"


def test_the_epoch_floor_rises_only_with_accepted_revisions() -> None:
    floor = EpochFloor()
    held = {"pendingAction": None, "revision": rev("7", "3")}
    assert merge(None, held, floor) is held
    assert merge(held, {"pendingAction": None, "revision": rev("9", "x")}, floor) is held
    assert floor.epoch == "7"
    assert merge(held, {"pendingAction": None, "revision": rev("0008", "0")}, floor) is not held
    assert floor.epoch == "8"
    assert not floor.admits(rev("7", "99"))
    assert floor.admits(rev("8", "0"))
