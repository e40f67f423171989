"""``obsmem worker``: a process that runs the queued memory jobs of one database.

It is procrastinate's worker on the queue ``obsmem``, with what memory adds around it:

- **One job per log at a time**: a job's lock is its log's key (procrastinate runs no two jobs
  of one lock at once), and at most one more waits (its queueing lock).
- **Stalled jobs**: every worker heartbeats; a job whose worker stopped heartbeating for
  ``stalled_after`` seconds (a SIGKILL, a lost machine) is put back in the queue by any live
  worker, or, when the log already has a waiting job that will decide again, finished as
  failed. Its model calls may run twice; its commits cannot land twice (each is checked against
  the version it read, and a range already covered makes a ``redundant`` cycle).
- **A limit on concurrent calls per memory model** across every worker
  (:class:`~obsmem.queue.slots.ModelSlots`, entered around each call).
- **The database's clock**: what the worker stores is timed by PostgreSQL's ``now()`` (the
  offset to it measured at start and every ``CLOCK_CHECK_SECONDS``), so machines whose clocks
  disagree store one time line.
- **SIGTERM** (or SIGINT): no new job is claimed; running jobs get ``shutdown_timeout`` seconds to
  finish; a job cut off then is queued again for its log before the worker exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import threading
from collections.abc import Callable, Coroutine, Generator
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from ..errors import MissingExtraError
from ..messages import utcnow
from .jobs import QUEUE, TASK, queue_dsn
from .relay import EventPublisher
from .slots import ModelSlots

if TYPE_CHECKING:
    from ..engine import ObservationalMemory

__all__ = ["Worker"]

log = logging.getLogger("obsmem")

POLL_SECONDS = 1.0
"""A worker is woken by LISTEN/NOTIFY when a job is queued; it also looks every this many
seconds, for a job queued while its listener was not yet (or no longer) connected."""
CLOCK_CHECK_SECONDS = 300.0
"""How often a worker measures its clock's offset to the database's."""

REQUEUE_SECONDS = 10
"""The most a worker that is stopping waits to connect and queue again a job it cut off."""

_REQUEUE = (
    "INSERT INTO procrastinate_jobs (queue_name, task_name, lock, queueing_lock, args) "
    "VALUES (%(queue)s, %(task)s, %(lock)s, %(lock)s, %(args)s::jsonb) "
    "ON CONFLICT (queueing_lock) WHERE status = 'todo' DO NOTHING"
)
_RETRY_LATER = (
    "INSERT INTO procrastinate_jobs "
    "(queue_name, task_name, lock, queueing_lock, args, scheduled_at) "
    "VALUES (%(queue)s, %(task)s, %(lock)s, %(waiting)s, %(args)s::jsonb, "
    "now() + make_interval(secs => %(after)s)) "
    "ON CONFLICT (queueing_lock) WHERE status = 'todo' DO NOTHING"
)
"""A retry of a log's job for when its back-off has passed, under a queueing lock of its own
(``retry:<key>``), so it never keeps the log's turns from queueing their work."""


class DatabaseClock:
    """The local clock moved by its measured offset to the database's ``now()``."""

    def __init__(self, local: Callable[[], datetime] = utcnow) -> None:
        self.local = local
        self.offset = timedelta(0)

    def __call__(self) -> datetime:
        return self.local() + self.offset

    async def measure(self, conn: Any) -> None:
        """The offset, from one ``SELECT now()`` (half its round trip counted on each side)."""
        before = self.local()
        cur = await conn.execute("SELECT now()")
        row = await cur.fetchone()
        after = self.local()
        self.offset = row[0] - (before + (after - before) / 2)


class Worker:
    """Runs the queued memory jobs of ``engine``'s database with ``engine``'s models, options,
    extractors and hooks (``Memory(...).worker()`` builds one)."""

    def __init__(
        self,
        engine: ObservationalMemory,
        *,
        concurrency: int = 4,
        model_limit: int | None = None,
        heartbeat: float = 10.0,
        stalled_after: float = 30.0,
        shutdown_timeout: float = 30.0,
        install_signal_handlers: bool = True,
        until_empty: bool = False,
    ) -> None:
        """``concurrency``: jobs this worker runs at once. ``model_limit``: the most calls to one
        memory model at once across every worker (None: no limit). ``heartbeat`` and
        ``stalled_after``: seconds between heartbeats, and without one before this worker's
        jobs count as stalled and go back to the queue. ``shutdown_timeout``: seconds running
        jobs get to finish after SIGTERM. ``until_empty``: stop once no job is left (draining
        the queue after the serving processes went back to ``background="process"``)."""
        if concurrency < 1:
            raise ValueError(f"concurrency={concurrency!r}: give the jobs to run at once (>= 1)")
        if not 0 < heartbeat < stalled_after:
            raise ValueError(
                f"heartbeat={heartbeat!r}, stalled_after={stalled_after!r}: a worker must "
                "heartbeat more often than the time after which its jobs count as stalled"
            )
        self.engine = engine
        self.dsn = queue_dsn(engine.store)
        self.concurrency = concurrency
        self.slots = ModelSlots(self.dsn, model_limit) if model_limit is not None else None
        self.heartbeat = heartbeat
        self.stalled_after = stalled_after
        self.shutdown_timeout = shutdown_timeout
        self.install_signal_handlers = install_signal_handlers
        self.until_empty = until_empty
        self.clock = DatabaseClock()
        self.jobs_done = 0
        """Jobs this worker finished (whatever they found to do)."""
        self._queue_worker: Any = None
        self._side: asyncio.Task[None] | None = None

    async def run(self) -> None:
        """Claim and run jobs until :meth:`stop`, SIGTERM or SIGINT (or until cancelled)."""
        try:
            import procrastinate
            from procrastinate.worker import Worker as QueueWorker
        except ImportError as exc:
            raise MissingExtraError(
                "obsmem worker (the job queue)", "queue", package="procrastinate"
            ) from exc
        app = procrastinate.App(
            connector=procrastinate.PsycopgConnector(
                conninfo=self.dsn, min_size=1, max_size=self.concurrency + 2
            )
        )
        app.task(name=TASK, queue=QUEUE, pass_context=False)(self._job)
        self.engine.use_wall_clock(self.clock)
        if self.slots is not None:
            self.engine.caller.gate = self.slots.held
        migrated = getattr(self.engine.store, "schema_version", None)
        if migrated is not None:  # the queue's tables exist before procrastinate looks
            await migrated()
        await self._measure_clock()
        async with app.open_async():
            self._queue_worker = QueueWorker(
                app,
                queues=[QUEUE],
                concurrency=self.concurrency,
                wait=not self.until_empty,
                listen_notify=True,
                fetch_job_polling_interval=POLL_SECONDS,
                delete_jobs="successful",
                update_heartbeat_interval=self.heartbeat,
                stalled_worker_timeout=self.stalled_after,
                shutdown_graceful_timeout=self.shutdown_timeout,
                install_signal_handlers=False,
            )
            self._side = asyncio.create_task(self._side_work(app), name="obsmem worker upkeep")
            publisher = EventPublisher(self.dsn)
            unsubscribe = self.engine.subscribe(publisher)
            with self._signals():
                try:
                    await self._queue_worker.run()
                finally:
                    self.stop()
                    unsubscribe()
                    with contextlib.suppress(asyncio.CancelledError):
                        await self._side
                    await publisher.aclose()

    def stop(self) -> None:
        """Claim no more jobs; running jobs get ``shutdown_timeout`` seconds, then are cut off
        and queued again. The stalled-job check stops first: a stopping worker's heartbeat
        stops, and its own jobs must not look stalled to it."""
        if self._side is not None:
            self._side.cancel()
        if self._queue_worker is not None:
            self._queue_worker.stop()

    @contextlib.contextmanager
    def _signals(self) -> Generator[None]:
        """SIGTERM and SIGINT stop the worker (when it may install handlers: the main thread)."""
        loop = asyncio.get_running_loop()
        wanted = (signal.SIGTERM, signal.SIGINT)
        installed: list[signal.Signals] = []
        if self.install_signal_handlers and threading.current_thread() is threading.main_thread():
            for sig in wanted:
                loop.add_signal_handler(sig, self.stop)
                installed.append(sig)
        try:
            yield
        finally:
            for sig in installed:
                loop.remove_signal_handler(sig)

    async def _job(self, **args: Any) -> None:
        """One job: the log's due background work, run here."""
        try:
            await self.engine.run_job(args)
            delay = self.engine.retry_delay(str(args.get("key")))
            if delay is not None:
                await self._requeue(args, after=delay)
        except asyncio.CancelledError:  # SIGTERM past shutdown_timeout: the log's work waits
            await _unstoppable(self._requeue(args))
            raise
        self.jobs_done += 1

    async def _requeue(self, args: dict[str, Any], *, after: float | None = None) -> None:
        """Queue the job again: now (unless one of its log waits), or ``after`` seconds (a
        retry once a failed role's back-off has passed; one such retry waits per log)."""
        import psycopg
        from psycopg.types.json import Jsonb

        key = str(args.get("key"))
        params = {"queue": QUEUE, "task": TASK, "lock": key, "args": Jsonb(args)}
        query = _REQUEUE
        if after is not None:
            query = _RETRY_LATER
            params |= {"waiting": f"retry:{key}", "after": after}
        async with await psycopg.AsyncConnection.connect(
            self.dsn, autocommit=True, connect_timeout=REQUEUE_SECONDS
        ) as conn:
            await conn.execute(query, params)

    async def _measure_clock(self) -> None:
        import psycopg

        async with await psycopg.AsyncConnection.connect(self.dsn, autocommit=True) as conn:
            await self.clock.measure(conn)

    async def _side_work(self, app: Any) -> None:
        """Put stalled jobs back in the queue, and measure the database's clock again now and
        then, for as long as the worker runs."""
        loop = asyncio.get_running_loop()
        measured = loop.time()
        while True:
            if loop.time() - measured >= CLOCK_CHECK_SECONDS:
                await self._measure_clock()
                measured = loop.time()
            await self._retry_stalled(app)
            await asyncio.sleep(self.heartbeat)

    async def _retry_stalled(self, app: Any) -> None:
        """Jobs of workers that stopped heartbeating go back to the queue; one whose log already
        has a job waiting (which decides again from the store) is finished instead. A job
        another worker dealt with first is left alone."""
        from procrastinate.exceptions import ConnectorException, UniqueViolation
        from procrastinate.jobs import Status

        manager = app.job_manager
        for job in await manager.get_stalled_jobs(
            queue=QUEUE, seconds_since_heartbeat=self.stalled_after
        ):
            try:
                await manager.retry_job(job)
                log.info("obsmem: stalled memory job %s of %s queued again", job.id, job.lock)
            except UniqueViolation:
                with contextlib.suppress(ConnectorException):
                    await manager.finish_job(job, status=Status.FAILED, delete_job=True)
            except ConnectorException as exc:
                log.info("obsmem: stalled memory job %s left alone (%s)", job.id, exc)


async def _unstoppable(work: Coroutine[Any, Any, None]) -> None:
    """Run ``work`` to its end even while the caller is cancelled again (the worker is
    stopping, and the job's log must not lose its work); bounded by ``REQUEUE_SECONDS``."""
    task = asyncio.ensure_future(asyncio.wait_for(work, REQUEUE_SECONDS * 2))
    while not task.done():
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.shield(task)
    if task.exception() is not None:
        log.warning(
            "obsmem: a memory job cut off by the worker's stop could not be queued again (%s); "
            "its log's next turn queues its work",
            task.exception(),
        )
