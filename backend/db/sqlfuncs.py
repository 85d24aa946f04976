"""JSON expressions compiled per dialect, so SQLite and PostgreSQL read metadata the same way."""

from __future__ import annotations

import re
from typing import Any

from sqlalchemy import Boolean, Text, bindparam
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql import ColumnElement
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement
from sqlalchemy.sql.visitors import InternalTraversal
from sqlalchemy.types import TypeEngine

from backend import jsoncodec
from backend.domain.states import TRUTHY_FLAG_TEXTS

_KEY = re.compile(r"^[a-z_][a-z0-9_]*$")


# The metadata keys are part of the SQL text, so they are part of the statement cache key: two
# statements that differ only in a key must never share a compiled form.
_KEYED = [*FunctionElement._traverse_internals, ("key", InternalTraversal.dp_string)]


def _key(key: str) -> str:
    if not _KEY.match(key):
        raise ValueError(f"unsupported metadata key {key!r}")
    return key


class json_text(FunctionElement[str]):
    """The text of one top-level metadata key (NULL when absent); indexable on both dialects."""

    type: TypeEngine[str] = Text()
    name = "json_text"
    inherit_cache = True
    _traverse_internals = _KEYED

    def __init__(self, column: ColumnElement[Any], key: str) -> None:
        self.key = _key(key)
        super().__init__(column)


@compiles(json_text, "sqlite")
def _json_text_sqlite(element: json_text, compiler: SQLCompiler, **kw: Any) -> str:
    (col,) = element.clauses
    return f"json_extract({compiler.process(col, **kw)}, '$.{element.key}')"


@compiles(json_text, "postgresql")
def _json_text_pg(element: json_text, compiler: SQLCompiler, **kw: Any) -> str:
    (col,) = element.clauses
    return f"({compiler.process(col, **kw)} ->> '{element.key}')"


class json_flag(FunctionElement[bool]):
    """The tolerant flag test: JSON true, "true", "1" and 1 are set; anything else is not."""

    type: TypeEngine[bool] = Boolean()
    name = "json_flag"
    inherit_cache = True
    _traverse_internals = _KEYED

    def __init__(self, column: ColumnElement[Any], key: str) -> None:
        self.key = _key(key)
        super().__init__(column)


_TRUTHY_SQL = ", ".join(f"'{v}'" for v in TRUTHY_FLAG_TEXTS)


@compiles(json_flag, "sqlite")
def _json_flag_sqlite(element: json_flag, compiler: SQLCompiler, **kw: Any) -> str:
    (col,) = element.clauses
    # json_extract yields 1 for JSON true; the cast makes numbers and booleans comparable as text.
    return (
        f"(COALESCE(CAST(json_extract({compiler.process(col, **kw)}, '$.{element.key}') AS TEXT), '')"
        f" IN ({_TRUTHY_SQL}))"
    )


@compiles(json_flag, "postgresql")
def _json_flag_pg(element: json_flag, compiler: SQLCompiler, **kw: Any) -> str:
    (col,) = element.clauses
    return f"(COALESCE(({compiler.process(col, **kw)} ->> '{element.key}'), '') IN ({_TRUTHY_SQL}))"


_UPDATE_INTERNALS = [
    *FunctionElement._traverse_internals,
    ("set_keys", InternalTraversal.dp_string_list),
    ("remove_keys", InternalTraversal.dp_string_list),
]


class json_update(FunctionElement[Any]):
    """`metadata` with some top-level keys set (shallow, values replaced whole) and others removed."""

    name = "json_update"
    # Cacheable: the keys shape the SQL (so they are in the cache key); the values travel as one
    # bound parameter, which a cached statement takes afresh on every execution.
    inherit_cache = True
    _traverse_internals = _UPDATE_INTERNALS

    def __init__(
        self,
        column: ColumnElement[Any],
        set_values: dict[str, Any] | None = None,
        remove: tuple[str, ...] | list[str] = (),
        *,
        param: str | None = None,
    ) -> None:
        """`param`: the values arrive at execution as this bound parameter (the text of
        `json_patch(values)`), for a statement built once; `set_values` then only names the keys."""
        self.set_keys = tuple(_key(k) for k in (set_values or {}))
        self.remove_keys = tuple(_key(k) for k in remove)
        self.type = column.type
        if param is not None:
            super().__init__(column, bindparam(param, type_=Text()))
            return
        super().__init__(column, bindparam(None, json_patch(set_values or {}), type_=Text(), unique=True))


def json_patch(values: dict[str, Any]) -> str:
    """The bound text of a `json_update` built with `param` (parsed by the database, never compared
    as text)."""
    return jsoncodec.dumps(values)


@compiles(json_update, "sqlite")
def _json_update_sqlite(element: json_update, compiler: SQLCompiler, **kw: Any) -> str:
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


@compiles(json_update, "postgresql")
def _json_update_pg(element: json_update, compiler: SQLCompiler, **kw: Any) -> str:
    col, patch = element.clauses
    expr = compiler.process(col, **kw)
    if element.set_keys:
        expr = f"({expr} || CAST({compiler.process(patch, **kw)} AS jsonb))"
    for k in element.remove_keys:
        expr = f"({expr} - '{k}')"
    return expr
