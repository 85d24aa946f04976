"""The meta table: the database-backed, monotonic revision epoch."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql.selectable import ScalarSelect

from backend.db.tables import meta
from backend.domain.errors import CorruptData

EPOCH_KEY = "pending_action_epoch"


def parse_epoch(value: Any) -> int:
    if not isinstance(value, str) or not value.isdigit() or not value.isascii():
        raise CorruptData(f"stored revision epoch {value!r} is not a decimal number")
    return int(value)


def epoch_value() -> ScalarSelect[Any]:
    """Read in the same statement as the sequence, so the pair is one consistent snapshot."""
    return select(meta.c.value).where(meta.c.key == EPOCH_KEY).scalar_subquery()


async def advance_epoch(conn: AsyncConnection) -> int:
    """Allocate the next epoch (once per server start). A corrupt stored value is an error, not a reset.

    Safe when several processes start at once on a fresh database (`turnwise serve --workers N`):
    only one creates the row; the others wait for its commit and advance from it."""
    locked = select(meta.c.value).where(meta.c.key == EPOCH_KEY).with_for_update()
    current = (await conn.execute(locked)).scalar_one_or_none()
    if current is None:
        dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
        created = await conn.execute(
            dialect.insert(meta)
            .values(key=EPOCH_KEY, value="1")
            .on_conflict_do_nothing(index_elements=[meta.c.key])
        )
        if created.rowcount == 1:
            return 1
        # Another process created it meanwhile (its insert held ours until it committed).
        current = (await conn.execute(locked)).scalar_one()
    nxt = parse_epoch(current) + 1
    await conn.execute(update(meta).where(meta.c.key == EPOCH_KEY).values(value=str(nxt)))
    return nxt


async def value_or_set(conn: AsyncConnection, key: str, candidate: str) -> str:
    """The stored value of `key`; `candidate` stored first when there is none. Several processes
    starting at once on a fresh database agree: only one insert takes, all read it back."""
    dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
    await conn.execute(dialect.insert(meta).values(key=key, value=candidate).on_conflict_do_nothing())
    stored = (await conn.execute(select(meta.c.value).where(meta.c.key == key))).scalar_one()
    return str(stored)


async def value_of(conn: AsyncConnection, key: str) -> str | None:
    """The stored value of `key`, or None."""
    stored = (await conn.execute(select(meta.c.value).where(meta.c.key == key))).scalar_one_or_none()
    return None if stored is None else str(stored)
