"""Builds the services once per process and wires their seams."""

from __future__ import annotations

from dataclasses import dataclass

from backend.services.context import Deps
from backend.services.operations import Operations
from backend.services.reads import Reads
from backend.services.summaries import Summaries


@dataclass
class Services:
    deps: Deps
    operations: Operations
    reads: Reads
    summaries: Summaries

    @classmethod
    def build(cls, deps: Deps) -> Services:
        return cls(deps=deps, operations=Operations(deps), reads=Reads(deps), summaries=Summaries(deps))
