"""Log lines for operators: the message, then the structured fields a call passed in `extra`.

One record is one line, whatever its text holds: a record's message and fields often carry text a
client chose (an id, a name, an error message), and a line break in it would otherwise end the
record early and start what reads as another (`...\\n2026-12-01 ... INFO turnwise.access task
granted`). So on the record's line:

- control characters of the message and of every field's name and value are escaped: `\\n`, `\\r`,
  `\\t`, others as `\\xNN` (C0, DEL, C1) or `\\uNNNN` (U+2028, U+2029); the set is the one stored
  names refuse (`backend.domain.names.CONTROL`). Other backslashes are kept as they are: the
  escapes keep a line safe to read, they are not meant to be decoded back;
- a field value that is empty or holds a space, `"` or `=` is quoted (`error="task 'x' not found"`,
  `\\"` and `\\\\` inside), so a value can never pass for further fields;
- a secret the running code holds (`withholding`: a channel URL's tokens while it is read or sent
  through) shows as `***` in the message, the fields and the traceback, whichever logger wrote them.

The one multi-line part is a traceback (and a stack, with `stack_info`), below its record's line:
every one of its lines starts with `| `, a start no record line has (those start with the time),
and has its own control characters escaped the same way, so a line break inside an exception's
message continues the traceback instead of starting a record. No JSON format is defined here.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterable, Iterator
from contextvars import ContextVar

from backend.domain.names import CONTROL

# What every LogRecord carries; anything else on a record came from `extra=`, except uvicorn's
# `color_message`, its message again with terminal colours.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
    "color_message",
}
FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"
CONTINUATION = "| "

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
WITHHELD = "***"
# A context variable, not a global: a record is formatted in the thread (and task) that made it, so
# the secrets of one send are withheld from its own lines, and no other's text is touched.
_withheld: ContextVar[tuple[str, ...]] = ContextVar("withheld", default=())


@contextlib.contextmanager
def withholding(secrets: Iterable[str]) -> Iterator[None]:
    """No line written within (in this context: this thread, this task) shows any of `secrets`."""
    # Longest first, so that a secret holding a shorter one is masked whole.
    held = sorted({*_withheld.get(), *(s for s in secrets if s)}, key=len, reverse=True)
    token = _withheld.set(tuple(held))
    try:
        yield
    finally:
        _withheld.reset(token)


def _withhold(text: str, secrets: tuple[str, ...]) -> str:
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, WITHHELD)
    return text


def _escape_of(char: str) -> str:
    code = ord(char)
    return _NAMED.get(char) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")


# Built from the one definition of a control character, so the two can never disagree.
_ESCAPES = {code: _escape_of(chr(code)) for code in range(0x2030) if CONTROL.match(chr(code))}


def escape(text: str) -> str:
    """`text` with its control characters as backslash escapes; unchanged (not copied) without any."""
    if CONTROL.search(text) is None:
        return text
    return text.translate(_ESCAPES)


def _value(value: object) -> str:
    text = str(value)
    if text and " " not in text and '"' not in text and "=" not in text:
        return escape(text)
    return '"' + escape(text.replace("\\", "\\\\").replace('"', '\\"')) + '"'


class FieldsFormatter(logging.Formatter):
    """`... pending action asked event=pending.asked kind=clarification pending_id=p1`."""

    _second: int | None = None
    _stamp = ""

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        # The date and time change once a second: formatted once per second, not once per line.
        if datefmt is not None or self.default_msec_format is None:
            return super().formatTime(record, datefmt)
        second = int(record.created)
        if second != self._second:
            self._stamp = time.strftime(self.default_time_format, self.converter(second))
            self._second = second
        return self.default_msec_format % (self._stamp, record.msecs)

    def format(self, record: logging.LogRecord) -> str:
        # logging.Formatter.format, except that the record's line is escaped as a whole before the
        # traceback joins it (the base class appends the traceback to the message unescaped).
        secrets = _withheld.get()
        record.message = _withhold(record.getMessage(), secrets)
        if self.usesTime():
            record.asctime = self.formatTime(record, self.datefmt)
        line = escape(self.formatMessage(record))
        fields = [
            f"{escape(k)}={_value(_withhold(str(v), secrets) if secrets else v)}"
            for k, v in record.__dict__.items()
            if k not in _STANDARD and not k.startswith("_")
        ]
        if fields:
            line = f"{line} {' '.join(fields)}"
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)  # cached, as the base class does
        below = [_withhold(record.exc_text, secrets)] if record.exc_text else []
        if record.stack_info:
            below.append(_withhold(self.formatStack(record.stack_info), secrets))
        if not below:
            return line
        # Split on line feeds only: any other line break is escaped within its continuation line.
        rest = [f"{CONTINUATION}{escape(part)}" for text in below for part in text.split("\n")]
        return "\n".join([line, *rest])


# Libraries whose routine INFO lines (Alembic's "Context impl", the demo agent's and the MCP SDK's
# request lines, uvicorn's start-up chatter) belong to `--log-level debug`, not the default output.
QUIET_UNLESS_DEBUG = ("alembic", "httpx", "httpcore", "mcp", "uvicorn.error")


def _not_a_lifespan_traceback(record: logging.LogRecord) -> bool:
    # Starlette hands uvicorn a failed startup's whole traceback as the text of one ERROR record.
    # The app's lifespan logs its own failure (with the traceback where one helps, as one line where
    # its message says it all, a pooler setting say), so uvicorn's copy would only repeat it.
    return not str(record.msg).startswith("Traceback (most recent call last):")


def configure(level: int = logging.INFO) -> None:
    # Lines name no thread or process: a record need not look them up (a few per ask -> answer).
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    # Nor where the call came from (the logging HOWTO, "Optimization"): no stack walk per record.
    logging._srcfile = None
    handler = logging.StreamHandler()
    handler.setFormatter(FieldsFormatter(FORMAT))
    logging.basicConfig(level=level, handlers=[handler], force=True)
    # A library's warning (DeprecationWarning, ...) is a record too: Python's own printing of it
    # spans lines outside this format.
    logging.captureWarnings(True)
    uvicorn_errors = logging.getLogger("uvicorn.error")
    if _not_a_lifespan_traceback not in uvicorn_errors.filters:
        uvicorn_errors.addFilter(_not_a_lifespan_traceback)
    for name in QUIET_UNLESS_DEBUG:
        logging.getLogger(name).setLevel(level if level <= logging.DEBUG else max(level, logging.WARNING))
