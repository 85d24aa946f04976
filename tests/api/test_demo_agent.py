"""The built-in demo agent connects through the API: its question detaches, a late answer resumes it."""

from __future__ import annotations

import asyncio

from backend.executors.demo_agent import DemoAgent
from tests.api.client import Client
from tests.api.test_clarification_api import RESPOND
from tests.servers import ADMIN_TOKEN, Server

ACTIVE = """{ tasks { title sessions { id activeClarification { pendingId state } } } }"""
MESSAGES = "query($s: ID!) { sessionMessages(sessionId: $s) { content } }"


async def test_demo_agent_question_detaches_and_a_late_answer_resumes_it(
    server: Server, admin: Client
) -> None:
    agent = DemoAgent(server.base_url, ADMIN_TOKEN, ask_timeout=0.3, pause=0)
    run = asyncio.create_task(agent.run(cycles=1))
    pending_id = session_id = None
    for _ in range(200):
        for task in (await admin.execute(ACTIVE))["tasks"]:
            for s in task["sessions"]:
                bundle = s["activeClarification"]
                if task["title"].startswith("Demo agent") and bundle and bundle["state"] == "ACTIVE_DETACHED":
                    pending_id, session_id = bundle["pendingId"], s["id"]
        if pending_id:
            break
        await asyncio.sleep(0.05)
    assert pending_id is not None, "the demo agent's question never detached"
    answer = [{"questionId": "q1", "selectedOptionIds": ["q1_opt2"]}]
    result = (await admin.execute(RESPOND, {"p": pending_id, "a": answer, "r": False}))[
        "respondToClarification"
    ]
    assert result == {**result, "__typename": "ClarificationResponded", "resumed": True}
    assert await asyncio.wait_for(run, 20) == ["resumed"]
    contents = [m["content"] for m in (await admin.execute(MESSAGES, {"s": session_id}))["sessionMessages"]]
    assert any("Resumed with your answer: PostgreSQL" in c for c in contents)
