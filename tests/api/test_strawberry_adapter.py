"""The canary of `backend/api/strawberry_adapter.py`: every undocumented name of Strawberry that the
API relies on is still there, with the shape it relies on, and the installed Strawberry is the version
those names were checked against. After an upgrade this fails first, and says which names to re-check
(in the new version's source) before `CHECKED` is moved on."""

from __future__ import annotations

import asyncio
import dataclasses
import importlib
import inspect
import re
import traceback
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import graphql
import pytest
import strawberry
from starlette.applications import Starlette
from starlette.routing import Route, WebSocketRoute
from starlette.testclient import TestClient
from strawberry.asgi import GraphQL
from strawberry.extensions import MaskErrors, SchemaExtension

from backend.api import strawberry_adapter as adapter
from backend.api.app import create_app
from backend.config import Settings

_WHERE = "backend/api/strawberry_adapter.py"


def _owner(reliance: adapter.Reliance) -> Any:
    module, _, name = reliance.owner.partition(":")
    found = importlib.import_module(module)
    return getattr(found, name) if name else found


def assert_checked_versions(module: Any, where: str, also_run: str) -> None:
    """The canary of an adapter `module` (its `CHECKED`, `RELIED_ON`, `installed_versions()`): every
    installed library is the version the names were checked against, else say what to re-check."""
    installed = module.installed_versions()
    moved = {name: found for name, found in installed.items() if found != module.CHECKED[name]}
    assert not moved, "\n".join(
        f"{name} is {found}, but {where} was checked against {module.CHECKED[name]}. Re-check in "
        f"{name} {found}'s source that these still exist and mean what {where} says they do, run this "
        f"canary and {also_run}, then set CHECKED[{name!r}] = {found!r}:\n"
        + "\n".join(f"  {r.owner}.{r.name} ({r.kind})" for r in module.RELIED_ON if r.library == name)
        for name, found in moved.items()
    )


def assert_still_there(reliance: Any, installed: dict[str, str], path: str) -> None:
    """`reliance` (a name the adapter at `path` relies on) still exists with the shape relied on."""
    owner = _owner(reliance)
    where = f"{reliance.library} {installed[reliance.library]}: {reliance.owner}.{reliance.name} "
    where += f"({reliance.kind}), relied on by {path}"
    if reliance.kind == "instance attribute":
        assigned = re.search(rf"self\.{reliance.name}\s*[:=]", inspect.getsource(owner.__init__))
        assert assigned, f"{where} is gone"
        return
    if reliance.kind == "dataclass field":
        assert reliance.name in {f.name for f in dataclasses.fields(owner)}, f"{where} is gone"
        return
    assert hasattr(owner, reliance.name), f"{where} is gone"
    member = getattr(owner, reliance.name)
    if reliance.kind == "coroutine":
        assert inspect.iscoroutinefunction(member), f"{where} is no longer a coroutine function"
    if reliance.kind == "function":
        assert callable(member), f"{where} is no longer callable"
        assert not inspect.iscoroutinefunction(member), f"{where} is now a coroutine function"
    if reliance.kind in ("coroutine", "function"):
        found = tuple(inspect.signature(member).parameters)[: len(reliance.parameters)]
        assert found == reliance.parameters, f"{where} now takes {found}, not {reliance.parameters}"


def reliance_id(reliance: Any) -> str:
    return f"{reliance.owner.split(':')[-1]}.{reliance.name}"


def test_the_installed_strawberry_is_the_version_the_names_were_checked_against() -> None:
    assert_checked_versions(adapter, _WHERE, "tests/api/test_live_api.py")


@pytest.mark.parametrize("reliance", adapter.RELIED_ON, ids=reliance_id)
def test_each_relied_on_name_is_still_there(reliance: adapter.Reliance) -> None:
    assert_still_there(reliance, adapter.installed_versions(), _WHERE)


@strawberry.type
class Query:
    @strawberry.field
    def ok(self) -> bool:
        return True


def _frames_kept_by_init_timer(*, adapted: bool) -> list[str]:
    """Over a real graphql-transport-ws connection (`connection_init`, acknowledged, still open), the
    frames in the error its handler's cancelled `connection_init` timer task hands back."""
    view: GraphQL[None, None] = GraphQL(strawberry.Schema(query=Query))
    if adapted:
        adapter.use_in(view)
    handlers: list[Any] = []
    base = view.graphql_transport_ws_handler_class

    class Recording(base):  # type: ignore[misc,valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            handlers.append(self)

    view.graphql_transport_ws_handler_class = Recording
    client = TestClient(Starlette(routes=[WebSocketRoute("/", view)]))
    with client, client.websocket_connect("/", subprotocols=["graphql-transport-ws"]) as ws:
        ws.send_json({"type": "connection_init", "payload": {}})
        assert ws.receive_json() == {"type": "connection_ack"}
        ws.send_json({"type": "ping"})
        assert ws.receive_json() == {"type": "pong"}  # the timer task has run its course by now
        (handler,) = handlers
        timer = handler.connection_init_timeout_task
        assert isinstance(timer, asyncio.Task)
        assert timer.cancelled()
        # Read while the connection lasts (Strawberry awaits the timer when the connection ends,
        # which drops the error too).
        with pytest.raises(asyncio.CancelledError) as ended:
            timer.result()
    return [frame.name for frame in traceback.extract_tb(ended.value.__traceback__)]


def test_a_connection_does_not_keep_its_cancelled_init_timer_frames() -> None:
    # Strawberry's own handler: the cancelled timer keeps the error it ended with, and the frames of
    # its wait with it, for as long as the connection lasts (what the adapter is for) ...
    assert "handle_connection_init_timeout" in _frames_kept_by_init_timer(adapted=False)
    # ... the adapted handler has dropped it: what the task hands back now is a new error.
    assert "handle_connection_init_timeout" not in _frames_kept_by_init_timer(adapted=True)


def test_the_switch_turns_it_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TURNWISE_WS_ADAPTER", raising=False)
    assert Settings.from_env().ws_adapter
    for off in ("0", "false", "No"):
        monkeypatch.setenv("TURNWISE_WS_ADAPTER", off)
        assert not Settings.from_env().ws_adapter


@pytest.mark.parametrize("on", [True, False])
def test_the_served_view_uses_it_unless_switched_off(on: bool, tmp_path: Path) -> None:
    app = create_app(Settings(database_url=f"sqlite+aiosqlite:///{tmp_path / 'x.db'}", ws_adapter=on))
    (view,) = [r.endpoint for r in app.routes if isinstance(r, Route) and r.path == "/graphql"]
    assert isinstance(view, GraphQL)
    handler = view.graphql_transport_ws_handler_class
    assert handler.__name__.startswith("ReleasingInitTimer") is on
    assert (view.schema._turnwise_runner is not None) is on  # type: ignore[attr-defined]


_DOCUMENT = "query Q($id: ID!) { person(id: $id) { name ... on Person { id } } }"


def test_strawberrys_parse_cache_is_still_an_lru_cache_around_graphqls_parse() -> None:
    # The shape `parse_cache` relies on: one shared `lru_cache` of `graphql.parse` per maxsize.
    from strawberry.extensions import parser_cache

    cached = parser_cache._get_parse_cache(128)
    assert cached is parser_cache._get_parse_cache(128), "no longer one cache per maxsize"
    assert getattr(cached, "__wrapped__", None) is graphql.parse, "no longer wraps graphql.parse"
    assert cached.cache_info().maxsize == 128, "no longer an lru_cache of maxsize"  # type: ignore[attr-defined]


def test_the_parse_cache_is_strawberrys_unless_switched_off(monkeypatch: pytest.MonkeyPatch) -> None:
    from strawberry.extensions import parser_cache

    monkeypatch.delenv("TURNWISE_WS_ADAPTER", raising=False)
    on = adapter.parse_cache(128)
    assert on is parser_cache._get_parse_cache(128)
    monkeypatch.setenv("TURNWISE_WS_ADAPTER", "0")
    off = adapter.parse_cache(128)
    assert off is not on
    assert off.__wrapped__ is graphql.parse  # type: ignore[attr-defined]
    assert off is adapter.parse_cache(128)  # one per maxsize, like Strawberry's
    # The same document, and each path caches: the second parse of a text is the first's document.
    parsed_on, parsed_off = on(_DOCUMENT, max_tokens=5000), off(_DOCUMENT, max_tokens=5000)
    assert parsed_on == parsed_off == graphql.parse(_DOCUMENT)
    assert graphql.print_ast(parsed_on) == graphql.print_ast(parsed_off)
    assert on(_DOCUMENT, max_tokens=5000) is parsed_on
    assert off(_DOCUMENT, max_tokens=5000) is parsed_off


def test_the_parse_cache_falls_back_where_strawberrys_is_gone(monkeypatch: pytest.MonkeyPatch) -> None:
    from strawberry.extensions import parser_cache

    monkeypatch.delenv("TURNWISE_WS_ADAPTER", raising=False)
    monkeypatch.delattr(parser_cache, "_get_parse_cache")
    assert adapter.parse_cache(128) is adapter._own_parse_cache(128)


def test_the_api_parses_through_the_adapter() -> None:
    from backend.api import policy

    assert policy._parse is adapter.parse_cache(policy._CACHED)


def test_the_api_validates_through_the_adapter_unless_switched_off(monkeypatch: pytest.MonkeyPatch) -> None:
    from strawberry.schema import schema as strawberry_schema

    monkeypatch.delenv("TURNWISE_WS_ADAPTER", raising=False)
    assert adapter.document_validator() is strawberry_schema.validate_document
    monkeypatch.setenv("TURNWISE_WS_ADAPTER", "0")
    assert adapter.document_validator() is None
    monkeypatch.delenv("TURNWISE_WS_ADAPTER")
    monkeypatch.delattr(strawberry_schema, "validate_document")
    assert adapter.document_validator() is None


# Each fails before execution: an unknown field, a missing variable, too deep (the depth rule), too
# many tokens.
_INVALID = (
    "{ nope }",
    "query Q($id: ID!) { taskSessions(taskId: $id) { id } }",
    "{ tasks { sessions { activeClarification { questions { options { id } } } } } }",
    "{ __typename " + "x: __typename " * 2000 + "}",
)


def test_left_to_strawberrys_own_validation_the_api_answers_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    """With no validator (the adapter off, or the name gone), every document goes through Strawberry's
    own validation step: the same errors, and a valid document still executes."""
    from backend.api import policy
    from backend.api.schema import build_schema

    def errors() -> list[list[str]]:
        schema = build_schema(max_depth=3)
        found = []
        for document in (*_INVALID, "{ __typename }"):
            result = schema.execute_sync(document)
            found.append(sorted(e.message for e in result.errors or ()))
        return found

    cached = errors()
    assert all(cached[:-1]), cached
    assert not cached[-1], cached
    monkeypatch.setattr(policy, "_validate", None)
    assert errors() == cached


# --- extension hooks entered through the adapter's runner ------------------------------------------

_SEEN: list[str] = []


class _Recorder(SchemaExtension):
    """A hook of every shape for every stage: generator, async generator and plain function."""

    def on_operation(self) -> Iterator[None]:
        _SEEN.append("operation>")
        try:
            yield
        except BaseException as exc:
            _SEEN.append(f"operation!{type(exc).__name__}")
            raise
        _SEEN.append("operation<")

    def on_parse(self) -> Iterator[None]:
        _SEEN.append("parse>")
        yield
        _SEEN.append("parse<")

    async def on_validate(self) -> AsyncIterator[None]:
        _SEEN.append("validate>")
        yield
        _SEEN.append("validate<")

    def on_execute(self) -> None:  # type: ignore[override]
        _SEEN.append("execute")

    def on_stream_result(self, result: Any) -> Iterator[None]:
        _SEEN.append(f"stream>{result.data}")
        try:
            yield
        except BaseException as exc:
            _SEEN.append(f"stream!{type(exc).__name__}")
            raise
        _SEEN.append("stream<")

    def get_results(self) -> dict[str, Any]:
        return {"seen": len(_SEEN)}


class _SyncRecorder(_Recorder):
    def on_validate(self) -> Iterator[None]:  # type: ignore[override]
        _SEEN.append("validate-sync")
        yield


class _Quiet(SchemaExtension):
    """No hooks and no results of its own."""


@strawberry.type
class _HookQuery:
    @strawberry.field
    def ok(self) -> bool:
        return True

    @strawberry.field
    def boom(self) -> bool:
        raise ValueError("a secret")


@strawberry.type
class _HookSubscription:
    @strawberry.subscription
    async def count(self, fail: bool = False) -> AsyncGenerator[int, None]:
        yield 1
        yield 2
        if fail:
            raise ValueError("a secret")


def _hook_schema(lean: bool, *extensions: type[SchemaExtension]) -> strawberry.Schema:
    from backend.api.schema import TurnwiseSchema

    return TurnwiseSchema(
        query=_HookQuery,
        subscription=_HookSubscription,
        extensions=[*extensions, MaskErrors],
        runner=adapter.extensions_runner() if lean else None,
    )


async def _hook_run(schema: strawberry.Schema) -> list[Any]:
    """What each kind of operation returns, and the hooks it entered, in order."""
    seen: list[Any] = []
    for document in ("{ ok }", "{ boom }", "{ nope }", "{ ok"):
        _SEEN.clear()
        result = await schema.execute(document)
        seen.append((document, result.data, [e.message for e in result.errors or ()], result.extensions))
        seen.append(list(_SEEN))
    for document, close_early in (
        ("subscription { count }", False),
        ("subscription { count(fail: true) }", False),
        ("subscription { count }", True),
    ):
        _SEEN.clear()
        stream = await schema.subscribe(document)
        got = []
        async for result in stream:
            got.append((result.data, [e.message for e in result.errors or ()], result.extensions))
            if close_early:
                break
        await stream.aclose()
        seen.append((document, close_early, got, list(_SEEN)))
    return seen


async def test_the_lean_runner_enters_the_same_hooks_in_the_same_order_as_strawberrys() -> None:
    plain, lean = _hook_schema(False, _Recorder, _Quiet), _hook_schema(True, _Recorder, _Quiet)
    assert adapter.extensions_runner() is not None
    assert type(plain.create_extensions_runner(None, [])).__name__ == "SchemaExtensionsRunner"  # type: ignore[arg-type]
    assert type(lean.create_extensions_runner(None, [])).__name__ == "LeanExtensionsRunner"  # type: ignore[arg-type]
    expected = await _hook_run(plain)
    assert await _hook_run(lean) == expected
    # What is compared: every stage's hooks, the results sent (errors masked by MaskErrors), and an
    # early close reaching the stream hook as GeneratorExit.
    flat = repr(expected)
    markers = ("validate<", "execute", "stream>{'count': 1}", "stream!GeneratorExit", "Unexpected error.")
    for marker in markers:
        assert marker in flat, marker
    assert "a secret" not in flat
    # Again with the plans made (the second run of a schema uses them), and with no hooks at all.
    assert await _hook_run(lean) == expected
    assert await _hook_run(_hook_schema(True, _Quiet)) == await _hook_run(_hook_schema(False, _Quiet))


def test_the_lean_runner_enters_sync_stages_as_strawberrys_does() -> None:
    def run(schema: strawberry.Schema) -> list[Any]:
        seen: list[Any] = []
        for document in ("{ ok }", "{ boom }", "{ nope }"):
            _SEEN.clear()
            result = schema.execute_sync(document)
            errors = [e.message for e in result.errors or ()]
            seen.append((result.data, errors, result.extensions, list(_SEEN)))
        return seen

    expected = run(_hook_schema(False, _SyncRecorder))
    assert "validate-sync" in repr(expected)
    assert run(_hook_schema(True, _SyncRecorder)) == expected
    # An async hook cannot be entered synchronously: the same outcome with either runner.
    outcomes: list[Any] = []
    for lean in (False, True):
        _SEEN.clear()
        try:
            result = _hook_schema(lean, _Recorder).execute_sync("{ ok }")
            errors = [re.sub(" at 0x[0-9a-f]+", "", e.message) for e in result.errors or ()]
            outcomes.append((result.data, errors, list(_SEEN)))
        except RuntimeError as exc:
            outcomes.append((type(exc).__name__, re.sub(" at 0x[0-9a-f]+", "", str(exc)), list(_SEEN)))
    assert outcomes[0] == outcomes[1]


def test_the_lean_runner_is_the_schemas_unless_switched_off(monkeypatch: pytest.MonkeyPatch) -> None:
    from backend.api.schema import build_schema

    monkeypatch.delenv("TURNWISE_WS_ADAPTER", raising=False)
    assert build_schema()._turnwise_runner is not None  # type: ignore[attr-defined]
    assert build_schema(adapter=False)._turnwise_runner is None  # type: ignore[attr-defined]
    monkeypatch.setenv("TURNWISE_WS_ADAPTER", "0")
    assert adapter.extensions_runner() is None
    assert build_schema()._turnwise_runner is None  # type: ignore[attr-defined]


# --- the error policy's result check ---------------------------------------------------------------


def _masking(lean: bool, monkeypatch: pytest.MonkeyPatch) -> type[MaskErrors]:
    if lean:
        monkeypatch.delenv("TURNWISE_WS_ADAPTER", raising=False)
    else:
        monkeypatch.setenv("TURNWISE_WS_ADAPTER", "0")

    class Masking(MaskErrors):
        pass

    return adapter.lean_error_results(Masking)


async def test_the_error_check_masks_what_strawberrys_masks_unless_switched_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from backend.api.errors import ErrorPolicy

    lean, own = _masking(True, monkeypatch), _masking(False, monkeypatch)
    assert lean._process_result is not MaskErrors._process_result
    assert own._process_result is MaskErrors._process_result
    assert ErrorPolicy._process_result is lean._process_result  # made while the adapter is on

    async def outcomes(masking: type[MaskErrors]) -> list[Any]:
        schema = strawberry.Schema(query=_HookQuery, subscription=_HookSubscription, extensions=[masking])
        seen: list[Any] = []
        for document in ("{ ok }", "{ boom }", "{ nope }"):
            result = await schema.execute(document)
            seen.append((result.data, [e.message for e in result.errors or ()]))
        stream = await schema.subscribe("subscription { count(fail: true) }")
        seen += [(r.data, [e.message for e in r.errors or ()]) async for r in stream]
        return seen

    expected = await outcomes(own)
    assert "Unexpected error." in repr(expected)
    assert "a secret" not in repr(expected)
    assert await outcomes(lean) == expected
