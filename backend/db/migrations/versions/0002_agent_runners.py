"""agent runner presence, so any server process can tell whether a session's prompt channel is held

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "agent_runners",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("session_id", sa.String(length=64), nullable=False),
        sa.Column("instance_id", sa.String(length=64), nullable=False),
        sa.Column("connected_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["session_id"],
            ["task_sessions.id"],
            name=op.f("fk_agent_runners_session_id_task_sessions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_agent_runners")),
    )
    with op.batch_alter_table("agent_runners", schema=None) as batch_op:
        batch_op.create_index("ix_agent_runners_session", ["session_id", "expires_at"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("agent_runners", schema=None) as batch_op:
        batch_op.drop_index("ix_agent_runners_session")
    op.drop_table("agent_runners")
