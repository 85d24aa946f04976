"""tasks know their project: the repository folder they work in

A hook reports the folder an agent runs in (`cwd`); tasks of one folder share it, and permission
rules can be scoped to it. Tasks written before have none.

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("tasks", sa.Column("project", sa.Text(), nullable=True))
    op.create_index("ix_tasks_project", "tasks", ["project"])


def downgrade() -> None:
    op.drop_index("ix_tasks_project", table_name="tasks")
    # A plain DROP COLUMN on both dialects (SQLite has it since 3.35): a batch copy of `tasks` would
    # drop the table, and with it, by their foreign keys, every session and message of every task.
    op.execute("ALTER TABLE tasks DROP COLUMN project")
