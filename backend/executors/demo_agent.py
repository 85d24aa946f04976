"""The built-in demo agent: a real API client that asks, detaches, is resumed and completes its turns,
and asks permission before it touches staging.

`turnwise demo` starts it next to the server. It connects exactly like an outside agent would, through
the package's Python agent client (`backend.client.Agent`, a bearer token), in two sessions:

- its own (`DemoSessions.questions`): it holds `agentPrompts`, asks with a short timeout so the
  question detaches, and when the person answers later it receives the resume prompt, acknowledges
  it, posts what it got and completes the turn with the prompt's generation;
- the migration's (`DemoSessions.permission`): it asks `askPermission` to run the migration against
  staging and waits for the decision; allowed, it says it ran it (nothing really runs), denied, that
  it did not.

Started again on the same database (`turnwise demo` keys its seed, `backend.demo`), it takes up what
an earlier run left open rather than asking again: a question or permission request still pending is
asked again identically, which re-attaches to it (same pending id), so it stays answerable and the
agent reacts to its answer; an answer given while no agent was connected reaches it once, as a
resume prompt; a deny given then (which resumes nobody) is read back and reacted to; a request
already reacted to is left alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import httpx

from backend.client import Agent, GraphQLTransport, PermissionResult, Prompt

log = logging.getLogger("turnwise.demo_agent")

CREATE_TASK = "mutation($t: String!) { createTask(title: $t) { id } }"
CREATE_SESSION = "mutation($t: ID!, $p: Boolean!) { createSession(taskId: $t, isPrimary: $p) { id } }"
RUNNING = "mutation($s: ID!) { setSessionState(sessionId: $s, state: RUNNING) { id } }"
SESSIONS = """query($t: ID!) { taskSessions(taskId: $t) { id
  activeClarification { pendingId turnId questions { prompt } } } }"""
PERMISSION = """query($p: ID!) { permission(pendingId: $p) {
  state turnId decision { behavior updatedInput message } } }"""
TURNS = "query($s: ID!) { sessionTurns(sessionId: $s) { id completedAt } }"

ACTIVE = ("ACTIVE_LIVE", "ACTIVE_DETACHED")
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
# The permission request: the same every run, so asking it again re-attaches to an open one.
MIGRATION_TOOL = "Bash"
MIGRATION = {"command": "alembic upgrade head", "description": "Run the migration against staging"}
MIGRATION_ASK = "May I run the migration against staging?"
MIGRATION_TOOL_USE = "demo-staging-migration"


@dataclass(frozen=True, slots=True)
class DemoSessions:
    """Where the demo agent works: its question cycles (`questions`, in `questions_task`) and the
    migration's permission request (`permission`, in `permission_task`); `asked`: the pending id of
    the permission request an earlier run asked there (None: it was never asked)."""

    questions_task: str
    questions: str
    permission_task: str
    permission: str
    asked: str | None = None


class DemoAgent:
    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        sessions: DemoSessions | None = None,
        ask_timeout: float = 15.0,
        pause: float = 20.0,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.sessions = sessions
        self.ask_timeout = ask_timeout
        self.pause = pause
        self.agent: Agent | None = None
        self.migration: Agent | None = None
        self.resumed: asyncio.Queue[str] = asyncio.Queue()  # the texts of resume prompts handled

    async def wait_ready(self, seconds: float = 60) -> None:
        async with httpx.AsyncClient(base_url=self.base_url, timeout=5) as http:
            for _ in range(int(seconds / 0.2)):
                with contextlib.suppress(httpx.HTTPError):
                    if (await http.get("/readyz")).status_code == 200:
                        return
                await asyncio.sleep(0.2)
        raise RuntimeError("the server did not become ready")

    async def _admin(self, query: str, variables: dict[str, Any]) -> dict[str, Any]:
        admin = GraphQLTransport(self.base_url, self.token)
        try:
            return await admin.execute(query, variables)
        finally:
            await admin.aclose()

    async def setup(self) -> DemoSessions:
        """Operator work (an admin token), when nothing was seeded: a task with a running session for
        the questions, and a second one for the permission request."""
        task = (await self._admin(CREATE_TASK, {"t": "Demo agent: configure the webhook service"}))[
            "createTask"
        ]
        task_id = str(task["id"])
        ids = []
        for primary in (True, False):
            created = await self._admin(CREATE_SESSION, {"t": task_id, "p": primary})
            ids.append(str(created["createSession"]["id"]))
            await self._admin(RUNNING, {"s": ids[-1]})
        return DemoSessions(task_id, ids[0], task_id, ids[1])

    def _agent(self) -> Agent:
        if self.agent is None:
            raise RuntimeError("the demo agent is not connected yet")
        return self.agent

    def _migration(self) -> Agent:
        if self.migration is None:
            raise RuntimeError("the demo agent is not connected yet")
        return self.migration

    async def say(self, text: str) -> None:
        await self._agent().post_message(text)

    # --- resume prompts -------------------------------------------------------------------------

    async def _hold_prompts(self, agent: Agent, handle: Callable[[Prompt], Awaitable[None]]) -> None:
        """The agent runner of one session: holds its prompt channel (reconnecting) and handles each
        resume prompt as it arrives, earlier runs' queued ones first."""
        async for prompt in agent.prompts():
            try:
                await handle(prompt)
            except Exception:
                log.exception("demo agent could not handle a resume prompt")

    async def _answered_later(self, prompt: Prompt) -> None:
        """A question answered after it detached: say what the answer was, complete the turn."""
        await prompt.ack()
        answer = prompt.text.split("The user answered: ", 1)[-1].split("\n", 1)[0]
        await self.say(f"Resumed with your answer: {answer}. Done, thanks!")
        await self._agent().complete_turn(prompt.turn_id, prompt.generation)
        self.resumed.put_nowait(prompt.text)

    async def _decided_later(self, prompt: Prompt) -> None:
        """The migration decided while no agent waited on it (an allow resumes the agent)."""
        await prompt.ack()
        allowed = "The user allowed it" in prompt.text
        await self._migration().post_message(_migration_said(allowed, None, MIGRATION, later=True))
        await self._migration().complete_turn(prompt.turn_id, prompt.generation)

    # --- the question cycles --------------------------------------------------------------------

    async def _open_question(self) -> tuple[int, str] | None:
        """The demo question an earlier run left open in its session: (its index, its turn)."""
        sessions = self.sessions
        if sessions is None:
            return None
        found = await self._admin(SESSIONS, {"t": sessions.questions_task})
        for session in found["taskSessions"]:
            bundle = session["activeClarification"]
            if session["id"] != sessions.questions or not bundle or not bundle["turnId"]:
                continue
            prompts = [q["prompt"] for q in bundle["questions"]]
            for index, question in enumerate(QUESTIONS):
                if prompts == [question["prompt"]]:
                    return index, str(bundle["turnId"])
        return None

    async def cycle(self, questions: dict[str, Any], *, open_turn: str | None = None) -> str:
        """One turn with one question; returns how it ended (answered live, or resumed later).
        `open_turn`: the turn of the same question an earlier run left open, taken up again."""
        agent = self._agent()
        turn_id = open_turn
        if turn_id is None:
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
        while str(questions["prompt"]) not in await self.resumed.get():
            pass  # an earlier run's question, answered and handled (`_answered_later`)
        return "resumed"

    # --- the permission request -----------------------------------------------------------------

    async def _ask_to_migrate(self) -> PermissionResult:
        return await self._migration().ask_permission(
            MIGRATION_TOOL, MIGRATION, tool_use_id=MIGRATION_TOOL_USE, context=MIGRATION_ASK
        )

    async def _react(self, outcome: PermissionResult, turn_id: str | None) -> None:
        migration = self._migration()
        if outcome.status in ("allowed", "denied"):
            said = _migration_said(outcome.allowed, outcome.message, outcome.updated_input or MIGRATION)
        else:
            said = "The request was closed without a decision; I did not run the migration."
        await migration.post_message(said)
        if turn_id is not None:
            await migration.complete_turn(turn_id, turn_id)

    async def migrate(self) -> str:
        """Ask to run the migration against staging and react to the decision; or take up the
        request an earlier run asked. How it ended: allowed, denied, closed or "earlier"."""
        sessions = self.sessions
        asked = None if sessions is None else sessions.asked
        if asked is not None:
            view = (await self._admin(PERMISSION, {"p": asked}))["permission"]
            if view is not None and view["state"] in ACTIVE:
                outcome = await self._ask_to_migrate()  # the same request: re-attached, still answerable
                await self._react(outcome, view["turnId"])
                return _ended(outcome)
            if view is not None and await self._denied_while_away(view):
                message = (view["decision"] or {}).get("message")
                await self._react(PermissionResult("denied", asked, message=message), view["turnId"])
                return "denied"
            return "earlier"  # reacted to already, closed, or an allow that reaches us as a prompt
        turn_id = await self._migration().start_turn()
        await self._migration().post_message("The plan is reviewed. Next I would apply it to staging.")
        outcome = await self._ask_to_migrate()
        await self._react(outcome, outcome.turn_id or turn_id)
        return _ended(outcome)

    async def _denied_while_away(self, view: dict[str, Any]) -> bool:
        """A deny given while no agent waited (it resumes nobody), not yet reacted to: its turn is
        still open."""
        decision = view["decision"]
        if decision is None or decision["behavior"] != "DENY" or not view["turnId"]:
            return False
        turns = (await self._admin(TURNS, {"s": self._migration().session_id}))["sessionTurns"]
        return any(t["id"] == view["turnId"] and t["completedAt"] is None for t in turns)

    # --- running --------------------------------------------------------------------------------

    async def run(self, *, cycles: int | None = None) -> list[str]:
        await self.wait_ready()
        if self.sessions is None:
            self.sessions = await self.setup()
        self.agent = Agent(self.base_url, self.token, self.sessions.questions)
        self.migration = Agent(self.base_url, self.token, self.sessions.permission)
        runners = [
            asyncio.create_task(self._hold_prompts(self.agent, self._answered_later)),
            asyncio.create_task(self._hold_prompts(self.migration, self._decided_later)),
            asyncio.create_task(self._migrate_logged()),
        ]
        ended: list[str] = []
        try:
            open_question = await self._open_question()
            for n in itertools.count():
                if cycles is not None and n >= cycles:
                    break
                if open_question is not None:
                    index, turn_id = open_question
                    open_question = None
                    ended.append(await self.cycle(QUESTIONS[index], open_turn=turn_id))
                else:
                    ended.append(await self.cycle(QUESTIONS[n % len(QUESTIONS)]))
                log.info("demo agent turn done", extra={"event": "demo.turn", "how": ended[-1]})
                if cycles is None or n + 1 < cycles:
                    await asyncio.sleep(self.pause)
        finally:
            for runner in runners:
                runner.cancel()
            for result in await asyncio.gather(*runners, return_exceptions=True):
                if isinstance(result, Exception):
                    log.error("demo agent task had failed", exc_info=result)
            await self._agent().aclose()
            await self._migration().aclose()
        return ended

    async def _migrate_logged(self) -> None:
        how = await self.migrate()
        log.info("demo agent migration request done", extra={"event": "demo.migration", "how": how})


def _ended(outcome: PermissionResult) -> str:
    return outcome.status  # allowed | denied | detached | closed


def _migration_said(allowed: bool, reason: str | None, tool_input: Any, *, later: bool = False) -> str:
    """What the agent says it did with the migration."""
    if not allowed:
        why = f" ({reason})" if reason else ""
        return f"You denied it{why}, so I did not run the migration against staging."
    command = tool_input.get("command") if isinstance(tool_input, dict) else None
    when = " while I was away" if later else ""
    return (
        f"You allowed it{when}: I ran `{command or MIGRATION['command']}` against staging "
        "(I am the demo agent: nothing really ran)."
    )


def describe(questions: dict[str, Any], answers: list[dict[str, Any]]) -> str:
    labels = {f"q1_opt{i + 1}": o["label"] for i, o in enumerate(questions["options"])}
    parts = []
    for a in answers:
        parts += [labels.get(o, o) for o in a["selectedOptionIds"]]
        if a.get("customText"):
            parts.append(a["customText"])
    return "; ".join(parts) or "(nothing)"
