"""A message row's pending-action fields: stored in columns, shown to the domain as metadata keys.

The bundle (`pending_id`), the status and the delivery claim of a pending action's row are columns of
their own (`db/tables.py` says why); the domain still reads them from a row's metadata
(`BundleRow.metadata`, `MessageRecord.metadata`) under the names they always had. Every insert of a
message splits its metadata with `values_of`, and every read that builds a record selects `COLUMNS`
and joins them back with `metadata_of`; a write of one of these fields sets its column.
"""

from __future__ import annotations

from typing import Any

from backend.db.tables import task_session_messages as M
from backend.domain.lifecycle import CLAIM_KEY, INTENT_KEY
from backend.domain.records import MessageRecord
from backend.domain.states import TRUTHY_FLAG_TEXTS
from backend.repository import rows

# metadata key -> its column; the one map every split and join below follows.
LIFTED = {
    "pending_id": M.c.pending_id,
    "status": M.c.status,
    CLAIM_KEY: M.c.claim_id,
    INTENT_KEY: M.c.delivery_pending,
}
# The flags among them (a boolean column, shown only while set, as a removed key was).
_FLAGS = frozenset({INTENT_KEY})

# What a read selects to build a row's metadata (besides id and the rest it needs).
COLUMNS = (M.c.metadata, *LIFTED.values())


def _flag(value: Any) -> bool:
    """The tolerant flag test of `sqlfuncs.json_flag` (JSON true, "true", "1", 1), for a value
    arriving in metadata."""
    if isinstance(value, bool):
        return value
    return value is not None and str(value) in TRUTHY_FLAG_TEXTS


def _text(value: Any) -> str | None:
    return None if value is None else value if isinstance(value, str) else str(value)


def values_of(metadata: Any) -> dict[str, Any]:
    """The columns of a new row whose metadata is `metadata`: the lifted fields in their columns,
    the rest as the metadata column (metadata that is not an object is stored as it is: a read then
    reports it corrupt)."""
    fields = metadata if isinstance(metadata, dict) else {}
    values: dict[str, Any] = {
        column.name: (_flag if key in _FLAGS else _text)(fields.get(key)) for key, column in LIFTED.items()
    }
    values["metadata"] = (
        {k: v for k, v in fields.items() if k not in LIFTED} if fields is metadata else metadata
    )
    return values


def metadata_of(m: Any, *, where: str) -> dict[str, Any]:
    """A row's metadata (a row mapping with `COLUMNS`) with its lifted fields joined back under
    their metadata names; an empty one is left out, as a key never written."""
    metadata = dict(rows.metadata_of(m["metadata"], where=where))
    for key, column in LIFTED.items():
        value = m[column.name]
        if value is not None and (value or key not in _FLAGS):
            metadata[key] = value
    return metadata


def record(row: Any) -> MessageRecord:
    """A message row (every column) as its record."""
    m = row._mapping
    return MessageRecord(
        m["id"],
        m["session_id"],
        m["turn_id"],
        m["type"],
        m["author"],
        m["content"],
        metadata_of(m, where=f"message {m['id']}"),
        m["created_at"],
        m["updated_at"],
    )
