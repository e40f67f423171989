"""An erased conversation stays erased through the proxy: its chat client still holds it and
resends it whole, and the thread id's tombstone (``Memory.erased_at``) tells the proxy that
those messages were erased, not new. Memory goes on from the client's new turn; the header and
one WARNING say so."""

from __future__ import annotations

import asyncio
import io
import logging
from pathlib import Path
from typing import Any

import httpx
import pytest

from obsmem import Memory
from obsmem.cli import main
from obsmem.proxy.history import StoredEntry, erased_prefix, fingerprint
from obsmem.stores import SQLiteStore
from tests.strict_server import strict_server

from .helpers import AUTH, client_requests, memory_aware, running_proxy
from .test_proxy import THREAD, echo, texts
from .test_store_calls import owner

SAID = ["Turn 0: my pet is called Rex.", "Turn 1: and my locker code is 4417-B."]
"""What the client says before the conversation is erased."""
LATER = ["Turn 2: a new start.", "Turn 3: what is the weather?"]
CALL = {"id": "c1", "type": "function", "function": {"name": "weather", "arguments": "{}"}}


async def _ask(http: httpx.AsyncClient, base_url: str, history: list[dict[str, Any]]) -> str:
    """One turn: the whole ``history`` sent, the answer added to it; the memory header."""
    reply = await http.post(
        f"{base_url}/chat/completions",
        json={"model": "local", "messages": history},
        headers={**AUTH, **THREAD},
    )
    assert reply.status_code == 200, reply.text
    history.append(
        {"role": "assistant", "content": reply.json()["choices"][0]["message"]["content"]}
    )
    return reply.headers["x-obsmem-memory"]


async def _erase(db: Path, memory: Memory, owner_id: str) -> None:
    """``obsmem delete --thread`` on the proxy's database, as its owner runs it beside it."""
    (thread,) = await memory.threads(owner_id)
    argv = ["delete", "--thread", thread.id, "--yes", "--db", str(db)]
    assert await asyncio.to_thread(main, argv, out=io.StringIO()) == 0


@pytest.mark.parametrize("restart", [False, True], ids=["same-proxy", "proxy-restarted"])
async def test_a_resent_erased_conversation_is_not_stored_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, restart: bool
) -> None:
    """The conversation is erased while the proxy serves it (which knows nothing of it, the
    delete ran in another process), or before a proxy that never saw it starts: the client's
    next two turns resend it, and the thread holds their turns only. The model is not shown
    the erased messages either."""
    caplog.set_level(logging.WARNING, logger="obsmem")
    db = tmp_path / "memory.db"
    history: list[dict[str, Any]] = []
    async with (
        strict_server(answer=memory_aware(echo)) as upstream,
        httpx.AsyncClient(timeout=60) as http,
    ):
        async with running_proxy(upstream.base_url, store=SQLiteStore(db)) as proxy:
            for said in SAID:
                history.append({"role": "user", "content": said})
                assert await _ask(http, proxy.base_url, history) == "on"
            await proxy.proxy.settle()
            memory = proxy.proxy.memory_if_made
            assert memory is not None
            owner_id = owner(proxy.proxy)
            await _erase(db, memory, owner_id)
            headers: list[str] = []
            if not restart:
                for said in LATER:
                    history.append({"role": "user", "content": said})
                    headers.append(await _ask(http, proxy.base_url, history))
                await proxy.proxy.settle()
        if restart:
            async with running_proxy(upstream.base_url, store=SQLiteStore(db)) as proxy:
                for said in LATER:
                    history.append({"role": "user", "content": said})
                    headers.append(await _ask(http, proxy.base_url, history))
                await proxy.proxy.settle()
        sent = client_requests(upstream.requests)[-2:]
    check = Memory(SQLiteStore(db))
    try:
        (thread,) = await check.threads(owner_id)
        stored = texts(await check.messages(thread.id))
    finally:
        await check.aclose()
    assert stored == [LATER[0], "Answer to: Turn 2", LATER[1], "Answer to: Turn 3"], stored
    for request in sent:
        shown = " ".join(str(m.get("content")) for m in request["messages"])
        assert "Rex" not in shown, shown
        assert "4417-B" not in shown, shown
    assert "was erased" in headers[0], headers
    assert headers[1] == "on", headers
    told = [r for r in caplog.records if "was erased" in r.getMessage()]
    assert len(told) == 1, [r.getMessage() for r in told]


def _user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def _assistant(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def _stored(conversation: list[dict[str, Any]]) -> list[StoredEntry]:
    return [StoredEntry(i + 1, f"m{i}", fingerprint(m)) for i, m in enumerate(conversation)]


ERASED = [_user("hi"), _assistant("Hello."), _user("my pet is Rex"), _assistant("Noted.")]


@pytest.mark.parametrize(
    ("conversation", "stored", "erased"),
    [
        pytest.param([*ERASED, _user("new")], [], 4, id="resent-before-the-new-turn"),
        pytest.param(
            [*ERASED, _user("hi"), _assistant("Hi again."), _user("next")],
            [_user("hi"), _assistant("Hi again.")],
            4,
            id="the-new-thread-opens-like-the-erased-one",
        ),
        pytest.param(
            [_user("hi"), _assistant("Hi again."), _user("next")],
            [_user("hi"), _assistant("Hi again.")],
            0,
            id="a-client-that-started-afresh",
        ),
        pytest.param(
            [*ERASED, _user("edited"), _assistant("A."), _user("next")],
            [_user("new"), _assistant("A.")],
            6,
            id="nothing-lines-up-the-current-step-only",
        ),
        pytest.param(
            [
                *ERASED,
                {"role": "assistant", "tool_calls": [CALL]},
                {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
            ],
            [],
            4,
            id="a-tool-step-keeps-its-call",
        ),
    ],
)
def test_the_erased_messages_a_client_resends_are_those_before_the_stored_thread(
    conversation: list[dict[str, Any]], stored: list[dict[str, Any]], erased: int
) -> None:
    """Of a thread id that was erased, the client's messages before what is stored again (or,
    when nothing of it lines up, before the current step) are the erased ones."""
    prints = [fingerprint(m) for m in conversation]
    assert erased_prefix(conversation, prints, _stored(stored)) == erased
