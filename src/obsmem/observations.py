"""The observation log as text: spotting degenerate output, truncation, boundaries.

Everything here is pure. :func:`is_degenerate` is the repetition detector that turns a looping
model answer into a failed attempt; :func:`truncate_observations` shortens the previous log shown
to the Observer; :func:`boundary_line` and :func:`split_segments` join and split a log at message
boundaries; :func:`with_reflection` and :func:`dropped_critical_dates` judge and apply a
reflection. Reading a model's answer into log text is :mod:`obsmem.answers`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime

from .answers import DATE_LINE, is_entry

__all__ = [
    "BOUNDARY",
    "RECALL_RANGE",
    "boundary_line",
    "dropped_critical_dates",
    "is_degenerate",
    "split_segments",
    "strip_recall_ranges",
    "truncate_observations",
    "with_reflection",
]

BOUNDARY = "--- message boundary ({iso}) ---"
"""The line that separates log segments appended at different times."""

# ---------------------------------------------------------------------------------------------
# degenerate output
# ---------------------------------------------------------------------------------------------

_MIN_DEGENERATE_CHARS = 2_000
_WINDOW = 200
_SAMPLES = 50
_MAX_LINE = 50_000
_MIN_LINE = 24
_MIN_LINES = 20


def is_degenerate(text: str) -> bool:
    """True when ``text`` looks like a model stuck in a loop (then its answer is a failed attempt).

    Text under 2,000 characters never is. Longer text is when more than 40% of about 50 sampled
    200-character windows repeat an earlier one, when a line exceeds 50,000 characters, or when
    more than half of the substantial lines (at least 20 lines of 24+ characters) are duplicates.
    """
    if len(text) < _MIN_DEGENERATE_CHARS:
        return False
    step = max(1, len(text) // _SAMPLES)
    windows = [text[i : i + _WINDOW] for i in range(0, len(text) - _WINDOW + 1, step)]
    if len(windows) > 5:
        repeats = len(windows) - len(set(windows))
        if repeats / len(windows) > 0.4:
            return True
    lines = text.splitlines()
    if any(len(line) > _MAX_LINE for line in lines):
        return True
    substantial = [s for line in lines if len(s := line.strip()) >= _MIN_LINE]
    if len(substantial) >= _MIN_LINES:
        duplicates = len(substantial) - len(set(substantial))
        if duplicates / len(substantial) > 0.5:
            return True
    return False


# ---------------------------------------------------------------------------------------------
# truncation of the previous log shown to the Observer
# ---------------------------------------------------------------------------------------------

_KEEP_MARKS = ("🔴", "✅")


def _marker(n: int) -> str:
    return f"[{n} observations truncated here]"


def truncate_observations(log: str, budget: int | None, count: Callable[[str], int]) -> str:
    """``log`` shortened to about ``budget`` tokens (as ``count`` counts them).

    ``None`` keeps everything and ``0`` keeps nothing. A log over budget keeps its newest lines
    that fit in half the budget, then the older 🔴 and ✅ lines that still fit (newest first),
    with the ``Date:`` headers of every kept line, and a ``[N observations truncated here]``
    marker wherever lines were cut.
    """
    if budget is None:
        return log
    if budget <= 0:
        return ""
    if count(log) <= budget:
        return log
    lines = log.split("\n")
    cost = [count(line) for line in lines]
    header_of = _headers(lines)

    keep: set[int] = set()
    used = 0
    tail_start = len(lines)
    for i in range(len(lines) - 1, -1, -1):
        if used + cost[i] > budget // 2:
            break
        used += cost[i]
        tail_start = i
    keep.update(range(tail_start, len(lines)))
    first = next((i for i in range(tail_start, len(lines)) if lines[i].strip()), None)
    if first is not None and (h := header_of[first]) is not None and h not in keep:
        keep.add(h)
        used += cost[h]

    marker_cost = count(_marker(len(lines)))
    used += marker_cost
    for i in range(tail_start - 1, -1, -1):
        if not any(mark in lines[i] for mark in _KEEP_MARKS) or DATE_LINE.match(lines[i]):
            continue
        header = header_of[i]
        extra = cost[i] + marker_cost
        if header is not None and header not in keep:
            extra += cost[header]
        if used + extra > budget:
            continue
        used += extra
        keep.add(i)
        if header is not None:
            keep.add(header)
    return _render_kept(lines, keep)


def _headers(lines: list[str]) -> list[int | None]:
    """For each line, the index of the ``Date:`` header above it (itself for a header)."""
    out: list[int | None] = []
    current: int | None = None
    for i, line in enumerate(lines):
        if DATE_LINE.match(line):
            current = i
        out.append(current)
    return out


def _render_kept(lines: list[str], keep: set[int]) -> str:
    out: list[str] = []
    cut = 0
    for i, line in enumerate(lines):
        if i in keep:
            if cut:
                out.append(_marker(cut))
                cut = 0
            out.append(line)
        elif line.strip() and not DATE_LINE.match(line):
            cut += 1
    if cut:
        out.append(_marker(cut))
    return "\n".join(out)


# ---------------------------------------------------------------------------------------------
# message boundaries
# ---------------------------------------------------------------------------------------------

_BOUNDARY_LINE = re.compile(r"\n*^--- message boundary \([^)\n]*\) ---$\n*", re.MULTILINE)


def dropped_critical_dates(source: str, candidate: str) -> list[str]:
    """The dates (``Date:`` headers) that ``candidate`` still has but under which it dropped
    every 🔴 line ``source`` had there: a rewrite that keeps a day but loses all that the user
    asserted on it has lost what matters most."""

    def critical_by_date(log: str) -> dict[str, int]:
        found: dict[str, int] = {}
        date: str | None = None
        for line in log.split("\n"):
            if DATE_LINE.match(line):
                date = line.strip()
                found.setdefault(date, 0)
            elif date is not None and "🔴" in line:
                found[date] += 1
        return found

    before, after = critical_by_date(source), critical_by_date(candidate)
    return [d for d, n in before.items() if n and d in after and not after[d]]


def with_reflection(reflection: str, reflected: str, tail: str) -> str:
    """The log after a reflection: ``reflection`` (the rewrite of ``reflected``), then ``tail``,
    the lines appended after ``reflected`` meanwhile. Tail lines that came before any ``Date:``
    header of their own sat under ``reflected``'s last header: that header goes with them, so
    they are not read as belonging to the reflection's last date."""
    tail = tail.strip()
    if not tail:
        return reflection
    lines = tail.split("\n")
    first_date = next((i for i, ln in enumerate(lines) if DATE_LINE.match(ln)), len(lines))
    undated = any(is_entry(ln) for ln in lines[:first_date])
    governing = next(
        (ln.strip() for ln in reversed(reflected.split("\n")) if DATE_LINE.match(ln)), None
    )
    if undated and governing is not None:
        at = next(i for i, ln in enumerate(lines) if is_entry(ln))
        lines.insert(at, governing)
        tail = "\n".join(lines)
    return f"{reflection}\n\n{tail}"


def boundary_line(at: datetime) -> str:
    """The separator put between log segments: ``"\\n\\n--- message boundary (ISO) ---\\n\\n"``.

    The time is written in UTC with milliseconds (``2025-12-04T14:30:00.000Z``).
    """
    utc = at.astimezone(UTC)
    iso = utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"
    return "\n\n" + BOUNDARY.format(iso=iso) + "\n\n"


def split_segments(log: str) -> list[str]:
    """``log`` split at its boundary lines (the inverse of joining with :func:`boundary_line`).

    Blank segments are dropped.
    """
    return [seg for seg in _BOUNDARY_LINE.split(log) if seg.strip()]


RECALL_RANGE = re.compile(r"^\[recall range [^\]\n]*\]\n?", re.MULTILINE)
"""The ``[recall range FIRST:LAST]`` line that opens an observation group's text in the log."""


def strip_recall_ranges(log: str) -> str:
    """``log`` without its recall-range lines (for an actor that has no ``recall`` tool)."""
    return RECALL_RANGE.sub("", log)
