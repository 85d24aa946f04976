"""What every service needs: the database, the event bus and the settings."""

from __future__ import annotations

from dataclasses import dataclass, field

from backend.bus import EventBus
from backend.config import Settings
from backend.db.engine import Database
from backend.domain.ids import new_id


@dataclass(frozen=True)
class Deps:
    db: Database
    bus: EventBus
    settings: Settings
    # Identifies this server process in durable rows (runner leases, waiters) shared with others.
    instance_id: str = field(default_factory=new_id)
