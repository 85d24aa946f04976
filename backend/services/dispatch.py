"""The records of one answer's way to its agent: where a reservation stands, who sent the answer,
and the dispatch the orchestrator carries from admission to publication."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from backend.domain.lifecycle import Claim


class Outcome(StrEnum):
    """Where a reservation of this process stands."""

    OPEN = "open"  # reserved or dispatching: ready events of its session wait
    REFUSED = "refused"  # admission found the clarification's turn superseded: nothing reserved
    ROLLED_BACK = "rolled_back"
    UNRESOLVED = "unresolved"  # the rollback failed: the session stays quarantined until restart
    AMBIGUOUS = "ambiguous"  # may have reached the agent: kept, never sent again
    PUBLISHED = "published"  # accepted (its start event published, or queued in the outbox)


@dataclass
class Live:
    """A reservation of this process that has not resolved yet; ready events of its session wait."""

    turn_id: str
    resolved: asyncio.Event = field(default_factory=asyncio.Event)
    outcome: Outcome = Outcome.OPEN


@dataclass
class Admission:
    """A session's in-process admission lock and how many dispatches hold or wait for it."""

    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0


class Origin(StrEnum):
    """Who sends an answer to its agent as a new turn."""

    DETACHED = "detached"  # a respond to a detached agent: the dispatch settles its claim
    WATCHDOG = "watchdog"  # the primary-answer fallback: the waiter already settled the claim


@dataclass(frozen=True, slots=True)
class Dispatch:
    """One answer on its way to its agent, as the successor turn `live` reserved for it."""

    claim: Claim
    origin: Origin
    live: Live

    @property
    def session_id(self) -> str:
        return self.claim.session_id

    @property
    def turn_id(self) -> str:
        return self.live.turn_id

    @property
    def claim_id(self) -> str | None:
        """The claim this dispatch settles once its turn is published (None: already settled)."""
        return self.claim.claim_id if self.origin == Origin.DETACHED else None

    @property
    def ids(self) -> dict[str, Any]:
        """Its ids, as every log line of the way carries them."""
        c = self.claim
        return {
            "turn_id": self.turn_id,
            "session_id": c.session_id,
            "pending_id": c.pending_id,
            "claim_id": self.claim_id,
        }


@dataclass(frozen=True, slots=True)
class TurnSnapshot:
    """Turn authority observed before a pause: a specific turn, or explicitly none."""

    session_id: str
    turn_id: str | None


class Busy(Exception):
    """Another process holds an unresolved reservation in this session."""


class Stale(Exception):
    """The clarification's turn is no longer the current turn of a live session."""
