"""LangGraph's ask -> answer cycle for `bench cycle`: an interrupt -> resume in the bench's own process.

The graph is the smallest that asks a person: one node that calls `langgraph.types.interrupt(question)`
and returns the answer it is resumed with, compiled with `AsyncPostgresSaver` (the checkpointer of
langgraph-checkpoint-postgres, on a psycopg `AsyncConnectionPool`, set up with `setup()`) on the same
PostgreSQL as the other runs, in a database of its own. One cycle: `ainvoke` the graph on a new thread
id until it interrupts (the ask), then `ainvoke(Command(resume=answer))` on that thread (the answer)
to its final state. No network but PostgreSQL's, no GraphQL, no auth: what an agent pays that keeps
its person in its own process.

LangGraph is not a dependency of Turnwise: it comes with the `bench` extra (requirements-bench.lock,
installed by `make bench`). This module imports it only inside its functions, so the bench (and its
type check) runs without it; `missing()` says what is not installed.
"""

from __future__ import annotations

import asyncio
import importlib
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, TypedDict

# What the run needs from the `bench` extra; `missing()` tries each.
MODULES = ("langgraph.types", "langgraph.graph", "langgraph.checkpoint.postgres.aio", "psycopg_pool")
INSTALL_HINT = "make bench (or: pip install --require-hashes -r requirements-bench.lock)"


class CycleError(RuntimeError):
    """A graph run that did not interrupt with the question, or did not end with the answer."""


class AskState(TypedDict, total=False):
    question: dict[str, Any]
    answer: Any


def missing() -> str | None:
    """None when LangGraph and its PostgreSQL checkpointer import; else what is missing and how to
    install it."""
    for name in MODULES:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            absent = exc.name or name
            return f"LangGraph is not installed (no {absent}); install the bench extra: {INSTALL_HINT}"
    return None


def database_errors() -> tuple[type[BaseException], ...]:
    """The errors of the database driver that one cycle may meet (the agent records them and goes on)."""
    import psycopg

    errors: tuple[type[BaseException], ...] = (psycopg.Error,)
    return errors


@asynccontextmanager
async def compiled_graph(conninfo: str, *, pool_size: int = 20) -> AsyncIterator[Any]:
    """The graph compiled with an `AsyncPostgresSaver` on a pool of at most `pool_size` connections
    (`bench cycle` gives it the size of Turnwise's and the floor's pools, from PostgreSQL's free
    connections) to `conninfo` (a libpq URL), its tables set up."""
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
    from langgraph.graph import END, START, StateGraph
    from langgraph.types import interrupt
    from psycopg import AsyncConnection
    from psycopg.rows import DictRow, dict_row
    from psycopg_pool import AsyncConnectionPool

    def ask(state: AskState) -> dict[str, Any]:
        """The graph's one node: ask the question, and return what the run is resumed with."""
        return {"answer": interrupt(state["question"])}

    # The connection settings LangGraph's documentation gives for a pool (the same as its
    # `AsyncPostgresSaver.from_conn_string`): autocommit, prepared statements, rows as dicts.
    kwargs: dict[str, Any] = {"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row}
    pool = AsyncConnectionPool(
        conninfo,
        connection_class=AsyncConnection[DictRow],
        min_size=1,
        max_size=pool_size,
        kwargs=kwargs,
        open=False,
    )
    async with pool:
        saver = AsyncPostgresSaver(pool)
        await saver.setup()
        builder = StateGraph(AskState)
        builder.add_node("ask", ask)
        builder.add_edge(START, "ask")
        builder.add_edge("ask", END)
        yield builder.compile(checkpointer=saver)


async def cycle(graph: Any, thread_id: str, question: dict[str, Any], answer: Any) -> tuple[float, float]:
    """One ask -> answer cycle on a new thread: (seconds to the interrupt, seconds from the resume to
    the final state)."""
    from langgraph.types import Command

    config = {"configurable": {"thread_id": thread_id}}
    started = time.perf_counter()
    async with asyncio.timeout(30):
        asked = await graph.ainvoke({"question": question}, config)
    asked_at = time.perf_counter()
    interrupts = asked.get("__interrupt__") or []
    if len(interrupts) != 1 or interrupts[0].value != question:
        raise CycleError(f"expected one interrupt with the question, got {asked}")
    async with asyncio.timeout(30):
        final = await graph.ainvoke(Command(resume=answer), config)
    answered_at = time.perf_counter()
    if final.get("answer") != answer or "__interrupt__" in final:
        raise CycleError(f"expected the answer in the final state, got {final}")
    return asked_at - started, answered_at - asked_at
