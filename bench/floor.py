"""The floors: what Turnwise's work costs on its own framework, with no rules.

For `bench cycle`: a minimal Strawberry app on Starlette/uvicorn/asyncpg serving the same two
operation documents as Turnwise (`askClarification`, `respondToClarification`) with three commits per
cycle (insert the question, claim the answer, confirm it), an in-process hand-off, and no rules: no
auth, no sessions or turns, no validation beyond GraphQL's. `python -m bench.floor --dsn
postgresql://... --port N [--pool-size K]` (K: the most connections of its asyncpg pool, 20 by
default; `bench cycle` sizes it from PostgreSQL's free connections). It counts its statements and
transactions at `/metrics` the way `turnwise serve` does.

For `bench connections` (`--live`, no database): the same subscription as Turnwise's,
`pendingActionChanged(taskId)` with the same result type, a snapshot of the task's sessions first and
then changes, fed by an in-process asyncio fan-out (a queue per subscriber); `POST /publish` with
`{"taskId", "sessionId", "pendingAction"}` changes a session and offers the new projection to every
subscriber of its task. `python -m bench.floor --live --port N`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import enum
import gc
import json
import uuid
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Annotated, Any

import asyncpg  # type: ignore[import-untyped]
import strawberry
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse
from starlette.routing import Route, WebSocketRoute
from strawberry.asgi import GraphQL
from strawberry.extensions import ParserCache, ValidationCache

DDL = """CREATE TABLE IF NOT EXISTS floor_questions (
  pending_id text PRIMARY KEY, session_id text NOT NULL, questions jsonb NOT NULL,
  status text NOT NULL, response jsonb)"""


class State:
    pool: asyncpg.Pool
    statements = 0
    transactions = 0
    # pending_id -> the waiter's inbox: (answers, confirmation future)
    waiters: dict[str, asyncio.Queue[tuple[list[dict[str, Any]], asyncio.Future[bool]]]] = {}  # noqa: RUF012

    @classmethod
    async def commit(cls, sql: str, *args: Any) -> Any:
        async with cls.pool.acquire() as conn, conn.transaction():
            cls.statements += 1
            result = await conn.fetchval(sql, *args)
        cls.transactions += 1
        return result


@strawberry.input
class ClarificationOptionInput:
    id: strawberry.ID | None = None
    label: str
    description: str | None = None


@strawberry.input
class ClarificationQuestionInput:
    id: strawberry.ID | None = None
    title: str | None = None
    prompt: str
    options: list[ClarificationOptionInput]
    multi_select: bool | None = False


@strawberry.input
class ClarificationAnswerInput:
    question_id: strawberry.ID
    selected_option_ids: list[strawberry.ID] = strawberry.field(default_factory=list)
    custom_text: str | None = None


@strawberry.type
class ClarificationBundle:
    pending_id: strawberry.ID


@strawberry.type
class ClarificationAsked:
    bundle: ClarificationBundle


@strawberry.type
class ClarificationAnswered:
    pending_id: strawberry.ID


@strawberry.type
class ClarificationDetached:
    pending_id: strawberry.ID


@strawberry.type
class ClarificationResponded:
    resumed: bool


@strawberry.type
class ClarificationConflict:
    pending_id: strawberry.ID
    reason: str


Outcome = Annotated[
    ClarificationAsked | ClarificationAnswered | ClarificationDetached,
    strawberry.union("ClarificationOutcome"),
]
RespondResult = Annotated[
    ClarificationResponded | ClarificationConflict, strawberry.union("RespondToClarificationResult")
]


@strawberry.type
class Query:
    @strawberry.field
    def ok(self) -> bool:
        return True


@strawberry.type
class Mutation:
    @strawberry.mutation
    async def respond_to_clarification(
        self,
        pending_id: strawberry.ID,
        answers: list[ClarificationAnswerInput],
    ) -> RespondResult:
        data = [
            {"question_id": str(a.question_id), "selected": [str(s) for s in a.selected_option_ids]}
            for a in answers
        ]
        claimed = await State.commit(
            "UPDATE floor_questions SET status = 'claimed', response = $2::jsonb "
            "WHERE pending_id = $1 AND status = 'pending' RETURNING pending_id",
            str(pending_id),
            json.dumps(data),
        )
        inbox = State.waiters.get(str(pending_id))
        if claimed is None or inbox is None:
            return ClarificationConflict(pending_id=pending_id, reason="DELIVERY_CLAIMED")
        confirmed: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        await inbox.put((data, confirmed))
        await confirmed
        return ClarificationResponded(resumed=False)


@strawberry.type
class Subscription:
    @strawberry.subscription
    async def ask_clarification(
        self,
        session_id: strawberry.ID,
        questions: list[ClarificationQuestionInput],
        timeout_seconds: float | None = None,
    ) -> AsyncGenerator[Outcome, None]:
        pending_id = uuid.uuid4().hex
        stored = [{"prompt": q.prompt, "options": [o.label for o in q.options]} for q in questions]
        inbox: asyncio.Queue[tuple[list[dict[str, Any]], asyncio.Future[bool]]] = asyncio.Queue()
        State.waiters[pending_id] = inbox
        try:
            await State.commit(
                "INSERT INTO floor_questions VALUES ($1, $2, $3::jsonb, 'pending', NULL) RETURNING 1",
                pending_id,
                str(session_id),
                json.dumps(stored),
            )
            yield ClarificationAsked(bundle=ClarificationBundle(pending_id=strawberry.ID(pending_id)))
            try:
                _answers, confirmed = await asyncio.wait_for(inbox.get(), timeout_seconds or 3600)
            except TimeoutError:
                yield ClarificationDetached(pending_id=strawberry.ID(pending_id))
                return
            await State.commit(
                "UPDATE floor_questions SET status = 'answered' "
                "WHERE pending_id = $1 AND status = 'claimed' RETURNING 1",
                pending_id,
            )
            confirmed.set_result(True)
            yield ClarificationAnswered(pending_id=strawberry.ID(pending_id))
        finally:
            State.waiters.pop(pending_id, None)


async def _keep_session(_conn: asyncpg.Connection) -> None:
    return None


def create_app(dsn: str, pool_size: int = 20) -> Starlette:
    schema = strawberry.Schema(
        query=Query, mutation=Mutation, subscription=Subscription, extensions=[ParserCache, ValidationCache]
    )
    view: GraphQL[None, None] = GraphQL(schema, graphql_ide=None)

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        # No reset query on release: it would be one more transaction per commit at the database.
        State.pool = await asyncpg.create_pool(
            dsn, min_size=min(2, pool_size), max_size=pool_size, reset=_keep_session
        )
        async with State.pool.acquire() as conn:
            await conn.execute(DDL)
        try:
            yield
        finally:
            await State.pool.close()

    async def metrics(_: Request) -> PlainTextResponse:
        return PlainTextResponse(
            f"turnwise_db_statements_total {State.statements}\n"
            f"turnwise_db_transactions_total {State.transactions}\n"
        )

    async def readyz(_: Request) -> PlainTextResponse:
        return PlainTextResponse("ready")

    return Starlette(
        routes=[
            Route("/graphql", view, methods=["GET", "POST"]),
            WebSocketRoute("/graphql", view),
            Route("/metrics", metrics),
            Route("/readyz", readyz),
        ],
        lifespan=lifespan,
    )


# --- the live floor (`bench connections`) -------------------------------------------------------


@strawberry.enum
class PendingActionKind(enum.Enum):
    CLARIFICATION = "clarification"
    PERMISSION = "permission"


@strawberry.type
class PendingActionRevision:
    epoch: str
    sequence: str


@strawberry.type
class SessionProjection:
    session_id: strawberry.ID
    pending_action: PendingActionKind | None
    revision: PendingActionRevision


class Live:
    """Each task's sessions (session -> projection) and each task's subscribers' queues."""

    sessions: dict[str, dict[str, SessionProjection]] = {}  # noqa: RUF012
    watchers: dict[str, set[asyncio.Queue[SessionProjection]]] = {}  # noqa: RUF012
    sequence = 1

    @classmethod
    def projections(cls, task_id: str) -> dict[str, SessionProjection]:
        """The task's sessions; a task seen first has one session, with nothing pending."""
        if task_id not in cls.sessions:
            revision = PendingActionRevision(epoch="1", sequence=str(cls.sequence))
            session = SessionProjection(
                session_id=strawberry.ID(f"{task_id}-session"), pending_action=None, revision=revision
            )
            cls.sessions[task_id] = {str(session.session_id): session}
        return cls.sessions[task_id]

    @classmethod
    def publish(cls, task_id: str, session_id: str, pending_action: str | None) -> int:
        cls.sequence += 1
        projection = SessionProjection(
            session_id=strawberry.ID(session_id),
            pending_action=None if pending_action is None else PendingActionKind[pending_action],
            revision=PendingActionRevision(epoch="1", sequence=str(cls.sequence)),
        )
        cls.projections(task_id)[session_id] = projection
        watchers = cls.watchers.get(task_id, set())
        for queue in watchers:
            queue.put_nowait(projection)
        return len(watchers)


@strawberry.type
class LiveSubscription:
    @strawberry.subscription
    async def pending_action_changed(self, task_id: strawberry.ID) -> AsyncGenerator[SessionProjection, None]:
        tid = str(task_id)
        queue: asyncio.Queue[SessionProjection] = asyncio.Queue()
        Live.watchers.setdefault(tid, set()).add(queue)
        try:
            for projection in list(Live.projections(tid).values()):
                yield projection
            while True:
                yield await queue.get()
        finally:
            Live.watchers[tid].discard(queue)


def create_live_app() -> Starlette:
    schema = strawberry.Schema(
        query=Query, subscription=LiveSubscription, extensions=[ParserCache, ValidationCache]
    )
    view: GraphQL[None, None] = GraphQL(schema, graphql_ide=None)

    async def publish(request: Request) -> JSONResponse:
        body = await request.json()
        notified = Live.publish(str(body["taskId"]), str(body["sessionId"]), body.get("pendingAction"))
        return JSONResponse({"notified": notified})

    async def readyz(_: Request) -> PlainTextResponse:
        return PlainTextResponse("ready")

    return Starlette(
        routes=[
            Route("/graphql", view, methods=["GET", "POST"]),
            WebSocketRoute("/graphql", view),
            Route("/publish", publish, methods=["POST"]),
            Route("/readyz", readyz),
        ],
    )


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.floor")
    parser.add_argument("--dsn", help="postgresql://user@host:port/database (the cycle floor)")
    parser.add_argument("--live", action="store_true", help="the live floor of `bench connections`")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--pool-size", type=int, default=20, help="the cycle floor's most connections")
    args = parser.parse_args()
    if args.live:
        app = create_live_app()
        # As `turnwise serve` does once its application is built (backend/api/app.tune_collector):
        # the floor gets every knob of the framework that Turnwise uses.
        gc.collect()
        gc.freeze()
        gc.set_threshold(50_000, 50, 100)
    elif args.dsn:
        app = create_app(args.dsn, args.pool_size)
    else:
        parser.error("--dsn is required without --live")
    uvicorn.run(
        app,
        host="127.0.0.1",
        port=args.port,
        log_level="warning",
        access_log=False,
        ws="websockets-sansio",
        # As `turnwise serve` by default: the floor gets every knob of the framework that Turnwise uses.
        ws_per_message_deflate=False,
    )


if __name__ == "__main__":
    main()
