"""What a proxied turn costs the store, and why it stays right with other processes on the
same database: a plain turn is the memory step (begin) and the answer (finish), with this
process's copy of the thread trusted unread, and checked by the begin's load. Another process
may have appended to the thread, taken messages back, erased it or stored a failure state since
this one last looked; the load then stores nothing, and the request reads the thread and lines
up with what is stored now."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.models.function import FunctionModel

from obsmem.memory import ThreadRef
from obsmem.messages import Message
from obsmem.proxy import Proxy, ProxyConfig
from obsmem.proxy.steps import Step
from obsmem.stores import InMemoryStore, SQLiteStore
from obsmem.testing import scripted_observer
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
    """The first turn reads the thread (and whether its id was erased); every turn after it
    is the memory step and the answer: the thread is not read again, nor the messages this
    process stored itself."""
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
                assert calls == {"load": 2}, calls
        assert client_requests(upstream.requests)[-1]["messages"][-1]["content"] == turn(4)
        memory = proxy.proxy.memory_if_made
        assert memory is not None
        (thread,) = await memory.threads(owner(proxy.proxy))
        assert texts(await memory.messages(thread.id)) == [m["content"] for m in history]


async def test_two_processes_on_one_store_store_each_message_once(tmp_path: Path) -> None:
    """Two proxies answer one conversation in turns, on one database: each reads what the
    other stored, so each message is stored once. A message the client never sent, stored
    between, is taken back: the thread follows the client."""
    db = tmp_path / "memory.db"
    async with (
        strict_server(answer=memory_aware(echo)) as upstream,
        running_proxy(upstream.base_url, store=SQLiteStore(db)) as one,
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
            sent = client_requests(upstream.requests)[-1]["messages"]
            assert [m["content"] for m in sent] == [m["content"] for m in history[:-1]]
        memory = one.proxy.memory_if_made
        assert memory is not None
        (thread,) = await memory.threads(owner(one.proxy))
        shown = [m async for m in memory.shown_tail(thread.id)]
        assert texts(shown[::-1]) == [m["content"] for m in history]


# -- another process changed the thread since this one last looked ------------------------------


@contextlib.asynccontextmanager
async def _proxies(
    db: Path,
    models: tuple[Any, Any] = (None, None),
    *,
    wrap: Callable[[SQLiteStore], Any] = lambda store: store,
    **options: Any,
) -> AsyncIterator[tuple[Proxy, Proxy]]:
    """Two proxy processes' apps on one database file (their steps called directly), each
    with its memory model; the first one's store is ``wrap``ped."""
    first = wrap(SQLiteStore(db))
    one, other = (
        Proxy(
            ProxyConfig(
                upstream="http://127.0.0.1:9/v1", store=store, memory_model=model, **options
            )
        )
        for store, model in zip((first, SQLiteStore(db)), models, strict=True)
    )
    try:
        yield one, other
    finally:
        await one.aclose()
        await other.aclose()


async def _turn(proxy: Proxy, history: list[dict[str, Any]], answer: str) -> Step:
    """One request of ``history`` through ``proxy``'s step, answered with ``answer``."""
    _, step = await proxy.prepare(REF, history, "m")
    await proxy.finish(step, {"role": "assistant", "content": answer})
    history.append({"role": "assistant", "content": answer})
    return step


async def _talk(*proxies: Proxy) -> list[dict[str, Any]]:
    """A conversation of one turn per proxy, in order: u1 answered a1, u2 answered a2, ..."""
    history: list[dict[str, Any]] = []
    for i, proxy in enumerate(proxies, 1):
        history.append({"role": "user", "content": f"u{i}"})
        await _turn(proxy, history, f"a{i}")
    return history


async def _shown(proxy: Proxy) -> list[str]:
    memory = await proxy.memory("m")
    return texts([m async for m in memory.shown_tail(REF.thread)][::-1])


REF = ThreadRef(resource="r", thread="t")


async def test_an_edit_lands_once_whichever_process_stored_what_it_replaces(
    tmp_path: Path,
) -> None:
    async with _proxies(tmp_path / "m.db") as (one, other):
        history = await _talk(one, other)
        history[2:] = [{"role": "user", "content": "u2 edited"}]  # the client edits u2
        await _turn(one, history, "a2'")
        history.append({"role": "user", "content": "u3"})
        await _turn(other, history, "a3")
        history.append({"role": "user", "content": "u4"})
        await _turn(one, history, "a4")
        assert await _shown(one) == [m["content"] for m in history]
        memory = await one.memory("m")
        stored = texts(await memory.messages(REF.thread))
        assert stored.count("u2 edited") == 1
        assert stored.count("a2'") == 1


async def test_a_retry_after_another_process_erased_the_thread_sends_the_new_turn(
    tmp_path: Path,
) -> None:
    async with _proxies(tmp_path / "m.db") as (one, other):
        history = await _talk(one, one)
        await (await other.memory("m")).delete_thread(REF)
        sent, step = await one.prepare(REF, history[:3], "m")  # the client retries u2
        await one.finish(step, {"role": "assistant", "content": "a2 again"})
        assert [m["content"] for m in sent if m["role"] != "system"] == ["u2"]
        assert await _shown(one) == ["u2", "a2 again"]


def _failing(messages: Any, info: Any) -> Any:
    raise RuntimeError("observer is down")


async def test_a_failure_another_process_stored_is_in_this_ones_header(tmp_path: Path) -> None:
    options = {"observation": {"messageTokens": 60, "bufferTokens": False}}
    models = (scripted_observer(), FunctionModel(_failing))
    async with _proxies(tmp_path / "m.db", models, options=options) as (one, other):
        history = [{"role": "user", "content": "hello there"}]
        assert (await _turn(one, history, "hi")).status == "on"
        for i in range(3):
            history.append({"role": "user", "content": f"turn {i} " + "words " * 30})
            await _turn(other, history, f"answer {i}")
            await (await other.memory("m")).settle()
        history.append({"role": "user", "content": "and now?"})
        status = (await _turn(one, history, "yes")).status
        assert status.startswith("failing; observer"), status
        assert "observer is down" in status


async def test_a_copy_another_process_made_stale_is_refused_then_read(tmp_path: Path) -> None:
    """This process's copy is checked, not read: after another process's turn, its memory
    step's load stores nothing (a ConflictError), the thread and what the other process stored
    are read, and the turn goes on from them. The turn after reads the thread first, finds no
    other write, and the one after that costs 2 store calls again (the next test)."""
    async with _proxies(tmp_path / "m.db", wrap=CountingStore) as (one, other):
        counting = one.config.store
        assert isinstance(counting, CountingStore)
        history = await _talk(one, one)
        assert counting.take() == {"get_thread": 1, "get_resource": 1, "load": 4}
        history.append({"role": "user", "content": "u3"})
        await _turn(other, history, "a3")
        history.append({"role": "user", "content": "u4"})
        sent, step = await one.prepare(REF, history, "m")
        assert [m["content"] for m in sent if m["role"] != "system"] == [
            m["content"] for m in history
        ]
        assert counting.take() == {"load": 2, "get_thread": 1, "list_messages": 1}
        await one.finish(step, {"role": "assistant", "content": "a4"})
        history.append({"role": "assistant", "content": "a4"})
        history.append({"role": "user", "content": "u5"})
        await _turn(one, history, "a5")
        assert counting.take() == {"load": 3, "get_thread": 1}  # a4, a read first, u5 and a5
        memory = await one.memory("m")
        assert texts(await memory.messages(REF.thread)) == [m["content"] for m in history]


async def test_turns_that_alternate_between_processes_read_first(tmp_path: Path) -> None:
    """Once its copy was refused, this process reads the thread first (no refused load) for
    as long as each read finds another process's write; the first read that finds none makes
    it trust its copy again."""
    async with _proxies(tmp_path / "m.db", wrap=CountingStore) as (one, other):
        counting = one.config.store
        assert isinstance(counting, CountingStore)
        history: list[dict[str, Any]] = []
        for i, (proxy, calls) in enumerate(
            [
                (one, None),  # the thread is made
                (other, None),
                (one, {"load": 3, "get_thread": 1, "list_messages": 1}),  # refused, then read
                (other, None),
                (one, {"get_thread": 1, "list_messages": 1, "load": 2}),  # read first
                (one, {"get_thread": 1, "load": 2}),  # read first: nobody else wrote
                (one, {"load": 2}),  # trusted again
            ]
        ):
            history.append({"role": "user", "content": f"u{i}"})
            await _turn(proxy, history, f"a{i}")
            taken = counting.take()
            if calls is not None:
                assert taken == calls, (i, taken)
        memory = await one.memory("m")
        assert texts(await memory.messages(REF.thread)) == [m["content"] for m in history]


# -- another writer between this process's read of the thread and its memory step ------------


class Hooked:
    """A store that runs ``hook`` once, right after the next call of ``after``."""

    def __init__(self, inner: SQLiteStore) -> None:
        self.inner = inner
        self.after = ""
        self.hook: Callable[[], Awaitable[Any]] | None = None

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if name.startswith("_") or not callable(attr):
            return attr

        async def called(*args: Any, **kwargs: Any) -> Any:
            result = await attr(*args, **kwargs)
            if name == self.after and self.hook is not None:
                hook, self.hook = self.hook, None
                await hook()
            return result

        return called


def _sent(messages: list[dict[str, Any]]) -> list[str]:
    return [m["content"] for m in messages if m["role"] != "system"]


async def _aside(proxy: Proxy) -> None:
    """A message the client never sent, stored in the thread by ``proxy``."""
    memory = await proxy.memory("m")
    await memory.save(REF, [Message.user("aside", thread_id=REF.thread)], actor_model=None)


async def test_a_write_between_the_read_and_the_step_is_lined_up(tmp_path: Path) -> None:
    """After another process's turn this one reads the thread; another write lands between
    that read and its memory step: the step's load refuses the copy, and the request lines up
    again (the message the client never sent is taken back)."""
    async with _proxies(tmp_path / "m.db", wrap=Hooked) as (one, other):
        hooked = one.config.store
        assert isinstance(hooked, Hooked)
        history = await _talk(one, other)
        history.append({"role": "user", "content": "u3"})
        hooked.after, hooked.hook = "list_messages", lambda: _aside(other)
        sent, step = await one.prepare(REF, history, "m")
        assert hooked.hook is None  # the aside was stored
        assert _sent(sent) == [m["content"] for m in history]
        await one.finish(step, {"role": "assistant", "content": "a3"})
        history.append({"role": "assistant", "content": "a3"})
        assert await _shown(one) == [m["content"] for m in history]


async def test_an_edit_with_a_write_between_the_read_and_the_take_back(tmp_path: Path) -> None:
    """The client edits its last message while another process stores one in the thread
    right after this one read it: what the edit replaced and the message between are taken
    back, and the model sees the edited history."""
    async with _proxies(tmp_path / "m.db", wrap=Hooked) as (one, other):
        hooked = one.config.store
        assert isinstance(hooked, Hooked)
        history = await _talk(one, one)
        history[2:] = [{"role": "user", "content": "u2 edited"}]
        hooked.after, hooked.hook = "get_thread", lambda: _aside(other)
        sent, step = await one.prepare(REF, history, "m")
        assert hooked.hook is None
        assert _sent(sent) == ["u1", "a1", "u2 edited"]
        await one.finish(step, {"role": "assistant", "content": "a2'"})
        assert await _shown(one) == ["u1", "a1", "u2 edited", "a2'"]


async def test_an_edit_while_this_process_stores_a_streamed_answer(tmp_path: Path) -> None:
    """One process: a streamed request's answer is stored after its stream, outside the
    thread's lock, while an edit of the same thread lines up."""
    async with _proxies(tmp_path / "m.db", wrap=Hooked) as (one, _):
        hooked = one.config.store
        assert isinstance(hooked, Hooked)
        history = await _talk(one)
        _, streaming = await one.prepare(REF, [*history, {"role": "user", "content": "u2"}], "m")

        async def stream_ends() -> None:
            await one.finish(streaming, {"role": "assistant", "content": "a2"})

        hooked.after, hooked.hook = "get_thread", stream_ends
        history.append({"role": "user", "content": "u2 edited"})
        sent, step = await one.prepare(REF, history, "m")
        assert hooked.hook is None
        assert _sent(sent) == ["u1", "a1", "u2 edited"]
        await one.finish(step, {"role": "assistant", "content": "a2'"})
        assert await _shown(one) == ["u1", "a1", "u2 edited", "a2'"]
