from __future__ import annotations

from datetime import UTC, date, datetime, timedelta, timezone

import pytest

from obsmem.dates import (
    format_timestamp,
    gap_text,
    parse_date_text,
    relative_label,
    render_relative_dates,
)

TODAY = date(2025, 12, 25)
NOW = datetime(2025, 12, 25, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("days_ago", "label"),
    [
        (0, "today"),
        (1, "yesterday"),
        (2, "2 days ago"),
        (6, "6 days ago"),
        (7, "1 week ago"),
        (13, "1 week ago"),
        (14, "2 weeks ago"),
        (29, "4 weeks ago"),
        (30, "1 month ago"),
        (59, "1 month ago"),
        (60, "2 months ago"),
        (364, "12 months ago"),
        (365, "1 year ago"),
        (730, "2 years ago"),
        (-1, "tomorrow"),
        (-3, "in 3 days"),
        (-7, "in 1 week"),
        (-21, "in 3 weeks"),
        (-30, "in 1 month"),
        (-95, "in 3 months"),
        (-365, "in 1 year"),
        (-800, "in 2 years"),
    ],
)
def test_relative_label(days_ago: int, label: str) -> None:
    assert relative_label(TODAY - timedelta(days=days_ago), TODAY) == label


@pytest.mark.parametrize(
    ("delta", "text"),
    [
        (timedelta(seconds=20), "less than a minute"),
        (timedelta(minutes=1), "1 minute"),
        (timedelta(minutes=45, seconds=59), "45 minutes"),
        (timedelta(hours=1), "1 hour"),
        (timedelta(hours=2, minutes=5), "2 hours 5 minutes"),
        (timedelta(days=1, minutes=30), "1 day"),
        (timedelta(days=3, hours=4), "3 days 4 hours"),
        (timedelta(days=15), "2 weeks 1 day"),
        (timedelta(days=14), "2 weeks"),
        (timedelta(days=104), "3 months 2 weeks"),
        (timedelta(days=365 + 65), "1 year 2 months"),
        (timedelta(days=800), "2 years 2 months"),
        (timedelta(hours=-2, minutes=-5), "2 hours 5 minutes"),
    ],
)
def test_gap_text(delta: timedelta, text: str) -> None:
    assert gap_text(delta) == text


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("May 30, 2023", date(2023, 5, 30)),
        ("May 30 2023", date(2023, 5, 30)),
        ("December 3rd, 2025", date(2025, 12, 3)),
        ("Sept 9, 2024", date(2024, 9, 9)),
        ("2025-12-11", date(2025, 12, 11)),
        ("May 27-28, 2023", date(2023, 5, 28)),
        ("May 30 to June 2, 2023", date(2023, 6, 2)),
        ("late April 2023", date(2023, 4, 23)),
        ("early April 2023", date(2023, 4, 7)),
        ("mid April 2023", date(2023, 4, 15)),
        ("mid-April 2023", date(2023, 4, 15)),
        ("late April to early May 2023", date(2023, 5, 7)),
        ("April 2023", None),
        ("next Friday", None),
        ("Feb 30, 2023", None),
    ],
)
def test_parse_date_text(text: str, expected: date | None) -> None:
    assert parse_date_text(text) == expected


def test_headers_gain_relative_labels_and_gap_lines() -> None:
    log = (
        "Date: Dec 1, 2025\n"
        "* 🔴 (14:30) User likes tea.\n"
        "Date: Dec 2, 2025\n"
        "* one\n"
        "\n"
        "Date: Dec 5, 2025\n"
        "* two\n"
        "Date: Dec 24, 2025\n"
        "* three\n"
        "Date: Dec 25, 2025\n"
        "* four"
    )
    assert render_relative_dates(log, NOW, UTC) == (
        "Date: Dec 1, 2025 (3 weeks ago)\n"
        "* 🔴 (14:30) User likes tea.\n"
        "Date: Dec 2, 2025 (3 weeks ago)\n"
        "* one\n"
        "\n"
        "[3 days later]\n"
        "Date: Dec 5, 2025 (2 weeks ago)\n"
        "* two\n"
        "[2 weeks later]\n"
        "Date: Dec 24, 2025 (yesterday)\n"
        "* three\n"
        "Date: Dec 25, 2025 (today)\n"
        "* four"
    )


def test_gap_lines_for_months() -> None:
    log = "Date: Jan 1, 2025\n* a\nDate: Feb 15, 2025\n* b"
    out = render_relative_dates(log, NOW, UTC)
    assert out.splitlines()[2] == "[1 month later]"


def test_header_must_be_a_whole_line() -> None:
    log = "* User said Date: Dec 1, 2025 was fine\nDate: Dec 1, 2025 and more"
    assert render_relative_dates(log, NOW, UTC) == log


@pytest.mark.parametrize(
    ("line", "rendered"),
    [
        (
            "* User will fly to Rome (meaning Dec 11, 2025)",
            "* User will fly to Rome (meaning Dec 11, 2025 - 2 weeks ago, likely already happened)",
        ),
        (
            "* User plans to move (estimated late November 2025)",
            "* User plans to move (estimated late November 2025 - 1 month ago, "
            "likely already happened)",
        ),
        (
            "* Dentist appointment scheduled (meaning Dec 23, 2025)",
            "* Dentist appointment scheduled (meaning Dec 23, 2025 - 2 days ago, "
            "likely already happened)",
        ),
        (
            "* User is looking forward to the trip (meaning May 27-28, 2025)",
            "* User is looking forward to the trip (meaning May 27-28, 2025 - 7 months ago, "
            "likely already happened)",
        ),
        (
            "* User bought a bike (meaning Dec 11, 2025)",
            "* User bought a bike (meaning Dec 11, 2025 - 2 weeks ago)",
        ),
        (
            "* User will fly to Rome (meaning Dec 30, 2025)",
            "* User will fly to Rome (meaning Dec 30, 2025 - in 5 days)",
        ),
        (
            "* User needs to renew (meaning Dec 25, 2025)",
            "* User needs to renew (meaning Dec 25, 2025 - today)",
        ),
        ("* User will go (meaning next Friday)", "* User will go (meaning next Friday)"),
        ("* (14:30) Plain line (no date here)", "* (14:30) Plain line (no date here)"),
    ],
)
def test_inline_dates(line: str, rendered: str) -> None:
    assert render_relative_dates(line, NOW, UTC) == rendered


def test_today_follows_the_time_zone() -> None:
    late = datetime(2025, 12, 25, 23, 30, tzinfo=UTC)
    tokyo = timezone(timedelta(hours=9))
    log = "Date: Dec 25, 2025"
    assert render_relative_dates(log, late, UTC) == "Date: Dec 25, 2025 (today)"
    assert render_relative_dates(log, late, tokyo) == "Date: Dec 25, 2025 (yesterday)"


def test_rendering_of_a_prefix_does_not_change_when_the_log_grows() -> None:
    base = "Date: Dec 1, 2025\n* User will call Bob (meaning Dec 2, 2025)"
    grown = (
        base + "\n\n--- message boundary (2025-12-10T10:00:00.000Z) ---\n\nDate: Dec 10, 2025\n* x"
    )
    before = render_relative_dates(base, NOW, UTC)
    after = render_relative_dates(grown, NOW, UTC)
    assert after.startswith(before + "\n")
    assert "[1 week later]\nDate: Dec 10, 2025 (2 weeks ago)" in after


def test_format_timestamp() -> None:
    pst = timezone(timedelta(hours=-8))
    at = datetime(2025, 12, 4, 23, 4, tzinfo=UTC)
    assert format_timestamp(at, pst) == "Dec 4, 2025, 3:04 PM"
    assert format_timestamp(datetime(2025, 1, 2, 0, 5, tzinfo=UTC), UTC) == "Jan 2, 2025, 12:05 AM"
