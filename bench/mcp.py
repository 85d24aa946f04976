"""The MCP ask -> answer cycle against the GraphQL one, on a real `turnwise serve`.

Per cycle: the agent asks one question (MCP `ask_user_question` through the official client, or
`askClarification` through the package's agent client), a person's client sees it live and answers
over GraphQL, the agent gets the answer. Both sides use the same answerer, so the ratio compares the
agent transports. `python -m bench mcp`.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

CYCLES = 40
PENDING = "query($t: ID!) { taskSessions(taskId: $t) { activeClarification { pendingId state } } }"
RESPOND = """mutation($p: ID!, $a: [ClarificationAnswerInput!]!) {
  respondToClarification(pendingId: $p, answers: $a) { __typename } }"""


def question(n: int) -> dict[str, Any]:
    return {"prompt": f"Cycle {n}: which one?", "options": [{"label": "A"}, {"label": "B"}]}


async def answer_when_live(admin: Any, task_id: str) -> None:
    while True:
        for s in (await admin.execute(PENDING, {"t": task_id}))["taskSessions"]:
            bundle = s["activeClarification"]
            if bundle and bundle["state"] == "ACTIVE_LIVE":
                answers = [{"questionId": "q1", "selectedOptionIds": ["q1_opt1"]}]
                await admin.execute(RESPOND, {"p": bundle["pendingId"], "a": answers})
                return
        await asyncio.sleep(0.002)


async def cycles(ask: Callable[[int], Awaitable[str]], admin: Any, task_id: str) -> list[float]:
    loop = asyncio.get_running_loop()
    samples = []
    for n in range(CYCLES + 5):
        start = loop.time()
        status, _ = await asyncio.gather(ask(n), answer_when_live(admin, task_id))
        assert status == "answered", status
        if n >= 5:  # warm-up
            samples.append(loop.time() - start)
    return samples


async def bench(base_url: str, admin_token: str) -> dict[str, Any]:
    from backend.client import Agent, GraphQLTransport
    from bench.common import median, pct
    from tests.api.gql import running_session, token_for
    from tests.api.test_mcp import mcp_session

    admin = GraphQLTransport(base_url, admin_token)
    out: dict[str, Any] = {}
    try:
        task_gql, session_gql = await running_session(admin, title="bench graphql")  # type: ignore[arg-type]
        _, token_gql = await token_for(admin, "agent", name="bench-gql", session_id=session_gql)  # type: ignore[arg-type]
        async with Agent(base_url, token_gql, session_gql) as agent:

            async def ask_graphql(n: int) -> str:
                return (await agent.ask([question(n)])).status

            gql = await cycles(ask_graphql, admin, task_gql)
        task_mcp, session_mcp = await running_session(admin, title="bench mcp")  # type: ignore[arg-type]
        _, token_mcp = await token_for(admin, "agent", name="bench-mcp", session_id=session_mcp)  # type: ignore[arg-type]
        async with mcp_session(base_url, token_mcp) as mcp:

            async def ask_mcp(n: int) -> str:
                q = question(n)
                args = {"questions": [{"question": q["prompt"], "options": q["options"]}]}
                result = await mcp.call_tool("ask_user_question", args)
                assert result.structured_content is not None, result
                return str(result.structured_content["status"])

            over_mcp = await cycles(ask_mcp, admin, task_mcp)
    finally:
        await admin.aclose()
    for name, samples in (("graphql", gql), ("mcp", over_mcp)):
        out[f"{name}_p50_ms"] = median(samples) * 1e3
        out[f"{name}_p99_ms"] = pct(samples, 99) * 1e3
    out["mcp_over_graphql_p50"] = out["mcp_p50_ms"] / out["graphql_p50_ms"]
    out["cycles"] = CYCLES
    return out


def main() -> None:
    sys.path.insert(0, str(Path(__file__).parents[1]))  # the tests package: real servers
    from bench.common import write_result
    from tests.servers import ADMIN_TOKEN, Server, drop_database, fresh_database

    results: dict[str, Any] = {}
    for dialect in ("sqlite", "postgresql"):
        url = fresh_database(dialect)
        server = Server(url).start()
        try:
            results[dialect] = asyncio.run(bench(server.base_url, ADMIN_TOKEN))
        finally:
            server.stop()
            drop_database(url)
        print(json.dumps({dialect: results[dialect]}, indent=2), flush=True)
    print(f"written {write_result('mcp', results)}")
