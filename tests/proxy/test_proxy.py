"""``obsmem proxy`` driven by the official ``openai`` client and by raw HTTP, in front of the
loopback strict server (one leading system message, alternating roles, string content)."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import socket
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from obsmem.convert.openai_chat import from_openai_chat
from obsmem.messages import TextPart, ToolCallPart, ToolResultPart
from obsmem.stores import InMemoryStore, SQLiteStore
from obsmem.tokens import HeuristicEstimator
from tests.loopback_openai import is_memory_call
from tests.strict_server import ToolCalls, endless, strict_server

from .helpers import (
    AUTH,
    KEY,
    FixedUpstream,
    bytes_under,
    client_requests,
    error_body,
    memory_aware,
    running_proxy,
    system_of,
)

THREAD = {"X-Obsmem-Thread": "trip"}
FILLER = " ".join(["please", "remember", "this", "detail", "for", "later"] * 5)


def turn(i: int) -> str:
    return f"Turn {i}: tell me about place number {i}. {FILLER}"


def echo(body: dict[str, Any]) -> str:
    """The answer: which turn it saw last (so each answer differs)."""
    last = next(m for m in reversed(body["messages"]) if m["role"] == "user")
    return f"Answer to: {re.findall(r'Turn [0-9]+', str(last['content']))[-1]}"


def client(base_url: str, key: str = KEY) -> openai.AsyncOpenAI:
    """The official client, keeping no connection open between requests."""
    http = httpx.AsyncClient(limits=httpx.Limits(max_keepalive_connections=0))
    return openai.AsyncOpenAI(base_url=base_url, api_key=key, max_retries=0, http_client=http)


def texts(messages: list[Any]) -> list[str]:
    return [" ".join(p.text for p in m.parts if isinstance(p, TextPart)) for m in messages]


async def test_sixty_turns_stay_bounded_while_the_client_sends_everything() -> None:
    """A 60-turn conversation: the client sends its whole history each time; what goes
    upstream stays within block_after plus the log, and every message is stored once."""
    async with (
        strict_server(answer=memory_aware(echo)) as upstream,
        running_proxy(upstream.base_url) as proxy,
    ):
        ai = client(proxy.base_url)
        history: list[dict[str, Any]] = [{"role": "system", "content": "You are terse."}]
        for i in range(60):
            history.append({"role": "user", "content": turn(i)})
            reply = await ai.chat.completions.with_raw_response.create(
                model="local", messages=history, extra_headers=THREAD
            )
            assert reply.headers["x-obsmem-memory"] == "on"
            answer = reply.parse().choices[0].message
            assert answer.content == f"Answer to: Turn {i}"
            history.append({"role": "assistant", "content": answer.content})
            await proxy.proxy.settle()
        memory = proxy.proxy.memory_if_made
        assert memory is not None
        assert not upstream.refusals
        sent = client_requests(upstream.requests)
        assert len(sent) == 60
        estimator = HeuristicEstimator()
        block_after = 480
        record = await memory.store.get_thread("key-" + _hash("sk-test-alpha") + ":trip")
        assert record is not None
        head = memory.om
        assert head is not None
        for body in sent:
            assert body["messages"][0]["role"] == "system"
            assert body["messages"][0]["content"].startswith("You are terse.")
            raw = from_openai_chat(body["messages"][1:])
            raw_tokens = sum(estimator.count_message(m) for m in raw)
            log = estimator.count_text(body["messages"][0]["content"])
            assert raw_tokens <= block_after + 200, raw_tokens  # the reminder and current step
            assert raw_tokens + log <= block_after + 4_000 + 1_000
        client_tokens = sum(estimator.count_message(m) for m in from_openai_chat(history[1:]))
        last = from_openai_chat(sent[-1]["messages"][1:])
        assert client_tokens > 8 * sum(estimator.count_message(m) for m in last)
        assert "<observations>" in sent[-1]["messages"][0]["content"]
        stored = await memory.messages(record.id)
        assert texts(stored) == [str(m["content"]) for m in history[1:]]
        assert [m.seq for m in stored] == list(range(1, 121))


def _hash(key: str) -> str:
    import hashlib

    return hashlib.sha256(key.encode()).hexdigest()[:24]


async def test_a_request_without_a_thread_passes_through_unchanged() -> None:
    async with strict_server() as upstream, running_proxy(upstream.base_url) as proxy:
        body = {
            "model": "local",
            "messages": [{"role": "user", "content": "hi"}],
            "temperature": 0.3,
            "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
        }
        async with httpx.AsyncClient() as http:
            reply = await http.post(f"{proxy.base_url}/chat/completions", json=body, headers=AUTH)
        assert reply.status_code == 200
        assert reply.headers["x-obsmem-memory"].startswith("off; no thread id")
        assert upstream.requests == [body]
        assert proxy.proxy.memory_if_made is None  # nothing stored


async def test_models_pass_through() -> None:
    async with strict_server() as upstream, running_proxy(upstream.base_url) as proxy:
        models = await client(proxy.base_url).models.list()
        assert [m.id for m in models.data] == ["local"]


async def test_other_parameters_are_forwarded_untouched() -> None:
    async with (
        strict_server(answer=memory_aware(echo)) as upstream,
        running_proxy(upstream.base_url) as proxy,
    ):
        tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
        await client(proxy.base_url).chat.completions.create(
            model="local",
            messages=[{"role": "user", "content": turn(0)}],
            tools=tools,  # type: ignore[arg-type]
            tool_choice="auto",
            temperature=0.25,
            response_format={"type": "json_object"},
            extra_headers=THREAD,
        )
        (sent,) = upstream.requests
        assert sent["tools"] == tools
        assert sent["tool_choice"] == "auto"
        assert sent["temperature"] == 0.25
        assert sent["response_format"] == {"type": "json_object"}
        assert sent["model"] == "local"


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    ("status", "headers"),
    [(500, {}), (429, {"Retry-After": "7"})],
)
async def test_upstream_errors_reach_the_client_unchanged(
    stream: bool, status: int, headers: dict[str, str]
) -> None:
    body = error_body(status, f"upstream says {status}")
    async with (
        FixedUpstream(status, body, {"Content-Type": "application/json", **headers}) as upstream,
        running_proxy(upstream.base_url) as proxy,
        httpx.AsyncClient() as http,
    ):
        reply = await http.post(
            f"{proxy.base_url}/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": stream},
            headers={**THREAD, **AUTH},
        )
        assert reply.status_code == status
        assert reply.content == body
        for name, value in headers.items():
            assert reply.headers[name] == value
        with pytest.raises(openai.APIStatusError) as raised:
            await client(proxy.base_url).chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hi"}], extra_headers=THREAD
            )
        assert raised.value.status_code == status
        assert raised.value.body == json.loads(body)["error"]
        # The client's key went upstream; the proxy's own header did not.
        assert upstream.headers_seen[-1]["authorization"] == "Bearer sk-test-alpha"
        assert "x-obsmem-thread" not in upstream.headers_seen[-1]


async def test_streaming_passes_through_and_the_answer_is_stored() -> None:
    pieces = ["The ", "answer ", "comes ", "in ", "pieces."]
    async with (
        strict_server(answer=memory_aware(lambda body: iter(pieces))) as upstream,
        running_proxy(upstream.base_url) as proxy,
    ):
        stream = await client(proxy.base_url).chat.completions.create(
            model="local",
            messages=[{"role": "user", "content": turn(0)}],
            stream=True,
            extra_headers=THREAD,
        )
        got = [c.choices[0].delta.content async for c in stream if c.choices]
        assert "".join(g or "" for g in got) == "".join(pieces)
        assert len([g for g in got if g]) == len(pieces)  # chunk by chunk, as sent
        memory = proxy.proxy.memory_if_made
        assert memory is not None
        (thread,) = await memory.threads("key-" + _hash("sk-test-alpha"))
        assert texts(await memory.messages(thread.id)) == [turn(0), "".join(pieces)]


@pytest.mark.parametrize("stream", [False, True])
async def test_a_client_side_tool_loop(stream: bool) -> None:
    """The model calls a tool, the client runs it and sends the result: each request is the
    current step, the call and its result are stored paired, once each."""
    answers = iter(
        [ToolCalls(("get_weather", {"city": "Lisbon"})), ToolCalls(("get_time", {})), "Sunny."]
    )
    async with (
        strict_server(answer=memory_aware(lambda body: next(answers))) as upstream,
        running_proxy(upstream.base_url) as proxy,
    ):
        ai = client(proxy.base_url)
        history: list[Any] = [{"role": "user", "content": turn(0)}]
        tools = [
            {"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}
            for n in ("get_weather", "get_time")
        ]
        for result in ("18 degrees", "noon", None):
            if stream:
                chunks = await ai.chat.completions.create(
                    model="local",
                    messages=history,
                    tools=tools,  # type: ignore[arg-type]
                    stream=True,
                    extra_headers=THREAD,
                )
                message = await _assembled(chunks)
            else:
                done = await ai.chat.completions.create(
                    model="local",
                    messages=history,
                    tools=tools,  # type: ignore[arg-type]
                    extra_headers=THREAD,
                )
                message = done.choices[0].message.model_dump(exclude_none=True)
            history.append(message)
            if result is None:
                break
            (call,) = message["tool_calls"]
            history.append({"role": "tool", "tool_call_id": call["id"], "content": result})
        assert history[-1]["content"] == "Sunny."
        assert not upstream.refusals
        # The second step's request carried the first call and its result, raw.
        second = client_requests(upstream.requests)[1]["messages"]
        assert second[-1] == {"role": "tool", "tool_call_id": "call_100", "content": "18 degrees"}
        memory = proxy.proxy.memory_if_made
        assert memory is not None
        (thread,) = await memory.threads("key-" + _hash("sk-test-alpha"))
        stored = await memory.messages(thread.id)
        roles = ["user", "assistant", "tool", "assistant", "tool", "assistant"]
        assert [m.role for m in stored] == roles
        call = stored[1].parts[0]
        assert isinstance(call, ToolCallPart)
        assert (call.tool_name, call.args) == ("get_weather", {"city": "Lisbon"})
        result_part = stored[2].parts[0]
        assert isinstance(result_part, ToolResultPart)
        assert (result_part.tool_call_id, result_part.tool_name) == ("call_100", "get_weather")
        assert result_part.content == "18 degrees"


async def _assembled(chunks: Any) -> dict[str, Any]:
    """The message a streaming client builds from the chunks."""
    content: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    async for chunk in chunks:
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        if delta.content:
            content.append(delta.content)
        for call in delta.tool_calls or []:
            empty = {"id": "", "type": "function", "function": {"name": "", "arguments": ""}}
            into = calls.setdefault(call.index, empty)
            into["id"] = call.id or into["id"]
            if call.function and call.function.name:
                into["function"]["name"] += call.function.name
            if call.function and call.function.arguments:
                into["function"]["arguments"] += call.function.arguments
    message: dict[str, Any] = {"role": "assistant", "content": "".join(content) or None}
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    return message


async def test_an_edited_earlier_message_takes_back_what_it_replaced() -> None:
    """The client rewrote history (edited its second message): the thread follows it. What
    the edit replaced is taken back (kept in storage, marked; out of the context), and the
    edited message and the new answer are stored once."""
    async with (
        strict_server(answer=memory_aware(echo)) as upstream,
        running_proxy(upstream.base_url) as proxy,
    ):
        ai = client(proxy.base_url)
        history: list[Any] = []
        for i in range(2):
            history.append({"role": "user", "content": turn(i)})
            done = await ai.chat.completions.create(
                model="local", messages=history, extra_headers=THREAD
            )
            history.append({"role": "assistant", "content": done.choices[0].message.content})
        edited = [*history[:2], {"role": "user", "content": "Turn 9: something else."}]
        done = await ai.chat.completions.create(
            model="local", messages=edited, extra_headers=THREAD
        )
        sent = upstream.requests[-1]["messages"]
        assert [m["content"] for m in sent] == [m["content"] for m in edited]
        assert not upstream.refusals
        memory = proxy.proxy.memory_if_made
        assert memory is not None
        (thread,) = await memory.threads("key-" + _hash("sk-test-alpha"))
        everything = await memory.messages(thread.id)
        assert len(everything) == 6  # nothing stored twice; the replaced two kept, marked
        after = [*edited, {"role": "assistant", "content": done.choices[0].message.content}]
        # The next request (the client's history after the edit) finds everything known.
        after.append({"role": "user", "content": turn(3)})
        await ai.chat.completions.create(model="local", messages=after, extra_headers=THREAD)
        assert [m["content"] for m in upstream.requests[-1]["messages"]] == [
            m["content"] for m in after
        ]
        assert len(await memory.messages(thread.id)) == 8


async def test_two_api_keys_cannot_see_each_others_memory(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "proxy.db")
    secret = "sk-secret-key-never-stored-123"
    async with (
        strict_server(answer=memory_aware(echo)) as upstream,
        running_proxy(upstream.base_url, store=store, accepted=(secret, "sk-other")) as proxy,
    ):
        await client(proxy.base_url, secret).chat.completions.create(
            model="local",
            messages=[{"role": "user", "content": "Turn 1: my favorite color is teal."}],
            extra_headers=THREAD,
        )
        await client(proxy.base_url, "sk-other").chat.completions.create(
            model="local",
            messages=[{"role": "user", "content": "Turn 1: what is my favorite color?"}],
            extra_headers=THREAD,  # the same thread name
        )
        second = upstream.requests[-1]["messages"]
        assert "teal" not in json.dumps(second)
        assert upstream.requests[0]["messages"] != second
        memory = proxy.proxy.memory_if_made
        assert memory is not None
        mine = await memory.threads("key-" + _hash(secret))
        theirs = await memory.threads("key-" + _hash("sk-other"))
        assert len(mine) == len(theirs) == 1
        assert mine[0].id != theirs[0].id
    raw = bytes_under(tmp_path)
    assert secret.encode() not in raw


async def test_the_api_key_is_never_logged(caplog: pytest.LogCaptureFixture) -> None:
    secret = "sk-secret-key-never-logged-456"
    caplog.set_level(logging.DEBUG)
    body = error_body(500, "boom")
    async with (
        FixedUpstream(500, body, {"Content-Type": "application/json"}) as upstream,
        running_proxy(upstream.base_url, store=_FailingStore(), accepted=(secret,)) as proxy,
    ):
        with pytest.raises(openai.APIStatusError):
            await client(proxy.base_url, secret).chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hi"}], extra_headers=THREAD
            )
    assert any("memory failed" in r.getMessage() for r in caplog.records)
    assert all(secret not in r.getMessage() for r in caplog.records)
    assert secret not in caplog.text


class _FailingStore(InMemoryStore):
    async def get_thread(self, thread_id: str) -> Any:
        raise RuntimeError("the database is on fire")


async def test_a_memory_failure_never_fails_the_request() -> None:
    async with (
        strict_server(answer=memory_aware(echo)) as upstream,
        running_proxy(upstream.base_url, store=_FailingStore()) as proxy,
    ):
        messages = [{"role": "user", "content": turn(0)}]
        reply = await client(proxy.base_url).chat.completions.with_raw_response.create(
            model="local", messages=messages, extra_headers=THREAD
        )
        assert reply.parse().choices[0].message.content == "Answer to: Turn 0"
        assert reply.headers["x-obsmem-memory"] == (
            "failing; RuntimeError: the database is on fire"
        )
        assert upstream.requests[-1]["messages"] == messages  # the client's own request


async def test_asking_again_keeps_one_answer_or_takes_back_the_old_one() -> None:
    """The client sends the same history again (a retry, a regenerate): the same answer is
    stored once; a different one replaces the old (taken back, kept in storage)."""
    replies = iter(["First answer.", "First answer.", "Second answer.", "Later."])
    async with (
        strict_server(answer=memory_aware(lambda body: next(replies))) as upstream,
        running_proxy(upstream.base_url) as proxy,
    ):
        ai = client(proxy.base_url)
        asked = [{"role": "user", "content": turn(0)}]
        for _ in range(3):
            await ai.chat.completions.create(model="local", messages=asked, extra_headers=THREAD)
            assert upstream.requests[-1]["messages"] == asked  # never the earlier answer
        memory = proxy.proxy.memory_if_made
        assert memory is not None
        (thread,) = await memory.threads("key-" + _hash("sk-test-alpha"))
        assert texts(await memory.messages(thread.id)) == [
            turn(0),
            "First answer.",
            "Second answer.",
        ]
        later = [*asked, {"role": "assistant", "content": "Second answer."}]
        later.append({"role": "user", "content": turn(1)})
        await ai.chat.completions.create(model="local", messages=later, extra_headers=THREAD)
        assert [m["content"] for m in upstream.requests[-1]["messages"]] == [
            m["content"] for m in later
        ]


async def test_a_failing_observer_is_reported_in_a_header_and_the_log(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The Observer (on the upstream) answers nothing: every request is still answered, and
    the response header and a WARNING say that memory is failing."""
    caplog.set_level(logging.WARNING, logger="obsmem")

    def answer(body: dict[str, Any]) -> str:
        return "" if is_memory_call(system_of(body)) else echo(body)

    async with (
        strict_server(answer=answer) as upstream,
        running_proxy(upstream.base_url) as proxy,
    ):
        ai = client(proxy.base_url)
        history: list[Any] = []
        statuses: list[str] = []
        for i in range(12):
            history.append({"role": "user", "content": turn(i)})
            reply = await ai.chat.completions.with_raw_response.create(
                model="local", messages=history, extra_headers=THREAD
            )
            statuses.append(reply.headers["x-obsmem-memory"])
            content = reply.parse().choices[0].message.content
            history.append({"role": "assistant", "content": content})
        assert statuses[0] == "on"
        assert statuses[-1].startswith("failing; observer: "), statuses
    assert any(r.levelno == logging.WARNING and r.name.startswith("obsmem") for r in caplog.records)


async def test_a_stream_the_client_hangs_up_on_is_not_stored() -> None:
    """The client stops reading halfway: the upstream is hung up on too, and the partial
    answer (which the client never saw whole) is not stored."""
    async with (
        strict_server(answer=memory_aware(endless("more "))) as upstream,
        running_proxy(upstream.base_url) as proxy,
    ):
        stream = await client(proxy.base_url).chat.completions.create(
            model="local",
            messages=[{"role": "user", "content": turn(0)}],
            stream=True,
            extra_headers=THREAD,
        )
        seen = 0
        async for _ in stream:
            seen += 1
            if seen == 3:
                break
        await stream.close()
        await upstream.wait_hung_up(1)
        memory = proxy.proxy.memory_if_made
        assert memory is not None
        (thread,) = await memory.threads("key-" + _hash("sk-test-alpha"))
        assert texts(await memory.messages(thread.id)) == [turn(0)]


async def test_memory_models_can_be_set_apart_from_the_upstream() -> None:
    """With a memory model of its own, the upstream sees only the client's requests."""
    from obsmem.testing import ModelCalls, scripted_observer

    calls = ModelCalls()
    async with (
        strict_server(answer=echo) as upstream,
        running_proxy(upstream.base_url, memory_model=scripted_observer(calls=calls)) as proxy,
    ):
        ai = client(proxy.base_url)
        history: list[Any] = []
        for i in range(12):
            history.append({"role": "user", "content": turn(i)})
            done = await ai.chat.completions.create(
                model="local", messages=history, extra_headers=THREAD
            )
            history.append({"role": "assistant", "content": done.choices[0].message.content})
        assert calls.count > 0  # memory observed, with its own model
        assert len(upstream.requests) == 12
        assert "<observations>" in upstream.requests[-1]["messages"][0]["content"]


async def test_concurrent_identical_requests_on_one_thread_store_it_once() -> None:
    async with (
        strict_server(answer=memory_aware(echo)) as upstream,
        running_proxy(upstream.base_url) as proxy,
    ):
        ai = client(proxy.base_url)
        asked = [{"role": "user", "content": turn(0)}]
        replies = await asyncio.gather(
            *(
                ai.chat.completions.create(model="local", messages=asked, extra_headers=THREAD)
                for _ in range(5)
            )
        )
        assert {r.choices[0].message.content for r in replies} == {"Answer to: Turn 0"}
        memory = proxy.proxy.memory_if_made
        assert memory is not None
        (thread,) = await memory.threads("key-" + _hash("sk-test-alpha"))
        assert texts(await memory.messages(thread.id)) == [turn(0), "Answer to: Turn 0"]


@pytest.mark.parametrize("stream", [False, True], ids=["complete", "stream"])
async def test_a_request_too_long_for_the_upstream_is_compacted_and_sent_again(
    stream: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """Thresholds far past the upstream's context (a small local model): when the upstream
    refuses a request as too long (llama.cpp's 400), memory compacts the thread once and the
    proxy sends the request again; the client never sees the refusal."""
    from obsmem.testing import scripted_observer, scripted_reflector

    big = {
        "observation": {"messageTokens": 30_000, "bufferTokens": False},
        "reflection": {"observationTokens": 40_000, "model": scripted_reflector()},
    }
    caplog.set_level(logging.WARNING, logger="obsmem")
    async with (
        strict_server(answer=echo, context_size=1_400) as upstream,
        running_proxy(
            upstream.base_url, options=big, memory_model=scripted_observer(words=3)
        ) as proxy,
    ):
        ai = client(proxy.base_url)
        history: list[dict[str, Any]] = [{"role": "system", "content": "You are terse."}]
        for i in range(24):
            history.append({"role": "user", "content": turn(i)})
            if stream:
                chunks = await ai.chat.completions.create(
                    model="local", messages=history, extra_headers=THREAD, stream=True
                )
                pieces = [c.choices[0].delta.content or "" async for c in chunks if c.choices]
                text = "".join(pieces)
            else:
                reply = await ai.chat.completions.create(
                    model="local", messages=history, extra_headers=THREAD
                )
                text = reply.choices[0].message.content or ""
            assert text == f"Answer to: Turn {i}"
            history.append({"role": "assistant", "content": text})
            await proxy.proxy.settle()
    assert upstream.refusals, "the conversation outgrew the upstream's context"
    sizes = [upstream.tokens_of(r) for r in upstream.requests]
    refused_at = [i for i, size in enumerate(sizes) if size > 1_400]
    assert refused_at
    assert all(sizes[i + 1] <= 1_400 for i in refused_at)  # each refusal: one retry that fitted
    compacted = [r for r in caplog.records if "compacted thread" in r.getMessage()]
    assert len(compacted) == len(refused_at)
    assert "the model's context is 1,400 tokens" in compacted[0].getMessage()


async def _breakpoint_requests(model: str, **config: Any) -> list[dict[str, Any]]:
    """The client's upstream requests of a conversation long enough to observe, sent as
    ``model`` to an upstream that takes list content."""
    async with (
        strict_server(answer=memory_aware(echo), multimodal=True) as upstream,
        running_proxy(upstream.base_url, **config) as proxy,
    ):
        ai = client(proxy.base_url)
        history: list[dict[str, Any]] = [{"role": "system", "content": "You are terse."}]
        for i in range(14):
            history.append({"role": "user", "content": turn(i)})
            reply = await ai.chat.completions.create(
                model=model, messages=history, extra_headers=THREAD
            )
            history.append({"role": "assistant", "content": reply.choices[0].message.content})
            await proxy.proxy.settle()
        assert not upstream.refusals
        return client_requests(upstream.requests)


async def test_an_openai_upstream_gets_a_breakpoint_at_the_end_of_memory() -> None:
    """For a model that takes OpenAI's explicit breakpoints (GPT-5.6 and later), the joined
    system message (the client's instructions, then memory's observations) ends with one."""
    sent = await _breakpoint_requests("gpt-6.1-terra", cache_breakpoints=True)
    observed = [b for b in sent if "<observations>" in json.dumps(b["messages"][0])]
    assert observed
    for body in sent:
        system, *rest = body["messages"]
        *_, last = system["content"]
        assert last["prompt_cache_breakpoint"] == {"mode": "explicit"}
        assert "prompt_cache_breakpoint" not in json.dumps(rest)
        assert system["content"][0]["text"].startswith("You are terse.")
    # Another model, or an upstream that is not OpenAI's (the default for a local one): none.
    for sent in (
        await _breakpoint_requests("local", cache_breakpoints=True),
        await _breakpoint_requests("gpt-6.1-terra"),
    ):
        assert not any("prompt_cache_breakpoint" in json.dumps(b) for b in sent)
        assert all(isinstance(b["messages"][0]["content"], str) for b in sent)


async def test_an_upstream_that_cannot_be_reached_is_a_502_in_openais_error_shape(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Nothing listens at the upstream's address: the client gets a 502 whose body has every
    field of OpenAI's error shape, naming the address, and the log one WARNING."""
    caplog.set_level(logging.WARNING, logger="obsmem")
    with socket.socket() as taken:  # a loopback port that was free and is closed again
        taken.bind(("127.0.0.1", 0))
        port = taken.getsockname()[1]
    async with (
        running_proxy(f"http://127.0.0.1:{port}/v1") as proxy,
        httpx.AsyncClient(base_url=proxy.base_url) as http,
    ):
        answer = await http.post(
            "/chat/completions",
            json={"model": "local", "messages": [{"role": "user", "content": "hi"}]},
            headers={"Authorization": f"Bearer {KEY}", **THREAD},
        )
    assert answer.status_code == 502
    error = answer.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["param"] is None
    assert f"cannot reach the upstream http://127.0.0.1:{port}/v1" in error["message"]
    warnings = [r for r in caplog.records if "cannot reach the upstream" in r.getMessage()]
    assert len(warnings) == 1
