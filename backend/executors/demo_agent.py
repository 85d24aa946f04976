"""The built-in demo agent: a real API client that asks, detaches, is resumed and completes its turns.

`turnwise demo` starts it next to the server. It connects exactly like an outside agent would
(graphql-transport-ws with a bearer token): it holds `agentPrompts` for its session, asks through the
`askClarification` subscription with a short timeout so the question detaches, and when the person
answers later it receives the resume prompt, acknowledges it, posts what it got and completes the
turn with the prompt's generation. A newcomer sees the whole lifecycle in the web app.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import httpx
import websockets

log = logging.getLogger("turnwise.demo_agent")

ASK = """subscription($s: ID!, $q: [ClarificationQuestionInput!]!, $t: Float) {
  askClarification(sessionId: $s, questions: $q, timeoutSeconds: $t) {
    __typename
    ... on ClarificationAsked { bundle { pendingId turnId } }
    ... on ClarificationAnswered { pendingId answers { questionId selectedOptionIds customText } }
  } }"""
PROMPTS = "subscription($s: ID!) { agentPrompts(sessionId: $s) { sessionId turnId generation prompt } }"
ACK = "mutation($t: ID!) { acknowledgePrompt(turnId: $t, accepted: true) }"
POST = "mutation($s: ID!, $c: String!) { postMessage(sessionId: $s, content: $c) { id turnId } }"
COMPLETE = "mutation($t: ID!, $g: String) { completeTurn(turnId: $t, generation: $g) { id } }"
START = "mutation($s: ID!) { startTurn(sessionId: $s) { id } }"
CREATE_TASK = "mutation($t: String!) { createTask(title: $t) { id } }"
CREATE_SESSION = "mutation($t: ID!) { createSession(taskId: $t, isPrimary: true) { id } }"
RUNNING = "mutation($s: ID!) { setSessionState(sessionId: $s, state: RUNNING) { id } }"

QUESTIONS = [
    {
        "title": "Database",
        "prompt": "Which database should the demo service use?",
        "options": [
            {"label": "SQLite", "description": "embedded, zero setup"},
            {"label": "PostgreSQL", "description": "for several server processes"},
        ],
    },
    {
        "title": "Retries",
        "prompt": "How many times should a failed webhook be retried?",
        "options": [{"label": "3 times"}, {"label": "5 times"}, {"label": "never"}],
    },
]


class DemoAgent:
    def __init__(self, base_url: str, token: str, *, ask_timeout: float = 15.0, pause: float = 20.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.ws_url = self.base_url.replace("http", "ws", 1) + "/graphql"
        self.token = token
        self.ask_timeout = ask_timeout
        self.pause = pause
        self.session_id: str | None = None
        self.prompts: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.http = httpx.AsyncClient(
            base_url=self.base_url, headers={"Authorization": f"Bearer {token}"}, timeout=60
        )

    async def execute(self, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
        response = await self.http.post("/graphql", json={"query": query, "variables": variables or {}})
        body = response.json()
        if body.get("errors"):
            raise RuntimeError(json.dumps(body["errors"]))
        return dict(body["data"])

    @contextlib.asynccontextmanager
    async def subscribe(
        self, query: str, variables: dict[str, Any]
    ) -> AsyncIterator[AsyncIterator[dict[str, Any]]]:
        async with websockets.connect(
            self.ws_url, subprotocols=[websockets.Subprotocol("graphql-transport-ws")]
        ) as ws:
            await ws.send(json.dumps({"type": "connection_init", "payload": {"token": self.token}}))
            ack = json.loads(await ws.recv())
            if ack.get("type") != "connection_ack":
                raise RuntimeError(f"connection refused: {ack}")
            await ws.send(
                json.dumps(
                    {"id": "1", "type": "subscribe", "payload": {"query": query, "variables": variables}}
                )
            )

            async def results() -> AsyncIterator[dict[str, Any]]:
                async for raw in ws:
                    msg = json.loads(raw)
                    if msg["type"] == "ping":
                        await ws.send(json.dumps({"type": "pong"}))
                    elif msg["type"] == "next":
                        if msg["payload"].get("errors"):
                            raise RuntimeError(json.dumps(msg["payload"]["errors"]))
                        yield dict(msg["payload"]["data"])
                    elif msg["type"] in ("error", "complete"):
                        return

            yield results()

    async def wait_ready(self, seconds: float = 60) -> None:
        for _ in range(int(seconds / 0.2)):
            with contextlib.suppress(httpx.HTTPError):
                if (await self.http.get("/readyz")).status_code == 200:
                    return
            await asyncio.sleep(0.2)
        raise RuntimeError("the server did not become ready")

    async def setup(self) -> str:
        task = (await self.execute(CREATE_TASK, {"t": "Demo agent: configure the webhook service"}))[
            "createTask"
        ]
        session_id = str((await self.execute(CREATE_SESSION, {"t": task["id"]}))["createSession"]["id"])
        await self.execute(RUNNING, {"s": session_id})
        return session_id

    async def _hold_prompts(self, session_id: str) -> None:
        """The agent runner: holds the session's prompt channel and queues what arrives."""
        while True:
            try:
                async with self.subscribe(PROMPTS, {"s": session_id}) as prompts:
                    async for data in prompts:
                        await self.prompts.put(data["agentPrompts"])
            except asyncio.CancelledError:
                raise
            except Exception:
                log.warning("prompt channel lost; reconnecting", exc_info=True)
            await asyncio.sleep(1)

    def _session(self) -> str:
        if self.session_id is None:
            raise RuntimeError("the demo agent has no session yet")
        return self.session_id

    async def say(self, text: str) -> None:
        await self.execute(POST, {"s": self._session(), "c": text})

    async def cycle(self, questions: dict[str, Any]) -> str:
        """One turn with one question; returns how it ended (answered live, or resumed later)."""
        session_id = self._session()
        turn_id = str((await self.execute(START, {"s": session_id}))["startTurn"]["id"])
        await self.say("Working on the webhook service. I need one decision from you.")
        outcome: dict[str, Any] = {}
        async with self.subscribe(ASK, {"s": session_id, "q": [questions], "t": self.ask_timeout}) as results:
            async for data in results:
                outcome = data["askClarification"]
                if outcome["__typename"] != "ClarificationAsked":
                    break
        kind = outcome.get("__typename")
        if kind == "ClarificationAnswered":
            await self.say(f"Thanks, going with: {describe(questions, outcome['answers'])}.")
            await self.execute(COMPLETE, {"t": turn_id, "g": turn_id})
            return "answered"
        if kind != "ClarificationDetached":
            await self.say("The question was closed; continuing without an answer.")
            await self.execute(COMPLETE, {"t": turn_id, "g": turn_id})
            return "closed"
        await self.say("No answer yet. I stopped here; answer the question any time and I will pick it up.")
        prompt = await self.prompts.get()
        await self.execute(ACK, {"t": prompt["turnId"]})
        answer = prompt["prompt"].split("The user answered: ", 1)[-1].split("\n", 1)[0]
        await self.say(f"Resumed with your answer: {answer}. Done, thanks!")
        await self.execute(COMPLETE, {"t": prompt["turnId"], "g": prompt["generation"]})
        return "resumed"

    async def run(self, *, cycles: int | None = None) -> list[str]:
        await self.wait_ready()
        self.session_id = await self.setup()
        runner = asyncio.create_task(self._hold_prompts(self.session_id))
        ended: list[str] = []
        try:
            for n in itertools.count():
                if cycles is not None and n >= cycles:
                    break
                ended.append(await self.cycle(QUESTIONS[n % len(QUESTIONS)]))
                log.info("demo agent turn done", extra={"event": "demo.turn", "how": ended[-1]})
                if cycles is None or n + 1 < cycles:
                    await asyncio.sleep(self.pause)
        finally:
            runner.cancel()
            try:
                await runner
            except asyncio.CancelledError:
                pass
            except Exception:
                log.exception("demo agent prompt runner had failed")
            await self.http.aclose()
        return ended


def describe(questions: dict[str, Any], answers: list[dict[str, Any]]) -> str:
    labels = {f"q1_opt{i + 1}": o["label"] for i, o in enumerate(questions["options"])}
    parts = []
    for a in answers:
        parts += [labels.get(o, o) for o in a["selectedOptionIds"]]
        if a.get("customText"):
            parts.append(a["customText"])
    return "; ".join(parts) or "(nothing)"
