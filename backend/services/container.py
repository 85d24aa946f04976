"""Builds the services once per process and wires their seams."""

from __future__ import annotations

from dataclasses import dataclass

from backend.services.access import Access
from backend.services.clarifications import Clarifications
from backend.services.context import Deps
from backend.services.live import LiveHub
from backend.services.operations import Operations
from backend.services.reads import Reads
from backend.services.recovery import Recovery
from backend.services.summaries import Summaries
from backend.services.waiters import WaiterHub


@dataclass
class Services:
    deps: Deps
    operations: Operations
    reads: Reads
    summaries: Summaries
    access: Access
    live: LiveHub
    waiters: WaiterHub
    clarifications: Clarifications
    recovery: Recovery

    @classmethod
    def build(cls, deps: Deps) -> Services:
        summaries = Summaries(deps)
        waiters = WaiterHub(deps)
        return cls(
            deps=deps,
            operations=Operations(deps),
            reads=Reads(deps),
            summaries=summaries,
            access=Access(deps),
            live=LiveHub(deps, summaries),
            waiters=waiters,
            clarifications=Clarifications(deps, waiters, refresh_summaries=summaries.refresh),
            recovery=Recovery(deps, waiters),
        )
