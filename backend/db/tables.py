"""SQLAlchemy Core tables: tasks, sessions, turns, messages, summaries, access and meta."""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    text,
)

from backend.db.types import JSONDoc, UTCDateTime

metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
        "ck": "ck_%(table_name)s_%(constraint_name)s",
    }
)

ID = String(64)

tasks = Table(
    "tasks",
    metadata,
    Column("id", ID, primary_key=True),
    Column("title", Text, nullable=False),
    Column("workflow_step", String(200), nullable=False, server_default="todo"),
    Column("created_at", UTCDateTime, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
    # The repository folder the task works in (a hook's `cwd`); rules can be scoped to it.
    Column("project", Text, nullable=True),
    Index("ix_tasks_project", "project"),
)

task_sessions = Table(
    "task_sessions",
    metadata,
    Column("id", ID, primary_key=True),
    Column("task_id", ID, ForeignKey("tasks.id", ondelete="CASCADE"), nullable=False),
    Column("state", String(32), nullable=False),
    Column("is_primary", Boolean, nullable=False, server_default=text("false")),
    Column("input_capable", Boolean, nullable=False, server_default=text("true")),
    # Bumped under the session lock by every write that can change the pending projection; with the
    # database epoch it forms the revision clients compare, identical from every server process.
    Column("pending_seq", BigInteger, nullable=False, server_default=text("0")),
    Column("created_at", UTCDateTime, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
    Index("ix_task_sessions_task", "task_id", "created_at"),
)

task_session_turns = Table(
    "task_session_turns",
    metadata,
    Column("id", ID, primary_key=True),
    Column("session_id", ID, ForeignKey("task_sessions.id", ondelete="CASCADE"), nullable=False),
    Column("started_at", UTCDateTime, nullable=False),
    Column("completed_at", UTCDateTime, nullable=True),
    Column("created_at", UTCDateTime, nullable=False),
    Column("metadata", JSONDoc, nullable=False, server_default=text("'{}'")),
    # Current-turn lookups walk these backwards and stop at the first authoritative row.
    Index("ix_turns_session_order", "session_id", "started_at", "created_at", "id"),
    Index(
        "ix_turns_session_open_order",
        "session_id",
        "started_at",
        "created_at",
        "id",
        sqlite_where=text("completed_at IS NULL"),
        postgresql_where=text("completed_at IS NULL"),
    ),
)

task_session_messages = Table(
    "task_session_messages",
    metadata,
    Column("id", ID, primary_key=True),
    Column("session_id", ID, ForeignKey("task_sessions.id", ondelete="CASCADE"), nullable=False),
    # No foreign key: a message may name a turn that never became durable; the rule treats it as inert.
    Column("turn_id", ID, nullable=False),
    Column("type", String(64), nullable=False),
    Column("author", String(32), nullable=False),
    Column("content", Text, nullable=False, server_default=""),
    Column("metadata", JSONDoc, nullable=False, server_default=text("'{}'")),
    # A pending action's row: the bundle it belongs to (written once, at the ask), its status, and the
    # durable claim of a response (`claim_id`, with `delivery_pending` while its delivery is owed).
    # Columns of their own, so a claim or a settle changes no indexed value (no index reads status,
    # the claim or metadata): on PostgreSQL both are heap-only updates. The repository shows them to
    # the domain as the metadata keys they once were (`repository/message_fields.py`).
    Column("pending_id", ID, nullable=True),
    Column("status", String(16), nullable=True),
    Column("claim_id", ID, nullable=True),
    Column("delivery_pending", Boolean, nullable=False, server_default=text("false")),
    # Who decided: the id of the user whose response claimed the row (migration 0013; unindexed).
    Column("decided_by", ID, nullable=True),
    Column("created_at", UTCDateTime, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
    Index("ix_messages_turn_type", "turn_id", "type"),
    Index("ix_messages_session_created", "session_id", "created_at", "id"),
    # Bundle lookups; only the rows of pending actions carry a pending_id.
    Index(
        "ix_messages_pending_id",
        "pending_id",
        sqlite_where=text("pending_id IS NOT NULL"),
        postgresql_where=text("pending_id IS NOT NULL"),
    ),
    # The audit trail: a session's pending-action rows (columns no claim or settle changes).
    Index(
        "ix_messages_session_pending",
        "session_id",
        "created_at",
        sqlite_where=text("pending_id IS NOT NULL"),
        postgresql_where=text("pending_id IS NOT NULL"),
    ),
)

# The rows of pending actions whose status is pending (`authority.is_pending_row`), keyed by turn:
# what the one rule's pending tests read, so their cost does not grow with a turn's answered
# history, while the message rows themselves carry no index on their status. Kept by triggers on
# `task_session_messages` (migration 0007), never written by the code: every insert, status change
# and delete of a message row updates it in the same statement, on both dialects.
open_pending_rows = Table(
    "open_pending_rows",
    metadata,
    Column("turn_id", ID, primary_key=True),
    Column("type", String(64), primary_key=True),
    Column("session_id", ID, primary_key=True),
    Column("message_id", ID, primary_key=True),
)

task_status_summaries = Table(
    "task_status_summaries",
    metadata,
    Column("task_id", ID, ForeignKey("tasks.id", ondelete="CASCADE"), primary_key=True),
    Column("revision", Integer, nullable=False),
    Column("pending_action", String(32), nullable=True),
    Column("fields", JSONDoc, nullable=False, server_default=text("'{}'")),
    Column("updated_at", UTCDateTime, nullable=False),
)

users = Table(
    "users",
    metadata,
    Column("id", ID, primary_key=True),
    Column("name", String(200), nullable=False, unique=True),
    Column("role", String(16), nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
)

api_tokens = Table(
    "api_tokens",
    metadata,
    Column("id", ID, primary_key=True),
    Column("user_id", ID, ForeignKey("users.id", ondelete="CASCADE"), nullable=False),
    Column("token_hash", String(128), nullable=False, unique=True),
    # Agent tokens are scoped to one session.
    Column("session_id", ID, ForeignKey("task_sessions.id", ondelete="CASCADE"), nullable=True),
    Column("created_at", UTCDateTime, nullable=False),
    Column("revoked_at", UTCDateTime, nullable=True),
    # "runner": a person's token for their agent runner (hooks), which creates its own tasks and
    # sessions (`runner_tasks`, `runner_sessions`) and acts as the agent only in them. Null: a plain
    # token of its user's role.
    Column("kind", String(16), nullable=True),
    Column("label", String(200), nullable=True),
)

# A runner token's task of a project folder: the token's sessions started in that folder share it.
runner_tasks = Table(
    "runner_tasks",
    metadata,
    Column("token_id", ID, ForeignKey("api_tokens.id", ondelete="CASCADE"), primary_key=True),
    Column("project", Text, primary_key=True),
    Column("task_id", ID, ForeignKey("tasks.id", ondelete="CASCADE"), nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
)

# A runner token's session of an agent client's session id (Claude Code's or Codex's `session_id`),
# created on first sight; the key makes two hooks of one new session agree on one session.
runner_sessions = Table(
    "runner_sessions",
    metadata,
    Column("token_id", ID, ForeignKey("api_tokens.id", ondelete="CASCADE"), primary_key=True),
    Column("client_session_id", String(200), primary_key=True),
    Column("session_id", ID, ForeignKey("task_sessions.id", ondelete="CASCADE"), nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    UniqueConstraint("session_id"),
)

task_grants = Table(
    "task_grants",
    metadata,
    Column("task_id", ID, ForeignKey("tasks.id", ondelete="CASCADE"), primary_key=True),
    Column("user_id", ID, ForeignKey("users.id", ondelete="CASCADE"), primary_key=True),
)

# A held agentPrompts subscription, with a lease that the holding process renews; any process can
# then decide "no runner connected" (a dispatch known not to have been delivered) from the database.
agent_runners = Table(
    "agent_runners",
    metadata,
    Column("id", ID, primary_key=True),
    Column("session_id", ID, ForeignKey("task_sessions.id", ondelete="CASCADE"), nullable=False),
    Column("instance_id", String(64), nullable=False),
    Column("connected_at", UTCDateTime, nullable=False),
    Column("expires_at", UTCDateTime, nullable=False),
    Index("ix_agent_runners_session", "session_id", "expires_at"),
)

# Resume prompts of answers given while no agent held the session's prompt channel: written in the
# transaction that settles the claim, taken (delivered_at) at most once by agentPrompts or
# wait_for_answer, and only while `turn_id` (the successor the answer opened) is the current turn.
session_inbox = Table(
    "session_inbox",
    metadata,
    Column("id", ID, primary_key=True),
    Column("session_id", ID, ForeignKey("task_sessions.id", ondelete="CASCADE"), nullable=False),
    Column("turn_id", ID, nullable=False),
    Column("source_turn_id", ID, nullable=False),
    Column("pending_id", ID, nullable=False),
    Column("claim_id", ID, nullable=False),
    Column("prompt", Text, nullable=False),
    Column("answers", JSONDoc, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Column("delivered_at", UTCDateTime, nullable=True),
    Column("delivered_via", String(32), nullable=True),
    Column("acked_at", UTCDateTime, nullable=True),
    Column("closed_at", UTCDateTime, nullable=True),
    Index("ix_session_inbox_session", "session_id", "created_at"),
    Index("ix_session_inbox_pending", "pending_id"),
)

# Permission rules in Claude Code's syntax (`domain.rule_patterns`): `pattern` ("Bash",
# "Bash(npm test:*)", "Edit(src/**)", "mcp__github") decides a request `behavior` (allow, ask or deny)
# wherever its `scope` reaches: one session (`session_id` and `scope_id`), one task, one project
# (`Task.project`) or everywhere (global, `scope_id` NULL), until `expires_at` if it has one.
# `tool_name` is the pattern's tool as a request is looked up by (`rule_patterns` keys; an MCP server's
# rule is found under "mcp__<server>"). A rule for one exact input (remembered before patterns, or
# "this exact call" of a tool whose input no pattern can say) keeps it: `input_key` is the hash of its
# canonical JSON (`domain.permissions.input_key`), NULL for every other rule. Written by a person
# (respondToPermission with remember, addPermissionRule, importPermissionRules), never by an agent;
# read with the ask's own context statement (`repository.permission_rules.candidates`).
permission_rules = Table(
    "permission_rules",
    metadata,
    Column("id", ID, primary_key=True),
    Column("session_id", ID, ForeignKey("task_sessions.id", ondelete="CASCADE"), nullable=True),
    Column("tool_name", String(200), nullable=False),
    Column("input_key", String(64), nullable=True),
    Column("input", JSONDoc, nullable=True),
    # The input's JSON text (migration 0009): read back exactly, where JSONB rewrites numbers.
    Column("input_json", Text, nullable=True),
    Column("pattern", Text, nullable=False),
    Column("behavior", String(8), nullable=False),
    Column("scope", String(16), nullable=False),
    Column("scope_id", Text, nullable=True),
    Column("expires_at", UTCDateTime, nullable=True),
    Column("created_by", ID, nullable=True),
    Column("source_pending_id", ID, nullable=True),
    Column("created_at", UTCDateTime, nullable=False),
    Index("ix_permission_rules_scope", "scope_id", "tool_name"),
)

# Reach: where a person hears of a pending action with no tab open. A browser's Web Push subscription
# (one per device: its endpoint is unique) and a chat or mail channel (an Apprise URL: a secret).
push_subscriptions = Table(
    "push_subscriptions",
    metadata,
    Column("id", ID, primary_key=True),
    Column("user_id", ID, ForeignKey("users.id", ondelete="CASCADE"), nullable=False),
    Column("endpoint", Text, nullable=False, unique=True),
    Column("p256dh", String(200), nullable=False),
    Column("auth", String(64), nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Index("ix_push_subscriptions_user", "user_id"),
)
notification_channels = Table(
    "notification_channels",
    metadata,
    Column("id", ID, primary_key=True),
    Column("user_id", ID, ForeignKey("users.id", ondelete="CASCADE"), nullable=False),
    Column("url", Text, nullable=False),
    Column("label", String(200), nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Index("ix_notification_channels_user", "user_id"),
)
# One row per (pending action, message kind, step, destination): written with the ask's own unit of
# work (kind `pending`), when a sent push's action stops being pending (kind `close`), or by the
# worker's claim of an earlier message of the same action (kind `remind`, step 1, 2, ... per
# destination; kind `escalate`, to a person's escalation channel); the unique key makes each message
# at most one row. `asked_at`: when the action was asked (a reminder or escalation says how long it
# has waited; a first notice's is its `created_at`). A worker claims due rows (`claimed_by` /
# `claimed_until`, with SKIP LOCKED on PostgreSQL, so one process sends each), marks them `sending`
# before it sends (the at-most-once boundary: a row left `sending` by a crash is never sent again),
# then `sent`, `skipped` (the action was settled meanwhile, or the message is not wanted any more),
# `gone` (the destination no longer exists) or `failed` (retried with backoff until its deadline).
notification_outbox = Table(
    "notification_outbox",
    metadata,
    Column("id", ID, primary_key=True),
    Column("pending_id", ID, nullable=False),
    Column("kind", String(16), nullable=False),
    Column("task_id", ID, nullable=False),
    Column("session_id", ID, nullable=False),
    Column("destination", String(16), nullable=False),
    Column("destination_id", ID, nullable=False),
    Column("status", String(16), nullable=False),
    Column("due_at", UTCDateTime, nullable=False),
    Column("deadline_at", UTCDateTime, nullable=False),
    Column("attempts", Integer, nullable=False, server_default=text("0")),
    Column("claimed_by", String(64), nullable=True),
    Column("claimed_until", UTCDateTime, nullable=True),
    Column("sent_at", UTCDateTime, nullable=True),
    Column("close_queued", Boolean, nullable=False, server_default=text("false")),
    Column("last_error", Text, nullable=True),
    Column("created_at", UTCDateTime, nullable=False),
    Column("step", Integer, nullable=False, server_default=text("0")),
    Column("asked_at", UTCDateTime, nullable=True),
    UniqueConstraint(
        "pending_id", "kind", "step", "destination", "destination_id", name="uq_notification_outbox_message"
    ),
    Index("ix_notification_outbox_due", "status", "due_at"),
)
# A person's reminder and escalation preferences; no row (or a null field) is the server's default:
# told once after TURNWISE_NOTIFY_AFTER_SECONDS, never reminded, never escalated.
notification_preferences = Table(
    "notification_preferences",
    metadata,
    Column("user_id", ID, ForeignKey("users.id", ondelete="CASCADE"), primary_key=True),
    Column("notify_after_seconds", Float, nullable=True),
    Column("remind_every_seconds", Float, nullable=True),
    Column("escalate_after_seconds", Float, nullable=True),
    Column(
        "escalate_channel_id", ID, ForeignKey("notification_channels.id", ondelete="SET NULL"), nullable=True
    ),
    Column("updated_at", UTCDateTime, nullable=False),
)

# MCP tasks (a task-augmented `ask_user_question` / `approve_tool_use` call): which pending action a
# task waits on, for whom (`owner`: the caller's user and session), and until when (`ttl_ms` from
# `created_at`). Its status is never stored: it is read from the pending action. `result` is the tool
# result the plain call would have returned, written once, when the action settled and the result
# was first read, so every later read (from any process) returns the same.
mcp_tasks = Table(
    "mcp_tasks",
    metadata,
    Column("id", ID, primary_key=True),
    Column("owner", String(200), nullable=False),
    Column("session_id", ID, ForeignKey("task_sessions.id", ondelete="CASCADE"), nullable=False),
    Column("pending_id", ID, nullable=False),
    Column("tool", String(64), nullable=False),
    Column("ttl_ms", BigInteger, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Column("result", JSONDoc, nullable=True),
    Column("completed_at", UTCDateTime, nullable=True),
    Index("ix_mcp_tasks_owner", "owner", "id"),
    Index("ix_mcp_tasks_pending", "pending_id"),
)

meta = Table(
    "turnwise_meta",
    metadata,
    Column("key", String(64), primary_key=True),
    Column("value", Text, nullable=False),
)
