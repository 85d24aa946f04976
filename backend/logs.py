"""Log lines for operators: the message, then the structured fields a call passed in `extra`."""

from __future__ import annotations

import logging
import time

# What every LogRecord carries; anything else on a record came from `extra=`.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}
FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"


class FieldsFormatter(logging.Formatter):
    """`... clarification asked event=clarification.asked pending_id=p1 session_id=s1`."""

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
        line = super().format(record)
        fields = [
            f"{k}={v}" for k, v in record.__dict__.items() if k not in _STANDARD and not k.startswith("_")
        ]
        if not fields:
            return line
        head, sep, rest = line.partition("\n")  # a traceback stays below the fields
        return f"{head} {' '.join(fields)}{sep}{rest}"


def configure(level: int = logging.INFO) -> None:
    # Lines name no thread or process: a record need not look them up (a few per ask -> answer).
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    # Nor where the call came from (the logging HOWTO, "Optimization"): no stack walk per record.
    logging._srcfile = None
    handler = logging.StreamHandler()
    handler.setFormatter(FieldsFormatter(FORMAT))
    logging.basicConfig(level=level, handlers=[handler])
