"""The clarification bundle lifecycle as pure rules: input validation, bundle state, respond decision.

The bundle state machine (spec "State machine") is derived here from plain facts that the repository
reads through the one current-turn rule; the respond contract is one explicit decision per state
(`RESPOND_RULES`), so handlers never scatter state checks of their own.
"""

from __future__ import annotations

import datetime as dt
import enum
import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from backend.domain.clarification import flag, status_of
from backend.domain.errors import BrokenInvariant, InvalidInput
from backend.domain.names import plain_name
from backend.domain.permissions import PERMISSION_KEY, Decision, PermissionSpec
from backend.domain.states import (
    MESSAGE_KIND_CLARIFICATION,
    TERMINAL_SESSION_STATES,
    ClarificationStatus,
    PendingActionKind,
)

# Limits (kandev-notes "Shapes": 1-4 questions, 2-6 options, short titles); the text bounds are ours.
MAX_QUESTIONS = 4
MIN_OPTIONS = 2
MAX_OPTIONS = 6
MAX_TITLE = 12
MAX_PROMPT = 2_000
MAX_LABEL = 200
MAX_DESCRIPTION = 1_000
MAX_CONTEXT = 4_000
MAX_CUSTOM_TEXT = 4_000
MAX_ID = 64
_ID = re.compile(r"^[A-Za-z0-9_.:-]+$")

INTENT_KEY = "response_delivery_pending"
CLAIM_KEY = "delivery_claim_id"


class BundleState(enum.StrEnum):
    ACTIVE_LIVE = "active_live"
    ACTIVE_DETACHED = "active_detached"
    DELIVERY_CLAIMED = "delivery_claimed"
    TERMINAL = "terminal"
    SUPERSEDED_HISTORY = "superseded_history"


class ConflictReason(enum.StrEnum):
    SUPERSEDED = "superseded"
    TERMINAL = "terminal"
    DELIVERY_CLAIMED = "delivery_claimed"


# --- asking -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OptionSpec:
    id: str
    label: str
    description: str | None


@dataclass(frozen=True, slots=True)
class QuestionSpec:
    id: str
    title: str | None
    prompt: str
    options: tuple[OptionSpec, ...]
    multi_select: bool

    message_type = MESSAGE_KIND_CLARIFICATION

    @property
    def content(self) -> str:
        return self.prompt

    def row_metadata(self) -> dict[str, Any]:
        """What this question's row holds besides the bundle's common keys."""
        return {"question_id": self.id, "question": self.as_metadata()}

    def as_metadata(self) -> dict[str, Any]:
        return {
            "title": self.title,
            "prompt": self.prompt,
            "options": [{"id": o.id, "label": o.label, "description": o.description} for o in self.options],
            "multi_select": self.multi_select,
        }


def _bounded_text(field_name: str, value: str | None, limit: int, *, required: bool) -> str | None:
    if value is None:
        if required:
            raise InvalidInput(field_name, "is required")
        return None
    if required and not value.strip():
        raise InvalidInput(field_name, "must not be empty")
    if len(value) > limit:
        raise InvalidInput(field_name, f"must be at most {limit} characters")
    return value


def _explicit_id(field_name: str, value: str | None) -> str | None:
    if value is None:
        return None
    if not value or len(value) > MAX_ID or not _ID.match(value):
        raise InvalidInput(
            field_name, f"must be 1-{MAX_ID} characters of letters, digits, '_', '.', ':', '-'"
        )
    return value


def validate_questions(raw: Sequence[dict[str, Any]], context: str | None) -> tuple[QuestionSpec, ...]:
    """Normalized questions (default ids `qN`, `qN_optM`, 1-based) or InvalidInput naming the field."""
    if not raw:
        raise InvalidInput("questions", "at least one question is required")
    if len(raw) > MAX_QUESTIONS:
        raise InvalidInput("questions", f"at most {MAX_QUESTIONS} questions per request")
    _bounded_text("context", context, MAX_CONTEXT, required=False)
    out: list[QuestionSpec] = []
    seen_questions: set[str] = set()
    for qi, q in enumerate(raw):
        where = f"questions[{qi}]"
        qid = _explicit_id(f"{where}.id", q.get("id")) or f"q{qi + 1}"
        if qid in seen_questions:
            raise InvalidInput(f"{where}.id", f"duplicate question id {qid!r}")
        seen_questions.add(qid)
        title = _bounded_text(f"{where}.title", q.get("title"), MAX_TITLE, required=False)
        if title is not None:
            plain_name(f"{where}.title", title)
        prompt = _bounded_text(f"{where}.prompt", q.get("prompt"), MAX_PROMPT, required=True)
        options_raw = list(q.get("options") or [])
        if not MIN_OPTIONS <= len(options_raw) <= MAX_OPTIONS:
            raise InvalidInput(f"{where}.options", f"must hold {MIN_OPTIONS} to {MAX_OPTIONS} options")
        options: list[OptionSpec] = []
        seen_options: set[str] = set()
        for oi, o in enumerate(options_raw):
            owhere = f"{where}.options[{oi}]"
            oid = _explicit_id(f"{owhere}.id", o.get("id")) or f"{qid}_opt{oi + 1}"
            if oid in seen_options:
                raise InvalidInput(f"{owhere}.id", f"duplicate option id {oid!r}")
            seen_options.add(oid)
            label = _bounded_text(f"{owhere}.label", o.get("label"), MAX_LABEL, required=True) or ""
            plain_name(f"{owhere}.label", label)
            description = _bounded_text(
                f"{owhere}.description", o.get("description"), MAX_DESCRIPTION, required=False
            )
            options.append(OptionSpec(oid, label, description))
        out.append(QuestionSpec(qid, title, prompt or "", tuple(options), bool(q.get("multi_select"))))
    return tuple(out)


def bundle_signature(questions: Sequence[QuestionSpec], context: str | None) -> str:
    """Identity of "the same questions": asking them again while that bundle is active reuses it."""
    canonical = json.dumps(
        {"context": context, "questions": [dict(q.as_metadata(), id=q.id) for q in questions]},
        sort_keys=True,
        separators=(",", ":"),
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


# --- bundle state -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BundleRow:
    id: str
    session_id: str
    turn_id: str
    metadata: dict[str, Any]
    # When the row was written: its bundle's ask (None only where a row is built without it).
    created_at: dt.datetime | None = None

    @property
    def status(self) -> str:
        return status_of(self.metadata)

    @property
    def is_pending(self) -> bool:
        return self.status == ClarificationStatus.PENDING

    @property
    def claimed(self) -> bool:
        return flag(self.metadata.get(INTENT_KEY))

    @property
    def question_id(self) -> str:
        value = self.metadata.get("question_id")
        return value if isinstance(value, str) else ""


@dataclass(frozen=True, slots=True)
class Bundle:
    """Every row of one pending_id plus the facts the state derivation needs, read in one snapshot."""

    pending_id: str
    task_id: str
    session_id: str
    turn_id: str | None
    session_state: str
    current_turn_id: str | None
    rows: tuple[BundleRow, ...]
    # Whether the process recorded as this bundle's waiter is alive (see services/waiters.py).
    waiter_alive: bool = False
    state: BundleState = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "state", derive_state(self))

    @classmethod
    def of_rows(
        cls,
        pending_id: str,
        task_id: str,
        rows: Sequence[BundleRow],
        session_state: str,
        current_turn: str | None,
    ) -> Bundle:
        """The bundle one snapshot's facts make: its rows (at least one), its task, its session's state
        and current turn; its own turn is the rows' (`bundle_turn`)."""
        return cls(
            pending_id=pending_id,
            task_id=task_id,
            session_id=rows[0].session_id,
            turn_id=bundle_turn(rows),
            session_state=session_state,
            current_turn_id=current_turn,
            rows=tuple(rows),
        )

    @property
    def pending_rows(self) -> tuple[BundleRow, ...]:
        """Pending rows of the bundle's turn. A row with a legacy empty turn id does not mask the
        bundle's identity, but like the SQL rule (a row is active only in the current turn) it is
        history: counting it would keep a bundle active that no claim can ever finish."""
        return tuple(
            r for r in self.rows if r.is_pending and (self.turn_id is None or r.turn_id == self.turn_id)
        )

    @property
    def waiter_id(self) -> str | None:
        return self._first_pending("waiter_id")

    @property
    def waiter_instance(self) -> str | None:
        return self._first_pending("waiter_instance")

    def _first_pending(self, key: str) -> str | None:
        """The first non-empty text under `key` among the pending rows' metadata."""
        for r in self.pending_rows:
            value = r.metadata.get(key)
            if isinstance(value, str) and value:
                return value
        return None

    @property
    def kind(self) -> PendingActionKind:
        """A permission request's one row holds its tool request; every other bundle is questions."""
        if self.rows and PERMISSION_KEY in self.rows[0].metadata:
            return PendingActionKind.PERMISSION
        return PendingActionKind.CLARIFICATION

    @property
    def asked_at(self) -> dt.datetime:
        """When the agent asked: the bundle's rows are written together, by its ask."""
        times = [r.created_at for r in self.rows if r.created_at is not None]
        if not times:
            raise BrokenInvariant(f"bundle {self.pending_id} was read without its rows' times")
        return min(times)

    @property
    def context(self) -> str | None:
        for r in self.rows:
            value = r.metadata.get("context")
            if isinstance(value, str):
                return value
        return None


def bundle_turn(rows: Sequence[BundleRow]) -> str | None:
    """The one turn identity of a bundle: empty legacy ids do not mask a consistent non-empty one;
    conflicting non-empty ids (or several sessions) make the bundle unusable, i.e. None."""
    sessions = {r.session_id for r in rows}
    turns = {r.turn_id for r in rows if r.turn_id}
    if len(sessions) != 1 or len(turns) != 1:
        return None
    return next(iter(turns))


def derive_state(bundle: Bundle) -> BundleState:
    if any(r.claimed for r in bundle.rows):
        return BundleState.DELIVERY_CLAIMED
    pending = bundle.pending_rows
    current = bundle.turn_id is not None and bundle.turn_id == bundle.current_turn_id
    if pending and not current:
        return BundleState.SUPERSEDED_HISTORY
    if not pending or bundle.session_state in TERMINAL_SESSION_STATES:
        return BundleState.TERMINAL
    attached = any(not flag(r.metadata.get("agent_disconnected")) for r in pending)
    if attached and bundle.waiter_alive:
        return BundleState.ACTIVE_LIVE
    return BundleState.ACTIVE_DETACHED


# --- respond ------------------------------------------------------------------------------------


class RespondAction(enum.StrEnum):
    DELIVER_LIVE = "deliver_live"  # claim with intent, hand to the waiter, wait for its confirmation
    RESUME_DETACHED = "resume_detached"  # claim with intent, hand to the resume seam
    PERSIST_REJECTION = "persist_rejection"  # terminal write, no intent, no resume
    CONFLICT = "conflict"  # no write, no event, no resume


@dataclass(frozen=True, slots=True)
class RespondDecision:
    action: RespondAction
    conflict: ConflictReason | None = None


_CONFLICT = {
    BundleState.DELIVERY_CLAIMED: RespondDecision(RespondAction.CONFLICT, ConflictReason.DELIVERY_CLAIMED),
    BundleState.TERMINAL: RespondDecision(RespondAction.CONFLICT, ConflictReason.TERMINAL),
    BundleState.SUPERSEDED_HISTORY: RespondDecision(RespondAction.CONFLICT, ConflictReason.SUPERSEDED),
}

# (state, rejected) -> decision: the respond contract of the spec, one line per case.
RESPOND_RULES: dict[tuple[BundleState, bool], RespondDecision] = {
    (BundleState.ACTIVE_LIVE, False): RespondDecision(RespondAction.DELIVER_LIVE),
    (BundleState.ACTIVE_LIVE, True): RespondDecision(RespondAction.DELIVER_LIVE),
    (BundleState.ACTIVE_DETACHED, False): RespondDecision(RespondAction.RESUME_DETACHED),
    (BundleState.ACTIVE_DETACHED, True): RespondDecision(RespondAction.PERSIST_REJECTION),
    **{(state, rejected): d for state, d in _CONFLICT.items() for rejected in (False, True)},
}


def decide_response(state: BundleState, *, rejected: bool) -> RespondDecision:
    return RESPOND_RULES[(state, rejected)]


@dataclass(frozen=True, slots=True)
class Answer:
    question_id: str
    selected_option_ids: tuple[str, ...]
    custom_text: str | None

    def as_response(self) -> dict[str, Any]:
        return {"selected_option_ids": list(self.selected_option_ids), "custom_text": self.custom_text}


def validate_answers(bundle: Bundle, answers: Sequence[Answer], *, rejected: bool) -> dict[str, Answer]:
    """Answers keyed by question id, checked against the bundle's pending questions.

    Every pending question needs an answer (one option, several for multi-select, and/or custom
    text): a partial answer would leave the agent waiting on a question nobody can answer later.
    """
    if rejected:
        if answers:
            raise InvalidInput("answers", "must be empty when rejected is true")
        return {}
    questions = {r.question_id: r for r in bundle.rows}
    pending = {r.question_id for r in bundle.pending_rows}
    out: dict[str, Answer] = {}
    for i, a in enumerate(answers):
        where = f"answers[{i}]"
        row = questions.get(a.question_id)
        if row is None:
            raise InvalidInput(f"{where}.questionId", f"unknown question {a.question_id!r}")
        if a.question_id not in pending:
            raise InvalidInput(f"{where}.questionId", f"question {a.question_id!r} is already {row.status}")
        if a.question_id in out:
            raise InvalidInput(f"{where}.questionId", f"question {a.question_id!r} is answered twice")
        question = row.metadata.get("question") or {}
        option_ids = {o.get("id") for o in question.get("options") or [] if isinstance(o, dict)}
        for oid in a.selected_option_ids:
            if oid not in option_ids:
                raise InvalidInput(f"{where}.selectedOptionIds", f"unknown option {oid!r}")
        if len(set(a.selected_option_ids)) != len(a.selected_option_ids):
            raise InvalidInput(f"{where}.selectedOptionIds", "an option is selected twice")
        if len(a.selected_option_ids) > 1 and not flag(question.get("multi_select")):
            raise InvalidInput(f"{where}.selectedOptionIds", "this question takes a single option")
        text = _bounded_text(f"{where}.customText", a.custom_text, MAX_CUSTOM_TEXT, required=False)
        if not a.selected_option_ids and not (text or "").strip():
            raise InvalidInput(where, "select an option or give custom text")
        out[a.question_id] = a
    missing = sorted(pending - set(out))
    if missing:
        raise InvalidInput("answers", f"missing an answer for question {', '.join(missing)}")
    return out


@dataclass(frozen=True, slots=True)
class Claim:
    """An immutable snapshot of one durable response claim; finalize and restore act on exactly it."""

    claim_id: str
    pending_id: str
    session_id: str
    task_id: str
    turn_id: str
    message_ids: tuple[str, ...]
    # The person's answers, one per question; or a permission request's one decision.
    answers: tuple[Answer | Decision, ...]
    rejected: bool

    @property
    def kind(self) -> PendingActionKind:
        """A permission request's claim carries its one decision, allowed or denied; a question's
        carries answers (none when skipped)."""
        if any(isinstance(a, Decision) for a in self.answers):
            return PendingActionKind.PERMISSION
        return PendingActionKind.CLARIFICATION


# --- outcomes -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Asked:
    bundle: Bundle


@dataclass(frozen=True, slots=True)
class Answered:
    pending_id: str
    answers: tuple[Answer | Decision, ...]

    @property
    def question_answers(self) -> tuple[Answer, ...]:
        """A clarification's answers (a permission's decision is not one)."""
        return tuple(a for a in self.answers if isinstance(a, Answer))


@dataclass(frozen=True, slots=True)
class Rejected:
    pending_id: str
    # A denied permission's decision (its reason for the agent); a skipped question has none.
    answers: tuple[Answer | Decision, ...] = ()


# What an ask writes: one row per spec (a question, or a permission request's one tool request).
Spec = QuestionSpec | PermissionSpec


@dataclass(frozen=True, slots=True)
class Detached:
    pending_id: str


@dataclass(frozen=True, slots=True)
class Closed:
    """The bundle takes no answer for the agent any more: cancelled or expired with its session (that
    status), or superseded by a newer turn (status pending: it stays in history, inert)."""

    pending_id: str
    status: str


@dataclass(frozen=True, slots=True)
class Decided:
    """Decided as it was asked, with nobody asked (a permission a remembered rule allows)."""

    pending_id: str
    answers: tuple[Answer | Decision, ...]


WaitOutcome = Asked | Answered | Rejected | Detached | Closed | Decided


@dataclass(frozen=True, slots=True)
class Responded:
    bundle: Bundle
    resumed: bool
    # The answer waits in the session's durable inbox for an agent that is not connected.
    queued: bool = False


@dataclass(frozen=True, slots=True)
class Conflict:
    pending_id: str
    reason: ConflictReason
    bundle: Bundle | None


@dataclass(frozen=True, slots=True)
class DeliveryFailed:
    pending_id: str
    retryable: bool
    message: str


RespondOutcome = Responded | Conflict | DeliveryFailed
