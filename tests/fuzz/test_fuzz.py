"""A few seeds of the multi-process fuzz in every run; `python -m tests.fuzz --seeds 500
--store sqlite|postgres` runs the release check."""

from __future__ import annotations

from pathlib import Path

import pytest

from .run import run_seed

SEEDS = [0, 5, 9]  # 0 and 5 kill a worker with SIGKILL mid-run


@pytest.mark.slow
@pytest.mark.parametrize("seed", SEEDS)
async def test_fuzz_on_sqlite(seed: int, tmp_path: Path) -> None:
    await run_seed(str(tmp_path / "fuzz.db"), seed)


@pytest.mark.slow
@pytest.mark.parametrize("seed", SEEDS)
async def test_fuzz_on_postgres(seed: int, postgres_dsn: str) -> None:
    await run_seed(postgres_dsn, seed)
