"""Permission rules over GraphQL: list what applies to a session, add one, import a Claude Code
`permissions` block, show a scope's block, revoke (`services/permission_rules.py` says who may)."""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any, cast

import strawberry
from strawberry.scalars import JSON
from strawberry.types import Info

from backend.api.access import require_task_answer, require_task_read
from backend.api.context import Context
from backend.domain.rule_scopes import RuleBehavior, RuleRecord, Scope
from backend.services.permission_rules import RuleAccess


@strawberry.type(
    description="A permission rule in Claude Code's syntax: requests its pattern matches, wherever its "
    "scope reaches, are allowed or denied at once, or always asked (deny, then ask, then allow; the "
    "first match decides)."
)
class PermissionRule:
    id: strawberry.ID
    session_id: strawberry.ID | None = strawberry.field(
        description="The session of a SESSION rule; null for wider scopes."
    )
    tool_name: str = strawberry.field(
        description="The tool its pattern names (an MCP server's rule: mcp__<server>)."
    )
    input: JSON | None = strawberry.field(
        description="A rule for one exact input (a call no pattern can say): that input; null for "
        "every other rule, whose pattern says what it matches."
    )
    created_at: dt.datetime
    pattern: str
    behavior: RuleBehavior
    scope: Scope
    scope_id: strawberry.ID | None = strawberry.field(
        description="The session id, task id or project it applies to; null for GLOBAL."
    )
    expires_at: dt.datetime | None = strawberry.field(
        description="When it stops deciding anything; null: until revoked. An expired rule is no "
        "longer listed; the requests it decided keep it in their history."
    )
    decisions: int = strawberry.field(
        description="In permissionRules(sessionId): how many requests of that session it decided as "
        "they were asked; 0 elsewhere."
    )
    last_decided_at: dt.datetime | None = strawberry.field(
        description="In permissionRules(sessionId): when it last decided a request of that session."
    )

    @classmethod
    def of(cls, r: RuleRecord, decisions: int = 0, last: dt.datetime | None = None) -> PermissionRule:
        return cls(
            id=strawberry.ID(r.id),
            session_id=None if r.session_id is None else strawberry.ID(r.session_id),
            tool_name=r.tool_name,
            input=cast(JSON, r.input) if r.exact else None,
            created_at=r.created_at,
            pattern=r.pattern,
            behavior=r.behavior,
            scope=r.scope,
            scope_id=None if r.scope_id is None else strawberry.ID(r.scope_id),
            expires_at=r.expires_at,
            decisions=decisions,
            last_decided_at=last,
        )


def rule_access(info: Info[Context, None]) -> RuleAccess:
    principal = info.context.principal
    return RuleAccess(
        may_answer=lambda task_id: require_task_answer(principal, task_id),
        may_read=lambda task_id: require_task_read(principal, task_id),
        admin=principal.is_admin,
    )


ScopeId = Annotated[
    strawberry.ID | None,
    strawberry.argument(
        description="SESSION: the session id; TASK: the task id; PROJECT: the project (Task.project); "
        "GLOBAL: null."
    ),
]


@strawberry.type
class PermissionRuleQueries:
    @strawberry.field(
        description="Every rule that applies to the session now, whatever its scope, in evaluation order "
        "(deny, ask, allow; within each the narrower scope, then the older rule, first)."
    )
    async def permission_rules(
        self, info: Info[Context, None], session_id: strawberry.ID
    ) -> list[PermissionRule]:
        found = await info.context.services.permission_rules.applying(str(session_id), rule_access(info))
        return [PermissionRule.of(r, n, last) for r, n, last in found]

    @strawberry.field(
        description='The scope\'s rules as a Claude Code "permissions" block ({"allow": [...], "ask": '
        '[...], "deny": [...]}), to copy into .claude/settings.json. Rules for one exact input have no '
        "pattern to say them in and are left out."
    )
    async def permission_settings(
        self, info: Info[Context, None], scope: Scope, scope_id: ScopeId = None
    ) -> JSON:
        block = await info.context.services.permission_rules.settings(
            scope, None if scope_id is None else str(scope_id), rule_access(info)
        )
        return cast(JSON, block)


@strawberry.type
class PermissionRuleMutations:
    @strawberry.mutation(
        description="A rule for a scope: who may answer a task's requests adds SESSION and TASK rules "
        "for it, and PROJECT rules for a project of one of their tasks; only an admin adds GLOBAL "
        "rules. The same rule added twice is one rule."
    )
    async def add_permission_rule(
        self,
        info: Info[Context, None],
        pattern: Annotated[
            str,
            strawberry.argument(
                description='Claude Code\'s syntax: "Bash", "Bash(npm run test:*)", "Edit(src/**)", '
                '"WebFetch(domain:example.com)", "mcp__github".'
            ),
        ],
        behavior: RuleBehavior,
        scope: Scope,
        scope_id: ScopeId = None,
        expires_in_seconds: Annotated[
            float | None,
            strawberry.argument(description="It stops deciding after this many seconds; null: never."),
        ] = None,
    ) -> PermissionRule:
        rule = await info.context.services.permission_rules.add(
            pattern=pattern,
            behavior=behavior,
            scope=scope,
            scope_id=None if scope_id is None else str(scope_id),
            expires_in=expires_in_seconds,
            access=rule_access(info),
            created_by=info.context.principal.user_id,
        )
        return PermissionRule.of(rule)

    @strawberry.mutation(
        description='The rules of a Claude Code "permissions" block ({"allow": [...], "ask": [...], '
        '"deny": [...]}; its other keys are ignored), all or none: an entry it cannot read is refused '
        'by its place ("allow[2]: ..."), and nothing is written.'
    )
    async def import_permission_rules(
        self, info: Info[Context, None], settings: JSON, scope: Scope, scope_id: ScopeId = None
    ) -> list[PermissionRule]:
        found = await info.context.services.permission_rules.import_settings(
            cast(Any, settings),
            scope,
            None if scope_id is None else str(scope_id),
            rule_access(info),
            info.context.principal.user_id,
        )
        return [PermissionRule.of(r) for r in found]

    @strawberry.mutation(
        description="Forget a rule; false when there is no such rule. The requests it decided keep it, "
        "as it was, in their history."
    )
    async def revoke_permission_rule(self, info: Info[Context, None], rule_id: strawberry.ID) -> bool:
        return await info.context.services.permission_rules.revoke(str(rule_id), rule_access(info))
