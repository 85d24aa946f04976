"""Users, their bearer tokens (sha256 at rest) and task grants."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from sqlalchemy import delete, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from backend.db.engine import utcnow
from backend.db.tables import api_tokens, task_grants, task_sessions, users
from backend.domain.errors import InvalidInput, NotFound
from backend.domain.ids import new_id
from backend.repository import runner_sessions

RUNNER = "runner"  # the role of a runner token's identity, and the token kind that makes it


def token_hash(token: str) -> str:
    # Tokens are 32 random bytes: a fast hash is enough, there is nothing to brute-force.
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class UserRecord:
    id: str
    name: str
    role: str


@dataclass(frozen=True, slots=True)
class Identity:
    """What a live token resolves to: the user, the agent's session and every task it may read. A
    runner token's identity has the role `runner`, its issuer as user, and the tasks and sessions it
    made (`session_ids`, where it acts as the agent)."""

    user_id: str
    role: str
    session_id: str | None
    task_ids: frozenset[str]
    token_id: str | None = None
    session_ids: frozenset[str] = frozenset()


async def create_user(conn: AsyncConnection, name: str, role: str) -> UserRecord:
    taken = (await conn.execute(select(users.c.id).where(users.c.name == name))).first()
    if taken is not None:
        raise InvalidInput("name", "a user with this name exists")
    record = UserRecord(new_id(), name, role)
    await conn.execute(users.insert().values(id=record.id, name=name, role=role, created_at=utcnow()))
    return record


async def get_user(conn: AsyncConnection, user_id: str) -> UserRecord:
    row = (await conn.execute(select(users).where(users.c.id == user_id))).first()
    if row is None:
        raise NotFound("user", user_id)
    return UserRecord(row.id, row.name, row.role)


async def list_users(conn: AsyncConnection) -> list[UserRecord]:
    result = await conn.execute(select(users).order_by(users.c.created_at, users.c.id))
    return [UserRecord(r.id, r.name, r.role) for r in result]


async def insert_token(
    conn: AsyncConnection,
    user_id: str,
    token: str,
    session_id: str | None,
    *,
    kind: str | None = None,
    label: str | None = None,
) -> str:
    token_id = new_id()
    await conn.execute(
        api_tokens.insert().values(
            id=token_id,
            user_id=user_id,
            token_hash=token_hash(token),
            session_id=session_id,
            created_at=utcnow(),
            kind=kind,
            label=label,
        )
    )
    return token_id


async def revoke_token(conn: AsyncConnection, token_id: str) -> bool:
    """Whether a live token was revoked (False: unknown or already revoked)."""
    result = await conn.execute(
        update(api_tokens)
        .where(api_tokens.c.id == token_id, api_tokens.c.revoked_at.is_(None))
        .values(revoked_at=utcnow())
    )
    return bool(result.rowcount)


async def grant_task(conn: AsyncConnection, user_id: str, task_id: str) -> None:
    dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
    await conn.execute(
        dialect.insert(task_grants).values(user_id=user_id, task_id=task_id).on_conflict_do_nothing()
    )


async def revoke_grant(conn: AsyncConnection, user_id: str, task_id: str) -> bool:
    result = await conn.execute(
        delete(task_grants).where(task_grants.c.user_id == user_id, task_grants.c.task_id == task_id)
    )
    return bool(result.rowcount)


async def identity_for_token(conn: AsyncConnection, token: str) -> Identity | None:
    """The live token's identity with its readable tasks, or None (unknown or revoked): one statement
    for the token, one for the grants (a runner token's: two, for the tasks and sessions it made)."""
    row = (
        await conn.execute(
            select(
                users.c.id,
                users.c.role,
                api_tokens.c.id.label("token_id"),
                api_tokens.c.kind,
                api_tokens.c.session_id,
                task_sessions.c.task_id,
            )
            .select_from(
                api_tokens.join(users, users.c.id == api_tokens.c.user_id).outerjoin(
                    task_sessions, task_sessions.c.id == api_tokens.c.session_id
                )
            )
            .where(api_tokens.c.token_hash == token_hash(token), api_tokens.c.revoked_at.is_(None))
        )
    ).first()
    if row is None:
        return None
    if row.kind == RUNNER:
        tasks, sessions = await runner_sessions.scope(conn, row.token_id)
        return Identity(row.id, RUNNER, None, tasks, token_id=row.token_id, session_ids=sessions)
    task_ids: set[str] = set()
    if row.role == "user":
        grants = await conn.execute(select(task_grants.c.task_id).where(task_grants.c.user_id == row.id))
        task_ids = {g.task_id for g in grants}
    elif row.role == "agent" and row.task_id is not None:
        task_ids = {row.task_id}
    return Identity(row.id, row.role, row.session_id, frozenset(task_ids), token_id=row.token_id)
