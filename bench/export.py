"""Export and import throughput and peak memory, 1k against 100k messages.

A SQLite store is filled directly with N messages in one thread and a log observed through all
but the last 40 (``overhead.populate``), then exported to a JSON Lines file (``Memory.export``
and ``write_export``, as ``obsmem export`` does) and imported into a new SQLite file
(``Memory.import_``: the validating pass, then the one-transaction write). Each step runs twice:
once timed, once under ``tracemalloc`` for its peak (tracemalloc slows what it watches).

Claims: an export's peak memory is flat in N (it holds one page of messages); an import's grows
only with the ids it checks for conflicts, not with the messages; throughput (messages a
second) holds from 1k to 100k.

    python bench/export.py            # 1k and 100k messages
    python bench/export.py --quick    # 100 and 1k (smoke test)
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
import tracemalloc
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _common import Talk, header, ratio, table
from overhead import RESOURCE, THREAD, populate

from obsmem import Memory
from obsmem.records import record_key
from obsmem.stores import SQLiteStore
from obsmem.transfer import open_private, write_export

MIB = 1024 * 1024


@dataclass
class Row:
    size: int
    export_s: float
    export_peak: int
    import_s: float
    import_peak: int
    file_bytes: int


async def _measured(step: Callable[[], Awaitable[Any]]) -> int:
    """The peak of traced memory while ``step`` runs."""
    tracemalloc.start()
    try:
        await step()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


async def _timed(step: Callable[[], Awaitable[Any]]) -> float:
    started = time.perf_counter()
    await step()
    return time.perf_counter() - started


async def measure(size: int, tmp: Path) -> Row:
    source = Memory(SQLiteStore(tmp / f"source-{size}.db"))
    pool = Talk(seed=1, user_tokens=100, assistant_tokens=300).messages(250)
    started = time.perf_counter()
    await populate(
        source.store, record_key("thread", thread_id=THREAD, resource_id=None), size, 40, pool
    )
    print(f"# populated {size:,} messages in {time.perf_counter() - started:.1f} s")
    files = iter(tmp / f"export-{size}-{n}.jsonl" for n in range(2))
    targets = iter(tmp / f"target-{size}-{n}.db" for n in range(2))
    last: list[Path] = []

    async def export() -> None:
        path = next(files)
        last[:] = [path]
        with open_private(str(path)) as out:
            await write_export(source.export(resource=RESOURCE), out)

    async def import_() -> None:
        target = Memory(SQLiteStore(next(targets)))
        await target.import_(last[0])
        await target.aclose()

    export_s = await _timed(export)
    export_peak = await _measured(export)
    import_s = await _timed(import_)
    import_peak = await _measured(import_)
    await source.aclose()
    return Row(size, export_s, export_peak, import_s, import_peak, last[0].stat().st_size)


async def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,100000")
    parser.add_argument("--quick", action="store_true", help="tiny sizes for the smoke test")
    args = parser.parse_args()
    if args.quick:
        args.sizes = "100,1000"
    sizes = [int(s) for s in args.sizes.split(",")]
    header("obsmem export and import: throughput and peak memory (SQLite)", sizes=args.sizes)
    with tempfile.TemporaryDirectory(prefix="obsmem-bench-") as tmp:
        rows = [await measure(size, Path(tmp)) for size in sizes]
    print()
    table(
        [
            (
                f"{r.size:,}",
                f"{r.file_bytes / MIB:.1f}",
                f"{r.size / r.export_s:,.0f}",
                f"{r.export_peak / MIB:.1f}",
                f"{r.size / r.import_s:,.0f}",
                f"{r.import_peak / MIB:.1f}",
            )
            for r in rows
        ],
        [
            "messages",
            "file MiB",
            "export msg/s",
            "export peak MiB",
            "import msg/s",
            "import peak MiB",
        ],
    )
    print()
    small, large = rows[0], rows[-1]
    times = f"{large.size // small.size}x the messages"
    ratio(
        f"export peak memory {large.size:,} / {small.size:,}",
        large.export_peak / small.export_peak,
        times,
    )
    ratio(
        f"import peak memory {large.size:,} / {small.size:,}",
        large.import_peak / small.import_peak,
        times,
    )
    ratio(
        f"export throughput {large.size:,} / {small.size:,}",
        (large.size / large.export_s) / (small.size / small.export_s),
        "messages a second",
    )
    ratio(
        f"import throughput {large.size:,} / {small.size:,}",
        (large.size / large.import_s) / (small.size / small.import_s),
        "messages a second",
    )


if __name__ == "__main__":
    asyncio.run(main())
