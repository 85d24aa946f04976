"""reminders and escalation: a person's preferences, and outbox messages numbered by step

A person may be told again while an action waits (kind `remind`, steps 1, 2, ...) and, after a
while, have one chosen channel told (kind `escalate`). The outbox's unique key gains the step, so
each reminder of an action is at most one row per destination; `asked_at` carries the action's ask
time to the messages that say how long it has waited. Rows written before are first notices and
closes: step 0.

Revision ID: 0014
Revises: 0013
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

OLD_KEY = "uq_notification_outbox_pending_id_kind_destination_destination_id"
NEW_KEY = "uq_notification_outbox_message"


def upgrade() -> None:
    with op.batch_alter_table("notification_outbox") as batch:
        batch.add_column(sa.Column("step", sa.Integer(), server_default=sa.text("0"), nullable=False))
        batch.add_column(sa.Column("asked_at", sa.DateTime(timezone=True), nullable=True))
        batch.drop_constraint(op.f(OLD_KEY), type_="unique")
        batch.create_unique_constraint(
            op.f(NEW_KEY), ["pending_id", "kind", "step", "destination", "destination_id"]
        )
    op.create_table(
        "notification_preferences",
        sa.Column("user_id", sa.String(length=64), nullable=False),
        sa.Column("notify_after_seconds", sa.Float(), nullable=True),
        sa.Column("remind_every_seconds", sa.Float(), nullable=True),
        sa.Column("escalate_after_seconds", sa.Float(), nullable=True),
        sa.Column("escalate_channel_id", sa.String(length=64), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["user_id"],
            ["users.id"],
            name=op.f("fk_notification_preferences_user_id_users"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["escalate_channel_id"],
            ["notification_channels.id"],
            name=op.f("fk_notification_preferences_escalate_channel_id_notification_channels"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("user_id", name=op.f("pk_notification_preferences")),
    )


def downgrade() -> None:
    op.drop_table("notification_preferences")
    # Reminders and escalations have no place in the old key: they go with their column.
    op.execute("DELETE FROM notification_outbox WHERE step <> 0 OR kind = 'escalate'")
    with op.batch_alter_table("notification_outbox") as batch:
        batch.drop_constraint(op.f(NEW_KEY), type_="unique")
        batch.create_unique_constraint(op.f(OLD_KEY), ["pending_id", "kind", "destination", "destination_id"])
        batch.drop_column("asked_at")
        batch.drop_column("step")
