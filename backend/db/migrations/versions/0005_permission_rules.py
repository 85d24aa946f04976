"""remembered permission decisions: session rules that allow a tool (this input, or any) at once

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "permission_rules",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("session_id", sa.String(length=64), nullable=False),
        sa.Column("tool_name", sa.String(length=200), nullable=False),
        sa.Column("input_key", sa.String(length=64), nullable=False),
        sa.Column(
            "input",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=True,
        ),
        sa.Column("created_by", sa.String(length=64), nullable=True),
        sa.Column("source_pending_id", sa.String(length=64), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["session_id"],
            ["task_sessions.id"],
            name=op.f("fk_permission_rules_session_id_task_sessions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_permission_rules")),
        sa.UniqueConstraint(
            "session_id",
            "tool_name",
            "input_key",
            name=op.f("uq_permission_rules_session_id_tool_name_input_key"),
        ),
    )


def downgrade() -> None:
    op.drop_table("permission_rules")
