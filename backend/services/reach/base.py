"""What every part of the reach service reads: its dependencies and their settings."""

from __future__ import annotations

from typing import Any

from backend.services.context import Deps


class Part:
    """One concern of `Reach`; the fields are declared there (a dataclass), shared by every part."""

    deps: Deps

    @property
    def settings(self) -> Any:
        return self.deps.settings
