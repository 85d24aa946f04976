"""The one seam through which a detached affirmative answer resumes its agent.

The clarification service calls `Resumer.resume(claim)` exactly once per detached answer, after the
claim transaction committed. What the claim carries (`backend.domain.lifecycle.Claim`, immutable):

- `claim_id`: the durable claim identity, stored as `delivery_claim_id` on every claimed row together
  with the delivery intent `response_delivery_pending=true`;
- `pending_id`, `session_id`, `task_id`, `turn_id`: the bundle and the current turn it was claimed in
  (the turn the resume prompt answers; revalidate it under the session lock before dispatch);
- `message_ids`: exactly the rows this claim moved from pending to answered (terminal siblings that
  were answered earlier are not in it and must never be restored);
- `answers`: per question id, the selected option ids and custom text, already validated;
- `rejected`: always False here (a detached rejection is persisted without resuming).

The outcome tells the service what happened and who owns the rows from now on:

- `accepted=True`: the resume reached its durable boundary (successor turn published). The resumer
  has retired the intent of exactly `message_ids` (`claims.settle_claim` with `claim_id`) in
  the same transaction, or its reservation recovery owns it. The service publishes the terminal rows
  and returns `ClarificationResponded(resumed=True)`.
- `accepted=True, queued=True`: no agent was connected; the resume prompt was written durably to the
  session's inbox together with the successor turn, and the intent retired in that transaction
  (`backend/services/inbox.py`). The service returns `ClarificationResponded(resumed=False,
  queued=True)`.
- `accepted=False, retryable=True`: dispatch is known NOT to have reached the agent and any
  reservation was rolled back. The service restores exactly the claim (only while its turn is
  current and the session live), refreshes summaries, publishes, and returns a retryable failure.
- `accepted=False, retryable=False`: dispatch may have reached the agent (attempt marker written,
  or accepted but publication failed). The rows stay terminal; the resumer has retired the intent
  or left it to its own reservation recovery; the service returns a non-retryable failure.

The resumer owns its acceptance deadline (`settings.dispatch_seconds`); the service runs it in a
task that a cancelled request cannot cancel. An exception out of `resume` is treated as
`accepted=False, retryable=True`, so a resumer must catch everything after its at-most-once boundary
(the attempt marker) and report `retryable=False` itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from backend.domain.lifecycle import Claim


@dataclass(frozen=True, slots=True)
class ResumeOutcome:
    accepted: bool
    retryable: bool
    message: str = ""
    # Accepted into the session's durable inbox (no agent was connected): delivered when it returns.
    queued: bool = False


class Resumer(Protocol):
    async def resume(self, claim: Claim) -> ResumeOutcome: ...


class NotWiredResumer:
    """Until executors exist, no detached agent can be resumed: say so and keep the answer retryable."""

    async def resume(self, _claim: Claim) -> ResumeOutcome:
        return ResumeOutcome(
            accepted=False,
            retryable=True,
            message="the agent is not connected and cannot be resumed yet; the question stays answerable",
        )
