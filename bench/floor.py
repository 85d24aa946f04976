"""The floor for `bench cycle`: what the ask -> answer cycle costs on Turnwise's own framework.

A minimal Strawberry app on Starlette/uvicorn/asyncpg serving the same two operation documents as
Turnwise (`askClarification`, `respondToClarification`) with three commits per cycle (insert the
question, claim the answer, confirm it), an in-process hand-off, and no rules: no auth, no sessions or
turns, no validation beyond GraphQL's. `python -m bench.floor --dsn postgresql://... --port N`.
It counts its statements and transactions at `/metrics` the way `turnwise serve` does.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Annotated, Any

import asyncpg  # type: ignore[import-untyped]
import strawberry
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
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


def create_app(dsn: str) -> Starlette:
    schema = strawberry.Schema(
        query=Query, mutation=Mutation, subscription=Subscription, extensions=[ParserCache, ValidationCache]
    )
    view: GraphQL[None, None] = GraphQL(schema, graphql_ide=None)

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        # No reset query on release: it would be one more transaction per commit at the database.
        State.pool = await asyncpg.create_pool(dsn, min_size=2, max_size=20, reset=_keep_session)
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


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.floor")
    parser.add_argument("--dsn", required=True, help="postgresql://user@host:port/database")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    uvicorn.run(
        create_app(args.dsn),
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
