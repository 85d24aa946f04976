"""The built-in demo agent: a real API client that asks, detaches, is resumed and completes its turns.

`turnwise demo` starts it next to the server. It connects exactly like an outside agent would, through
the package's Python agent client (`backend.client.Agent`, a bearer token): it holds `agentPrompts`
for its session, asks with a short timeout so the question detaches, and when the person answers
later it receives the resume prompt, acknowledges it, posts what it got and completes the turn with
the prompt's generation. A newcomer sees the whole lifecycle in the web app.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from typing import Any

import httpx

from backend.client import Agent, GraphQLTransport, Prompt

log = logging.getLogger("turnwise.demo_agent")

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
        self.token = token
        self.ask_timeout = ask_timeout
        self.pause = pause
        self.session_id: str | None = None
        self.agent: Agent | None = None
        self.prompts: asyncio.Queue[Prompt] = asyncio.Queue()

    async def wait_ready(self, seconds: float = 60) -> None:
        async with httpx.AsyncClient(base_url=self.base_url, timeout=5) as http:
            for _ in range(int(seconds / 0.2)):
                with contextlib.suppress(httpx.HTTPError):
                    if (await http.get("/readyz")).status_code == 200:
                        return
                await asyncio.sleep(0.2)
        raise RuntimeError("the server did not become ready")

    async def setup(self) -> str:
        """Operator work (an admin token): a task with one running session for the agent."""
        admin = GraphQLTransport(self.base_url, self.token)
        try:
            task = await admin.execute(CREATE_TASK, {"t": "Demo agent: configure the webhook service"})
            created = await admin.execute(CREATE_SESSION, {"t": task["createTask"]["id"]})
            session_id = str(created["createSession"]["id"])
            await admin.execute(RUNNING, {"s": session_id})
        finally:
            await admin.aclose()
        return session_id

    async def _hold_prompts(self) -> None:
        """The agent runner: holds the session's prompt channel (reconnecting) and queues what arrives."""
        async for prompt in self._agent().prompts():
            await self.prompts.put(prompt)

    def _agent(self) -> Agent:
        if self.agent is None:
            raise RuntimeError("the demo agent is not connected yet")
        return self.agent

    def _session(self) -> str:
        if self.session_id is None:
            raise RuntimeError("the demo agent has no session yet")
        return self.session_id

    async def say(self, text: str) -> None:
        await self._agent().post_message(text)

    async def cycle(self, questions: dict[str, Any]) -> str:
        """One turn with one question; returns how it ended (answered live, or resumed later)."""
        agent = self._agent()
        turn_id = await agent.start_turn()
        await self.say("Working on the webhook service. I need one decision from you.")
        result = await agent.ask([questions], timeout_seconds=self.ask_timeout)
        if result.status == "answered":
            await self.say(f"Thanks, going with: {describe(questions, result.answers)}.")
            await agent.complete_turn(turn_id, turn_id)
            return "answered"
        if result.status != "detached":
            await self.say("The question was closed; continuing without an answer.")
            await agent.complete_turn(turn_id, turn_id)
            return "closed"
        await self.say("No answer yet. I stopped here; answer the question any time and I will pick it up.")
        prompt = await self.prompts.get()
        await prompt.ack()
        answer = prompt.text.split("The user answered: ", 1)[-1].split("\n", 1)[0]
        await self.say(f"Resumed with your answer: {answer}. Done, thanks!")
        await agent.complete_turn(prompt.turn_id, prompt.generation)
        return "resumed"

    async def run(self, *, cycles: int | None = None) -> list[str]:
        await self.wait_ready()
        self.session_id = await self.setup()
        self.agent = Agent(self.base_url, self.token, self.session_id)
        runner = asyncio.create_task(self._hold_prompts())
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
            await self._agent().aclose()
        return ended


def describe(questions: dict[str, Any], answers: list[dict[str, Any]]) -> str:
    labels = {f"q1_opt{i + 1}": o["label"] for i, o in enumerate(questions["options"])}
    parts = []
    for a in answers:
        parts += [labels.get(o, o) for o in a["selectedOptionIds"]]
        if a.get("customText"):
            parts.append(a["customText"])
    return "; ".join(parts) or "(nothing)"
