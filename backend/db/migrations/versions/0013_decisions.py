"""who decided a pending action, and the audit trail's index

A pending action's rows kept the response but not who gave it: the decisions read as "a person" at
best, and a rule's allow, which names its rule in the response, looked like the others only by that.
`decided_by` holds the id of the user whose response claimed the rows (written by the claim, beside
the status; rows claimed before this read as decided by "unknown"). The audit trail reads a session's
pending-action rows through `ix_messages_session_pending` (only rows with a `pending_id`, keyed by
columns no claim or settle changes, so those stay heap-only updates on PostgreSQL).

Revision ID: 0013
Revises: 0012
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

M = "task_session_messages"


def upgrade() -> None:
    op.add_column(M, sa.Column("decided_by", sa.String(length=64), nullable=True))
    op.create_index(
        "ix_messages_session_pending",
        M,
        ["session_id", "created_at"],
        unique=False,
        sqlite_where=sa.text("pending_id IS NOT NULL"),
        postgresql_where=sa.text("pending_id IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index(
        "ix_messages_session_pending",
        M,
        sqlite_where=sa.text("pending_id IS NOT NULL"),
        postgresql_where=sa.text("pending_id IS NOT NULL"),
    )
    # A plain DROP COLUMN on both dialects (SQLite has it since 3.35): a batch copy of the messages
    # table would drop it, and with it, through their foreign keys, the rows that reference it.
    op.execute(f"ALTER TABLE {M} DROP COLUMN decided_by")
