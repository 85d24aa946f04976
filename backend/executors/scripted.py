"""Scripted executor for failure-mode tests: answers from a script, logs every dispatch it receives.

Selected with TURNWISE_EXECUTOR=scripted. TURNWISE_SCRIPTED_OUTCOMES is a comma-separated list of
outcomes used in order (accepted | rejected | ambiguous | hang), the last one repeating; the log
(TURNWISE_SCRIPTED_LOG, one JSON line per dispatch, fsynced) is the executor's own record, which
crash tests read to prove that no prompt was dispatched twice.
"""

from __future__ import annotations

import asyncio
import json
import os
from dataclasses import asdict
from pathlib import Path

from backend.executors.base import DispatchOutcome, DispatchResult, PromptRequest


class ScriptedExecutor:
    name = "scripted"

    def __init__(self, outcomes: list[str] | None = None, log_path: str | None = None) -> None:
        self.outcomes = list(outcomes or ["accepted"])
        self.log_path = Path(log_path) if log_path else None
        self.received: list[PromptRequest] = []

    def _next(self) -> str:
        return self.outcomes.pop(0) if len(self.outcomes) > 1 else self.outcomes[0]

    def _record(self, request: PromptRequest, outcome: str) -> None:
        self.received.append(request)
        if self.log_path is None:
            return
        with self.log_path.open("a") as fh:
            fh.write(json.dumps({**asdict(request), "outcome": outcome}) + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    async def dispatch(self, request: PromptRequest, *, deadline_seconds: float) -> DispatchResult:
        outcome = self._next()
        self._record(request, outcome)
        if outcome == "hang":
            await asyncio.sleep(deadline_seconds)
            return DispatchResult(DispatchOutcome.AMBIGUOUS, "no acknowledgement before the deadline")
        return DispatchResult(DispatchOutcome(outcome), "scripted")
