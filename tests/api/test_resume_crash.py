"""Killing the server between the steps of a detached resume, then restarting it on the same database:
no answer is lost (answerable again, or handed to the agent once) and no prompt is dispatched twice,
judged by the scripted executor's own fsynced log. For a detached clarification answer and a detached
ALLOW alike (the agent asked with askPermission and its wait ran out)."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from backend import faults
from backend.db.engine import Database
from tests.api.client import Client
from tests.api.kinds import API_KINDS, ApiKind
from tests.api.test_clarification_api import ASK, CLARIFICATION, QUESTION, YES, respond, session
from tests.lifecycle.support import rows
from tests.servers import ADMIN_TOKEN, Server, drop_database, fresh_database

TURNS = "query($s: ID!) { sessionTurns(sessionId: $s) { id } }"


@pytest.fixture(params=["sqlite", "postgresql"])
def crash_db(request: pytest.FixtureRequest) -> Iterator[str]:
    if request.param == "postgresql":
        request.getfixturevalue("pg_url")
    url = fresh_database(request.param)
    yield url
    drop_database(url)


def resume_env(log: Path, fault: str | None = None) -> dict[str, str]:
    env = {
        "TURNWISE_EXECUTOR": "scripted",
        "TURNWISE_SCRIPTED_OUTCOMES": "accepted",
        "TURNWISE_SCRIPTED_LOG": str(log),
        "TURNWISE_DISPATCH_SECONDS": "2",
        "TURNWISE_PERSISTENCE_SECONDS": "2",
    }
    if fault:
        env["TURNWISE_FAULT_POINTS"] = fault
    return env


def dispatched(log: Path) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


async def detached(client: Client, session_id: str) -> str:
    async with client.subscribe(ASK, {"s": session_id, "q": [QUESTION], "t": 0.2}) as sub:
        pending_id = str((await sub.next())["askClarification"]["bundle"]["pendingId"])
        assert (await sub.next())["askClarification"]["__typename"] == "ClarificationDetached"
    return pending_id


async def crash_while_answering(
    url: str, log: Path, fault: str, kind: ApiKind | None = None
) -> tuple[str, str]:
    server = Server(url, env=resume_env(log, fault)).start()
    client = Client(server.base_url, ADMIN_TOKEN)
    try:
        _, session_id = await session(client)
        if kind is None:
            pending_id = await detached(client, session_id)
            with pytest.raises(httpx.HTTPError):
                await respond(client, pending_id, YES)
        else:
            pending_id = await kind.detached(client, session_id)
            with pytest.raises(httpx.HTTPError):
                await kind.answer(client, pending_id)
        assert server.proc is not None, server.log()
        assert server.proc.wait(10) == faults.CRASH_EXIT_CODE, server.log()
        return session_id, pending_id
    finally:
        await client.aclose()
        server.kill()


@pytest.mark.parametrize(
    ("fault", "sent_before_crash"),
    [
        ("resume.after_reserve", 0),
        ("resume.after_attempt_marker", 0),
        ("resume.after_dispatch_ack", 1),
        ("resume.after_publish", 1),
    ],
)
@pytest.mark.parametrize("kind", API_KINDS, ids=str)
@pytest.mark.scenario("S19", "S20")
async def test_a_crash_at_any_resume_step_never_loses_or_duplicates_the_answer(
    crash_db: str, fault: str, sent_before_crash: int, kind: ApiKind
) -> None:
    log = Path(tempfile.mkdtemp(prefix="turnwise-exec-")) / "dispatch.jsonl"
    session_id, pending_id = await crash_while_answering(crash_db, log, fault, kind)
    assert len(dispatched(log)) == sent_before_crash
    restarted = Server(crash_db, env=resume_env(log)).start()
    client = Client(restarted.base_url, ADMIN_TOKEN)
    try:
        bundle = await kind.read(client, pending_id)
        turns = [t["id"] for t in (await client.execute(TURNS, {"s": session_id}))["sessionTurns"]]
        if fault == "resume.after_reserve":
            # Never attempted: the empty reservation is gone and the same answer can be given again.
            assert bundle["state"] == "ACTIVE_DETACHED"
            assert kind.unanswered(bundle)
            assert len(turns) == 1
            again = await kind.answer(client, pending_id)
            assert again["__typename"] == kind.responded
            assert again["resumed"] is True
            assert len(dispatched(log)) == 1
            assert kind.in_prompt() in dispatched(log)[0]["prompt"]
        else:
            # At or past the at-most-once boundary: the successor stays current and visible, the
            # answer stays terminal, and nothing is ever dispatched again.
            assert bundle["state"] == "TERMINAL"
            assert len(turns) == 2
            if sent_before_crash:
                assert dispatched(log)[0]["turn_id"] == turns[1]
                assert kind.in_prompt() in dispatched(log)[0]["prompt"]
            assert not kind.unanswered(bundle)
            again = await kind.answer(client, pending_id)
            assert again["__typename"] == "ClarificationConflict"
            assert len(dispatched(log)) == sent_before_crash
    finally:
        await client.aclose()
        restarted.stop()


@pytest.mark.scenario("S19")
async def test_a_crash_during_startup_recovery_is_retried_by_the_next_start(crash_db: str) -> None:
    log = Path(tempfile.mkdtemp(prefix="turnwise-exec-")) / "dispatch.jsonl"
    session_id, pending_id = await crash_while_answering(crash_db, log, "resume.after_reserve")
    crashing = Server(crash_db, env=resume_env(log, "recovery.after_reservations")).start(wait=False)
    try:
        assert crashing.proc is not None, crashing.log()
        assert crashing.proc.wait(30) == faults.CRASH_EXIT_CODE, crashing.log()
    finally:
        crashing.kill()
    restarted = Server(crash_db, env=resume_env(log)).start()
    client = Client(restarted.base_url, ADMIN_TOKEN)
    try:
        bundle = (await client.execute(CLARIFICATION, {"p": pending_id}))["clarification"]
        assert bundle["state"] == "ACTIVE_DETACHED"
        assert (await respond(client, pending_id, YES))["resumed"] is True
        assert len(dispatched(log)) == 1
        assert len((await client.execute(TURNS, {"s": session_id}))["sessionTurns"]) == 2
    finally:
        await client.aclose()
        restarted.stop()


@pytest.mark.parametrize("kind", API_KINDS, ids=str)
@pytest.mark.scenario("S21")
async def test_a_crash_after_claiming_a_detached_answer_restores_exactly_its_rows_and_the_same_answer_resumes(
    crash_db: str, kind: ApiKind
) -> None:
    log = Path(tempfile.mkdtemp(prefix="turnwise-exec-")) / "dispatch.jsonl"
    db = Database(crash_db)
    server = Server(crash_db, env=resume_env(log, "after_claim")).start()
    client = Client(server.base_url, ADMIN_TOKEN)
    try:
        _, session_id = await session(client)
        pending_id = await kind.detached(client, session_id)
        # A bystander: another session's detached request that nobody answers.
        _, other_session = await session(client)
        other = await kind.detached(client, other_session)
        bystander = await rows(db, other)
        before = await rows(db, pending_id)
        with pytest.raises(httpx.HTTPError):
            await kind.answer(client, pending_id)  # dies after the claim, before the resumer sees it
        assert server.proc is not None
        assert server.proc.wait(10) == faults.CRASH_EXIT_CODE, server.log()
        stranded = await rows(db, pending_id)
        assert stranded[0]["status"] == "answered"
        assert stranded[0]["response_delivery_pending"]
    finally:
        await client.aclose()
        server.kill()
    assert dispatched(log) == []
    restarted = Server(crash_db, env=resume_env(log)).start()
    client = Client(restarted.base_url, ADMIN_TOKEN)
    try:
        # Startup restored exactly the claimed rows to what they were before the claim.
        assert await rows(db, pending_id) == before
        assert await rows(db, other) == bystander
        bundle = await kind.read(client, pending_id)
        assert bundle["state"] == "ACTIVE_DETACHED"
        assert kind.unanswered(bundle)
        assert len((await client.execute(TURNS, {"s": session_id}))["sessionTurns"]) == 1
        # The same answer submitted again resumes the agent, once.
        again = await kind.answer(client, pending_id)
        assert again["__typename"] == kind.responded
        assert again["resumed"] is True
        assert again["request" if kind.is_permission else "bundle"]["state"] == "TERMINAL"
        turns = [t["id"] for t in (await client.execute(TURNS, {"s": session_id}))["sessionTurns"]]
        assert len(turns) == 2
        sent = dispatched(log)
        assert len(sent) == 1
        assert sent[0]["turn_id"] == turns[1]
        assert kind.in_prompt() in sent[0]["prompt"]
        assert (await rows(db, other)) == bystander
    finally:
        await client.aclose()
        restarted.stop()
        await db.dispose()
