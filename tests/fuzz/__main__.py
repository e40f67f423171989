"""python -m tests.fuzz --seeds 500 --store sqlite|postgres [--first N]"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

from ..postgres_server import create_database, postgres_admin_dsn
from .run import run_seed


async def _run(store: str, seeds: range) -> int:
    failures = 0
    started = time.monotonic()
    with postgres_admin_dsn() if store == "postgres" else _nothing() as admin:
        for n, seed in enumerate(seeds, 1):
            with tempfile.TemporaryDirectory() as tmp:
                target = create_database(admin) if admin else str(Path(tmp) / "fuzz.db")
                try:
                    plan = await run_seed(target, seed)
                    note = f"{plan.workers} workers x {plan.turns} turns"
                    note += f", kill after {plan.kill_after:.2f}s" if plan.kill_after else ""
                    print(f"[{n}/{len(seeds)}] seed {seed} ok ({note})", flush=True)
                except AssertionError as exc:
                    failures += 1
                    print(f"[{n}/{len(seeds)}] seed {seed} FAILED: {exc}", flush=True)
    elapsed = time.monotonic() - started
    print(f"{len(seeds) - failures} passed, {failures} failed ({elapsed:.0f} s)")
    return 1 if failures else 0


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.fuzz")
    parser.add_argument("--seeds", type=int, default=500)
    parser.add_argument("--first", type=int, default=0, help="first seed")
    parser.add_argument("--store", choices=["sqlite", "postgres"], default="sqlite")
    args = parser.parse_args()
    return asyncio.run(_run(args.store, range(args.first, args.first + args.seeds)))


if __name__ == "__main__":
    raise SystemExit(main())
