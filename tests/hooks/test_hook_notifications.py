"""The person's phone hears of a hook's permission request, and the notification closes once the
terminal owns it: nobody decided in time, the hook went away, or a new prompt came first. A real
`turnwise serve` pushes to a local push service that checks VAPID and decrypts."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.api.client import Client
from tests.dialects import served
from tests.hooks.events import Agent, Hook, run_hook
from tests.hooks.runner import person, runner_token
from tests.reach.receivers import PushService, push_service
from tests.reach.test_close_on_settle import ENV, REGISTER, pushed
from tests.servers import ADMIN_TOKEN, Server


async def first_pending(phone: PushService) -> dict[str, Any]:
    """The first "pending" push the phone shows (each test has a phone of its own)."""
    for _ in range(300):
        shown = [p for p in phone.received.now() if p["type"] == "pending"]
        if shown:
            return dict(shown[0])
        await asyncio.sleep(0.05)
    raise AssertionError(f"no pending push: {phone.received.now()}")


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def notifying(request: pytest.FixtureRequest) -> Iterator[Server]:
    with served(str(request.param), request, env=ENV) as found:
        yield found


@pytest.mark.parametrize("ends", ["nobody-decides", "hook-goes-away", "new-prompt"])
async def test_the_notification_of_a_hooks_request_closes_when_the_terminal_owns_it(
    notifying: Server, ends: str
) -> None:
    admin = Client(notifying.base_url, ADMIN_TOKEN)
    _, token = await person(admin)
    runner = (await runner_token(notifying.base_url, token))["token"]
    mine = Client(notifying.base_url, token)
    try:
        with push_service() as phone:
            device = {"e": phone.endpoint, "k": phone.browser.p256dh, "a": phone.browser.auth_secret}
            assert await mine.execute(REGISTER, device) == {"registerPushSubscription": True}
            agent = Agent("claude", f"/home/ann/src/shop-{uuid.uuid4().hex[:6]}")
            wait = 4 if ends == "nobody-decides" else 60
            hook = await Hook.start(
                notifying.base_url, runner, "claude", agent.permission_request(), wait=wait
            )
            pending = await first_pending(phone)
            assert pending["kind"] == "permission"
            if ends == "hook-goes-away":
                hook.proc.terminate()
            elif ends == "new-prompt":
                await run_hook(notifying.base_url, runner, "claude", agent.user_prompt_submit())
            ran = await hook.result()
            assert ran.stdout == ""
            closed = await pushed(phone, pending["pendingId"], "close")
            assert closed == {"type": "close", "pendingId": pending["pendingId"]}
    finally:
        await mine.aclose()
        await admin.aclose()
