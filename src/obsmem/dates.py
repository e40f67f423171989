"""Relative dates for the actor's view of the observation log.

The stored log keeps absolute dates only ("Date: Dec 4, 2025", "(meaning Dec 11, 2025)").
Before the log is shown to the actor, :func:`render_relative_dates` adds how long ago each date
was, inserts "[3 days later]" lines between distant date headers and flags past plans as
"likely already happened". Rendering is a pure function of the log, ``now`` and the time zone;
a line's rendering never depends on what comes after it, so appending to the log leaves the
rendering of the earlier text unchanged (the prompt cache relies on that).

:func:`gap_text` turns a duration into words ("2 hours 5 minutes") for temporal markers.
"""

from __future__ import annotations

import re
from datetime import date, datetime, timedelta, tzinfo

__all__ = [
    "format_timestamp",
    "gap_text",
    "parse_date_text",
    "relative_label",
    "render_relative_dates",
]

_MONTHS: dict[str, int] = {
    "jan": 1,
    "january": 1,
    "feb": 2,
    "february": 2,
    "mar": 3,
    "march": 3,
    "apr": 4,
    "april": 4,
    "may": 5,
    "jun": 6,
    "june": 6,
    "jul": 7,
    "july": 7,
    "aug": 8,
    "august": 8,
    "sep": 9,
    "sept": 9,
    "september": 9,
    "oct": 10,
    "october": 10,
    "nov": 11,
    "november": 11,
    "dec": 12,
    "december": 12,
}
_MONTH_ABBR = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_MONTH_RE = "|".join(sorted(_MONTHS, key=len, reverse=True))

# Day used for "early/mid/late <Month> <Year>".
_PART_OF_MONTH = {"early": 7, "mid": 15, "late": 23}

_HEADER_RE = re.compile(rf"^\s*Date:\s*(?:{_MONTH_RE})\.?\s+\d{{1,2}},?\s+\d{{4}}\s*$", re.I)
_INLINE_RE = re.compile(r"\((meaning|estimated)\s+([^()\n]+?)\)", re.I)
_SINGLE_RE = re.compile(
    rf"^(?:(?P<part>early|mid|late)[\s-]+)?(?P<month>{_MONTH_RE})\.?"
    r"(?:\s+(?P<day>\d{1,2})(?:st|nd|rd|th)?)?,?\s+(?P<year>\d{4})$",
    re.I,
)
_DAY_YEAR_RE = re.compile(r"^(?P<day>\d{1,2})(?:st|nd|rd|th)?,?\s+(?P<year>\d{4})$", re.I)
_MONTH_IN_RE = re.compile(rf"\b({_MONTH_RE})\b", re.I)
_ISO_RE = re.compile(r"^(\d{4})-(\d{2})-(\d{2})$")
# "X to Y", "May 27-28", "late April - early May"; never the hyphen of "mid-April".
_RANGE_SPLIT_RE = re.compile(r"\s+to\s+|(?<=\d)\s*[-–]\s*|\s+[-–]\s+", re.I)
_FUTURE_INTENT_RE = re.compile(
    r"\b(?:will|plans? to|planning to|going to|wants? to|needs? to|about to|"
    r"looking forward to|scheduled)\b",
    re.I,
)

_DAY = 86_400
_SPAN_UNITS: tuple[tuple[str, int], ...] = (
    ("year", 365 * _DAY),
    ("month", 30 * _DAY),
    ("week", 7 * _DAY),
    ("day", _DAY),
    ("hour", 3_600),
    ("minute", 60),
)


def _plural(n: int, unit: str) -> str:
    return f"{n} {unit}" if n == 1 else f"{n} {unit}s"


def _day_span(days: int) -> str:
    """A whole number of days (>= 2) in its largest unit: "3 days", "2 weeks", "1 year"."""
    if days < 7:
        return _plural(days, "day")
    if days < 30:
        return _plural(days // 7, "week")
    if days < 365:
        return _plural(days // 30, "month")
    return _plural(days // 365, "year")


def relative_label(day: date, today: date) -> str:
    """How ``day`` relates to ``today``: "today", "yesterday", "3 days ago", "2 weeks ago",
    "1 month ago", "tomorrow", "in 3 days", ... (months are 30 days, years 365)."""
    diff = (today - day).days
    if diff == 0:
        return "today"
    if diff == 1:
        return "yesterday"
    if diff == -1:
        return "tomorrow"
    if diff > 0:
        return f"{_day_span(diff)} ago"
    return f"in {_day_span(-diff)}"


def gap_text(delta: timedelta) -> str:
    """A duration in its largest unit plus one sub-unit: "45 minutes", "2 hours 5 minutes",
    "3 days 4 hours", "2 weeks 1 day", "3 months 2 weeks", "1 year 2 months".

    Months are 30 days and years 365 days; a zero sub-unit is left out. The sign is ignored.
    """
    seconds = int(abs(delta).total_seconds())
    for index, (unit, size) in enumerate(_SPAN_UNITS):
        if seconds < size:
            continue
        count, rest = divmod(seconds, size)
        text = _plural(count, unit)
        if index + 1 < len(_SPAN_UNITS):
            sub_unit, sub_size = _SPAN_UNITS[index + 1]
            if sub_count := rest // sub_size:
                text += f" {_plural(sub_count, sub_unit)}"
        return text
    return "less than a minute"


def format_timestamp(at: datetime, tz: tzinfo) -> str:
    """``at`` in ``tz`` as "Dec 4, 2025, 3:04 PM" (English, independent of the locale)."""
    local = at.astimezone(tz)
    hour = local.hour % 12 or 12
    half = "AM" if local.hour < 12 else "PM"
    month = _MONTH_ABBR[local.month - 1]
    return f"{month} {local.day}, {local.year}, {hour}:{local.minute:02d} {half}"


def _make_date(year: int, month: int, day: int) -> date | None:
    try:
        return date(year, month, day)
    except ValueError:
        return None


def _parse_single(text: str) -> date | None:
    m = _SINGLE_RE.match(text)
    if m is None:
        return None
    month = _MONTHS[m["month"].lower()]
    year = int(m["year"])
    if m["day"] is not None:
        return _make_date(year, month, int(m["day"]))
    if m["part"] is not None:
        return _make_date(year, month, _PART_OF_MONTH[m["part"].lower()])
    return None


def parse_date_text(text: str) -> date | None:
    """Parse the date forms the Observer writes; ``None`` when the text is not one of them.

    Understands "May 30, 2023", "2023-05-30", "early/mid/late April 2023" (the 7th/15th/23rd)
    and ranges "May 27-28, 2023", "May 30 to June 2, 2023", "late April to early May 2023";
    a range gives its end date.
    """
    text = text.strip().rstrip(".").strip()
    if iso := _ISO_RE.match(text):
        return _make_date(int(iso[1]), int(iso[2]), int(iso[3]))
    if (single := _parse_single(text)) is not None:
        return single
    pieces = _RANGE_SPLIT_RE.split(text, maxsplit=1)
    if len(pieces) != 2:
        return None
    start, end = pieces[0].strip(), pieces[1].strip()
    if (parsed := _parse_single(end)) is not None:
        return parsed
    day_year = _DAY_YEAR_RE.match(end)
    month = _MONTH_IN_RE.search(start)
    if day_year is None or month is None:
        return None
    return _make_date(int(day_year["year"]), _MONTHS[month[1].lower()], int(day_year["day"]))


def _header_date(line: str) -> date | None:
    if not _HEADER_RE.match(line):
        return None
    return parse_date_text(line.strip()[len("Date:") :])


def _rewrite_inline(line: str, today: date) -> str:
    def replace(m: re.Match[str]) -> str:
        when = parse_date_text(m[2])
        if when is None:
            return m[0]
        note = relative_label(when, today)
        if when < today and _FUTURE_INTENT_RE.search(line):
            note += ", likely already happened"
        return f"({m[1]} {m[2]} - {note})"

    return _INLINE_RE.sub(replace, line)


def render_relative_dates(log: str, now: datetime, tz: tzinfo) -> str:
    """The log as the actor should read it, with relative dates added.

    - whole-line headers "Date: Dec 4, 2025" gain " (3 weeks ago)";
    - a line such as "[3 days later]" goes right before a date header that is more than one
      day after the previous header;
    - "(meaning Dec 11, 2025)" and "(estimated ...)" become "(meaning Dec 11, 2025 - 2 weeks
      ago)", plus ", likely already happened" when the date is past and the line speaks of an
      intention ("will", "plans to", "going to", ...).

    Other lines are returned unchanged. This is for display only; storage keeps the plain log.
    """
    today = now.astimezone(tz).date()
    out: list[str] = []
    previous: date | None = None
    for line in log.split("\n"):
        header = _header_date(line)
        if header is not None:
            if previous is not None and (header - previous).days > 1:
                out.append(f"[{_day_span((header - previous).days)} later]")
            previous = header
            out.append(f"{line.rstrip()} ({relative_label(header, today)})")
        elif "(" in line:
            out.append(_rewrite_inline(line, today))
        else:
            out.append(line)
    return "\n".join(out)
