from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from obsmem.stores import InMemoryStore, PostgresStore, SQLiteStore, Store

from .postgres_server import ENV_DSN, create_database, postgres_admin_dsn

STORE_KINDS = ["memory", "sqlite", "postgres"]
REQUIRE_POSTGRES = ("OBSMEM_REQUIRE_POSTGRES", "CI")  # CI must run the PostgreSQL tests


@pytest.fixture(scope="session")
def postgres_admin() -> Iterator[str]:
    """A PostgreSQL server for the session (a throwaway one unless OBSMEM_TEST_POSTGRES_DSN)."""
    try:
        with postgres_admin_dsn() as dsn:
            yield dsn
    except RuntimeError as exc:
        if any(os.environ.get(name) for name in REQUIRE_POSTGRES):
            raise
        pytest.skip(f"PostgreSQL is not available here ({exc}); set {ENV_DSN} to use a server")


@pytest.fixture
def postgres_dsn(postgres_admin: str) -> str:
    """A fresh, empty database."""
    return create_database(postgres_admin)


@pytest.fixture(params=STORE_KINDS)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    """Every store kind; the conformance suite runs once per kind."""
    s: Store
    if request.param == "memory":
        s = InMemoryStore()
    elif request.param == "sqlite":
        s = SQLiteStore(tmp_path / "obsmem.db")
    else:
        s = PostgresStore(request.getfixturevalue("postgres_dsn"))
    try:
        yield s
    finally:
        await s.aclose()
