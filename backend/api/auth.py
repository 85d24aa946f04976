"""Who is calling: bearer tokens from the HTTP header or the WebSocket connection_init payload."""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from backend.domain.errors import Forbidden, Unauthenticated
from backend.services.access import Access

ROLES = ("user", "support", "agent", "admin")


@dataclass(frozen=True)
class Principal:
    """`runner`: a runner token's caller, its issuer as `user_id`, reading `task_ids` and acting as
    the agent in `session_ids` (what the token made), with the token's id to make more."""

    user_id: str
    role: str
    session_id: str | None = None
    task_ids: frozenset[str] = field(default_factory=frozenset)
    token_id: str | None = None
    session_ids: frozenset[str] = field(default_factory=frozenset)

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"

    def require_admin(self) -> None:
        if not self.is_admin:
            raise Forbidden("this operation needs the admin role")


def bearer_from_header(value: str | None) -> str | None:
    if not value:
        return None
    scheme, _, token = value.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def bearer_from_params(params: Mapping[str, Any] | None) -> str | None:
    if not isinstance(params, Mapping):
        return None
    for key in ("token", "authToken"):
        value = params.get(key)
        if isinstance(value, str) and value:
            return value
    for key in ("Authorization", "authorization"):
        value = params.get(key)
        if isinstance(value, str):
            return bearer_from_header(value)
    return None


class Authenticator:
    """Resolves tokens to principals: the bootstrap token (TURNWISE_BOOTSTRAP_TOKEN) is an admin, any
    other token is looked up by its hash, with the user's granted tasks, once per request/connection."""

    def __init__(self, bootstrap_token: str | None, access: Access | None = None) -> None:
        self._bootstrap = bootstrap_token
        self._access = access

    async def authenticate(self, token: str | None) -> Principal:
        if not token:
            raise Unauthenticated("missing bearer token")
        if self._bootstrap and hmac.compare_digest(token.encode(), self._bootstrap.encode()):
            return Principal(user_id="bootstrap", role="admin")
        identity = None if self._access is None else await self._access.identity(token)
        if identity is None:
            raise Unauthenticated("invalid or revoked token")
        return Principal(
            user_id=identity.user_id,
            role=identity.role,
            session_id=identity.session_id,
            task_ids=identity.task_ids,
            token_id=identity.token_id,
            session_ids=identity.session_ids,
        )
