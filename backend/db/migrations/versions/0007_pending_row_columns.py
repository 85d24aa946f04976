"""pending rows' bundle, status and claim as columns; the open pending rows kept by triggers

A pending action's row kept its bundle (`pending_id`), status and delivery claim
(`delivery_claim_id`, `response_delivery_pending`) in `metadata`, and two indexes read that column
(the bundle lookup's expression and the pending-status predicate), so every claim and settle wrote an
entry in all five indexes of the table. Here they become columns (existing rows carried over, the
keys removed from `metadata`), the bundle index reads the `pending_id` column (written once, at the
ask), no index reads the status or the claim, and the pending rows of a turn are found through
`open_pending_rows`, a narrow table that triggers keep: on PostgreSQL a claim and a settle change no
indexed value, so both can be heap-only updates (the table also keeps room on its pages for them).

The pending-row condition here is the one rule's (`repository/authority.py`, `is_pending_row`),
frozen as text: a pending action's type, status `pending` or missing/empty, and a clarification only
with a non-empty `pending_id`.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

M = "task_session_messages"
LIFTED = ("pending_id", "status", "delivery_claim_id", "response_delivery_pending")


def _pending(row: str) -> str:
    return (
        f"{row}.type IN ('clarification_request', 'permission_request')"
        f" AND coalesce({row}.status, '') IN ('pending', '')"
        f" AND ({row}.type <> 'clarification_request' OR coalesce({row}.pending_id, '') <> '')"
    )


_KEY = "turn_id = OLD.turn_id AND type = OLD.type AND session_id = OLD.session_id AND message_id = OLD.id"
_CHANGED = " OR ".join(
    f"OLD.{c} IS DISTINCT FROM NEW.{c}" for c in ("status", "pending_id", "turn_id", "type", "session_id")
)

PG_TRIGGERS = (
    f"""
    CREATE FUNCTION turnwise_open_pending_rows() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF TG_OP <> 'INSERT' THEN
            DELETE FROM open_pending_rows WHERE {_KEY};
        END IF;
        IF TG_OP <> 'DELETE' AND {_pending("NEW")} THEN
            INSERT INTO open_pending_rows (turn_id, type, session_id, message_id)
            VALUES (NEW.turn_id, NEW.type, NEW.session_id, NEW.id);
        END IF;
        RETURN NULL;
    END
    $$
    """,
    f"""
    CREATE TRIGGER open_pending_rows_insert AFTER INSERT ON {M}
    FOR EACH ROW WHEN ({_pending("NEW")}) EXECUTE FUNCTION turnwise_open_pending_rows()
    """,
    f"""
    CREATE TRIGGER open_pending_rows_update
    AFTER UPDATE OF status, pending_id, turn_id, type, session_id ON {M}
    FOR EACH ROW WHEN ({_CHANGED}) EXECUTE FUNCTION turnwise_open_pending_rows()
    """,
    f"""
    CREATE TRIGGER open_pending_rows_delete AFTER DELETE ON {M}
    FOR EACH ROW WHEN ({_pending("OLD")}) EXECUTE FUNCTION turnwise_open_pending_rows()
    """,
)

_SQLITE_INSERT_NEW = (
    "INSERT INTO open_pending_rows (turn_id, type, session_id, message_id)"
    f" SELECT NEW.turn_id, NEW.type, NEW.session_id, NEW.id WHERE {_pending('NEW')};"
)
SQLITE_TRIGGERS = (
    f"CREATE TRIGGER open_pending_rows_insert AFTER INSERT ON {M} BEGIN {_SQLITE_INSERT_NEW} END",
    f"""
    CREATE TRIGGER open_pending_rows_update
    AFTER UPDATE OF status, pending_id, turn_id, type, session_id ON {M}
    BEGIN
        DELETE FROM open_pending_rows WHERE {_KEY};
        {_SQLITE_INSERT_NEW}
    END
    """,
    f"""
    CREATE TRIGGER open_pending_rows_delete AFTER DELETE ON {M} WHEN {_pending("OLD")}
    BEGIN DELETE FROM open_pending_rows WHERE {_KEY}; END
    """,
)

BACKFILL_OPEN = (
    "INSERT INTO open_pending_rows (turn_id, type, session_id, message_id)"
    f" SELECT m.turn_id, m.type, m.session_id, m.id FROM {M} m WHERE {_pending('m')}"
)


def upgrade() -> None:
    pg = op.get_bind().dialect.name == "postgresql"
    op.execute("DROP INDEX ix_messages_pending_id")
    with op.batch_alter_table(M, schema=None) as batch_op:
        batch_op.drop_index("ix_messages_pending_turn")
        batch_op.add_column(sa.Column("pending_id", sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column("status", sa.String(length=16), nullable=True))
        batch_op.add_column(sa.Column("claim_id", sa.String(length=64), nullable=True))
        batch_op.add_column(
            sa.Column("delivery_pending", sa.Boolean(), server_default=sa.text("false"), nullable=False)
        )
    if pg:
        op.execute(
            f"""
            UPDATE {M} SET
                pending_id = metadata ->> 'pending_id',
                status = metadata ->> 'status',
                claim_id = metadata ->> 'delivery_claim_id',
                delivery_pending = coalesce(metadata ->> 'response_delivery_pending', '') IN ('true', '1'),
                metadata = metadata - 'pending_id' - 'status' - 'delivery_claim_id'
                    - 'response_delivery_pending'
            WHERE metadata ?| array['pending_id', 'status', 'delivery_claim_id', 'response_delivery_pending']
            """
        )
        # Room on each page for the heap-only versions of its rows' claims and settles.
        op.execute(f"ALTER TABLE {M} SET (fillfactor = 80)")
    else:
        op.execute(
            f"""
            UPDATE {M} SET
                pending_id = CAST(json_extract(metadata, '$.pending_id') AS TEXT),
                status = CAST(json_extract(metadata, '$.status') AS TEXT),
                claim_id = CAST(json_extract(metadata, '$.delivery_claim_id') AS TEXT),
                delivery_pending = coalesce(
                    CAST(json_extract(metadata, '$.response_delivery_pending') AS TEXT), ''
                ) IN ('true', '1'),
                metadata = json_remove(
                    metadata, '$.pending_id', '$.status', '$.delivery_claim_id', '$.response_delivery_pending'
                )
            WHERE json_extract(metadata, '$.pending_id') IS NOT NULL
               OR json_extract(metadata, '$.status') IS NOT NULL
               OR json_extract(metadata, '$.delivery_claim_id') IS NOT NULL
               OR json_extract(metadata, '$.response_delivery_pending') IS NOT NULL
            """
        )
    with op.batch_alter_table(M, schema=None) as batch_op:
        batch_op.create_index(
            "ix_messages_pending_id",
            ["pending_id"],
            unique=False,
            sqlite_where=sa.text("pending_id IS NOT NULL"),
            postgresql_where=sa.text("pending_id IS NOT NULL"),
        )
    op.create_table(
        "open_pending_rows",
        sa.Column("turn_id", sa.String(length=64), nullable=False),
        sa.Column("type", sa.String(length=64), nullable=False),
        sa.Column("session_id", sa.String(length=64), nullable=False),
        sa.Column("message_id", sa.String(length=64), nullable=False),
        sa.PrimaryKeyConstraint(
            "turn_id", "type", "session_id", "message_id", name=op.f("pk_open_pending_rows")
        ),
    )
    op.execute(BACKFILL_OPEN)
    for statement in PG_TRIGGERS if pg else SQLITE_TRIGGERS:
        op.execute(statement)


def downgrade() -> None:
    pg = op.get_bind().dialect.name == "postgresql"
    for trigger in ("insert", "update", "delete"):
        op.execute(f"DROP TRIGGER open_pending_rows_{trigger}" + (f" ON {M}" if pg else ""))
    if pg:
        op.execute("DROP FUNCTION turnwise_open_pending_rows()")
    op.drop_table("open_pending_rows")
    with op.batch_alter_table(M, schema=None) as batch_op:
        batch_op.drop_index(
            "ix_messages_pending_id",
            sqlite_where=sa.text("pending_id IS NOT NULL"),
            postgresql_where=sa.text("pending_id IS NOT NULL"),
        )
    if pg:
        op.execute(
            f"""
            UPDATE {M} SET metadata = metadata || jsonb_strip_nulls(jsonb_build_object(
                'pending_id', pending_id, 'status', status, 'delivery_claim_id', claim_id,
                'response_delivery_pending', CASE WHEN delivery_pending THEN true END))
            WHERE pending_id IS NOT NULL OR status IS NOT NULL OR claim_id IS NOT NULL OR delivery_pending
            """
        )
        op.execute(f"ALTER TABLE {M} RESET (fillfactor)")
    else:
        op.execute(
            f"""
            UPDATE {M} SET metadata = json_patch(metadata, json_object(
                'pending_id', pending_id, 'status', status, 'delivery_claim_id', claim_id,
                'response_delivery_pending', CASE WHEN delivery_pending THEN json('true') END))
            WHERE pending_id IS NOT NULL OR status IS NOT NULL OR claim_id IS NOT NULL OR delivery_pending
            """
        )
    with op.batch_alter_table(M, schema=None) as batch_op:
        batch_op.drop_column("delivery_pending")
        batch_op.drop_column("claim_id")
        batch_op.drop_column("status")
        batch_op.drop_column("pending_id")
        batch_op.create_index(
            "ix_messages_pending_turn",
            ["turn_id", "type"],
            unique=False,
            sqlite_where=sa.text("coalesce(json_extract(metadata, '$.status'), '') IN ('pending', '')"),
            postgresql_where=sa.text("coalesce((metadata ->> 'status'), '') IN ('pending', '')"),
        )
    if pg:
        op.execute(f"CREATE INDEX ix_messages_pending_id ON {M} ((metadata ->> 'pending_id'))")
    else:
        op.execute(f"CREATE INDEX ix_messages_pending_id ON {M} (json_extract(metadata, '$.pending_id'))")
