"""We test these aspects of ``parse_time`` (``--at``/``--since``): durations ago, UNIX
times, ISO 8601 times with and without a zone, and refusal of anything else."""

from __future__ import annotations

from datetime import datetime

import pytest

from netctl.journal.query import parse_time

NOW = 1_700_000_000.0


@pytest.mark.parametrize(("value", "ago"), [
    ("0s", 0), ("90s", 90), ("5m", 300), ("2h", 7200), ("1d", 86400), ("1.5h", 5400),
    (" 30s ", 30),
])
def test_durations(value: str, ago: float) -> None:
    assert parse_time(value, now=NOW) == NOW - ago


def test_duration_defaults_to_the_clock() -> None:
    import time

    before = time.time()
    t = parse_time("10s")
    assert before - 10 <= t <= time.time() - 10


@pytest.mark.parametrize(("value", "expected"), [
    ("1700000000", 1_700_000_000.0), ("1700000000.25", 1_700_000_000.25), ("0", 0.0),
])
def test_unix_times(value: str, expected: float) -> None:
    assert parse_time(value, now=NOW) == expected


@pytest.mark.parametrize(("value", "expected"), [
    ("2023-11-14T22:13:20+00:00", 1_700_000_000.0),
    ("2023-11-14T22:13:20Z", 1_700_000_000.0),
    ("2023-11-15T00:13:20+02:00", 1_700_000_000.0),
    ("2023-11-14T22:13:20.5+00:00", 1_700_000_000.5),
])
def test_iso_times_with_zone(value: str, expected: float) -> None:
    assert parse_time(value, now=NOW) == expected


def test_iso_time_without_zone_is_local() -> None:
    local = datetime(2023, 11, 14, 22, 13, 20).astimezone()
    assert parse_time("2023-11-14T22:13:20") == local.timestamp()
    assert parse_time("2023-11-14 22:13:20") == local.timestamp()
    assert parse_time("2023-11-14") == datetime(2023, 11, 14).timestamp()


@pytest.mark.parametrize("bad", [
    "", "yesterday", "5x", "5 m", "-5m", "m5", "5M", "2023-13-01", "12:00:99", "nan", "inf",
    "-inf",
])
def test_bad_values_refused(bad: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_time(bad, now=NOW)
    assert repr(bad) in str(info.value)
    assert "duration (30s, 5m, 2h, 1d)" in str(info.value)
