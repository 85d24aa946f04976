"""MCP tasks: a task-augmented tool call's pending action, owner and ttl, kept so any server process
(and a restarted one) answers `tasks/get`, `tasks/result`, `tasks/list` and `tasks/cancel`

Revision ID: 0012
Revises: 0010
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0012"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "mcp_tasks",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("owner", sa.String(length=200), nullable=False),
        sa.Column("session_id", sa.String(length=64), nullable=False),
        sa.Column("pending_id", sa.String(length=64), nullable=False),
        sa.Column("tool", sa.String(length=64), nullable=False),
        sa.Column("ttl_ms", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column(
            "result",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=True,
        ),
        sa.Column("completed_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["session_id"],
            ["task_sessions.id"],
            name=op.f("fk_mcp_tasks_session_id_task_sessions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_mcp_tasks")),
    )
    with op.batch_alter_table("mcp_tasks", schema=None) as batch_op:
        batch_op.create_index("ix_mcp_tasks_owner", ["owner", "id"], unique=False)
        batch_op.create_index("ix_mcp_tasks_pending", ["pending_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("mcp_tasks", schema=None) as batch_op:
        batch_op.drop_index("ix_mcp_tasks_pending")
        batch_op.drop_index("ix_mcp_tasks_owner")
    op.drop_table("mcp_tasks")
