"""An export holds one page of messages at a time: its peak memory does not grow with the
thread (measured at 2k and 100k messages, as bench/export.py does)."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

from obsmem import Memory, Message
from obsmem.stores import SQLiteStore
from obsmem.transfer import write_export

BATCH = 2_000


class _Sink:
    """Where the lines go: nowhere (what is written is not what is measured)."""

    def write(self, text: str) -> int:
        return len(text)


async def _fill(store: SQLiteStore, size: int) -> None:
    await store.create_thread("long", "r")
    for start in range(0, size, BATCH):
        batch = [
            Message.user(f"message {i}: the budget review moved to friday. " * 4)
            for i in range(start, min(size, start + BATCH))
        ]
        await store.append_messages("long", batch)


async def _export_peak(path: Path, size: int) -> int:
    memory = Memory(SQLiteStore(path))
    await _fill(memory.store, size)  # type: ignore[arg-type]
    tracemalloc.start()
    try:
        count = await write_export(memory.export(thread="long"), _Sink())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    await memory.aclose()
    assert count == size + 2  # the header and the thread
    return peak


async def test_export_memory_stays_flat_as_the_thread_grows(tmp_path: Path) -> None:
    small = await _export_peak(tmp_path / "small.db", 2_000)
    large = await _export_peak(tmp_path / "large.db", 100_000)
    # fifty times the messages: a whole-thread read would need fifty times the memory
    assert large < small * 1.5, (small, large)
