"""Permission requests through the one lifecycle: ask, allow (as asked or edited), deny, detach and
resume, remembered rules, stale decisions; on SQLite and PostgreSQL."""

from __future__ import annotations

import json
from typing import Any

import pytest

from backend.db.engine import Database
from backend.domain import lifecycle as lc
from backend.domain.errors import InvalidInput, NotFound
from backend.domain.lifecycle import BundleState, ConflictReason
from backend.domain.permissions import (
    Decision,
    RuleRef,
    Sent,
    request_of,
    validate_decision,
    validate_permission,
)
from backend.domain.states import PendingActionKind
from backend.services.pending.core import trusted
from backend.services.resume import ResumeOutcome
from tests.lifecycle.support import (
    BASH,
    Agent,
    ScriptedResumer,
    ToolAgent,
    decide,
    new_session,
    rows,
    running,
)


async def test_a_live_allow_reaches_the_waiting_agent_with_the_input_as_asked(db: Database) -> None:
    async with running(db) as svc:
        _, session_id = await new_session(svc)
        agent = await ToolAgent.ask(svc, session_id, tool_use_id="toolu_1")
        assert isinstance(agent.first, lc.Asked)
        bundle = agent.first.bundle
        assert bundle.kind == PendingActionKind.PERMISSION
        assert bundle.state == BundleState.ACTIVE_LIVE
        (stored,) = await rows(db, agent.pending_id)
        # The input is kept as its JSON text (read back exactly on both dialects).
        assert stored["permission"] == {
            "tool_name": "Bash",
            "input_json": json.dumps(BASH, separators=(",", ":")),
            "tool_use_id": "toolu_1",
        }
        assert request_of(stored) == {"tool_name": "Bash", "input": BASH, "tool_use_id": "toolu_1"}
        assert (await svc.reads.session(session_id)).state == "WAITING_FOR_INPUT"
        assert set(await svc.permissions.active([session_id])) == {session_id}
        assert await svc.pending.active_bundles([session_id]) == {}
        waiting = agent.wait()
        result = await decide(svc, agent.pending_id)
        assert isinstance(result, lc.Responded)
        outcome = await waiting
        assert isinstance(outcome, lc.Answered)
        (decision,) = outcome.answers
        assert isinstance(decision, Decision)
        assert decision.for_agent() == {"behavior": "allow", "updatedInput": BASH}
        (stored,) = await rows(db, agent.pending_id)
        assert stored["status"] == "answered"
        assert stored["response"]["behavior"] == "allow"
        assert (await svc.reads.session(session_id)).state == "RUNNING"
        await agent.close()


async def test_an_edited_allow_carries_the_new_input_and_one_of_another_type_is_refused(db: Database) -> None:
    async with running(db) as svc:
        _, session_id = await new_session(svc)
        agent = await ToolAgent.ask(svc, session_id)
        waiting = agent.wait()
        with pytest.raises(InvalidInput, match="updatedInput"):
            await decide(svc, agent.pending_id, updated_input=["not", "an", "object"], has_updated_input=True)
        with pytest.raises(InvalidInput, match="message"):
            await decide(svc, agent.pending_id, message="allow with a reason?")
        with pytest.raises(InvalidInput, match="behavior"):
            await decide(svc, agent.pending_id, "maybe")
        (stored,) = await rows(db, agent.pending_id)
        assert stored["status"] == "pending"  # the refusals wrote nothing
        edited = {"command": "alembic upgrade head --sql"}
        assert isinstance(
            await decide(svc, agent.pending_id, updated_input=edited, has_updated_input=True), lc.Responded
        )
        outcome = await waiting
        assert isinstance(outcome, lc.Answered)
        assert outcome.answers[0].for_agent() == {"behavior": "allow", "updatedInput": edited}  # type: ignore[union-attr]
        await agent.close()


async def test_a_live_deny_tells_the_agent_why(db: Database) -> None:
    async with running(db) as svc:
        _, session_id = await new_session(svc)
        agent = await ToolAgent.ask(svc, session_id)
        waiting = agent.wait()
        with pytest.raises(InvalidInput, match="updatedInput"):
            await decide(svc, agent.pending_id, "deny", updated_input={}, has_updated_input=True)
        assert isinstance(await decide(svc, agent.pending_id, "deny", message="not on staging"), lc.Responded)
        outcome = await waiting
        assert isinstance(outcome, lc.Rejected)
        assert outcome.answers[0].for_agent() == {"behavior": "deny", "message": "not on staging"}  # type: ignore[union-attr]
        (stored,) = await rows(db, agent.pending_id)
        assert (stored["status"], stored["response"]["message"]) == ("rejected", "not on staging")
        await agent.close()


async def test_a_late_allow_resumes_the_detached_agent_and_a_late_deny_does_not(db: Database) -> None:
    async with running(db) as svc:
        resumer = ScriptedResumer(ResumeOutcome(accepted=True, retryable=False))
        svc.pending.resumer = resumer
        _, session_id = await new_session(svc)
        agent = await ToolAgent.ask(svc, session_id, timeout_seconds=0.05)
        assert isinstance(await agent.outcome(), lc.Detached)
        result = await decide(svc, agent.pending_id)
        assert isinstance(result, lc.Responded)
        assert result.resumed
        (claim,) = resumer.claims
        assert claim.answers[0].for_agent() == {"behavior": "allow", "updatedInput": BASH}  # type: ignore[union-attr]
        await agent.close()
        # A second request, denied late: final at once, nobody resumed (the agent was told "denied").
        other = await ToolAgent.ask(svc, session_id, {"command": "rm -rf build"}, timeout_seconds=0.05)
        assert isinstance(await other.outcome(), lc.Detached)
        denied = await decide(svc, other.pending_id, "deny")
        assert isinstance(denied, lc.Responded)
        assert not denied.resumed
        assert len(resumer.claims) == 1
        (stored,) = await rows(db, other.pending_id)
        assert stored["status"] == "rejected"
        await other.close()


async def test_a_remembered_allow_decides_the_next_matching_request_at_once_until_revoked(
    db: Database,
) -> None:
    async with running(db) as svc:
        _, session_id = await new_session(svc)
        agent = await ToolAgent.ask(svc, session_id)
        waiting = agent.wait()
        with pytest.raises(InvalidInput, match="remember"):
            await decide(svc, agent.pending_id, "deny", remember=True)
        assert isinstance(await decide(svc, agent.pending_id, remember=True), lc.Responded)
        await waiting
        await agent.close()
        (rule,) = await svc.permissions.rules(session_id, authorize=trusted)
        assert (rule.tool_name, rule.input, rule.any_input) == ("Bash", BASH, False)
        again = await ToolAgent.ask(svc, session_id)
        assert isinstance(again.first, lc.Decided)
        ref = RuleRef(rule.id, "Bash", False, rule.pattern, "allow", "session", session_id)
        assert again.first.answers == (Decision("allow", BASH, auto=True, rule=ref),)
        (stored,) = await rows(db, again.pending_id)
        assert (stored["status"], stored["response"]["auto"]) == ("answered", True)
        assert (await svc.reads.session(session_id)).state == "RUNNING"
        await again.close()
        # Another input of the same tool is not covered by an exact-input rule.
        other = await ToolAgent.ask(svc, session_id, {"command": "ls"})
        assert isinstance(other.first, lc.Asked)
        waiting = other.wait()
        await decide(svc, other.pending_id, remember=True, remember_any_input=True)
        await waiting
        await other.close()
        anything = await ToolAgent.ask(svc, session_id, {"command": "pwd"})
        assert isinstance(anything.first, lc.Decided)
        await anything.close()
        # Rules never cross sessions.
        _, elsewhere = await new_session(svc)
        fresh = await ToolAgent.ask(svc, elsewhere)
        assert isinstance(fresh.first, lc.Asked)
        await fresh.close()
        for r in await svc.permissions.rules(session_id, authorize=trusted):
            assert await svc.permissions.revoke(r.id, authorize=trusted)
        assert not await svc.permissions.revoke(rule.id, authorize=trusted)
        asked = await ToolAgent.ask(svc, session_id)
        assert isinstance(asked.first, lc.Asked)
        await asked.close()


async def test_a_decision_on_a_superseded_request_is_a_conflict_and_reaches_nobody(db: Database) -> None:
    async with running(db) as svc:
        resumer = ScriptedResumer(ResumeOutcome(accepted=True, retryable=False))
        svc.pending.resumer = resumer
        _, session_id = await new_session(svc)
        agent = await ToolAgent.ask(svc, session_id, timeout_seconds=0.05)
        await agent.outcome()
        await agent.close()
        await svc.operations.start_turn(session_id)  # newer work: the request is history
        result = await decide(svc, agent.pending_id)
        assert isinstance(result, lc.Conflict)
        assert result.reason == ConflictReason.SUPERSEDED
        assert resumer.claims == []
        (stored,) = await rows(db, agent.pending_id)
        assert stored["status"] == "pending"


async def test_each_kind_answers_only_through_its_own_respond(db: Database) -> None:
    async with running(db) as svc:
        _, session_id = await new_session(svc)
        tool = await ToolAgent.ask(svc, session_id)
        with pytest.raises(NotFound):
            await svc.pending.respond(tool.pending_id, [], rejected=True, authorize=trusted)
        await tool.close()
        _, other = await new_session(svc)
        question = await Agent.ask(svc, other)
        with pytest.raises(NotFound):
            await decide(svc, question.pending_id)
        assert await svc.permissions.request(question.pending_id, authorize=trusted) is None
        await question.close()


@pytest.mark.parametrize(
    ("tool_input", "refused"),
    [
        ({"command": "printf 'a\\u0000b' | xxd"}, False),  # a backslash before "u0000": plain text
        ({"pattern": "\\\\u0000"}, False),
        ({"command": "a\x00b"}, True),
        ({"a\x00": 1}, True),
        ({"command": "\\\x00"}, True),  # a backslash, then a NUL
        ({"deep": [[["\x00"]]]}, True),
    ],
)
def test_a_tool_input_is_refused_for_a_nul_character_and_only_for_one(tool_input: Any, refused: bool) -> None:
    # Checked below the API too: an agent's other ways in (MCP) reach this check directly.
    if refused:
        with pytest.raises(InvalidInput, match="NUL"):
            validate_permission("Bash", tool_input, None, None)
    else:
        assert validate_permission("Bash", tool_input, None, None).input == tool_input


NOT_OBJECTS = {
    "null": (None, "null"),
    "string": ("rm -rf /", "a string"),
    "number": (7, "a number"),
    "array": (["rm", "-rf", "/"], "an array"),
    "boolean": (True, "a boolean"),
}


@pytest.mark.parametrize(("value", "described"), list(NOT_OBJECTS.values()), ids=list(NOT_OBJECTS))
def test_a_tool_input_or_an_edited_one_is_refused_by_field_unless_a_json_object(
    value: Any, described: str
) -> None:
    reason = f"must be a JSON object (a tool's arguments by name), not {described}"
    with pytest.raises(InvalidInput) as asked:
        validate_permission("Bash", value, None, None)
    assert str(asked.value) == f"input: {reason}"
    edited = Sent("allow", updated_input=value, has_updated_input=True)
    with pytest.raises(InvalidInput) as allowed:
        validate_decision({"tool_name": "Bash", "input": BASH}, edited)
    assert str(allowed.value) == f"updatedInput: {reason}"


@pytest.mark.parametrize(("stored", "described"), list(NOT_OBJECTS.values()), ids=list(NOT_OBJECTS))
def test_a_stored_input_that_is_no_object_is_allowed_only_with_an_object_to_run(
    stored: Any, described: str
) -> None:
    # Stored by a server from before inputs had to be objects: allowed as it is, the agent would be
    # handed something it cannot run.
    request = {"tool_name": "Bash", "input": stored}
    with pytest.raises(InvalidInput) as err:
        validate_decision(request, Sent("allow"))
    assert str(err.value).startswith(
        f"updatedInput: is needed to allow this request: its input is {described}"
    )
    edited = Sent("allow", updated_input={"command": "ls"}, has_updated_input=True)
    assert validate_decision(request, edited).for_agent() == {
        "behavior": "allow",
        "updatedInput": {"command": "ls"},
    }
    assert validate_decision(request, Sent("deny")).for_agent()["behavior"] == "deny"
