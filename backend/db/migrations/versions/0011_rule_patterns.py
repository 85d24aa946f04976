"""permission rules in Claude Code's syntax: a pattern, allow / ask / deny, a scope, an expiry

A rule was "this exact input" or "any input" of one tool, allowing, in one session. Now each rule has
a `pattern` ("Bash", "Bash(npm test:*)", "Edit(src/**)"), a `behavior` (allow, ask or deny), a
`scope` (session, task, project or global) with its `scope_id`, and may expire (`expires_at`); only
a SESSION rule keeps `session_id`. The rules remembered before carry over as they were, allowing in
their session: "any input" is the bare tool name; an exact `Bash` input of one command is
`Bash(<command>)`; an exact input of any other tool (or a `Bash` input with more than its command)
keeps matching exactly that input, its numbers by
value (`Tool(=<json>)`, keeping its `input_key`); a tool whose name no pattern can hold keeps its name
as the pattern and is matched by name (and input) as before. The one-rule-per-(session, tool, input)
key goes: rules of one pattern may now differ in scope, behavior and expiry.

The downgrade keeps what the old shape can say: SESSION rules that allow, for any input of a tool
or one exact input (`Bash(<command>)` becomes the input `{"command": <command>}`); every other rule
is removed, and of rules alike one stays.

The patterns are written by the domain's own `legacy_pattern` (`domain/rule_syntax.py`), not a
frozen copy: a rule's text is only right as the parser that reads it writes it.

Revision ID: 0011
Revises: 0015
"""

from __future__ import annotations

import hashlib
import json
import math
from decimal import Decimal
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

from backend.domain.rule_patterns import PatternError, PatternKind
from backend.domain.rule_syntax import legacy_pattern, parse_pattern

revision = "0011"
down_revision = "0015"
branch_labels = None
depends_on = None

RULES = sa.table(
    "permission_rules",
    sa.column("id", sa.String),
    sa.column("session_id", sa.String),
    sa.column("tool_name", sa.String),
    sa.column("input_key", sa.String),
    sa.column("input", sa.JSON(none_as_null=True).with_variant(JSONB(none_as_null=True), "postgresql")),
    sa.column("input_json", sa.Text),
    sa.column("pattern", sa.Text),
    sa.column("behavior", sa.String),
    sa.column("scope", sa.String),
    sa.column("scope_id", sa.Text),
    sa.column("created_at", sa.DateTime(timezone=True)),
)
ANY_INPUT = ""
# The columns of a rule both shapes have (and read here).
KEPT = ("id", "session_id", "tool_name", "input_key", "input", "input_json")
UNIQUE = "uq_permission_rules_session_id_tool_name_input_key"


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _comparable(value: Any) -> Any:
    if isinstance(value, float):
        if math.isfinite(value):
            decimal = Decimal(repr(value))
            if decimal == decimal.to_integral_value():
                return int(decimal)
        return value
    if isinstance(value, dict):
        return {key: _comparable(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_comparable(item) for item in value]
    return value


def _key(value: Any) -> str:
    return hashlib.sha256(_canonical(_comparable(value)).encode()).hexdigest()


def _carried(tool_name: str, stored: Any, any_input: bool) -> tuple[str, bool]:
    """(pattern, whether it keeps matching its exact input) of a rule remembered before patterns."""
    try:
        pattern = legacy_pattern(tool_name, None if any_input else _comparable(stored), any_input)
    except PatternError:  # a tool whose name no pattern holds: matched by name (and input) as before
        return tool_name, not any_input
    return pattern.text, pattern.kind is PatternKind.EXACT_INPUT


def _stored_input(row: Any) -> Any:
    if row.input_json is not None:
        return json.loads(row.input_json)
    return json.loads(row.input) if isinstance(row.input, str) else row.input


def upgrade() -> None:
    with op.batch_alter_table("permission_rules") as batch:
        batch.drop_constraint(UNIQUE, type_="unique")
        batch.alter_column("session_id", existing_type=sa.String(64), nullable=True)
        batch.alter_column("input_key", existing_type=sa.String(64), nullable=True)
        batch.add_column(sa.Column("pattern", sa.Text(), nullable=True))
        batch.add_column(sa.Column("behavior", sa.String(8), nullable=True))
        batch.add_column(sa.Column("scope", sa.String(16), nullable=True))
        batch.add_column(sa.Column("scope_id", sa.Text(), nullable=True))
        batch.add_column(sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True))
    bind = op.get_bind()
    found = bind.execute(sa.select(*(RULES.c[name] for name in KEPT))).all()
    for row in found:
        any_input = row.input_key == ANY_INPUT
        pattern, exact = _carried(row.tool_name, None if any_input else _stored_input(row), any_input)
        values: dict[str, Any] = {
            "behavior": "allow",
            "scope": "session",
            "scope_id": row.session_id,
            "pattern": pattern,
        }
        if not exact:  # the pattern says it all: no input to compare
            values.update(input_key=None, input=None, input_json=None)
        bind.execute(sa.update(RULES).where(RULES.c.id == row.id).values(**values))
    with op.batch_alter_table("permission_rules") as batch:
        batch.alter_column("pattern", existing_type=sa.Text(), nullable=False)
        batch.alter_column("behavior", existing_type=sa.String(8), nullable=False)
        batch.alter_column("scope", existing_type=sa.String(16), nullable=False)
        batch.create_index("ix_permission_rules_scope", ["scope_id", "tool_name"])


def _old_shape(row: Any) -> tuple[str, Any] | None:
    """(input_key, input) of a rule as the old shape keeps it; None: it has no place there."""
    if row.scope != "session" or row.behavior != "allow" or row.session_id is None:
        return None
    if row.input_key is not None:
        return row.input_key, _stored_input(row)
    if row.pattern == row.tool_name:
        return ANY_INPUT, None
    try:
        pattern = parse_pattern(row.pattern)
    except PatternError:
        return None
    if pattern.kind is PatternKind.COMMAND:
        command = {"command": pattern.key}
        return _key(command), command
    return None


def downgrade() -> None:
    bind = op.get_bind()
    added = ("pattern", "behavior", "scope")
    found = bind.execute(
        sa.select(*(RULES.c[name] for name in KEPT + added)).order_by(RULES.c.created_at, RULES.c.id)
    ).all()
    taken: set[tuple[str, str, str]] = set()
    for row in found:
        shape = _old_shape(row)
        tool = row.tool_name
        if shape is None or (row.session_id, tool, shape[0]) in taken:
            bind.execute(sa.delete(RULES).where(RULES.c.id == row.id))
            continue
        taken.add((row.session_id, tool, shape[0]))
        key, value = shape
        text = None if value is None else _canonical(value)
        bind.execute(
            sa.update(RULES)
            .where(RULES.c.id == row.id)
            .values(tool_name=tool, input_key=key, input=value, input_json=text)
        )
    with op.batch_alter_table("permission_rules") as batch:
        batch.drop_index("ix_permission_rules_scope")
        batch.drop_column("expires_at")
        batch.drop_column("scope_id")
        batch.drop_column("scope")
        batch.drop_column("behavior")
        batch.drop_column("pattern")
        batch.alter_column("input_key", existing_type=sa.String(64), nullable=False)
        batch.alter_column("session_id", existing_type=sa.String(64), nullable=False)
        batch.create_unique_constraint(UNIQUE, ["session_id", "tool_name", "input_key"])
