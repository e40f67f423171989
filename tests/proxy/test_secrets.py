"""The operator's memory key never leaves ``obsmem proxy`` through an error: the upstream refuses
memory's own calls with an error that echoes the key, as OpenAI's ``Incorrect API key
provided: ...`` does, and the key is in no response header, log record, ledger row or byte of
the database file."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from obsmem.memory import ThreadRef
from obsmem.stores import SQLiteStore
from tests.loopback_openai import is_memory_call
from tests.strict_server import strict_server

from .helpers import bytes_under, running_proxy, system_of
from .test_proxy import THREAD, client, echo, turn

KEYS = [
    "sk-proj-Q7vX2mNcR4tY8uWz1aBd5eFg9hJk3LpS",  # shaped like an OpenAI project key
    "memory-key-of-the-operator-41c9",  # a local server's key: no known shape
]


@pytest.mark.parametrize("key", KEYS, ids=["sk-proj", "plain"])
async def test_the_memory_key_an_upstream_error_echoes_never_leaves(
    key: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="obsmem")

    def refuse(body: dict[str, Any]) -> tuple[int, str] | None:
        if not is_memory_call(system_of(body)):
            return None
        return 401, (
            f"Incorrect API key provided: {key}. You can find your API key at "
            "https://platform.openai.com/account/api-keys."
        )

    headers: list[Mapping[str, str]] = []
    store = SQLiteStore(tmp_path / "proxy.db")
    async with (
        strict_server(answer=echo, refuse=refuse) as upstream,
        running_proxy(upstream.base_url, store=store, memory_key=key) as proxy,
    ):
        ai = client(proxy.base_url)
        history: list[Any] = []
        for i in range(12):
            history.append({"role": "user", "content": turn(i)})
            reply = await ai.chat.completions.with_raw_response.create(
                model="local", messages=history, extra_headers=THREAD
            )
            headers.append(reply.headers)
            history.append(
                {"role": "assistant", "content": reply.parse().choices[0].message.content}
            )
        memory = proxy.proxy.memory_if_made
        assert memory is not None
        (resource,) = await store.list_resources()  # the one client's
        (thread,) = await memory.threads(resource)
        ref = ThreadRef(thread=thread.id, resource=resource)
        ledger = await memory.cycles(ref)
        status = await memory.status(ref)
    assert upstream.refusals, "the upstream never refused memory's call"
    last = headers[-1]["x-obsmem-memory"]
    assert last.startswith("failing; observer: "), last
    assert "Incorrect API key provided: [redacted]" in last
    assert all(key not in value for h in headers for value in h.values())
    failed = [row for row in ledger if row.outcome == "failed"]
    assert failed
    assert all(row.error and "[redacted]" in row.error for row in failed)
    assert all(key not in (row.error or "") for row in ledger)
    assert status.failures
    assert all(key not in f.error for f in status.failures)
    warned = [
        r for r in caplog.records if r.levelno >= logging.WARNING and "[redacted]" in r.getMessage()
    ]
    assert warned, [r.getMessage() for r in caplog.records]
    assert all(key not in r.getMessage() for r in caplog.records)
    assert key not in caplog.text  # tracebacks included
    assert key.encode() not in bytes_under(tmp_path)
