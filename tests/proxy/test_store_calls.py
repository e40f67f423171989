"""What a proxied turn costs the store: a plain turn is the door's two phases, the memory step
(begin) and the answer (finish), as every framework door's is; the thread is read again only
when something besides this process's own writes may have changed it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from obsmem.memory import ThreadRef
from obsmem.messages import Message
from obsmem.stores import InMemoryStore, SQLiteStore
from tests.engine.test_round_trips import CountingStore
from tests.strict_server import strict_server

from .helpers import KEY, client_requests, memory_aware, running_proxy
from .test_proxy import THREAD, client, echo, texts


def turn(i: int) -> str:
    """A short turn: these conversations stay well under the size memory observes at."""
    return f"Turn {i}: hello."


def owner(proxy: Any) -> str:
    return proxy.config.owners.caller(KEY).owner


async def _ask(base_url: str, history: list[dict[str, Any]], *, stream: bool) -> str:
    """One turn of the conversation, answered; the answer joins ``history``."""
    ai = client(base_url)
    if stream:
        chunks = await ai.chat.completions.create(
            model="local", messages=history, extra_headers=THREAD, stream=True
        )
        answer = "".join([c.choices[0].delta.content or "" async for c in chunks if c.choices])
    else:
        done = await ai.chat.completions.create(
            model="local", messages=history, extra_headers=THREAD
        )
        answer = done.choices[0].message.content or ""
    history.append({"role": "assistant", "content": answer})
    return answer


@pytest.mark.parametrize("stream", [False, True], ids=["complete", "stream"])
async def test_a_plain_turn_costs_two_store_calls(stream: bool) -> None:
    """The first turn reads the thread (there is none yet); every later one costs the memory
    step and the answer, and never reads the thread: what this process stored is what it
    knows."""
    counting = CountingStore(InMemoryStore())
    async with (
        strict_server(answer=memory_aware(echo)) as upstream,
        running_proxy(upstream.base_url, store=counting) as proxy,  # type: ignore[arg-type]
    ):
        history: list[dict[str, Any]] = []
        for i in range(5):
            history.append({"role": "user", "content": turn(i)})
            assert await _ask(proxy.base_url, history, stream=stream) == f"Answer to: Turn {i}"
            await proxy.proxy.settle()
            calls = counting.take()
            if i == 0:
                assert calls["get_thread"] == 1, calls
            else:
                assert sum(calls.values()) == 2, calls
        assert client_requests(upstream.requests)[-1]["messages"][-1]["content"] == turn(4)
        memory = proxy.proxy.memory_if_made
        assert memory is not None
        (thread,) = await memory.threads(owner(proxy.proxy))
        assert texts(await memory.messages(thread.id)) == [m["content"] for m in history]


async def test_two_processes_on_one_store_store_each_message_once(tmp_path: Path) -> None:
    """Two proxies answer one conversation in turns, on one database. What each stores of
    the client's history follows on from what it knew (the other's messages have the same
    ids), so each message is stored once and a plain turn still costs two store calls. A
    message the client never sent, stored between, leaves a gap: the next turn reads the
    thread, and the thread follows the client (the message is taken back)."""
    db = tmp_path / "memory.db"
    counting = CountingStore(SQLiteStore(db))
    async with (
        strict_server(answer=memory_aware(echo)) as upstream,
        running_proxy(upstream.base_url, store=counting) as one,  # type: ignore[arg-type]
        running_proxy(upstream.base_url, store=SQLiteStore(db)) as other,
    ):
        history: list[dict[str, Any]] = []
        for i in range(8):
            history.append({"role": "user", "content": turn(i)})
            proxy = (one, other)[i % 2] if i < 4 else one
            if i == 5:
                memory = other.proxy.memory_if_made
                assert memory is not None
                (thread,) = await memory.threads(owner(other.proxy))
                aside = Message.user("An aside the client never sent.", thread_id=thread.id)
                await memory.save(
                    ThreadRef(thread=thread.id, resource=thread.resource_id),
                    [aside],
                    actor_model=None,
                )
            assert await _ask(proxy.base_url, history, stream=False) == f"Answer to: Turn {i}"
            await proxy.proxy.settle()
            calls = counting.take()
            if i in (2, 4, 7):  # a plain turn of this process: two calls, though another wrote
                assert sum(calls.values()) == 2, (i, calls)
            sent = client_requests(upstream.requests)[-1]["messages"]
            assert [m["content"] for m in sent] == [m["content"] for m in history[:-1]]
        memory = one.proxy.memory_if_made
        assert memory is not None
        (thread,) = await memory.threads(owner(one.proxy))
        shown = [m async for m in memory.shown_tail(thread.id)]
        assert texts(shown[::-1]) == [m["content"] for m in history]
