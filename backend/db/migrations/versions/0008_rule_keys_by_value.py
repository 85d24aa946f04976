"""remembered rules compare an input's numbers by value

A rule for one exact input matched by the hash of the input's canonical JSON, in which 1e16 and
10000000000000000 (or -0.0 and 0) differ. PostgreSQL's JSONB keeps such numbers in the second form,
so a rule remembered from an input read back from it never matched the agent's own next ask. The key
is now the hash of the input with every whole-number float written as the integer it is
(`domain.permissions.comparable`); here each exact rule's key is worked out again from its stored
input. Two rules of one session and tool whose inputs differed only so now allow the same input: one
of them stays (the one whose key was already right). The downgrade works the keys out the old way
(a rule removed here stays removed).

The key functions are frozen here as they were written, so the migration does not move with the code.

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import hashlib
import json
import math
from decimal import Decimal
from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

RULES = sa.table(
    "permission_rules",
    sa.column("id", sa.String),
    sa.column("session_id", sa.String),
    sa.column("tool_name", sa.String),
    sa.column("input_key", sa.String),
    sa.column("input", sa.JSON),
    sa.column("created_at", sa.DateTime(timezone=True)),
)
ANY_INPUT = ""


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


def _by_value(value: Any) -> str:
    return hashlib.sha256(_canonical(_comparable(value)).encode()).hexdigest()


def _as_written(value: Any) -> str:
    return hashlib.sha256(_canonical(value).encode()).hexdigest()


def _rekey(key_of: Any) -> None:
    bind = op.get_bind()
    rows = bind.execute(
        sa.select(RULES.c.id, RULES.c.session_id, RULES.c.tool_name, RULES.c.input_key, RULES.c.input)
        .where(RULES.c.input_key != ANY_INPUT)
        .order_by(RULES.c.created_at, RULES.c.id)
    ).all()
    taken = {(r.session_id, r.tool_name, r.input_key) for r in rows}
    for row in rows:
        key = key_of(row.input)
        if key == row.input_key:
            continue
        taken.discard((row.session_id, row.tool_name, row.input_key))
        if (row.session_id, row.tool_name, key) in taken:
            # An older rule allows this very input already (rows come oldest first).
            bind.execute(sa.delete(RULES).where(RULES.c.id == row.id))
            continue
        taken.add((row.session_id, row.tool_name, key))
        bind.execute(sa.update(RULES).where(RULES.c.id == row.id).values(input_key=key))


def upgrade() -> None:
    _rekey(_by_value)


def downgrade() -> None:
    _rekey(_as_written)
