"""Access management over GraphQL (admin only) and `me`, the caller's own identity."""

from __future__ import annotations

import strawberry
from strawberry.types import Info

from backend.api import access
from backend.api.context import Context


@strawberry.type
class User:
    id: strawberry.ID
    name: str
    role: str


@strawberry.type
class IssuedToken:
    id: strawberry.ID
    user_id: strawberry.ID
    token: str = strawberry.field(description="The plaintext, shown once; only its hash is stored.")


@strawberry.type
class Me:
    user_id: strawberry.ID
    role: str
    session_id: strawberry.ID | None


@strawberry.type
class AccessQueries:
    @strawberry.field(description="Who the presented token belongs to.")
    def me(self, info: Info[Context, None]) -> Me:
        p = info.context.principal
        return Me(
            user_id=strawberry.ID(p.user_id),
            role=p.role,
            session_id=None if p.session_id is None else strawberry.ID(p.session_id),
        )

    @strawberry.field(description="Every user (admin only).")
    async def users(self, info: Info[Context, None]) -> list[User]:
        access.require_admin(info.context.principal)
        return [
            User(id=strawberry.ID(u.id), name=u.name, role=u.role)
            for u in await info.context.services.access.users()
        ]


@strawberry.type
class AccessMutations:
    @strawberry.mutation(description="Roles: user, support, agent, admin.")
    async def create_user(self, info: Info[Context, None], name: str, role: str) -> User:
        access.require_admin(info.context.principal)
        u = await info.context.services.access.create_user(name, role)
        return User(id=strawberry.ID(u.id), name=u.name, role=u.role)

    @strawberry.mutation(description="A new bearer token; agent tokens name their one session.")
    async def issue_token(
        self, info: Info[Context, None], user_id: strawberry.ID, session_id: strawberry.ID | None = None
    ) -> IssuedToken:
        access.require_admin(info.context.principal)
        issued = await info.context.services.access.issue_token(
            str(user_id), None if session_id is None else str(session_id)
        )
        return IssuedToken(
            id=strawberry.ID(issued.id), user_id=strawberry.ID(issued.user_id), token=issued.token
        )

    @strawberry.mutation(description="False when the token was unknown or already revoked.")
    async def revoke_token(self, info: Info[Context, None], token_id: strawberry.ID) -> bool:
        access.require_admin(info.context.principal)
        return await info.context.services.access.revoke_token(str(token_id))

    @strawberry.mutation
    async def grant_task(
        self, info: Info[Context, None], user_id: strawberry.ID, task_id: strawberry.ID
    ) -> bool:
        access.require_admin(info.context.principal)
        await info.context.services.access.grant_task(str(user_id), str(task_id))
        return True

    @strawberry.mutation
    async def revoke_task(
        self, info: Info[Context, None], user_id: strawberry.ID, task_id: strawberry.ID
    ) -> bool:
        access.require_admin(info.context.principal)
        return await info.context.services.access.revoke_task(str(user_id), str(task_id))
