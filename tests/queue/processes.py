"""Worker processes for the queue tests, and waiting on the database (polled with a deadline)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg

from .worker_app import CREATE_CALLS, DELAY, DSN, FAIL_FIRST

ROOT = Path(__file__).resolve().parents[2]
HEARTBEAT = 0.5
STALLED_AFTER = 2.0
"""Short, so a killed worker's job is queued again within seconds."""


def start_worker(
    dsn: str,
    *,
    concurrency: int = 2,
    model_limit: int | None = None,
    delay: float = 0.0,
    until_empty: bool = False,
    fail_first: int = 0,
) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)]),
        DSN: dsn,
        DELAY: str(delay),
        FAIL_FIRST: str(fail_first),
    }
    command = [
        sys.executable,
        "-m",
        "obsmem",
        "worker",
        "--db",
        dsn,
        "--app",
        "tests.queue.worker_app:memory",
        "--concurrency",
        str(concurrency),
        "--heartbeat",
        str(HEARTBEAT),
        "--stalled-after",
        str(STALLED_AFTER),
        "--shutdown-timeout",
        "5",
    ]
    if model_limit is not None:
        command += ["--model-limit", str(model_limit)]
    if until_empty:
        command.append("--until-empty")
    return subprocess.Popen(command, env=env, cwd=ROOT, stdout=subprocess.PIPE)


@contextmanager
def workers(dsn: str, count: int, **kwargs: object) -> Iterator[list[subprocess.Popen[bytes]]]:
    """``count`` worker processes, killed at the end whatever happened."""
    procs = [start_worker(dsn, **kwargs) for _ in range(count)]  # type: ignore[arg-type]
    try:
        yield procs
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()


def sql(dsn: str, query: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(query, params)
        return cur.fetchall() if cur.description is not None else []


def prepare_calls_table(dsn: str) -> None:
    sql(dsn, CREATE_CALLS)


async def until(
    condition: Callable[[], bool | Awaitable[bool]], what: str, within: float = 60.0
) -> None:
    """Poll ``condition`` until it holds; AssertionError naming ``what`` at the deadline."""
    deadline = time.monotonic() + within
    while True:
        result = condition()
        if not isinstance(result, bool):
            result = await result
        if result:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {within:.0f} s waiting for {what}")
        await asyncio.sleep(0.1)


def queue_empty(dsn: str) -> bool:
    return not sql(dsn, "SELECT 1 FROM procrastinate_jobs WHERE status IN ('todo', 'doing')")


def workers_registered(dsn: str, count: int) -> bool:
    try:
        return len(sql(dsn, "SELECT id FROM procrastinate_workers")) >= count
    except psycopg.errors.UndefinedTable:  # no store has migrated the database yet
        return False
