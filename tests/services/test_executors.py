"""Executors classify every dispatch as accepted, rejected (provably undelivered) or ambiguous."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from backend.db.engine import Database
from backend.executors.base import DispatchOutcome, PromptRequest
from backend.executors.scripted import ScriptedExecutor
from backend.executors.webhook import WebhookExecutor
from backend.repository import tasks, turns
from backend.services.prompt_channel import PromptChannel
from tests.servers import free_port
from tests.services.support import services_for


def request(turn_id: str = "turn-1", session_id: str = "s1") -> PromptRequest:
    return PromptRequest(
        session_id=session_id,
        task_id="task1",
        turn_id=turn_id,
        generation="g1",
        prompt="You previously asked the user: ...",
    )


class _Hook(BaseHTTPRequestHandler):
    behaviour = "ok"
    received: list[dict[str, object]] = []  # noqa: RUF012 - one receiver per test module

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _Hook.received.append(body)
        if _Hook.behaviour == "slow":
            threading.Event().wait(2)
        status = {"ok": 202, "refuse": 409, "broken": 500, "slow": 200}[_Hook.behaviour]
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def hook() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hook)
    _Hook.received = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/prompt"
    server.shutdown()


@pytest.mark.parametrize(
    ("behaviour", "outcome"),
    [
        ("ok", DispatchOutcome.ACCEPTED),
        ("refuse", DispatchOutcome.REJECTED),
        ("broken", DispatchOutcome.REJECTED),
        ("slow", DispatchOutcome.AMBIGUOUS),
    ],
)
async def test_webhook_status_decides_the_outcome(
    hook: str, behaviour: str, outcome: DispatchOutcome
) -> None:
    _Hook.behaviour = behaviour
    result = await WebhookExecutor(hook).dispatch(request(), deadline_seconds=0.5)
    assert result.outcome is outcome
    assert _Hook.received[-1]["turn_id"] == "turn-1"
    assert _Hook.received[-1]["type"] == "prompt"


async def test_webhook_that_cannot_be_reached_is_a_known_non_delivery() -> None:
    result = await WebhookExecutor(f"http://127.0.0.1:{free_port()}/x").dispatch(
        request(), deadline_seconds=1
    )
    assert result.outcome is DispatchOutcome.REJECTED


async def test_scripted_executor_follows_its_script_and_logs_every_dispatch(tmp_path: object) -> None:
    log = f"{tmp_path}/dispatches.jsonl"
    executor = ScriptedExecutor(["rejected", "accepted"], log)
    outcomes = [(await executor.dispatch(request(f"t{i}"), deadline_seconds=1)).outcome for i in range(3)]
    assert outcomes == [DispatchOutcome.REJECTED, DispatchOutcome.ACCEPTED, DispatchOutcome.ACCEPTED]
    lines = Path(log).read_text().splitlines()  # noqa: ASYNC240 - the executor has finished writing
    assert [json.loads(line)["turn_id"] for line in lines] == ["t0", "t1", "t2"]


async def _reserved_turn(db: Database) -> tuple[str, str]:
    async with db.write() as conn:
        task = await tasks.create_task(conn, "t")
        session = await tasks.create_session(conn, task.id, is_primary=True, input_capable=True)
        turn = await turns.insert_turn(conn, session.id, {"prompt_dispatch_pending": True})
    return session.id, turn.id


async def test_prompt_channel_without_a_runner_rejects_synchronously(db: Database) -> None:
    session_id, turn_id = await _reserved_turn(db)
    async with services_for(db) as services:
        result = await services.prompts.dispatch(request(turn_id, session_id), deadline_seconds=2)
    assert result.outcome is DispatchOutcome.REJECTED


@pytest.mark.parametrize("accepted", [True, False])
async def test_prompt_channel_delivers_to_the_runner_and_returns_its_answer(
    db: Database, accepted: bool
) -> None:
    session_id, turn_id = await _reserved_turn(db)
    async with services_for(db) as services:
        channel: PromptChannel = services.prompts
        async with channel.hold(session_id) as prompts:
            runner_got: list[PromptRequest] = []

            async def runner() -> None:
                async for p in prompts:
                    runner_got.append(p)
                    assert await channel.acknowledge(p.turn_id, accepted)
                    return

            task = asyncio.create_task(runner())
            await asyncio.sleep(0.05)
            result = await channel.dispatch(request(turn_id, session_id), deadline_seconds=5)
            await task
    assert result.outcome is (DispatchOutcome.ACCEPTED if accepted else DispatchOutcome.REJECTED)
    assert [p.turn_id for p in runner_got] == [turn_id]


async def test_prompt_channel_unacknowledged_dispatch_is_ambiguous(db: Database) -> None:
    session_id, turn_id = await _reserved_turn(db)
    async with services_for(db) as services, services.prompts.hold(session_id):
        result = await services.prompts.dispatch(request(turn_id, session_id), deadline_seconds=0.3)
    assert result.outcome is DispatchOutcome.AMBIGUOUS


async def test_a_newer_runner_takes_the_channel_over(db: Database) -> None:
    session_id, turn_id = await _reserved_turn(db)
    async with services_for(db) as services:
        channel = services.prompts
        async with channel.hold(session_id) as old, channel.hold(session_id) as new:
            got: dict[str, list[str]] = {"old": [], "new": []}

            async def drain(name: str, prompts: object) -> None:
                async for p in prompts:  # type: ignore[attr-defined]
                    got[name].append(p.turn_id)
                    await channel.acknowledge(p.turn_id, True)

            tasks_ = [asyncio.create_task(drain("old", old)), asyncio.create_task(drain("new", new))]
            await asyncio.sleep(0.05)
            result = await channel.dispatch(request(turn_id, session_id), deadline_seconds=2)
            await asyncio.sleep(0.05)
            for t in tasks_:
                t.cancel()
    assert result.outcome is DispatchOutcome.ACCEPTED
    assert got == {"old": [], "new": [turn_id]}


async def test_acknowledging_a_turn_that_is_not_an_outstanding_dispatch_returns_false(db: Database) -> None:
    async with db.write() as conn:
        task = await tasks.create_task(conn, "t")
        session = await tasks.create_session(conn, task.id, is_primary=True, input_capable=True)
        turn = await turns.insert_turn(conn, session.id)
    async with services_for(db) as services:
        assert await services.prompts.acknowledge(turn.id, True) is False
