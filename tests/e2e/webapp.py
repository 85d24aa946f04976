"""Driving the web app in tests: the API as an agent uses it, the page, and the network around it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from playwright.async_api import Error as PlaywrightError

from tests.api.client import Client
from tests.servers import ADMIN_TOKEN, Server

DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}

CREATE_TASK = "mutation($t: String!) { createTask(title: $t) { id } }"
CREATE_SESSION = "mutation($task: ID!, $p: Boolean!) { createSession(taskId: $task, isPrimary: $p) { id } }"
SET_STATE = "mutation($s: ID!, $st: SessionState!) { setSessionState(sessionId: $s, state: $st) { id } }"
START_TURN = "mutation($s: ID!) { startTurn(sessionId: $s) { id } }"
COMPLETE_TURN = "mutation($t: ID!) { completeTurn(turnId: $t) { id } }"
POST = """mutation($s: ID!, $c: String!, $a: String!) {
  postMessage(sessionId: $s, content: $c, author: $a) { id } }"""
RESPOND = """mutation($p: ID!, $a: [ClarificationAnswerInput!]!, $r: Boolean!) {
  respondToClarification(pendingId: $p, answers: $a, rejected: $r) { __typename } }"""
BUNDLE = """query($p: ID!) { clarification(pendingId: $p) { state
  questions { status response { selectedOptionIds customText } } } }"""
ASK = """subscription($s: ID!, $q: [ClarificationQuestionInput!]!, $c: String, $t: Float) {
  askClarification(sessionId: $s, questions: $q, context: $c, timeoutSeconds: $t) {
    __typename
    ... on ClarificationAsked { bundle { pendingId state } }
    ... on ClarificationAnswered { pendingId answers { questionId selectedOptionIds customText } }
    ... on ClarificationRejected { pendingId }
    ... on ClarificationDetached { pendingId }
  } }"""
PROMPTS = "subscription($s: ID!) { agentPrompts(sessionId: $s) { sessionId turnId generation prompt } }"
ACK = "mutation($t: ID!) { acknowledgePrompt(turnId: $t, accepted: true) }"


def question(
    prompt: str = "Which retry policy should the webhook use?",
    *,
    qid: str = "policy",
    options: tuple[str, ...] = ("Exponential backoff", "Fixed delay"),
    multi: bool = False,
) -> dict[str, Any]:
    return {
        "id": qid,
        "title": "Retry",
        "prompt": prompt,
        "multiSelect": multi,
        "options": [{"id": f"{qid}_opt{i + 1}", "label": label} for i, label in enumerate(options)],
    }


class Api:
    """The admin and agent side of a scenario, over the real server's GraphQL API."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.client = Client(server.base_url, ADMIN_TOKEN)
        self.open_turns: dict[str, str] = {}

    async def aclose(self) -> None:
        await self.client.aclose()

    async def task(self, title: str, sessions: int = 1) -> tuple[str, list[str]]:
        """A task with ``sessions`` RUNNING sessions (the first primary), each with an open turn."""
        task_id = (await self.client.execute(CREATE_TASK, {"t": title}))["createTask"]["id"]
        ids = []
        for n in range(sessions):
            created = await self.client.execute(CREATE_SESSION, {"task": task_id, "p": n == 0})
            session_id = created["createSession"]["id"]
            await self.client.execute(SET_STATE, {"s": session_id, "st": "RUNNING"})
            await self.start_turn(session_id)
            await self.client.execute(POST, {"s": session_id, "c": f"Working on step {n + 1}.", "a": "agent"})
            ids.append(session_id)
        return task_id, ids

    async def start_turn(self, session_id: str) -> str:
        """A new turn; the session's previous turn, still open, completes first as an agent's would."""
        previous = self.open_turns.pop(session_id, None)
        if previous is not None:
            await self.complete_turn(previous)
        turn_id = str((await self.client.execute(START_TURN, {"s": session_id}))["startTurn"]["id"])
        self.open_turns[session_id] = turn_id
        return turn_id

    async def complete_turn(self, turn_id: str) -> None:
        await self.client.execute(COMPLETE_TURN, {"t": turn_id})
        for session_id, open_turn in list(self.open_turns.items()):
            if open_turn == turn_id:
                del self.open_turns[session_id]

    async def respond(self, pending_id: str, answers: list[dict[str, Any]], rejected: bool = False) -> str:
        data = await self.client.execute(RESPOND, {"p": pending_id, "a": answers, "r": rejected})
        return str(data["respondToClarification"]["__typename"])

    async def bundle(self, pending_id: str) -> dict[str, Any]:
        return dict((await self.client.execute(BUNDLE, {"p": pending_id}))["clarification"])

    async def ask(
        self,
        session_id: str,
        questions: list[dict[str, Any]] | None = None,
        *,
        context: str | None = None,
        wait_seconds: float | None = None,
    ) -> Agent:
        """Ask like an agent; ``wait_seconds`` is the agent's wait before the question detaches."""
        agent = Agent(self.client, session_id, questions or [question()], context, wait_seconds)
        await agent.start()
        return agent


def _retrieve(future: asyncio.Future[Any]) -> None:
    # A test that never asks for the outcome must not log "exception was never retrieved".
    if not future.cancelled():
        future.exception()


class Agent:
    """One askClarification call held open like a connected agent's tool call."""

    def __init__(
        self,
        client: Client,
        session_id: str,
        questions: list[dict[str, Any]],
        context: str | None,
        timeout: float | None,
    ) -> None:
        self.client = client
        self.variables = {"s": session_id, "q": questions, "c": context, "t": timeout}
        loop = asyncio.get_running_loop()
        self._asked: asyncio.Future[dict[str, Any]] = loop.create_future()
        self._outcome: asyncio.Future[dict[str, Any]] = loop.create_future()
        self._task: asyncio.Task[None] | None = None
        for future in (self._asked, self._outcome):
            future.add_done_callback(_retrieve)

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run())
        await asyncio.wait_for(asyncio.shield(self._asked), 15)

    async def _run(self) -> None:
        try:
            async with self.client.subscribe(ASK, self.variables) as sub:
                asked = (await sub.next(timeout=15))["askClarification"]
                self._asked.set_result(asked["bundle"])
                outcome = (await sub.next(timeout=300))["askClarification"]
                self._outcome.set_result(outcome)
        except BaseException as error:
            for future in (self._asked, self._outcome):
                if not future.done():
                    future.set_exception(error if isinstance(error, Exception) else RuntimeError("cancelled"))
            if isinstance(error, asyncio.CancelledError):
                raise

    @property
    def pending_id(self) -> str:
        return str(self._asked.result()["pendingId"])

    async def outcome(self, seconds: float = 15) -> dict[str, Any]:
        return await asyncio.wait_for(asyncio.shield(self._outcome), seconds)

    async def disconnect(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task


@contextlib.asynccontextmanager
async def runner(api: Api, session_id: str) -> AsyncIterator[list[dict[str, Any]]]:
    """An agent runner holding the session's prompt channel, accepting every resume prompt."""
    prompts: list[dict[str, Any]] = []

    async def serve() -> None:
        async with api.client.subscribe(PROMPTS, {"s": session_id}) as sub:
            while True:
                dispatch = (await sub.next(timeout=300))["agentPrompts"]
                prompts.append(dispatch)
                await api.client.execute(ACK, {"t": dispatch["turnId"]})

    task = asyncio.create_task(serve())
    # The channel is held once the server has run the subscription's first step (it sends nothing
    # to say so); leave it ample time, even on a loaded machine.
    await asyncio.sleep(1.5)
    try:
        yield prompts
    finally:
        task.cancel()
        with contextlib.suppress(BaseException):
            await task


class Network:
    """Blocks and records every request that leaves the local server."""

    def __init__(self, origin: str) -> None:
        self.origin = origin
        self.outside: list[str] = []

    async def guard(self, route: Any) -> None:
        url = route.request.url
        if url.startswith((self.origin, "data:", "blob:")):
            await route.fallback()
        else:
            self.outside.append(url)
            await route.abort()


class Held:
    """Holds back the first ``times`` GraphQL requests naming ``operation``, answered with the
    response the server gave when they were sent, until ``release``."""

    def __init__(self, operation: str, times: int = 1) -> None:
        self.operation = operation
        self.remaining = times
        self.seen = asyncio.Event()
        self.released = asyncio.Event()
        self.delivered: list[bool] = []
        self.done = asyncio.Event()  # the held response was handed to the page (or the page gave up)

    async def handle(self, route: Any) -> None:
        body = route.request.post_data or ""
        if self.remaining <= 0 or f"query {self.operation}" not in body:
            await route.fallback()
            return
        self.remaining -= 1
        response = await route.fetch()  # the server's answer now: the state the load started from
        self.seen.set()
        await self.released.wait()
        try:
            await route.fulfill(response=response)
            self.delivered.append(True)
        except PlaywrightError:  # the page aborted the request meanwhile
            self.delivered.append(False)
        finally:
            self.done.set()

    def release(self) -> None:
        self.released.set()


async def open_app(page: Any, server: Server, path: str = "/", *, phone: bool = False) -> Network:
    """Sign in through ``#token=`` and wait until the task list is interactive."""
    network = Network(server.base_url)
    await page.context.route("**/*", network.guard)
    await page.set_viewport_size(PHONE if phone else DESKTOP)
    await page.goto(server.base_url + path + "#token=" + ADMIN_TOKEN)
    await page.wait_for_selector("html[data-ready=true]", state="attached", timeout=20_000)
    return network


async def activate(page: Any, task_id: str, *, phone: bool) -> None:
    """Click the task's row: in the sidebar, or in the drawer after opening it."""
    if phone:
        await page.get_by_test_id("task-drawer-toggle").click()
        await page.get_by_test_id("task-drawer").wait_for(state="visible")
    await page.get_by_test_id(f"task-row-{task_id}").click()


async def activations_finished(page: Any, count: int) -> str:
    """Wait until ``count`` task activations have ended (stale ones too); the last one's result."""
    await page.wait_for_selector(f'html[data-activations="{count}"]', state="attached")
    return str(await page.get_attribute("html", "data-last-activation"))


def path_of(page: Any) -> str:
    url = str(page.url)
    return "/" + url.split("://", 1)[1].split("/", 1)[1].split("#", 1)[0] if "://" in url else url
