"""ISO-8601 timestamps as integer microseconds since the Unix epoch, UTC."""

# MicroPython has no ``datetime``: the kit orders turns by instants it parses itself. Text order is
# wrong as soon as offsets or fractional seconds differ ("12:00:00.05+02:00" < "10:00:00.1Z").

_DIGITS = "0123456789"
_MICROS_PER_SECOND = 1000000
_SECONDS_PER_DAY = 86400
_DAYS_IN_MONTH = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def _number(text: str, start: int, length: int) -> int:
    part = text[start : start + length]
    if len(part) != length or not _all_digits(part):
        raise ValueError("invalid timestamp: " + repr(text))
    return int(part)


def _all_digits(text: str) -> bool:
    return bool(text) and all(ch in _DIGITS for ch in text)


def _is_leap(year: int) -> bool:
    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)


def _days_from_civil(year: int, month: int, day: int) -> int:
    # Howard Hinnant's algorithm: days since 1970-01-01 in the proleptic Gregorian calendar.
    if month <= 2:
        year -= 1
    era = year // 400
    year_of_era = year - era * 400
    shifted_month = month - 3 if month > 2 else month + 9
    day_of_year = (153 * shifted_month + 2) // 5 + day - 1
    day_of_era = year_of_era * 365 + year_of_era // 4 - year_of_era // 100 + day_of_year
    return era * 146097 + day_of_era - 719468


def _offset_seconds(text: str, zone: str) -> int:
    if zone in ("", "Z", "z"):
        # A naive value is taken as UTC: the API promises UTC and the database clock is UTC.
        return 0
    sign = zone[0]
    if sign not in "+-":
        raise ValueError("invalid timestamp offset: " + repr(text))
    body = zone[1:]
    if len(body) == 5 and body[2] == ":":
        hours, minutes = _number(body, 0, 2), _number(body, 3, 2)
    elif len(body) == 4:
        hours, minutes = _number(body, 0, 2), _number(body, 2, 2)
    elif len(body) == 2:
        hours, minutes = _number(body, 0, 2), 0
    else:
        raise ValueError("invalid timestamp offset: " + repr(text))
    if hours > 23 or minutes > 59:
        raise ValueError("invalid timestamp offset: " + repr(text))
    seconds = hours * 3600 + minutes * 60
    return -seconds if sign == "-" else seconds


def parse_timestamp(text: object) -> int:
    """Return microseconds since 1970-01-01T00:00:00Z; raise ``ValueError`` for anything else.

    Accepts ``YYYY-MM-DD``, then optionally ``T`` (or a space) ``HH:MM[:SS[.fraction]]`` and a zone
    (``Z``, ``+HH:MM``, ``+HHMM``, ``+HH``). Fractions of any length are truncated to microseconds,
    the resolution of the API's ``DateTime``.
    """
    if not isinstance(text, str):
        raise ValueError("timestamp is not a string: " + repr(text))
    year = _number(text, 0, 4)
    if text[4:5] != "-" or text[7:8] != "-":
        raise ValueError("invalid timestamp: " + repr(text))
    month = _number(text, 5, 2)
    day = _number(text, 8, 2)
    if month < 1 or month > 12:
        raise ValueError("invalid timestamp month: " + repr(text))
    month_days = 29 if month == 2 and _is_leap(year) else _DAYS_IN_MONTH[month - 1]
    if day < 1 or day > month_days:
        raise ValueError("invalid timestamp day: " + repr(text))
    hour = minute = second = micros = 0
    rest = text[10:]
    if rest:
        if rest[0] not in "Tt ":
            raise ValueError("invalid timestamp: " + repr(text))
        hour = _number(rest, 1, 2)
        if rest[3:4] != ":":
            raise ValueError("invalid timestamp: " + repr(text))
        minute = _number(rest, 4, 2)
        pos = 6
        if rest[pos : pos + 1] == ":":
            second = _number(rest, pos + 1, 2)
            pos += 3
            if rest[pos : pos + 1] in (".", ","):
                end = pos + 1
                while end < len(rest) and rest[end] in _DIGITS:
                    end += 1
                fraction = rest[pos + 1 : end]
                if not fraction:
                    raise ValueError("invalid timestamp fraction: " + repr(text))
                micros = int((fraction + "000000")[:6])
                pos = end
        if hour > 23 or minute > 59 or second > 59:
            raise ValueError("invalid timestamp time: " + repr(text))
        offset = _offset_seconds(text, rest[pos:])
    else:
        offset = 0
    seconds = _days_from_civil(year, month, day) * _SECONDS_PER_DAY + hour * 3600 + minute * 60 + second
    return (seconds - offset) * _MICROS_PER_SECOND + micros
