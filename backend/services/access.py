"""Access management (users, tokens, grants) and the lookups that access rules need."""

from __future__ import annotations

import logging
import secrets
from dataclasses import dataclass

from backend.domain.errors import InvalidInput
from backend.repository import access, tasks, turns
from backend.repository.access import Identity, UserRecord
from backend.services.context import Deps

log = logging.getLogger("turnwise.access")

ROLES = ("user", "support", "agent", "admin")
MAX_NAME = 200


@dataclass(frozen=True)
class IssuedToken:
    id: str
    user_id: str
    token: str  # the plaintext, returned once and never stored


@dataclass
class Access:
    deps: Deps

    async def identity(self, token: str) -> Identity | None:
        async with self.deps.db.read() as conn:
            return await access.identity_for_token(conn, token)

    async def create_user(self, name: str, role: str) -> UserRecord:
        name = name.strip()
        if not name or len(name) > MAX_NAME:
            raise InvalidInput("name", f"must be 1-{MAX_NAME} characters")
        if role not in ROLES:
            raise InvalidInput("role", f"must be one of {', '.join(ROLES)}")
        async with self.deps.db.write() as conn:
            user = await access.create_user(conn, name, role)
        log.info("user created", extra={"event": "access.user_created", "user_id": user.id, "role": role})
        return user

    async def users(self) -> list[UserRecord]:
        async with self.deps.db.read() as conn:
            return await access.list_users(conn)

    async def issue_token(self, user_id: str, session_id: str | None) -> IssuedToken:
        async with self.deps.db.write() as conn:
            user = await access.get_user(conn, user_id)
            if user.role == "agent":
                if session_id is None:
                    raise InvalidInput("sessionId", "an agent token is scoped to one session")
                await tasks.get_session(conn, session_id)
            elif session_id is not None:
                raise InvalidInput("sessionId", "only agent tokens are scoped to a session")
            token = secrets.token_urlsafe(32)
            token_id = await access.insert_token(conn, user_id, token, session_id)
        log.info(
            "token issued", extra={"event": "access.token_issued", "token_id": token_id, "user_id": user_id}
        )
        return IssuedToken(token_id, user_id, token)

    async def revoke_token(self, token_id: str) -> bool:
        async with self.deps.db.write() as conn:
            revoked = await access.revoke_token(conn, token_id)
        log.info(
            "token revoked", extra={"event": "access.token_revoked", "token_id": token_id, "revoked": revoked}
        )
        return revoked

    async def grant_task(self, user_id: str, task_id: str) -> None:
        async with self.deps.db.write() as conn:
            user = await access.get_user(conn, user_id)
            if user.role != "user":
                raise InvalidInput("userId", "tasks are granted to users with the user role")
            await tasks.get_task(conn, task_id)
            await access.grant_task(conn, user_id, task_id)
        log.info("task granted", extra={"event": "access.granted", "user_id": user_id, "task_id": task_id})

    async def revoke_task(self, user_id: str, task_id: str) -> bool:
        async with self.deps.db.write() as conn:
            return await access.revoke_grant(conn, user_id, task_id)

    # --- lookups for the access rules: which task and session an id belongs to ----------------

    async def session_owner(self, session_id: str) -> str:
        """The task of a session (NotFound when absent)."""
        async with self.deps.db.read() as conn:
            return (await tasks.get_session(conn, session_id)).task_id

    async def turn_owner(self, turn_id: str) -> tuple[str, str]:
        """(task, session) of a turn."""
        async with self.deps.db.read() as conn:
            turn = await turns.get_turn(conn, turn_id)
            return (await tasks.get_session(conn, turn.session_id)).task_id, turn.session_id
