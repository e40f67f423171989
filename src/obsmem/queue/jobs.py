"""The job format of ``background="queue"`` and what a serving process does with the queue.

A job names a log's work and nothing else: the plan step (``"cycle"``: re-decide what
background work the log needs), the subject's ids, the thread's incarnation (added by the
store, in the transaction that queued it), the job format's version and a hash of the options
that queued it. Never message text: the worker reads everything from the store and its planner
decides again, so a job for work already done commits nothing.

The queue is procrastinate's tables (created by obsmem's migration 9); a job is inserted by the
turn's own load (``LoadRequest.enqueue``), and at most one job per log waits at a time (its
queueing lock is the log's key, and so is its lock: one job per log runs at a time).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError, ConflictError, StoreError
from ..stores.changes import LoadRequest, QueuedJob
from .relay import EventListener
from .status import QueueState, queue_state

if TYPE_CHECKING:
    from ..cycles import Deps
    from ..events import EventBus
    from ..options import ResolvedOptions
    from ..snapshot import Snapshot, Subject
    from ..stores import CoreStore

__all__ = [
    "JOB_VERSION",
    "QUEUE",
    "TASK",
    "QueueSide",
    "options_hash",
]

log = logging.getLogger("obsmem")

QUEUE = "obsmem"
"""The procrastinate queue every memory job goes to."""
TASK = "obsmem.cycle"
"""The task name of a memory job: a log's background work, re-decided by the worker."""
CHECK_SECONDS = 60.0
"""How often a serving process looks at the queue (in the background) for work no worker runs."""
MAX_KEYS = 10_000
"""Most logs one process remembers queuing work for (the least recent go first)."""
JOB_VERSION = 1
"""The job format's version: a worker runs jobs of its version and older ones, so workers and
serving processes of neighbouring releases can run side by side during a rolling deploy."""


def options_hash(options: ResolvedOptions) -> str:
    """A short hash of the options (models by name), stored with each job so a worker can tell
    that the serving process that queued it was configured as it is."""
    text = json.dumps(options.snapshot(), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def queue_dsn(store: CoreStore) -> str:
    """The DSN of the PostgreSQL store the queue lives in; ConfigError naming the fix for any
    other store."""
    dsn = getattr(store, "queue_dsn", None)
    if not isinstance(dsn, str):
        raise ConfigError(
            "background",
            "queue",
            "the job queue lives in PostgreSQL: give Memory a PostgresStore "
            '(PostgresStore("postgresql://user@host/db")), or leave background at "process" '
            f"(this store is {type(store).__name__})",
        )
    return dsn


class QueueSide:
    """A serving process's side of the queue: every load that stores messages also queues the
    log's job, in the same transaction; a load whose job cannot be queued goes on without it and
    says so."""

    def __init__(self, store: CoreStore, options: ResolvedOptions, bus: EventBus) -> None:
        self.dsn = queue_dsn(store)
        self.hash = options_hash(options)
        self.events = EventListener(self.dsn, bus)
        """Emits on ``bus`` the events of the cycles workers run (from this process's first
        turn on)."""
        self.keys: OrderedDict[str, None] = OrderedDict()
        """The logs this process queued work for, newest last (``settle`` waits for them)."""
        self._checked: float | None = None
        """When this process last looked at the queue (first: one interval after its first
        job, since no work can have waited long before)."""
        self._check: asyncio.Task[None] | None = None
        self._stuck = False

    async def state(self, key: str) -> QueueState:
        """The jobs of the log ``key``, and the workers alive."""
        return await queue_state(self.dsn, [key])

    async def settle(self, *, poll: float = 0.05) -> None:
        """Wait until no job of the logs this process queued work for waits or runs, while a
        worker is alive; with none alive, return at once, with a WARNING when work waits."""
        import psycopg

        while self.keys:
            try:
                state = await queue_state(self.dsn, list(self.keys))
            except psycopg.Error as exc:
                log.warning("obsmem: settle() cannot read the job queue: %s", exc)
                return
            if not state.waiting and not state.running:
                return
            if state.workers == 0:
                log.warning(
                    "obsmem: settle() does not wait for %d queued memory jobs: no worker runs. "
                    "Fix: start one (obsmem worker --db DSN, or Memory(...).worker().run())",
                    state.waiting + state.running,
                )
                return
            await asyncio.sleep(poll)
            poll = min(poll * 2, 1.0)

    async def aclose(self) -> None:
        """Stop hearing workers' events, and wait for the queue check under way, if any (queued
        jobs stay for the workers)."""
        await self.events.aclose()
        if self._check is not None:
            await asyncio.gather(self._check, return_exceptions=True)

    def _queued(self, key: str) -> None:
        """Remember ``key``; every ``CHECK_SECONDS`` (of the system's monotonic clock: a
        replay's clock does not pace it), look at the queue in the background."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        self.events.start()
        self.keys[key] = None
        self.keys.move_to_end(key)
        while len(self.keys) > MAX_KEYS:
            self.keys.popitem(last=False)
        if self._checked is None:
            self._checked = now
        elif now - self._checked >= CHECK_SECONDS and (self._check is None or self._check.done()):
            self._checked = now
            self._check = loop.create_task(self._look())

    async def _look(self) -> None:
        """A WARNING when work waited past the threshold while no worker is alive (and when
        a worker runs again)."""
        try:
            state = await queue_state(self.dsn)
        except Exception as exc:  # the next turn's store call says what is wrong
            log.info("obsmem: the queue could not be read: %s", exc)
            return
        if state.stuck and not self._stuck:
            log.warning(
                "obsmem: memory work has waited %.0f s in the queue (%d jobs) and no worker "
                "runs. Fix: start one: obsmem worker --db DSN (or Memory(...).worker().run())",
                state.oldest_wait or 0.0,
                state.waiting,
            )
        elif self._stuck and state.workers:
            log.warning("obsmem: a worker runs the queued memory work again")
        self._stuck = state.stuck

    def job(self, subject: Subject) -> QueuedJob:
        """The job of ``subject``'s log: ids and the plan step only."""
        args: Mapping[str, Any] = {
            "v": JOB_VERSION,
            "step": "cycle",
            "key": subject.key,
            "scope": subject.scope,
            "thread_id": subject.thread_id,
            "resource_id": subject.resource_id,
            "options": self.hash,
        }
        return QueuedJob(queue=QUEUE, task=TASK, lock=subject.key, args=args)

    async def load(self, deps: Deps, request: LoadRequest) -> Snapshot:
        """``request`` with the log's job queued in its transaction (when it stores messages);
        when that fails, the load again without the job and a WARNING: the turn goes on, and
        the log's next turn queues its work."""
        from ..cycles import load

        if not request.append:
            return await load(deps, request)
        try:
            snapshot = await load(deps, replace(request, enqueue=self.job(request.subject)))
        except ConflictError:  # the caller's copy of the thread is stale: nothing was stored
            raise
        except StoreError as exc:
            log.warning(
                "obsmem: the memory work of %s could not be queued (%s); the turn goes on and "
                "the next turn queues it. Fix: check that the database holds obsmem's schema "
                "(any obsmem command that stores upgrades it) and that its queue tables "
                "(procrastinate_jobs) are writable",
                request.subject.key,
                exc,
            )
            return await load(deps, request)
        self._queued(request.subject.key)
        return snapshot
