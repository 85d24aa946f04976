"""Operators see a log line's structured fields, not only its message; one record is one line."""

from __future__ import annotations

import logging
import sys
import threading

import pytest

from backend.domain.names import CONTROL
from backend.logs import CONTINUATION, FORMAT, FieldsFormatter, withholding


def _record(msg: str = "clarification asked", *args: object, **extra: object) -> logging.LogRecord:
    record = logging.LogRecord("turnwise.clarification", logging.INFO, __file__, 1, msg, args or None, None)
    record.__dict__.update(extra)
    return record


def _failed(record: logging.LogRecord, error: Exception) -> logging.LogRecord:
    try:
        raise error
    except type(error):
        record.exc_info = sys.exc_info()
    return record


# Every format the module's formatter is used with: the served one, and a bare message.
FORMATTERS = pytest.mark.parametrize(
    "formatter", [FieldsFormatter(FORMAT), FieldsFormatter("%(message)s")], ids=["served", "bare"]
)
FORGED = "2026-12-01 09:00:00,000 INFO turnwise.access task granted event=access.granted user_id=u9"
BREAKS = {"lf": "\n", "cr": "\r", "esc": "\x1b", "crlf": "\r\n", "nel": "\x85", "line separator": "\u2028"}
each_break = pytest.mark.parametrize("char", list(BREAKS.values()), ids=list(BREAKS))


def test_a_line_ends_with_the_fields_its_call_passed() -> None:
    line = FieldsFormatter(FORMAT).format(_record(event="clarification.asked", pending_id="p1"))
    assert line.endswith(
        "INFO turnwise.clarification clarification asked event=clarification.asked pending_id=p1"
    )


def test_a_line_without_fields_is_unchanged_and_a_traceback_stays_below_them() -> None:
    formatter = FieldsFormatter(FORMAT)
    assert formatter.format(_record()).endswith("clarification asked")
    first, *rest = formatter.format(_failed(_record(event="x.failed"), ValueError("boom"))).split("\n")
    assert first.endswith("clarification asked event=x.failed")
    assert rest[0] == f"{CONTINUATION}Traceback (most recent call last):"
    assert rest[-1] == f"{CONTINUATION}ValueError: boom"


@FORMATTERS
@each_break
def test_a_message_holding_a_line_break_or_control_character_renders_as_one_line(
    formatter: FieldsFormatter, char: str
) -> None:
    line = formatter.format(_record("task advanced to %s", f"done{char}{FORGED}", event="workflow.advanced"))
    assert "\n" not in line
    assert CONTROL.search(line) is None
    assert line.endswith("event=workflow.advanced")


@FORMATTERS
@each_break
def test_a_field_value_or_name_holding_a_line_break_or_control_character_renders_as_one_line(
    formatter: FieldsFormatter, char: str
) -> None:
    line = formatter.format(_record(step=f"done{char}{FORGED}", **{f"k{char}": "v"}))
    assert "\n" not in line
    assert CONTROL.search(line) is None


@FORMATTERS
def test_escapes_name_the_character_they_replace(formatter: FieldsFormatter) -> None:
    line = formatter.format(_record("a\nb\r\tc\x1b[2Jd\x7f\x85\u2028"))
    assert line.endswith("a\\nb\\r\\tc\\x1b[2Jd\\x7f\\x85\\u2028")


def test_a_field_value_with_spaces_or_quotes_is_quoted_so_it_cannot_pass_for_further_fields() -> None:
    line = FieldsFormatter(FORMAT).format(
        _record(step="done user_id=admin", error='task "x" not found\n', empty="", path="a.b")
    )
    assert line.endswith('step="done user_id=admin" error="task \\"x\\" not found\\n" empty="" path=a.b')


@FORMATTERS
@each_break
def test_every_traceback_line_is_a_continuation_line_even_when_the_exception_message_breaks_lines(
    formatter: FieldsFormatter, char: str
) -> None:
    record = _failed(_record(event="x.failed"), RuntimeError(f"boom{char}{FORGED}"))
    head, *below = formatter.format(record).split("\n")
    assert head.endswith("clarification asked event=x.failed")
    assert below
    assert all(line.startswith(CONTINUATION) for line in below)
    assert all(CONTROL.search(line) is None for line in below)


def test_a_stack_is_below_the_line_as_continuation_lines_too() -> None:
    record = _record(event="x.stack")
    record.stack_info = "Stack (most recent call last):\n  File 'x', line 1"
    head, *below = FieldsFormatter(FORMAT).format(record).split("\n")
    assert head.endswith("event=x.stack")
    assert below == [f"{CONTINUATION}Stack (most recent call last):", f"{CONTINUATION}  File 'x', line 1"]


def test_a_withheld_secret_shows_as_stars_in_the_message_the_fields_and_the_traceback() -> None:
    formatter = FieldsFormatter(FORMAT)

    def record() -> logging.LogRecord:
        made = _record("POST %s", "/hooks/T0kenA/T0kenAB", url="x/T0kenAB")
        return _failed(made, RuntimeError("T0kenA refused"))

    with withholding(["T0kenA", "T0kenAB"]):
        head, *below = formatter.format(record()).split("\n")
        # Only in the context that holds the secret: another thread's lines are its own.
        elsewhere: list[str] = []
        thread = threading.Thread(target=lambda: elsewhere.append(formatter.format(record())))
        thread.start()
        thread.join()
    assert head.endswith("POST /hooks/***/*** url=x/***")
    assert below[-1] == f"{CONTINUATION}RuntimeError: *** refused"
    assert "T0kenA" in elsewhere[0]
    assert "T0kenA" in formatter.format(record())


def test_uvicorn_s_coloured_copy_of_its_message_is_not_a_field() -> None:
    record = _record(
        "Started server process [%d]", 42, color_message="Started server process [\x1b[36m%d\x1b[0m]"
    )
    assert FieldsFormatter(FORMAT).format(record).endswith("Started server process [42]")
