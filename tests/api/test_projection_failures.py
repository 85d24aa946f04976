"""S44: a forced task-session list whose pending-action derivation fails is an internal error, over
HTTP and over the WebSocket, never a successful list that looks clean."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from tests.api.client import Client, GraphQLError
from tests.api.gql import SESSIONS
from tests.api.kinds import API_KINDS, ApiKind
from tests.api.test_clarification_api import session
from tests.servers import ADMIN_TOKEN, Server, drop_database, fresh_database

MESSAGES = "query($s: ID!) { sessionMessages(sessionId: $s) { id kind } }"


# One server per dialect, shared by both kinds: each test asks on a task of its own.
@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def deriving_fails(request: pytest.FixtureRequest) -> Iterator[Server]:
    if request.param == "postgresql":
        request.getfixturevalue("pg_url")
    url = fresh_database(request.param)
    srv = Server(url, env={"TURNWISE_FAULT_POINTS": "pending.derive"}).start()
    try:
        yield srv
    finally:
        srv.stop()
        drop_database(url)


@pytest.mark.scenario("S44")
@pytest.mark.parametrize("kind", API_KINDS, ids=str)
async def test_a_failing_pending_derivation_fails_the_session_list_over_http_and_websocket(
    deriving_fails: Server, kind: ApiKind
) -> None:
    admin = Client(deriving_fails.base_url, ADMIN_TOKEN)
    try:
        task_id, session_id = await session(admin)
        pending_id = await kind.detached(admin, session_id, 0.05)
        # The session does have a pending action of this kind: a clean list would be a lie.
        messages = (await admin.execute(MESSAGES, {"s": session_id}))["sessionMessages"]
        assert [m["kind"] for m in messages] == [f"{kind}_request"]
        asked = await kind.read(admin, pending_id)
        assert asked["state"] == "ACTIVE_DETACHED"
        assert kind.unanswered(asked)
        # HTTP: the request fails as a whole with an internal error, no list at all.
        response = await admin.raw(SESSIONS, {"task": task_id})
        body = response.json()
        assert body["data"] is None
        (error,) = body["errors"]
        assert error["extensions"]["code"] == "INTERNAL"
        # WebSocket: the same list request over the socket fails the same way.
        async with admin.subscribe(SESSIONS, {"task": task_id}) as over_ws:
            with pytest.raises(GraphQLError) as failed:
                await over_ws.next()
        assert failed.value.codes == ["INTERNAL"]
        ws_error = failed.value.errors[0]["extensions"]["errorId"]
        await asyncio.sleep(0.2)  # let the server flush its log
        log = deriving_fails.log()
        assert error["extensions"]["errorId"] in log
        assert ws_error in log
        assert "injected fault at pending.derive" in log
    finally:
        await admin.aclose()
