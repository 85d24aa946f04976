"""Demo data for `turnwise demo` / `make run`: a few tasks whose sessions show the lifecycle, and the
sessions the demo agent works in.

Seeded once per database, keyed on the `demo` row of the meta table (the ids of the demo agent's
sessions, written once the demo data exists): `turnwise demo` started again on the same database
finds them and creates nothing. Nothing in the demo pretends: its permission request ("May I run the
migration against staging?") is asked by the demo agent through `askPermission`, in the second
session of "Review the migration plan", and the agent reacts to the decision.
"""

from __future__ import annotations

import json
from dataclasses import asdict, replace

from backend.domain.states import MESSAGE_KIND_PERMISSION, SessionState
from backend.executors.demo_agent import DemoSessions
from backend.repository import meta
from backend.services.container import Services

DEMO_KEY = "demo"


def _parse(text: str) -> DemoSessions:
    stored = json.loads(text)
    return DemoSessions(
        **{k: str(stored[k]) for k in ("questions_task", "questions", "permission_task", "permission")}
    )


async def prepare(services: Services) -> DemoSessions:
    """`seed`, and the permission request the demo agent asked in an earlier run (`asked`), which
    it takes up again instead of asking anew."""
    sessions = await seed(services)
    return replace(sessions, asked=await last_permission_request(services, sessions))


async def seed(services: Services) -> DemoSessions:
    """The demo's tasks, created on the first start on a database; on every later start the same
    ones (nothing is created)."""
    async with services.deps.db.read() as conn:
        stored = await meta.value_of(conn, DEMO_KEY)
    if stored is not None:
        return _parse(stored)
    created = asdict(await _create(services))
    del created["asked"]
    async with services.deps.db.write() as conn:
        kept = await meta.value_or_set(conn, DEMO_KEY, json.dumps(created))
    return _parse(kept)


async def last_permission_request(services: Services, sessions: DemoSessions) -> str | None:
    """The pending id of the permission request the demo agent asked in an earlier run, if any."""
    rows = await services.reads.messages(sessions.permission, first=None, after=None)
    asked = [m for m in rows if m.type == MESSAGE_KIND_PERMISSION and m.metadata.get("pending_id")]
    return str(asked[-1].metadata["pending_id"]) if asked else None


async def _create(services: Services) -> DemoSessions:
    ops = services.operations
    task = await ops.create_task("Add retry to the payment webhook")
    primary = await ops.create_session(task.id, is_primary=True, input_capable=True)
    await ops.set_session_state(primary.id, SessionState.RUNNING)
    await ops.start_turn(primary.id)
    await ops.post_message(
        primary.id, content="Please add retries to the payment webhook.", author="user", kind="message"
    )
    await ops.post_message(
        primary.id, content="Looking at the webhook handler now.", author="agent", kind="message"
    )

    review = await ops.create_task("Review the migration plan")
    s1 = await ops.create_session(review.id, is_primary=True, input_capable=True)
    await ops.set_session_state(s1.id, SessionState.RUNNING)
    turn = await ops.start_turn(s1.id)
    await ops.post_message(s1.id, content="Plan reviewed; two risks noted.", author="agent", kind="message")
    await ops.complete_turn(turn.id)
    # The demo agent asks here, through the API, to run the migration against staging.
    migration = await ops.create_session(review.id, is_primary=False, input_capable=True)
    await ops.set_session_state(migration.id, SessionState.RUNNING)

    done = await ops.create_task("Fix flaky login test")
    s3 = await ops.create_session(done.id, is_primary=True, input_capable=True)
    await ops.set_session_state(s3.id, SessionState.RUNNING)
    turn = await ops.start_turn(s3.id)
    await ops.post_message(
        s3.id, content="Fixed the race in the login fixture.", author="agent", kind="message"
    )
    await ops.complete_turn(turn.id)
    await ops.set_session_state(s3.id, SessionState.COMPLETED)

    agent_task = await ops.create_task("Demo agent: configure the webhook service")
    questions = await ops.create_session(agent_task.id, is_primary=True, input_capable=True)
    await ops.set_session_state(questions.id, SessionState.RUNNING)
    return DemoSessions(agent_task.id, questions.id, review.id, migration.id)
