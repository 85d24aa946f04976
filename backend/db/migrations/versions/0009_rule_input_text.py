"""remembered rules keep their input's JSON text, so it reads back exactly

A rule's `input` column is JSONB on PostgreSQL, which keeps 1e16 as 10000000000000000 and -0.0 as 0:
the rule's input read back was not what the person remembered. `input_json` holds the input's JSON
text beside it (new rules write both; a rule written before has none and reads `input` as before).

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("permission_rules") as batch:
        batch.add_column(sa.Column("input_json", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("permission_rules") as batch:
        batch.drop_column("input_json")
