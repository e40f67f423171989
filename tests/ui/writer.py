"""Another process writing to the inspected database, as an agent would:

    python -m tests.ui.writer DB

Each line read on stdin runs one turn (a user message and the answer) through a real engine
with the scripted Observer; ``done N`` is printed once it is stored. Ends at end of input."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from obsmem.messages import Message
from obsmem.stores import SQLiteStore

from .data import MAIN, RESOURCE, engine


async def main(db: Path) -> None:
    """Run a turn per input line until stdin closes."""
    om = engine(SQLiteStore(db))
    loop = asyncio.get_running_loop()
    n = 0
    try:
        while await loop.run_in_executor(None, sys.stdin.readline):
            n += 1
            await om.prepare(MAIN, RESOURCE, [Message.user(f"live question {n}")])
            await om.record(MAIN, RESOURCE, [Message.assistant(f"live answer {n}")])
            await om.settle()
            print(f"done {n}", flush=True)
    finally:
        await om.aclose()


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1])))
