"""Access management (users, tokens, grants) and the lookups that access rules need."""

from __future__ import annotations

import asyncio
import logging
import secrets
from dataclasses import dataclass, field

from backend.background import stop_tasks
from backend.bus import BUS_GAP
from backend.domain.errors import Forbidden, InvalidInput, NotFound
from backend.domain.names import plain_name
from backend.repository import access, tasks, turns
from backend.repository.access import RUNNER, Identity, UserRecord
from backend.services.context import Deps
from backend.services.token_cache import ACCESS_CHANNEL, TokenCache

log = logging.getLogger("turnwise.access")

ROLES = ("user", "support", "agent", "admin")
MAX_NAME = 200
# Who issues runner tokens: a person who may answer what their agents ask (support staff write
# nothing; agents and runners are not people).
RUNNER_ISSUERS = ("user", "admin")


@dataclass(frozen=True)
class IssuedToken:
    id: str
    user_id: str
    token: str  # the plaintext, returned once and never stored


@dataclass
class Access:
    deps: Deps
    tokens: TokenCache = field(default_factory=TokenCache)
    _listener: asyncio.Task[None] | None = None

    async def identity(self, token: str) -> Identity | None:
        key = access.token_hash(token)
        cached = self.tokens.get(key)
        if cached is not None:
            return cached
        generation = self.tokens.generation
        async with self.deps.db.read() as conn:
            identity = await access.identity_for_token(conn, token)
        if identity is not None:
            self.tokens.put(key, identity, generation)
        return identity

    # --- the token cache across processes -----------------------------------------------------

    async def start(self) -> None:
        """Follow revocations and grant changes of every process (the bus is connected)."""
        # After a bus gap (its marker is a message too) the cache is cleared: invalidations
        # published meanwhile may have been lost.
        self._listener = await self.deps.bus.follow(
            ACCESS_CHANNEL, lambda _event: self.tokens.clear(), after_gap={"kind": BUS_GAP}
        )
        # Whatever changed before the subscription is not in the cache after this.
        self.tokens.clear()

    async def stop(self) -> None:
        await stop_tasks([self._listener], log, "access listener")
        self._listener = None

    async def _access_changed(self, what: str) -> None:
        """After a committed revocation or grant change: no process answers from older identities."""
        self.tokens.clear()
        try:
            await self.deps.bus.publish(ACCESS_CHANNEL, {"kind": what})
        except Exception:
            # Other processes stop trusting their cached identities within the cache's age bound.
            log.exception("access change not published", extra={"event": "access.publish_failed"})

    async def create_user(self, name: str, role: str) -> UserRecord:
        name = plain_name("name", name).strip()
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

    async def issue_runner_token(self, user_id: str, label: str) -> IssuedToken:
        """A token for the person's agent runner (Claude Code's or Codex's hooks): it makes its own
        tasks and sessions, granted to the person, and acts as the agent only in them."""
        label = plain_name("label", label).strip()
        if not label or len(label) > MAX_NAME:
            raise InvalidInput("label", f"must be 1-{MAX_NAME} characters")
        async with self.deps.db.write() as conn:
            try:
                user = await access.get_user(conn, user_id)
            except NotFound:
                raise Forbidden("runner tokens are issued by a person with a token of their own") from None
            if user.role not in RUNNER_ISSUERS:
                raise Forbidden(f"the {user.role} role cannot issue runner tokens")
            token = secrets.token_urlsafe(32)
            token_id = await access.insert_token(conn, user_id, token, None, kind=RUNNER, label=label)
        log.info(
            "runner token issued",
            extra={"event": "access.runner_token_issued", "token_id": token_id, "user_id": user_id},
        )
        return IssuedToken(token_id, user_id, token)

    async def runner_scope_changed(self) -> None:
        """A runner token made a task or a session: identities read before no longer hold all of them."""
        await self._access_changed("runner_scope")

    async def revoke_token(self, token_id: str) -> bool:
        async with self.deps.db.write() as conn:
            revoked = await access.revoke_token(conn, token_id)
        if revoked:
            await self._access_changed("token_revoked")
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
        await self._access_changed("task_granted")
        log.info("task granted", extra={"event": "access.granted", "user_id": user_id, "task_id": task_id})

    async def revoke_task(self, user_id: str, task_id: str) -> bool:
        async with self.deps.db.write() as conn:
            revoked = await access.revoke_grant(conn, user_id, task_id)
        if revoked:
            await self._access_changed("task_revoked")
        return revoked

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
