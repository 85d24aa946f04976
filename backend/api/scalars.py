"""The DateTime scalar: ISO-8601, UTC, always with microseconds."""

from __future__ import annotations

import datetime as dt

import strawberry


def serialize(value: dt.datetime) -> str:
    return value.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse(value: str) -> dt.datetime:
    parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    if parsed.tzinfo is None:
        raise ValueError("DateTime needs a UTC offset")
    return parsed.astimezone(dt.UTC)


DateTime = strawberry.scalar(
    name="DateTime",
    description="ISO-8601, UTC, microseconds",
    serialize=serialize,
    parse_value=parse,
)
