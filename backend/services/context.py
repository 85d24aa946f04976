"""What every service needs: the database, the event bus and the settings."""

from __future__ import annotations

from dataclasses import dataclass

from backend.config import Settings
from backend.db.engine import Database
from backend.events import EventBus


@dataclass(frozen=True)
class Deps:
    db: Database
    bus: EventBus
    settings: Settings
