"""The same pages on PostgreSQL (the suite's throwaway server; skipped without one): the store
is opened in read-only transactions, and the pages show what the replay stored."""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import urlencode

import pytest
from starlette.testclient import TestClient

from obsmem.cli.common import open_store
from obsmem.stores import PostgresStore
from obsmem.ui.app import create_app

from .conftest import config
from .data import MAIN, OTHER, build
from .test_pages import every_page


def _app(dsn: str) -> Any:
    return create_app(open_store(dsn, read_only=True), config("postgres"))


def test_the_pages_on_postgresql(postgres_dsn: str) -> None:
    report = asyncio.run(build(lambda: PostgresStore(postgres_dsn)))
    with TestClient(_app(postgres_dsn), base_url="http://127.0.0.1") as client:
        for url in every_page() + every_page(OTHER):
            response = client.get(url)
            assert response.status_code == 200, (url, response.text[:500])
        index = client.get("/").text
        assert "failing since" in index
        assert "healthy" in index
        thread = client.get(f"/thread?{urlencode({'id': MAIN, 'page': 1})}").text
        assert "&lt;script&gt;alert(" in thread
        assert "mark-observed" in thread
        generations = client.get(f"/generations?{urlencode({'id': MAIN})}").text
        assert generations.count('class="card diff"') == report["generations"] - 1
        failed = client.get(f"/cycles?{urlencode({'id': MAIN, 'outcome': 'failed'})}").text
        assert "scripted model failure" in failed


def test_postgresql_is_opened_read_only(postgres_dsn: str) -> None:
    asyncio.run(build(lambda: PostgresStore(postgres_dsn)))
    store = open_store(postgres_dsn, read_only=True)

    async def attempt() -> None:
        try:
            await store.create_thread("new", "r")
        finally:
            await store.aclose()

    with pytest.raises(Exception, match=r"(?i)read-only|read only"):
        asyncio.run(attempt())
