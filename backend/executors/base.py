"""The executor interface and what a dispatch can come back as."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol


class DispatchOutcome(enum.Enum):
    """ACCEPTED: the agent took the prompt. REJECTED: known NOT to have reached the agent (no runner,
    an explicit refusal, a failure before sending): safe to roll back and retry. AMBIGUOUS: sent but
    not acknowledged in time: the prompt may be running, so it must never be sent again."""

    ACCEPTED = "accepted"
    REJECTED = "rejected"
    AMBIGUOUS = "ambiguous"


@dataclass(frozen=True, slots=True)
class PromptRequest:
    session_id: str
    task_id: str
    turn_id: str
    generation: str
    prompt: str
    pending_id: str | None = None


@dataclass(frozen=True, slots=True)
class DispatchResult:
    outcome: DispatchOutcome
    detail: str = ""


class Executor(Protocol):
    name: str

    async def dispatch(self, request: PromptRequest, *, deadline_seconds: float) -> DispatchResult:
        """Deliver one prompt; never raises for transport failures, it classifies them instead."""
        ...
