"""The one revision comparison: which pending-action projection a client keeps."""

# A revision is ``{"epoch": "<decimal>", "sequence": "<decimal>"}``. The epoch is a database-backed
# backend generation and the sequence orders projections within it; both are decimal strings that
# may exceed any fixed-width integer, so they are compared as digit strings (length, then text)
# rather than converted.
#
# Unparseable revisions are *rejected*, never raised: ``parse`` returns None, ``is_newer_or_equal``
# answers False for a garbage candidate and ``merge`` keeps what it holds. A payload the client
# cannot order must not replace state it can (projections keep the last known value), and a bad
# payload must not crash the event loop that applies everything else.

try:
    from typing import Any
except ImportError:  # MicroPython: annotations are never evaluated there
    pass

_DIGITS = "0123456789"


def _decimal(value: object) -> str | None:
    if not isinstance(value, str) or not value:
        return None
    for ch in value:
        if ch not in _DIGITS:
            return None
    return value.lstrip("0") or "0"


def _compare_decimal(a: str, b: str) -> int:
    if len(a) != len(b):
        return -1 if len(a) < len(b) else 1
    if a == b:
        return 0
    return -1 if a < b else 1


def parse(revision: object) -> tuple[str, str] | None:
    """Return ``(epoch, sequence)`` as canonical digit strings, or None when unparseable."""
    if not isinstance(revision, dict):
        return None
    epoch = _decimal(revision.get("epoch"))
    sequence = _decimal(revision.get("sequence"))
    if epoch is None or sequence is None:
        return None
    return (epoch, sequence)


def compare(a: object, b: object) -> int:
    """Return -1, 0 or 1 ordering two revisions; ``ValueError`` when either is unparseable."""
    left = parse(a)
    right = parse(b)
    if left is None or right is None:
        raise ValueError("unparseable revision")
    by_epoch = _compare_decimal(left[0], right[0])
    if by_epoch != 0:
        return by_epoch
    return _compare_decimal(left[1], right[1])


def is_newer_or_equal(candidate: object, held: object) -> bool:
    """Whether ``candidate`` may replace ``held`` (None or unparseable ``held`` means nothing held)."""
    if parse(candidate) is None:
        return False
    if parse(held) is None:
        return True
    return compare(candidate, held) >= 0


class EpochFloor:
    """The highest epoch this client has accepted from any session.

    Epochs are allocated by the database, once per backend generation, and shared by every server
    process, so an epoch below one already accepted can only come from before a restart. After a
    client rebuilds its state from post-restart reads, a delayed pre-restart result for a session it
    has not seen yet has nothing per-session to lose against; the floor rejects it instead.
    """

    def __init__(self) -> None:
        self.epoch: str | None = None

    def admits(self, candidate: object) -> bool:
        parsed = parse(candidate)
        if parsed is None:
            return False
        return self.epoch is None or _compare_decimal(parsed[0], self.epoch) >= 0

    def observe(self, revision: object) -> None:
        parsed = parse(revision)
        if parsed is not None and (self.epoch is None or _compare_decimal(parsed[0], self.epoch) > 0):
            self.epoch = parsed[0]


def merge(held: Any, candidate: Any, floor: EpochFloor | None = None) -> Any:
    """Return whichever of two revisioned values the client keeps: ``candidate`` only if not older.

    Both are dicts carrying the revision under ``"revision"`` (a ``SessionProjection``) or
    ``"pendingActionRevision"`` (a ``TaskSession``); ``held`` may be None. With a ``floor`` the
    candidate must also not predate the newest epoch seen anywhere, and an accepted one raises it.
    """
    if candidate is None:
        return held
    candidate_revision = revision_of(candidate)
    if floor is not None and not floor.admits(candidate_revision):
        return held
    if held is not None and not is_newer_or_equal(candidate_revision, revision_of(held)):
        return held
    if parse(candidate_revision) is None:
        return held
    if floor is not None:
        floor.observe(candidate_revision)
    return candidate


def revision_of(value: Any) -> Any:
    """The revision inside a projection-bearing dict, whichever of the API's two keys it uses."""
    if not isinstance(value, dict):
        return None
    if "revision" in value:
        return value["revision"]
    return value.get("pendingActionRevision")
