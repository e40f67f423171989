from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from obsmem.stores import InMemoryStore, PostgresStore, SQLiteStore, Store

from .postgres_server import (
    ENV_DSN,
    PostgresUnavailable,
    create_database,
    describe,
    postgres_admin_dsn,
)

STORE_KINDS = ["memory", "sqlite", "postgres"]
REQUIRE_POSTGRES = ("OBSMEM_REQUIRE_POSTGRES", "CI")  # CI must run the PostgreSQL tests

_postgres: dict[str, str] = {}
"""What the run's summary says of PostgreSQL: ``server`` (what the tests ran on) or ``skipped``
(why they did not run)."""


@pytest.fixture(scope="session")
def postgres_admin() -> Iterator[str]:
    """A PostgreSQL server for the session (a throwaway one unless OBSMEM_TEST_POSTGRES_DSN).

    A machine without PostgreSQL binaries skips the PostgreSQL tests, saying so in the run's
    summary; where PostgreSQL is required (``OBSMEM_REQUIRE_POSTGRES`` or ``CI`` set) that is a
    failure instead. Binaries that are there but cannot start a server are always a failure:
    a broken setup must not pass for an untested one."""
    try:
        with postgres_admin_dsn() as dsn:
            _postgres["server"] = describe(dsn)
            yield dsn
    except PostgresUnavailable as exc:
        if any(os.environ.get(name) for name in REQUIRE_POSTGRES):
            raise
        _postgres["skipped"] = f"{exc}; set {ENV_DSN} to use a server"
        pytest.skip(f"PostgreSQL is not available here: {_postgres['skipped']}")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """One line saying whether PostgreSQL was tested, and on what (or why not)."""
    if "server" in _postgres:
        terminalreporter.write_line(f"PostgreSQL tests ran on {_postgres['server']}")
    elif "skipped" in _postgres:
        skipped = len(terminalreporter.stats.get("skipped", []))
        terminalreporter.write_line(
            f"PostgreSQL NOT TESTED ({skipped} tests skipped in all): {_postgres['skipped']}",
            yellow=True,
            bold=True,
        )


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
