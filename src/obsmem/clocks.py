"""The engine's two clocks: the wall clock for what is stored and shown (message times, failure
states, the ledger), and a monotonic one for every wait (back-off, idle time), so a wall clock
that steps back or forward (NTP, a suspended laptop, an operator) can neither stall memory work
nor cut a wait short.

Pure: no I/O.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from datetime import datetime

from .messages import utcnow

__all__ = ["ReplyTimes", "SteadyClock", "steady_clock_for"]


class SteadyClock:
    """Seconds that never go back, read off a wall clock that may step: each reading adds how
    far the wall clock moved forward since the one before (nothing when it stepped back).

    For an engine given a clock of its own (a replay, a test moving time), so its waits follow
    that clock's time as it passes, and a step back holds nothing up."""

    def __init__(self, wall: Callable[[], datetime]) -> None:
        self._wall = wall
        self._last: datetime | None = None
        self._elapsed = 0.0

    def __call__(self) -> float:
        now = self._wall()
        if self._last is not None and now > self._last:
            self._elapsed += (now - self._last).total_seconds()
        self._last = now
        return self._elapsed


def steady_clock_for(wall: Callable[[], datetime]) -> Callable[[], float]:
    """The monotonic clock that goes with ``wall``: the system's for the real time, else one
    read off ``wall`` (:class:`SteadyClock`)."""
    return time.monotonic if wall is utcnow else SteadyClock(wall)


class ReplyTimes:
    """When this engine stored each thread's latest reply, on both clocks (the ``remember``
    most recent threads), so idle time is measured on the monotonic clock for a reply this
    process stored, and on the wall clock only for one another process stored."""

    def __init__(self, wall: Callable[[], datetime], steady: Callable[[], float], *, remember: int):
        self._wall = wall
        self._steady = steady
        self._remember = remember
        self._seen: OrderedDict[str, tuple[datetime, float]] = OrderedDict()

    def stored(self, thread_id: str, created_at: datetime) -> None:
        """A reply created at ``created_at`` was just stored on ``thread_id``."""
        self._seen[thread_id] = (created_at, self._steady())
        self._seen.move_to_end(thread_id)
        while len(self._seen) > self._remember:
            self._seen.popitem(last=False)

    def idle_seconds(self, thread_id: str, last_reply_at: datetime | None) -> float | None:
        """Seconds since the thread's latest reply (None without one). A wall-clock difference
        below zero (a clock that stepped back, another worker's clock ahead) counts as none."""
        if last_reply_at is None:
            return None
        seen = self._seen.get(thread_id)
        if seen is not None and seen[0] == last_reply_at:
            return self._steady() - seen[1]
        return max(0.0, (self._wall() - last_reply_at).total_seconds())
