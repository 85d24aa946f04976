"""Timestamps are parsed into instants (microseconds, UTC) without the datetime module."""

from kit_support import raises

from frontend_py.kit import parse_timestamp


def test_timestamps_parse_to_utc_microseconds() -> None:
    cases = [
        ("1970-01-01T00:00:00Z", 0),
        ("2026-08-14T10:00:00Z", 1786701600000000),
        ("2026-08-14T12:00:00.05+02:00", 1786701600050000),
        ("2026-08-14T10:00:00-05:30", 1786721400000000),
        ("2026-08-14T15:30:00+0530", 1786701600000000),
        ("2026-08-14T12:00:00+02", 1786701600000000),
        ("2026-08-14 10:00:00z", 1786701600000000),
        ("2026-08-14T10:00Z", 1786701600000000),
        ("2026-08-14T10:00:00", 1786701600000000),
        ("2026-08-14", 1786665600000000),
        ("2000-02-29T23:59:59.999999Z", 951868799999999),
        ("2024-12-31T23:59:59.123456+00:00", 1735689599123456),
        ("1969-12-31T23:59:59.5Z", -500000),
        ("1900-03-01T00:00:00Z", -2203891200000000),
    ]
    for text, expected in cases:
        assert parse_timestamp(text) == expected, text


def test_fractional_seconds_of_any_length_are_read_to_the_microsecond() -> None:
    base = 1786701600000000
    cases = [
        ("", 0),
        (".1", 100000),
        (".05", 50000),
        (".123", 123000),
        (".1234", 123400),
        (".12345", 123450),
        (".123456", 123456),
        (".1234567", 123456),
        (".123456789", 123456),
        (",5", 500000),
    ]
    for fraction, micros in cases:
        assert parse_timestamp("2026-08-14T10:00:00" + fraction + "Z") == base + micros, fraction


def test_timestamps_compare_as_instants_not_as_text() -> None:
    earlier = "2026-08-14T12:00:00.05+02:00"
    later = "2026-08-14T10:00:00.1Z"
    assert earlier > later
    assert parse_timestamp(earlier) < parse_timestamp(later)


def test_malformed_timestamps_are_rejected() -> None:
    bad = [
        None,
        20260814,
        "",
        "2026-8-14T10:00:00Z",
        "2026-13-01T00:00:00Z",
        "2026-02-29T00:00:00Z",
        "2026-04-31T00:00:00Z",
        "2026-08-14T24:00:00Z",
        "2026-08-14T10:60:00Z",
        "2026-08-14T10:00:61Z",
        "2026-08-14T10:00:00.Z",
        "2026-08-14T10:00:00+2:00",
        "2026-08-14T10:00:00+24:00",
        "2026-08-14T10:00:00 UTC",
        "2026-08-14X10:00:00Z",
        "２０２６-08-14T10:00:00Z",
    ]
    for text in bad:
        assert raises(ValueError, parse_timestamp, text), repr(text)
