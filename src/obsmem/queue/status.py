"""How the queue stands: jobs waiting and running per log, how long the oldest has waited, and
how many workers are alive, all timed by the database's clock.

Read on a connection of its own (a serving process's turns never wait on it): by
``memory.status()``, ``obsmem inspect``, ``settle()``, and every ``CHECK_SECONDS`` by a serving
process, which says (a WARNING on the ``obsmem`` logger) when work has waited past
``WAIT_WARNING_SECONDS`` while no worker runs, and again when it moves.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["QueueState", "queue_state", "queue_states"]

log = logging.getLogger("obsmem")

ALIVE_SECONDS = 30.0
"""A worker whose last heartbeat is older than this counts as gone (procrastinate's default
stalled-worker time)."""
WAIT_WARNING_SECONDS = 60.0
"""Work waiting longer than this with no worker alive is a WARNING."""

_STATE = """
SELECT j.lock,
       count(*) FILTER (WHERE j.status = 'todo'),
       count(*) FILTER (WHERE j.status = 'doing'),
       EXTRACT(EPOCH FROM now() - min(e.at) FILTER (WHERE j.status = 'todo'))
  FROM procrastinate_jobs j
  LEFT JOIN procrastinate_events e ON e.job_id = j.id AND e.type = 'deferred'
 WHERE j.queue_name = 'obsmem' AND j.status IN ('todo', 'doing')
   AND (%(all)s OR j.lock = ANY(%(keys)s))
 GROUP BY j.lock
"""
_WORKERS = (
    "SELECT count(*) FROM procrastinate_workers "
    "WHERE last_heartbeat > now() - make_interval(secs => %(alive)s)"
)


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueState:
    """The queue's jobs of some logs (or of all), and the workers alive."""

    waiting: int = 0
    running: int = 0
    oldest_wait: float | None = None
    """Seconds the oldest waiting job has waited (None: none waits)."""
    workers: int = 0

    @property
    def stuck(self) -> bool:
        """Work has waited past ``WAIT_WARNING_SECONDS`` and no worker is alive to run it."""
        return (
            self.workers == 0
            and self.oldest_wait is not None
            and self.oldest_wait > WAIT_WARNING_SECONDS
        )

    def jobs_line(self) -> str:
        """The jobs in words."""
        wait = f", the oldest for {self.oldest_wait:.0f} s" if self.oldest_wait is not None else ""
        return f"{self.waiting} waiting{wait}, {self.running} running"

    def line(self) -> str:
        """The jobs and the workers in words."""
        text = (
            f"queue: {self.jobs_line()}; "
            f"{self.workers} worker{'s' if self.workers != 1 else ''} alive"
        )
        if self.workers == 0 and self.waiting:
            text += " (start one: obsmem worker --db DSN)"
        return text


async def queue_states(dsn: str, keys: Sequence[str] | None = None) -> dict[str, QueueState]:
    """Per log key with a job waiting or running (of ``keys``, or of every log), its state."""
    workers, rows = await _read(dsn, keys)
    return {
        str(lock): QueueState(
            waiting=int(waiting),
            running=int(running),
            oldest_wait=float(wait) if wait is not None else None,
            workers=workers,
        )
        for lock, waiting, running, wait in rows
    }


async def queue_state(dsn: str, keys: Sequence[str] | None = None) -> QueueState:
    """The jobs of ``keys`` (or of every log) together, and the workers alive."""
    workers, rows = await _read(dsn, keys)
    waits = [float(r[3]) for r in rows if r[3] is not None]
    return QueueState(
        waiting=sum(int(r[1]) for r in rows),
        running=sum(int(r[2]) for r in rows),
        oldest_wait=max(waits) if waits else None,
        workers=workers,
    )


async def _read(dsn: str, keys: Sequence[str] | None) -> tuple[int, list[tuple[Any, ...]]]:
    import psycopg

    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        cur = await conn.execute(_WORKERS, {"alive": ALIVE_SECONDS})
        row = await cur.fetchone()
        cur = await conn.execute(_STATE, {"all": keys is None, "keys": list(keys or ())})
        return (int(row[0]) if row else 0), [tuple(r) for r in await cur.fetchall()]
