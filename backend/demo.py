"""Demo data for `turnwise demo` / `make run`: a few tasks whose sessions show the lifecycle."""

from __future__ import annotations

from backend.domain.states import SessionState
from backend.services.container import Services


async def seed(services: Services) -> bool:
    """Seed once; returns False when the database already holds tasks."""
    if await services.reads.tasks():
        return False
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
    s2 = await ops.create_session(review.id, is_primary=False, input_capable=True)
    await ops.set_session_state(s2.id, SessionState.RUNNING)
    await ops.start_turn(s2.id)
    await ops.post_message(
        s2.id, content="May I run the migration against staging?", author="agent", kind="permission_request"
    )

    done = await ops.create_task("Fix flaky login test")
    s3 = await ops.create_session(done.id, is_primary=True, input_capable=True)
    await ops.set_session_state(s3.id, SessionState.RUNNING)
    turn = await ops.start_turn(s3.id)
    await ops.post_message(
        s3.id, content="Fixed the race in the login fixture.", author="agent", kind="message"
    )
    await ops.complete_turn(turn.id)
    await ops.set_session_state(s3.id, SessionState.COMPLETED)
    return True
