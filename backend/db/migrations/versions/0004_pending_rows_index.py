"""the pending rows of a turn: a partial index, so pending tests do not walk answered history

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

PENDING_STATUS_PG = "coalesce((metadata ->> 'status'), '') IN ('pending', '')"
PENDING_STATUS_SQLITE = "coalesce(json_extract(metadata, '$.status'), '') IN ('pending', '')"


def upgrade() -> None:
    with op.batch_alter_table("task_session_messages", schema=None) as batch_op:
        batch_op.create_index(
            "ix_messages_pending_turn",
            ["turn_id", "type"],
            unique=False,
            sqlite_where=sa.text(PENDING_STATUS_SQLITE),
            postgresql_where=sa.text(PENDING_STATUS_PG),
        )


def downgrade() -> None:
    with op.batch_alter_table("task_session_messages", schema=None) as batch_op:
        batch_op.drop_index(
            "ix_messages_pending_turn",
            sqlite_where=sa.text(PENDING_STATUS_SQLITE),
            postgresql_where=sa.text(PENDING_STATUS_PG),
        )
