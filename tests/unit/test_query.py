"""We test these aspects of ``read_time`` (``--at``/``--since``): durations ago, UNIX
times, RFC 3339 times with a zone or offset, without one (read as UTC, or as local time
with ``local``, and a note saying which), and refusal of anything else."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from netctl.journal.query import read_time

NOW = 1_700_000_000.0


@pytest.mark.parametrize(("value", "ago"), [
    ("0s", 0), ("90s", 90), ("5m", 300), ("2h", 7200), ("1d", 86400), ("1.5h", 5400),
    (" 30s ", 30),
])
def test_durations(value: str, ago: float) -> None:
    assert read_time(value, now=NOW).seconds == NOW - ago


def test_duration_defaults_to_the_clock() -> None:
    import time

    before = time.time()
    t = read_time("10s").seconds
    assert before - 10 <= t <= time.time() - 10


@pytest.mark.parametrize(("value", "expected"), [
    ("1700000000", 1_700_000_000.0), ("1700000000.25", 1_700_000_000.25), ("0", 0.0),
])
def test_unix_times(value: str, expected: float) -> None:
    assert read_time(value, now=NOW).seconds == expected


@pytest.mark.parametrize(("value", "expected"), [
    ("2023-11-14T22:13:20+00:00", 1_700_000_000.0),
    ("2023-11-14T22:13:20Z", 1_700_000_000.0),
    ("2023-11-15T00:13:20+02:00", 1_700_000_000.0),
    ("2023-11-14T22:13:20.5+00:00", 1_700_000_000.5),
])
def test_iso_times_with_zone(value: str, expected: float) -> None:
    assert read_time(value, now=NOW).seconds == expected


def test_iso_time_without_zone_is_utc_and_says_so() -> None:
    """The default platform teams expect: UTC, the zone the journal prints its times in."""
    utc = datetime(2023, 11, 14, 22, 13, 20, tzinfo=UTC)
    for value in ("2023-11-14T22:13:20", "2023-11-14 22:13:20"):
        read = read_time(value)
        assert read.seconds == utc.timestamp()
        assert "read as UTC" in read.note and repr(value) in read.note
    assert read_time("2023-11-14").seconds == datetime(2023, 11, 14, tzinfo=UTC).timestamp()
    assert read_time("2023-11-14T22:13:20Z").note == ""  # a zone given: nothing to say
    assert read_time("5m", now=NOW).note == "" and read_time("1700000000").note == ""


def test_iso_time_without_zone_with_local_is_local() -> None:
    local = datetime(2023, 11, 14, 22, 13, 20).astimezone()
    read = read_time("2023-11-14T22:13:20", local=True)
    assert read.seconds == local.timestamp()
    assert "read as local time (UTC" in read.note
    # an offset given wins over --local
    assert read_time("2023-11-14T22:13:20+00:00", local=True).seconds == utc_ts()


def utc_ts() -> float:
    return datetime(2023, 11, 14, 22, 13, 20, tzinfo=UTC).timestamp()


@pytest.mark.parametrize("bad", [
    "", "yesterday", "5x", "5 m", "-5m", "m5", "5M", "2023-13-01", "12:00:99", "nan", "inf",
    "-inf",
])
def test_bad_values_refused(bad: str) -> None:
    with pytest.raises(ValueError) as info:
        read_time(bad, now=NOW)
    assert repr(bad) in str(info.value)
    assert "duration (30s, 5m, 2h, 1d)" in str(info.value)
