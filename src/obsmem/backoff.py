"""Back-off: when a failed Observer or Reflector may be called again for a log. A planner
decision (:mod:`obsmem.planner` names it among its own), kept apart because it is the one
that reads a clock's readings: seconds on the engine's steady clock (:mod:`obsmem.clocks`).

Pure: nothing here awaits, reads a clock or touches a store.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

__all__ = [
    "BACKOFF_BASE_SECONDS",
    "BACKOFF_JITTER",
    "BACKOFF_LONGEST_SECONDS",
    "BACKOFF_MAX_SECONDS",
    "Backoff",
    "backoff_after",
    "may_retry",
    "retry_time_passed",
]

BACKOFF_BASE_SECONDS = 5.0
"""The wait after a first failure; it doubles with every failure in a row."""
BACKOFF_MAX_SECONDS = 600.0
"""The longest wait between two attempts, however many failed."""
BACKOFF_JITTER = 0.25
"""Each wait is spread by up to ±25%, so workers that failed together do not retry together."""


BACKOFF_LONGEST_SECONDS = BACKOFF_MAX_SECONDS * (1 + BACKOFF_JITTER)
"""No back-off is longer: a stored retry time further ahead than this was set by a clock that
ran ahead, or is read by one that stepped back, and counts as passed."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Backoff:
    """Failures in a row of one role's model calls for one log, and when to try again.

    Times are seconds on the engine's monotonic clock (``Deps.steady``), never the wall clock:
    a wall clock stepping back cannot stretch a back-off, nor one stepping forward cut it."""

    failures: int
    retry_at: float
    error: str


def backoff_after(previous: Backoff | None, *, now: float, error: str, spread: float) -> Backoff:
    """The back-off after one more failure at ``now`` (monotonic seconds). ``spread`` in
    [0, 1) picks where in the jitter band this wait falls (the caller draws it at random). The
    wait is bounded, so memory work always resumes once the model answers again, whatever the
    window size by then."""
    failures = (previous.failures if previous is not None else 0) + 1
    wait = min(BACKOFF_MAX_SECONDS, BACKOFF_BASE_SECONDS * 2 ** min(failures - 1, 30))
    wait *= 1 + BACKOFF_JITTER * (2 * spread - 1)
    return Backoff(failures=failures, retry_at=now + wait, error=error)


def may_retry(backoff: Backoff | None, now: float | None) -> bool:
    """Whether a model call may start at ``now`` (monotonic seconds; always, without a
    back-off)."""
    return backoff is None or now is None or now >= backoff.retry_at


def retry_time_passed(retry_at: datetime | None, now: datetime) -> bool:
    """Whether a retry time stored by some worker (wall clock) has passed at ``now``. One
    further ahead than the longest back-off counts as passed: the clock that wrote it ran
    ahead, or this one stepped back, and no back-off waits that long."""
    if retry_at is None:
        return True
    ahead = (retry_at - now).total_seconds()
    return ahead <= 0 or ahead > BACKOFF_LONGEST_SECONDS
