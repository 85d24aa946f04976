"""The rules that may decide a permission request come with the ask's own context statement: an ask
with no rule of its tool costs exactly what a question's ask costs, an ask a rule decides costs no
more, and rules of its tool that decide nothing cost at most the two statements that then write the
request and its notifications; on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from backend.db.engine import Database
from backend.domain import lifecycle as lc
from backend.domain.rule_scopes import RuleBehavior, Scope
from backend.services.container import Services
from backend.services.permission_rules import RuleAccess
from tests.lifecycle.support import Agent, ToolAgent, new_session, running
from tests.reach.test_ask_outbox import quiet

TRUSTED = RuleAccess(lambda _task: None, lambda _task: None, admin=True)


async def _cost(db: Database, ask: Callable[..., Awaitable[Any]], *args: Any) -> tuple[tuple[int, int], Any]:
    """(statements, transactions) of an ask and of what follows it in this process (the live
    projector's reads included) until the database is quiet, and the agent asking."""
    await quiet(db)
    statements, transactions = db.statements, db.transactions
    agent = await ask(*args)
    await quiet(db)
    cost = (db.statements - statements, db.transactions - transactions)
    await agent.close()
    return cost, agent


async def _rule(svc: Services, pattern: str, behavior: RuleBehavior, task_id: str) -> None:
    await svc.permission_rules.add(
        pattern=pattern,
        behavior=behavior,
        scope=Scope.TASK,
        scope_id=task_id,
        expires_in=None,
        access=TRUSTED,
        created_by=None,
    )


async def test_the_rules_of_an_ask_cost_no_statement_of_their_own(db: Database) -> None:
    async with running(db, heartbeat_seconds=60.0) as svc:  # no heartbeat among the counts
        costs: dict[str, tuple[int, int]] = {}
        for _ in range(2):  # the second round: every statement prepared already
            _, question = await new_session(svc)
            costs["question"], _ = await _cost(db, Agent.ask, svc, question)
            _, plain = await new_session(svc)
            costs["no rule"], asked = await _cost(db, ToolAgent.ask, svc, plain)
            assert isinstance(asked.first, lc.Asked)
            task_id, ruled = await new_session(svc)
            await _rule(svc, "Bash(alembic upgrade:*)", RuleBehavior.ALLOW, task_id)
            await _rule(svc, "Bash(rm -rf *)", RuleBehavior.DENY, task_id)
            costs["decided"], decided = await _cost(db, ToolAgent.ask, svc, ruled)
            assert isinstance(decided.first, lc.Decided)
            other = {"command": "make deploy"}
            costs["undecided"], undecided = await _cost(db, ToolAgent.ask, svc, ruled, other)
            assert isinstance(undecided.first, lc.Asked)
        assert costs["no rule"] == costs["question"], costs
        assert costs["decided"] <= costs["question"], costs
        # The context read the rules, so it did not write the request: its row (with the session's
        # state) and its notifications' rows are written apart.
        assert costs["undecided"][0] <= costs["question"][0] + 2, costs
        assert {transactions for _, transactions in costs.values()} == {1}, costs
