"""A limit on concurrent calls per memory model, held across every worker on every machine.

Each model has ``limit`` slots, each a PostgreSQL session advisory lock (two keys: the model's
hash and the slot number) on a connection of the call's own: a call holds its slot until it
ends, and a worker that dies releases it with its connection, so no slot leaks. A call waits,
polling with try-locks, until a slot of its model is free. The worker's
:class:`~obsmem.llm.ModelCaller` enters :meth:`ModelSlots.held` around every call (its
``gate``).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import random
from collections.abc import AsyncGenerator
from typing import Any

__all__ = ["ModelSlots"]

_SLOT_SPACE = 0x6F6D  # "om": the advisory-lock class of model slots
POLL_SECONDS = (0.05, 0.5)
"""How long a job waiting for a slot sleeps between tries (uniformly in this range)."""


def _model_key(model: str) -> int:
    """A stable signed 32-bit key for ``model`` (advisory locks take two int4 keys)."""
    digest = hashlib.sha256(f"{_SLOT_SPACE}:{model}".encode()).digest()
    return int.from_bytes(digest[:4], "big", signed=True)


class ModelSlots:
    """``limit`` concurrent calls per memory model, across every worker of one database."""

    def __init__(self, dsn: str, limit: int) -> None:
        if limit < 1:
            raise ValueError(
                f"model_limit={limit!r}: give the most concurrent jobs per model (>= 1)"
            )
        self.dsn = dsn
        self.limit = limit

    @contextlib.asynccontextmanager
    async def held(self, model: str) -> AsyncGenerator[None]:
        """Hold a slot of ``model`` while the block runs."""
        import psycopg

        async with await psycopg.AsyncConnection.connect(self.dsn, autocommit=True) as conn:
            await self._take(conn, _model_key(model))
            yield  # the slot goes with the connection, whatever ends the block

    async def _take(self, conn: Any, key: int) -> None:
        while True:
            for slot in random.sample(range(self.limit), self.limit):
                cur = await conn.execute("SELECT pg_try_advisory_lock(%s, %s)", (key, slot))
                row = await cur.fetchone()
                if row is not None and row[0]:
                    return
            await asyncio.sleep(random.uniform(*POLL_SECONDS))
