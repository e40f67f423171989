"""The application of the queue tests: ``obsmem worker --app tests.queue.worker_app:memory``
builds this Memory, and the tests' serving processes build the same one (so both queue and run
jobs with one options hash). Its Observer records every call it answers, with the process id
and the database's time, in ``test_model_calls``: where memory-model calls ran, and how many
overlapped."""

from __future__ import annotations

import os
from typing import Any

import psycopg
from pydantic_ai import messages as pa
from pydantic_ai.models.function import AgentInfo, FunctionModel

from obsmem import Memory
from obsmem.stores import PostgresStore
from obsmem.testing import scripted_observer, scripted_reflector

DSN = "OBSMEM_QUEUE_TEST_DSN"
DELAY = "OBSMEM_QUEUE_TEST_DELAY"
"""Seconds each Observer call takes (a slow model, so calls of several workers can overlap)."""
FAIL_FIRST = "OBSMEM_QUEUE_TEST_FAIL_FIRST"
"""How many of a process's first Observer calls fail."""

CREATE_CALLS = (
    "CREATE TABLE IF NOT EXISTS test_model_calls (pid INTEGER NOT NULL, "
    "started TIMESTAMPTZ NOT NULL, ended TIMESTAMPTZ)"
)


def recorded_observer(dsn: str, delay: float = 0.0, fail_first: int = 0) -> FunctionModel:
    inner = scripted_observer(delay=delay, fault=lambda n: "error" if n < fail_first else None)

    async def answer(messages: list[pa.ModelMessage], info: AgentInfo) -> pa.ModelResponse:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            cur = await conn.execute(
                "INSERT INTO test_model_calls (pid, started) VALUES (%s, clock_timestamp()) "
                "RETURNING ctid::text",
                (os.getpid(),),
            )
            row = await cur.fetchone()
            assert row is not None
            try:
                return await inner.function(messages, info)  # type: ignore[misc,no-any-return]
            finally:
                await conn.execute(
                    "UPDATE test_model_calls SET ended = clock_timestamp() WHERE ctid = %s::tid",
                    (row[0],),
                )

    return FunctionModel(answer, model_name="recorded-observer")


def options(dsn: str, *, delay: float = 0.0, fail_first: int = 0) -> dict[str, Any]:
    return {
        "background": "queue",
        "observation": {
            "model": recorded_observer(dsn, delay, fail_first),
            "messageTokens": 1_000,
            "bufferTokens": 200,
        },
        "reflection": {"model": scripted_reflector(), "observationTokens": 20_000},
    }


def memory() -> Memory:
    dsn = os.environ[DSN]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(CREATE_CALLS)
    given = options(
        dsn,
        delay=float(os.environ.get(DELAY, 0)),
        fail_first=int(os.environ.get(FAIL_FIRST, 0)),
    )
    return Memory(PostgresStore(dsn), observational_memory=given)
