"""A serving process of the kill test: ``python -m tests.queue.serve PREFIX THREADS TURNS`` runs
that many turns on each of its threads through the queue-mode Memory of ``worker_app``, then
closes it (``OBSMEM_QUEUE_TEST_DSN`` names the database)."""

from __future__ import annotations

import asyncio
import sys

from ..engine.helpers import Conversation
from .worker_app import memory


async def serve(prefix: str, threads: int, turns: int) -> None:
    conv = Conversation(seed=hash(prefix) % 1000)
    mem = memory()
    om = mem.om
    assert om is not None
    try:
        for _ in range(turns):
            for n in range(threads):
                thread = f"{prefix}{n}"
                await om.prepare(thread, "u1", [conv.user(150)])
                await om.record(thread, "u1", [conv.assistant(150)])
    finally:
        await mem.aclose()


if __name__ == "__main__":
    asyncio.run(serve(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
