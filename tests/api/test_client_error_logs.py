"""A client's mistake is one INFO line in the log, not an error with a traceback; a defect still is.

In process (the schema the server runs, over real services and a real database of each dialect), so
every logger's records are seen as they are made.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest
from strawberry.types import ExecutionResult

from backend.api.auth import Principal
from backend.api.context import Context
from backend.api.schema import LOGGED_ERRORS, build_schema
from backend.db.engine import Database
from backend.logs import CONTINUATION, FORMAT, FieldsFormatter
from backend.services.container import Services
from tests.services.support import services_for

ADMIN = Principal("admin", "admin")
USER = Principal("u1", "user")
SCHEMA = build_schema()


@pytest.fixture
async def services(db: Database) -> AsyncIterator[Services]:
    async with services_for(db) as svc:
        yield svc


async def execute(
    services: Services,
    query: str,
    variables: dict[str, Any] | None = None,
    principal: Principal | None = ADMIN,
    operation_name: str | None = None,
) -> ExecutionResult:
    return await SCHEMA.execute(
        query,
        variable_values=variables,
        context_value=Context(services, principal),
        operation_name=operation_name,
    )


def codes(result: ExecutionResult) -> list[str]:
    return [(e.extensions or {}).get("code", "") for e in result.errors or []]


def assert_quiet(records: list[logging.LogRecord]) -> None:
    """Nothing at WARNING or above, no traceback, nothing from Strawberry's own error log."""
    assert [r for r in records if r.levelno >= logging.WARNING] == []
    assert [r for r in records if r.exc_info or r.exc_text or r.stack_info] == []
    assert [r for r in records if r.name.startswith("strawberry")] == []


def client_errors(records: list[logging.LogRecord]) -> list[logging.LogRecord]:
    return [r for r in records if getattr(r, "event", None) == "graphql.client_error"]


@pytest.mark.parametrize(
    ("query", "variables", "principal", "code", "path"),
    [
        ('{ taskSessions(taskId: "nope") { id } }', None, ADMIN, "NOT_FOUND", "taskSessions"),
        (
            "mutation($t: String!) { createTask(title: $t) { id } }",
            {"t": "done\n2026-12-01 INFO turnwise.access task granted"},
            ADMIN,
            "BAD_USER_INPUT",
            "createTask",
        ),
        (
            "mutation($t: String!) { createTask(title: $t) { id } }",
            {"t": "a\x00b"},
            ADMIN,
            "BAD_USER_INPUT",
            None,
        ),
        ('mutation { createTask(title: "x") { id } }', None, USER, "FORBIDDEN", "createTask"),
        ("{ tasks { id } }", None, None, "UNAUTHENTICATED", "tasks"),
        ("{ tasks { nope } }", None, ADMIN, "GRAPHQL_VALIDATION_FAILED", None),
        ("{ tasks { id ", None, ADMIN, "GRAPHQL_PARSE_FAILED", None),
        (
            "mutation($u: String!) { addNotificationChannel(url: $u) { id } }",
            {"u": "slak://TokenA/TokenB/SECRETTOKENC"},
            ADMIN,
            "BAD_USER_INPUT",
            "addNotificationChannel",
        ),
    ],
    ids=[
        "not found",
        "bad input",
        "unstorable text",
        "forbidden",
        "unauthenticated",
        "validation",
        "parse",
        "channel url",
    ],
)
async def test_an_expected_error_is_one_info_line_without_a_traceback(
    services: Services,
    caplog: pytest.LogCaptureFixture,
    query: str,
    variables: dict[str, Any] | None,
    principal: Principal | None,
    code: str,
    path: str | None,
) -> None:
    with caplog.at_level(logging.INFO):
        result = await execute(services, query, variables, principal)
    assert codes(result) == [code]
    assert_quiet(caplog.records)
    (record,) = client_errors(caplog.records)
    assert record.levelno == logging.INFO
    assert record.__dict__["code"] == code
    assert record.__dict__.get("path") == path
    line = FieldsFormatter(FORMAT).format(record)
    assert "\n" not in line
    assert f"code={code}" in line


async def test_the_line_of_an_expected_error_names_its_operation(
    services: Services, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO):
        result = await execute(services, 'query Boards { taskSessions(taskId: "nope") { id } }')
    assert codes(result) == ["NOT_FOUND"]
    (record,) = client_errors(caplog.records)
    line = FieldsFormatter(FORMAT).format(record)
    assert line.endswith(
        "client error event=graphql.client_error operation=Boards code=NOT_FOUND path=taskSessions "
        "error=\"task 'nope' not found\""
    )


async def test_an_expected_error_of_a_subscription_is_one_info_line_without_a_traceback(
    services: Services, caplog: pytest.LogCaptureFixture
) -> None:
    query = """subscription { askClarification(sessionId: "nope", questions: [
      { prompt: "Which?", options: [{ label: "a" }, { label: "b" }] }]) { __typename } }"""
    with caplog.at_level(logging.INFO):
        stream = await SCHEMA.subscribe(query, context_value=Context(services, ADMIN))
        assert not isinstance(stream, ExecutionResult)
        results = [r async for r in stream]
    assert [codes(r) for r in results] == [["NOT_FOUND"]]
    assert_quiet(caplog.records)
    assert len(client_errors(caplog.records)) == 1


async def test_a_document_with_many_errors_logs_a_bounded_number_of_lines(
    services: Services, caplog: pytest.LogCaptureFixture
) -> None:
    fields = " ".join(f"nope{i}" for i in range(3 * LOGGED_ERRORS))
    with caplog.at_level(logging.INFO):
        result = await execute(services, f"{{ tasks {{ {fields} }} }}")
    assert len(result.errors or []) == 3 * LOGGED_ERRORS
    assert_quiet(caplog.records)
    api = [r for r in caplog.records if r.name == "turnwise.api"]
    assert len(client_errors(api)) == LOGGED_ERRORS
    (omitted,) = [r for r in api if getattr(r, "event", None) == "graphql.client_errors_omitted"]
    assert omitted.__dict__["count"] == 2 * LOGGED_ERRORS
    assert len(api) == LOGGED_ERRORS + 1


async def test_an_unexpected_error_is_one_error_with_its_id_and_traceback(
    db: Database, caplog: pytest.LogCaptureFixture
) -> None:
    async with services_for(db, fault_points=("api.tasks",)) as services:
        with caplog.at_level(logging.INFO):
            result = await execute(services, "{ tasks { id } }")
    (error,) = result.errors or []
    assert (error.extensions or {})["code"] == "INTERNAL"
    error_id = (error.extensions or {})["errorId"]
    # Logged once, by the error policy, which told the client its id; not also by Strawberry.
    (record,) = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert record.levelno == logging.ERROR
    assert record.name == "turnwise.api"
    assert record.__dict__["error_id"] == error_id
    assert client_errors(caplog.records) == []
    head, *traceback = FieldsFormatter(FORMAT).format(record).split("\n")
    assert error_id in head
    assert traceback[0] == f"{CONTINUATION}Traceback (most recent call last):"
    assert "hunter2" in traceback[-1]
