"""runner tokens: a person's token for their agent runner, and the tasks and sessions it made

A runner token (api_tokens.kind "runner", with a label) creates its own tasks, one per project
folder, and its own sessions, one per agent client session id; both keyed so that two hooks seeing
a new session at once agree on one.

Revision ID: 0015
Revises: 0014
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def _token_fk(table: str) -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(
        ["token_id"], ["api_tokens.id"], name=op.f(f"fk_{table}_token_id_api_tokens"), ondelete="CASCADE"
    )


def upgrade() -> None:
    with op.batch_alter_table("api_tokens") as batch:
        batch.add_column(sa.Column("kind", sa.String(length=16), nullable=True))
        batch.add_column(sa.Column("label", sa.String(length=200), nullable=True))
    op.create_table(
        "runner_tasks",
        sa.Column("token_id", sa.String(length=64), nullable=False),
        sa.Column("project", sa.Text(), nullable=False),
        sa.Column("task_id", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        _token_fk("runner_tasks"),
        sa.ForeignKeyConstraint(
            ["task_id"], ["tasks.id"], name=op.f("fk_runner_tasks_task_id_tasks"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("token_id", "project", name=op.f("pk_runner_tasks")),
    )
    op.create_table(
        "runner_sessions",
        sa.Column("token_id", sa.String(length=64), nullable=False),
        sa.Column("client_session_id", sa.String(length=200), nullable=False),
        sa.Column("session_id", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        _token_fk("runner_sessions"),
        sa.ForeignKeyConstraint(
            ["session_id"],
            ["task_sessions.id"],
            name=op.f("fk_runner_sessions_session_id_task_sessions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("token_id", "client_session_id", name=op.f("pk_runner_sessions")),
        sa.UniqueConstraint("session_id", name=op.f("uq_runner_sessions_session_id")),
    )


def downgrade() -> None:
    op.drop_table("runner_sessions")
    op.drop_table("runner_tasks")
    with op.batch_alter_table("api_tokens") as batch:
        batch.drop_column("label")
        batch.drop_column("kind")
