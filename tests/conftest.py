from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from obsmem.stores import InMemoryStore, SQLiteStore, Store

STORE_KINDS = ["memory", "sqlite"]


@pytest.fixture(params=STORE_KINDS)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    """Every store kind; the conformance suite runs once per kind."""
    s: Store
    s = InMemoryStore() if request.param == "memory" else SQLiteStore(tmp_path / "obsmem.db")
    try:
        yield s
    finally:
        await s.aclose()
