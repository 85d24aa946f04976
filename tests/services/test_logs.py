"""Operators see a log line's structured fields, not only its message."""

from __future__ import annotations

import logging
import sys

from backend.logs import FORMAT, FieldsFormatter


def _record(**extra: object) -> logging.LogRecord:
    record = logging.LogRecord(
        "turnwise.clarification", logging.INFO, __file__, 1, "clarification asked", None, None
    )
    record.__dict__.update(extra)
    return record


def test_a_line_ends_with_the_fields_its_call_passed() -> None:
    line = FieldsFormatter(FORMAT).format(_record(event="clarification.asked", pending_id="p1"))
    assert line.endswith(
        "INFO turnwise.clarification clarification asked event=clarification.asked pending_id=p1"
    )


def test_a_line_without_fields_is_unchanged_and_a_traceback_stays_below_them() -> None:
    formatter = FieldsFormatter(FORMAT)
    assert formatter.format(_record()).endswith("clarification asked")
    try:
        raise ValueError("boom")
    except ValueError:
        record = _record(event="x.failed")
        record.exc_info = sys.exc_info()
    first, *rest = formatter.format(record).split("\n")
    assert first.endswith("clarification asked event=x.failed")
    assert rest[-1] == "ValueError: boom"
