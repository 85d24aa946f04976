"""Alembic environment: runs on a connection handed in by `backend.db.migrate`."""

from __future__ import annotations

from alembic import context

from backend.db.tables import metadata

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("run migrations through `turnwise migrate`")
context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
