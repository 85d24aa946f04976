"""the session inbox: resume prompts of late answers, kept until the agent comes back

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "session_inbox",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("session_id", sa.String(length=64), nullable=False),
        sa.Column("turn_id", sa.String(length=64), nullable=False),
        sa.Column("source_turn_id", sa.String(length=64), nullable=False),
        sa.Column("pending_id", sa.String(length=64), nullable=False),
        sa.Column("claim_id", sa.String(length=64), nullable=False),
        sa.Column("prompt", sa.Text(), nullable=False),
        sa.Column(
            "answers",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("delivered_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("delivered_via", sa.String(length=32), nullable=True),
        sa.Column("acked_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("closed_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["session_id"],
            ["task_sessions.id"],
            name=op.f("fk_session_inbox_session_id_task_sessions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_session_inbox")),
    )
    with op.batch_alter_table("session_inbox", schema=None) as batch_op:
        batch_op.create_index("ix_session_inbox_session", ["session_id", "created_at"], unique=False)
        batch_op.create_index("ix_session_inbox_pending", ["pending_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("session_inbox", schema=None) as batch_op:
        batch_op.drop_index("ix_session_inbox_pending")
        batch_op.drop_index("ix_session_inbox_session")
    op.drop_table("session_inbox")
