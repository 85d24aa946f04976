"""JSON expressions compiled per dialect, so SQLite and PostgreSQL read metadata the same way."""

from __future__ import annotations

import functools
import re
from typing import Any, ClassVar, TypeVar

from sqlalchemy import Boolean, Text, bindparam
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql import ColumnElement
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement
from sqlalchemy.types import TypeEngine

from backend import jsoncodec
from backend.domain.states import TRUTHY_FLAG_TEXTS

_KEY = re.compile(r"^[a-z_][a-z0-9_]*$")


def _key(key: str) -> str:
    if not _KEY.match(key):
        raise ValueError(f"unsupported metadata key {key!r}")
    return key


_F = TypeVar("_F", bound=FunctionElement[Any])


@functools.lru_cache(maxsize=1024)
def _keyed(base: type[_F], keys: tuple[tuple[str, Any], ...]) -> type[_F]:
    """`base` with these metadata keys as class attributes. The keys are part of the SQL text, so they
    must be part of the statement cache key (two statements that differ only in a key must never share
    a compiled form); with `inherit_cache` the class is (SQLAlchemy's documented scheme for custom
    constructs), and one class per set of keys puts them there. The keys are the code's own, so the
    classes are few; one made again after eviction only adds a cache entry."""
    return type(base.__name__, (base,), {"inherit_cache": True, **dict(keys)})


class JsonText(FunctionElement[str]):
    type: TypeEngine[str] = Text()
    name = "json_text"
    inherit_cache = True
    key = ""  # the metadata key, also SQLAlchemy's `key` of the column it makes


def json_text(column: ColumnElement[Any], key: str) -> JsonText:
    """The text of one top-level metadata key (NULL when absent); indexable on both dialects."""
    element: JsonText = _keyed(JsonText, (("key", _key(key)),))(column)
    return element


@compiles(JsonText, "sqlite")
def _json_text_sqlite(element: JsonText, compiler: SQLCompiler, **kw: Any) -> str:
    (col,) = element.clauses
    return f"json_extract({compiler.process(col, **kw)}, '$.{element.key}')"


@compiles(JsonText, "postgresql")
def _json_text_pg(element: JsonText, compiler: SQLCompiler, **kw: Any) -> str:
    (col,) = element.clauses
    return f"({compiler.process(col, **kw)} ->> '{element.key}')"


class JsonFlag(FunctionElement[bool]):
    type: TypeEngine[bool] = Boolean()
    name = "json_flag"
    inherit_cache = True
    key = ""  # the metadata key, also SQLAlchemy's `key` of the column it makes


def json_flag(column: ColumnElement[Any], key: str) -> JsonFlag:
    """The tolerant flag test: JSON true, "true", "1" and 1 are set; anything else is not."""
    element: JsonFlag = _keyed(JsonFlag, (("key", _key(key)),))(column)
    return element


_TRUTHY_SQL = ", ".join(f"'{v}'" for v in TRUTHY_FLAG_TEXTS)


@compiles(JsonFlag, "sqlite")
def _json_flag_sqlite(element: JsonFlag, compiler: SQLCompiler, **kw: Any) -> str:
    (col,) = element.clauses
    # json_extract yields 1 for JSON true; the cast makes numbers and booleans comparable as text.
    return (
        f"(COALESCE(CAST(json_extract({compiler.process(col, **kw)}, '$.{element.key}') AS TEXT), '')"
        f" IN ({_TRUTHY_SQL}))"
    )


@compiles(JsonFlag, "postgresql")
def _json_flag_pg(element: JsonFlag, compiler: SQLCompiler, **kw: Any) -> str:
    (col,) = element.clauses
    return f"(COALESCE(({compiler.process(col, **kw)} ->> '{element.key}'), '') IN ({_TRUTHY_SQL}))"


class JsonUpdate(FunctionElement[Any]):
    name = "json_update"
    # Cacheable: the keys shape the SQL (so they are in the class); the values travel as one bound
    # parameter, which a cached statement takes afresh on every execution.
    inherit_cache = True
    set_keys: ClassVar[tuple[str, ...]] = ()
    remove_keys: ClassVar[tuple[str, ...]] = ()


def json_update(
    column: ColumnElement[Any],
    set_values: dict[str, Any] | None = None,
    remove: tuple[str, ...] | list[str] = (),
    *,
    param: str | None = None,
) -> JsonUpdate:
    """`metadata` with some top-level keys set (shallow, values replaced whole) and others removed.

    `param`: the values arrive at execution as this bound parameter (the text of `json_patch(values)`),
    for a statement built once; `set_values` then only names the keys."""
    keys = (
        ("set_keys", tuple(_key(k) for k in (set_values or {}))),
        ("remove_keys", tuple(_key(k) for k in remove)),
    )
    if param is not None:
        patch = bindparam(param, type_=Text())
    else:
        patch = bindparam(None, json_patch(set_values or {}), type_=Text(), unique=True)
    element: JsonUpdate = _keyed(JsonUpdate, keys)(column, patch)
    element.type = column.type
    return element


def json_patch(values: dict[str, Any]) -> str:
    """The bound text of a `json_update` built with `param` (parsed by the database, never compared
    as text)."""
    return jsoncodec.dumps(values)


@compiles(JsonUpdate, "sqlite")
def _json_update_sqlite(element: JsonUpdate, compiler: SQLCompiler, **kw: Any) -> str:
    col, patch = element.clauses
    expr = compiler.process(col, **kw)
    p = compiler.process(patch, **kw)
    if element.set_keys:
        pairs = ", ".join(f"'$.{k}', json_extract({p}, '$.{k}')" for k in element.set_keys)
        # json_extract of an object/array yields text; json() keeps it JSON instead of a string.
        pairs = ", ".join(
            f"'$.{k}', CASE json_type({p}, '$.{k}') WHEN 'object' THEN json(json_extract({p}, '$.{k}')) "
            f"WHEN 'array' THEN json(json_extract({p}, '$.{k}')) WHEN 'true' THEN json('true') "
            f"WHEN 'false' THEN json('false') WHEN 'null' THEN json('null') "
            f"ELSE json_extract({p}, '$.{k}') END"
            for k in element.set_keys
        )
        expr = f"json_set({expr}, {pairs})"
    if element.remove_keys:
        paths = ", ".join(f"'$.{k}'" for k in element.remove_keys)
        expr = f"json_remove({expr}, {paths})"
    return expr


@compiles(JsonUpdate, "postgresql")
def _json_update_pg(element: JsonUpdate, compiler: SQLCompiler, **kw: Any) -> str:
    col, patch = element.clauses
    expr = compiler.process(col, **kw)
    if element.set_keys:
        expr = f"({expr} || CAST({compiler.process(patch, **kw)} AS jsonb))"
    for k in element.remove_keys:
        expr = f"({expr} - '{k}')"
    return expr
