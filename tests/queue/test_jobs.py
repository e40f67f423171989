"""A worker's job, run in this process: the planner decides again from the store, a job run
twice commits its range once (the second is ``redundant``), a job for a deleted thread stores
nothing and recreates nothing, and deleting a thread removes its jobs."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Literal

import psycopg
import pytest

from obsmem import Memory
from obsmem.queue.jobs import JOB_VERSION
from obsmem.stores import PostgresStore
from obsmem.testing import scripted_observer, scripted_reflector

from ..engine.helpers import Conversation, engine
from .processes import until, workers_registered


def _options(observer: Any = None) -> dict[str, Any]:
    return {
        "background": "queue",
        "observation": {
            "model": observer or scripted_observer(),
            "messageTokens": 1_000,
            "bufferTokens": 200,
        },
        "reflection": {"model": scripted_reflector(), "observationTokens": 20_000},
    }


def _job_args(dsn: str, thread_id: str) -> list[dict[str, Any]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT args FROM procrastinate_jobs WHERE args->>'thread_id' = %s", (thread_id,)
        ).fetchall()
    return [dict(r[0]) for r in rows]


async def _queue_turns(dsn: str, thread_id: str, turns: int = 2) -> None:
    conv = Conversation()
    serving = engine(PostgresStore(dsn), _options(), clock=conv.clock)
    try:
        for _ in range(turns):
            await serving.prepare(thread_id, "u1", [conv.user(150)])
            await serving.record(thread_id, "u1", [conv.assistant(150)])
    finally:
        await serving.aclose()


class _Gate(asyncio.Event):
    """An event a scripted model waits on, saying when the first call reached it."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = asyncio.Event()

    async def wait(self) -> Literal[True]:
        self.entered.set()
        return await super().wait()


async def test_a_job_buffers_what_is_due_and_a_second_run_commits_nothing(
    postgres_dsn: str,
) -> None:
    await _queue_turns(postgres_dsn, "t1")
    [args] = _job_args(postgres_dsn, "t1")
    gate = _Gate()
    slow = engine(PostgresStore(postgres_dsn), _options(scripted_observer(gate=gate)))
    fast = engine(PostgresStore(postgres_dsn), _options())
    try:
        # A worker that died mid-call (``slow``, stuck in its model call) and the one that
        # runs the job again: both call the model, one range is committed once.
        stuck = asyncio.create_task(slow.run_job(args))
        await gate.entered.wait()  # ``slow`` read the log and is in its model call
        assert await fast.run_job(args) == ("buffering",)
        gate.set()
        assert await stuck == ("buffering",)
        again = await fast.run_job(args)  # nothing is due any more
        record = await fast.store.get_record("thread:t1")
        cycles = await fast.store.list_cycles("thread:t1", kinds=("buffering",))
    finally:
        await slow.aclose()
        await fast.aclose()
    assert again == ()
    assert record is not None
    assert len(record.chunks) >= 1
    committed = [c for c in cycles if c.outcome == "committed"]
    redundant = [c for c in cycles if c.outcome == "redundant"]
    assert len(committed) == len(record.chunks)
    assert redundant, [c.outcome for c in cycles]
    seqs = [s for c in committed for r in c.ranges for s in range(r.first_seq, r.last_seq + 1)]
    assert len(seqs) == len(set(seqs))  # no message in two committed chunks


async def test_a_deleted_thread_s_job_commits_and_recreates_nothing(postgres_dsn: str) -> None:
    await _queue_turns(postgres_dsn, "t1")
    [args] = _job_args(postgres_dsn, "t1")
    memory = Memory(PostgresStore(postgres_dsn), observational_memory=_options())
    try:
        await memory.delete_thread({"thread": "t1", "resource": "u1"})
    finally:
        await memory.aclose()
    assert _job_args(postgres_dsn, "t1") == []  # its queued job went with it
    worker = engine(PostgresStore(postgres_dsn), _options())
    try:
        # A job its worker claimed before the delete still runs: it finds the thread gone.
        assert await worker.run_job(args) == ("deleted",)
        assert await worker.store.get_thread("t1") is None
        assert await worker.store.get_record("thread:t1") is None
    finally:
        await worker.aclose()


async def test_deleting_a_resource_removes_its_jobs(postgres_dsn: str) -> None:
    await _queue_turns(postgres_dsn, "t1")
    await _queue_turns(postgres_dsn, "t2")
    memory = Memory(PostgresStore(postgres_dsn), observational_memory=_options())
    try:
        await memory.delete_resource("u1")
    finally:
        await memory.aclose()
    assert _job_args(postgres_dsn, "t1") == _job_args(postgres_dsn, "t2") == []


async def test_a_worker_configured_otherwise_says_so_and_a_newer_job_waits(
    postgres_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    await _queue_turns(postgres_dsn, "t1")
    [args] = _job_args(postgres_dsn, "t1")
    other = _options()
    other["observation"] = {**other["observation"], "messageTokens": 2_000}
    worker = engine(PostgresStore(postgres_dsn), other)
    try:
        with caplog.at_level(logging.WARNING, logger="obsmem"):
            assert await worker.run_job({**args, "v": JOB_VERSION + 1}) == ("skipped",)
            assert "newer than this worker understands" in caplog.text
            await worker.run_job(args)  # run with the worker's own options
    finally:
        await worker.aclose()
    assert "this worker runs with" in caplog.text


async def test_memory_worker_runs_in_an_existing_process(postgres_dsn: str) -> None:
    """``Memory(...).worker()`` embedded in a process that serves too: it runs the jobs, and
    ``stop()`` ends it."""
    conv = Conversation()
    memory = Memory(PostgresStore(postgres_dsn), observational_memory=_options())
    serving = engine(PostgresStore(postgres_dsn), _options(), clock=conv.clock)
    worker = memory.worker(concurrency=2, heartbeat=0.5, stalled_after=2.0)
    running = asyncio.create_task(worker.run())
    try:
        await until(lambda: workers_registered(postgres_dsn, 1), "the worker registered")
        for _ in range(3):
            await serving.prepare("t1", "u1", [conv.user(150)])
            await serving.record("t1", "u1", [conv.assistant(150)])
        await serving.settle()  # a worker is alive: until it ran the jobs
        record = await serving.store.get_record("thread:t1")
    finally:
        worker.stop()
        await running
        await serving.aclose()
        await memory.aclose()
    assert record is not None
    assert record.chunks
    assert worker.jobs_done >= 1
