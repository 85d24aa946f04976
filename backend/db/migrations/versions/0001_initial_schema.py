"""initial schema

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tasks",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("title", sa.Text(), nullable=False),
        sa.Column("workflow_step", sa.String(length=200), server_default="todo", nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tasks")),
    )
    op.create_table(
        "turnwise_meta",
        sa.Column("key", sa.String(length=64), nullable=False),
        sa.Column("value", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("key", name=op.f("pk_turnwise_meta")),
    )
    op.create_table(
        "users",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_users")),
        sa.UniqueConstraint("name", name=op.f("uq_users_name")),
    )
    op.create_table(
        "task_grants",
        sa.Column("task_id", sa.String(length=64), nullable=False),
        sa.Column("user_id", sa.String(length=64), nullable=False),
        sa.ForeignKeyConstraint(
            ["task_id"], ["tasks.id"], name=op.f("fk_task_grants_task_id_tasks"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_task_grants_user_id_users"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("task_id", "user_id", name=op.f("pk_task_grants")),
    )
    op.create_table(
        "task_sessions",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("task_id", sa.String(length=64), nullable=False),
        sa.Column("state", sa.String(length=32), nullable=False),
        sa.Column("is_primary", sa.Boolean(), server_default=sa.text("(false)"), nullable=False),
        sa.Column("input_capable", sa.Boolean(), server_default=sa.text("(true)"), nullable=False),
        sa.Column("pending_seq", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["task_id"], ["tasks.id"], name=op.f("fk_task_sessions_task_id_tasks"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_task_sessions")),
    )
    with op.batch_alter_table("task_sessions", schema=None) as batch_op:
        batch_op.create_index("ix_task_sessions_task", ["task_id", "created_at"], unique=False)

    op.create_table(
        "task_status_summaries",
        sa.Column("task_id", sa.String(length=64), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("pending_action", sa.String(length=32), nullable=True),
        sa.Column(
            "fields",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            server_default=sa.text("'{}'"),
            nullable=False,
        ),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["task_id"], ["tasks.id"], name=op.f("fk_task_status_summaries_task_id_tasks"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("task_id", name=op.f("pk_task_status_summaries")),
    )
    op.create_table(
        "api_tokens",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("user_id", sa.String(length=64), nullable=False),
        sa.Column("token_hash", sa.String(length=128), nullable=False),
        sa.Column("session_id", sa.String(length=64), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["session_id"],
            ["task_sessions.id"],
            name=op.f("fk_api_tokens_session_id_task_sessions"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_api_tokens_user_id_users"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_tokens")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_api_tokens_token_hash")),
    )
    op.create_table(
        "task_session_messages",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("session_id", sa.String(length=64), nullable=False),
        sa.Column("turn_id", sa.String(length=64), nullable=False),
        sa.Column("type", sa.String(length=64), nullable=False),
        sa.Column("author", sa.String(length=32), nullable=False),
        sa.Column("content", sa.Text(), server_default="", nullable=False),
        sa.Column(
            "metadata",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            server_default=sa.text("'{}'"),
            nullable=False,
        ),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["session_id"],
            ["task_sessions.id"],
            name=op.f("fk_task_session_messages_session_id_task_sessions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_task_session_messages")),
    )
    with op.batch_alter_table("task_session_messages", schema=None) as batch_op:
        batch_op.create_index("ix_messages_session_created", ["session_id", "created_at", "id"], unique=False)
        batch_op.create_index("ix_messages_turn_type", ["turn_id", "type"], unique=False)

    op.create_table(
        "task_session_turns",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("session_id", sa.String(length=64), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("completed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column(
            "metadata",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            server_default=sa.text("'{}'"),
            nullable=False,
        ),
        sa.ForeignKeyConstraint(
            ["session_id"],
            ["task_sessions.id"],
            name=op.f("fk_task_session_turns_session_id_task_sessions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_task_session_turns")),
    )
    with op.batch_alter_table("task_session_turns", schema=None) as batch_op:
        batch_op.create_index(
            "ix_turns_session_open_order",
            ["session_id", "started_at", "created_at", "id"],
            unique=False,
            sqlite_where=sa.text("completed_at IS NULL"),
            postgresql_where=sa.text("completed_at IS NULL"),
        )
        batch_op.create_index(
            "ix_turns_session_order", ["session_id", "started_at", "created_at", "id"], unique=False
        )

    # Bundle lookups by metadata.pending_id use the same expression the repository compiles per dialect.
    if op.get_bind().dialect.name == "postgresql":
        op.execute(
            "CREATE INDEX ix_messages_pending_id ON task_session_messages ((metadata ->> 'pending_id'))"
        )
    else:
        op.execute(
            "CREATE INDEX ix_messages_pending_id"
            " ON task_session_messages (json_extract(metadata, '$.pending_id'))"
        )


def downgrade() -> None:
    op.execute("DROP INDEX ix_messages_pending_id")
    with op.batch_alter_table("task_session_turns", schema=None) as batch_op:
        batch_op.drop_index("ix_turns_session_order")
        batch_op.drop_index(
            "ix_turns_session_open_order",
            sqlite_where=sa.text("completed_at IS NULL"),
            postgresql_where=sa.text("completed_at IS NULL"),
        )

    op.drop_table("task_session_turns")
    with op.batch_alter_table("task_session_messages", schema=None) as batch_op:
        batch_op.drop_index("ix_messages_turn_type")
        batch_op.drop_index("ix_messages_session_created")

    op.drop_table("task_session_messages")
    op.drop_table("api_tokens")
    op.drop_table("task_status_summaries")
    with op.batch_alter_table("task_sessions", schema=None) as batch_op:
        batch_op.drop_index("ix_task_sessions_task")

    op.drop_table("task_sessions")
    op.drop_table("task_grants")
    op.drop_table("users")
    op.drop_table("turnwise_meta")
    op.drop_table("tasks")
