"""Worker processes on the suite's PostgreSQL: serving processes in queue mode make no
memory-model calls and workers make them; a thread behind is caught up with no serving process
running; the per-model limit holds across workers; SIGTERM exits within a generous bound."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
from typing import Any

import pytest

from obsmem import Memory
from obsmem.engine import ObservationalMemory
from obsmem.messages import Message
from obsmem.stores import PostgresStore

from ..engine.helpers import Conversation, Recorder
from .processes import prepare_calls_table, queue_empty, sql, until, workers, workers_registered
from .worker_app import options

pytestmark = pytest.mark.slow


def _serving(dsn: str, conv: Conversation) -> ObservationalMemory:
    memory = Memory(PostgresStore(dsn), observational_memory=options(dsn), clock=conv.clock)
    assert memory.om is not None
    return memory.om


async def _turns(om: ObservationalMemory, conv: Conversation, threads: list[str], n: int) -> None:
    for _ in range(n):
        for thread in threads:
            await om.prepare(thread, "u1", [conv.user(150)])
            await om.record(thread, "u1", [conv.assistant(150)])


def _buffered(dsn: str, threads: list[str]) -> bool:
    rows = sql(
        dsn,
        "SELECT key FROM om_records WHERE superseded_by IS NULL AND chunks IS NOT NULL "
        "AND chunks <> '[]' AND key = ANY(%s)",
        ([f"thread:{t}" for t in threads],),
    )
    return len(rows) == len(threads)


async def test_serving_processes_make_no_model_calls_and_workers_do(postgres_dsn: str) -> None:
    prepare_calls_table(postgres_dsn)
    conv = Conversation()
    threads = ["t1", "t2", "t3"]
    om = _serving(postgres_dsn, conv)
    events = Recorder()
    om.subscribe(events)

    def heard() -> set[str]:
        return {e.thread_id for e in events.of("data-om-buffering-end")}

    try:
        with workers(postgres_dsn, 2) as procs:
            await until(lambda: workers_registered(postgres_dsn, 2), "two workers registered")
            await _turns(om, conv, threads, 3)
            await om.settle()  # in queue mode: until the workers ran this process's jobs
            assert _buffered(postgres_dsn, threads)
            assert queue_empty(postgres_dsn)
            pids = {p.pid for p in procs}
            # The workers' cycles reach this process's subscribers (LISTEN/NOTIFY).
            await until(lambda: heard() == set(threads), "the workers' buffering events")
    finally:
        await om.aclose()
    callers = {int(r[0]) for r in sql(postgres_dsn, "SELECT pid FROM test_model_calls")}  # type: ignore[arg-type]
    assert callers
    assert callers <= pids
    assert os.getpid() not in callers


async def test_a_thread_behind_is_caught_up_with_no_serving_process(postgres_dsn: str) -> None:
    prepare_calls_table(postgres_dsn)
    conv = Conversation()
    # A thread stored before memory was on: far past block_after (1,200 tokens).
    history: list[Message] = []
    for _ in range(12):
        history += [conv.user(150), conv.assistant(150)]
    plain = Memory(PostgresStore(postgres_dsn))
    try:
        await plain.save({"thread": "old", "resource": "u1"}, history, actor_model=None)
    finally:
        await plain.aclose()
    om = _serving(postgres_dsn, conv)
    try:  # one turn queues the catch-up, then the serving process is gone
        await om.prepare("old", "u1", [conv.user(20)])
    finally:
        await om.aclose()
    assert not sql(postgres_dsn, "SELECT 1 FROM test_model_calls")

    def observed_through() -> int:
        rows = sql(postgres_dsn, "SELECT cursor FROM om_records WHERE key = 'thread:old'")
        cursor: Any = json.loads(str(rows[0][0])) if rows else {}
        return int(cursor.get("old", 0))

    with workers(postgres_dsn, 1):
        await until(lambda: observed_through() >= 18, "the backlog observed by the worker", 90)
        await until(lambda: queue_empty(postgres_dsn), "the queue drained")
    assert observed_through() < 25  # never the message of the turn that queued it


async def test_the_per_model_limit_holds_across_workers(postgres_dsn: str) -> None:
    prepare_calls_table(postgres_dsn)
    conv = Conversation()
    threads = [f"t{i}" for i in range(6)]
    om = _serving(postgres_dsn, conv)
    try:
        with workers(postgres_dsn, 2, concurrency=3, model_limit=1, delay=0.2):
            await _turns(om, conv, threads, 2)
            await until(lambda: _buffered(postgres_dsn, threads), "every thread buffered", 120)
            await until(lambda: queue_empty(postgres_dsn), "the queue drained")
    finally:
        await om.aclose()
    calls = sql(postgres_dsn, "SELECT pid, started, ended FROM test_model_calls ORDER BY started")
    assert len(calls) >= len(threads)
    assert len({c[0] for c in calls}) == 2  # both workers called the model
    for before, after in itertools.pairwise(calls):
        assert after[1] >= before[2], f"two calls at once: {before} and {after}"


async def test_sigterm_stops_a_worker_within_a_bound(postgres_dsn: str) -> None:
    prepare_calls_table(postgres_dsn)
    with workers(postgres_dsn, 1) as [proc]:
        await until(lambda: workers_registered(postgres_dsn, 1), "the worker registered")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        assert proc.stdout is not None
        assert b"stopped after" in proc.stdout.read()
    assert not sql(postgres_dsn, "SELECT id FROM procrastinate_workers")


async def test_sigterm_puts_a_job_that_cannot_finish_back_in_the_queue(postgres_dsn: str) -> None:
    prepare_calls_table(postgres_dsn)
    conv = Conversation()
    om = _serving(postgres_dsn, conv)
    try:
        with workers(postgres_dsn, 1, delay=3600.0) as [proc]:  # a model call that never ends
            await _turns(om, conv, ["t1"], 2)
            await until(
                lambda: bool(sql(postgres_dsn, "SELECT 1 FROM test_model_calls")),
                "the worker's model call",
            )
            # The serving process closes without waiting for its job: the job is durable.
            await asyncio.wait_for(om.aclose(), 30)
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=60) == 0  # its shutdown timeout is 5 s
    finally:
        await om.aclose()
    statuses = sql(
        postgres_dsn,
        "SELECT status::text FROM procrastinate_jobs WHERE lock = 'thread:t1' ORDER BY id",
    )
    assert statuses == [("aborted",), ("todo",)]  # the log's work waits for the next worker


async def test_a_worker_drains_the_queue_and_exits(postgres_dsn: str) -> None:
    """Switching the queue off: serving processes go back to in-process work, and one worker
    with --until-empty runs what is left, then exits."""
    prepare_calls_table(postgres_dsn)
    conv = Conversation()
    om = _serving(postgres_dsn, conv)
    try:
        await _turns(om, conv, ["t1", "t2"], 3)
    finally:
        await om.aclose(cancel=True)
    with workers(postgres_dsn, 1, until_empty=True) as [proc]:
        assert proc.wait(timeout=120) == 0
    assert queue_empty(postgres_dsn)
    assert _buffered(postgres_dsn, ["t1", "t2"])


async def test_work_a_failure_put_off_is_done_after_its_back_off_without_a_turn(
    postgres_dsn: str,
) -> None:
    prepare_calls_table(postgres_dsn)
    conv = Conversation()
    om = _serving(postgres_dsn, conv)
    try:
        await _turns(om, conv, ["t1"], 3)
    finally:
        await om.aclose(cancel=True)  # no serving process from here on
    with workers(postgres_dsn, 1, fail_first=1):  # its first Observer call fails
        await until(lambda: _buffered(postgres_dsn, ["t1"]), "buffering after the back-off", 60)
    outcomes = {
        str(r[0])
        for r in sql(postgres_dsn, "SELECT outcome FROM om_cycles WHERE kind = 'buffering'")
    }
    assert {"failed", "committed"} <= outcomes
