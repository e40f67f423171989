"""``POST /v1/responses`` through the proxy: the official ``openai`` client's Responses API and raw
HTTP, in front of the loopback strict server (which refuses a ``function_call_output`` with no
call before it, as OpenAI does)."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import openai
import pytest

from obsmem.messages import TextPart, ToolCallPart, ToolResultPart
from obsmem.proxy.responses import answer_of, chat_to_items, items_to_chat
from obsmem.tokens import HeuristicEstimator
from tests.strict_server import ToolCalls, strict_server

from .helpers import (
    AUTH,
    FixedUpstream,
    client_requests,
    error_body,
    memory_aware,
    running_proxy,
)
from .test_proxy import THREAD, client, texts, turn


def _input_text(body: dict[str, Any]) -> str:
    return json.dumps(body.get("input"))


def echo(body: dict[str, Any]) -> str:
    """Which turn the request's last user item was."""
    users = [i for i in body["input"] if i.get("role") == "user"]
    return f"Answer to: {re.findall(r'Turn [0-9]+', json.dumps(users[-1]))[-1]}"


async def _thread_messages(proxy: Any) -> list[Any]:
    memory = proxy.proxy.memory_if_made
    assert memory is not None
    (resource,) = await memory.store.list_resources()
    (thread,) = await memory.store.list_threads(resource)
    return await memory.messages(thread.id)


async def test_a_long_conversation_stays_bounded_while_the_client_sends_every_item() -> None:
    """30 turns with the client appending each response's output items to its input: the
    upstream's input stays bounded, the instructions are untouched, everything is stored once."""
    async with (
        strict_server(answer=memory_aware(echo)) as upstream,
        running_proxy(upstream.base_url) as proxy,
    ):
        ai = client(proxy.base_url)
        items: list[Any] = []
        for i in range(30):
            items.append({"role": "user", "content": turn(i)})
            raw = await ai.responses.with_raw_response.create(
                model="local", instructions="You are terse.", input=items, extra_headers=THREAD
            )
            assert raw.headers["x-obsmem-memory"] == "on"
            response = raw.parse()
            assert response.output_text == f"Answer to: Turn {i}"
            items += [item.model_dump(exclude_none=True) for item in response.output]
            await proxy.proxy.settle()
        assert not upstream.refusals
        sent = client_requests(upstream.requests)
        assert len(sent) == 30
        assert all(body["instructions"] == "You are terse." for body in sent)
        estimator = HeuristicEstimator()
        assert "<observations>" in _input_text(sent[-1])
        for body in sent:
            raw = json.dumps([i for i in body["input"] if i.get("role") != "system"])
            assert estimator.count_text(raw) <= 480 + 400, raw
        last_raw = json.dumps([i for i in sent[-1]["input"] if i.get("role") != "system"])
        assert len(last_raw) * 4 < len(json.dumps(items))
        stored = await _thread_messages(proxy)
        expected = [t for i in range(30) for t in (turn(i), f"Answer to: Turn {i}")]
        assert texts(stored) == expected
        assert [m.seq for m in stored] == list(range(1, 61))


async def test_a_streamed_answer_passes_through_and_is_stored() -> None:
    async with (
        strict_server(answer=lambda body: iter(["Lis", "bon ", "it is."])) as upstream,
        running_proxy(upstream.base_url) as proxy,
    ):
        stream = await client(proxy.base_url).responses.create(
            model="local", input="Where did I move?", stream=True, extra_headers=THREAD
        )
        kinds: list[str] = []
        deltas: list[str] = []
        async for event in stream:
            kinds.append(event.type)
            if event.type == "response.output_text.delta":
                deltas.append(event.delta)
        assert deltas == ["Lis", "bon ", "it is."]
        assert kinds[0] == "response.created"
        assert kinds[-1] == "response.completed"
        await proxy.proxy.settle()
        assert texts(await _thread_messages(proxy)) == ["Where did I move?", "Lisbon it is."]
        assert upstream.requests[0]["stream"] is True


async def test_a_client_side_tool_loop_keeps_calls_and_outputs_paired() -> None:
    """The model calls a tool (streamed); the client runs it and sends the call and its output;
    the upstream sees the pair (it refuses an output without its call) and memory stores both."""

    def answer(body: dict[str, Any]) -> Any:
        if any(i.get("type") == "function_call_output" for i in body["input"]):
            return "It is sunny in Lisbon."
        return ToolCalls(("weather", {"city": "Lisbon"}))

    async with (
        strict_server(answer=answer) as upstream,
        running_proxy(upstream.base_url) as proxy,
    ):
        ai = client(proxy.base_url)
        items: list[Any] = [{"role": "user", "content": "Weather in Lisbon?"}]
        stream = await ai.responses.create(
            model="local", input=items, stream=True, extra_headers=THREAD
        )
        calls: list[Any] = []
        async for event in stream:
            if event.type == "response.output_item.done" and event.item.type == "function_call":
                calls.append(event.item)
        assert [(c.name, json.loads(c.arguments)) for c in calls] == [
            ("weather", {"city": "Lisbon"})
        ]
        await proxy.proxy.settle()
        items += [c.model_dump(exclude_none=True) for c in calls]
        items.append({"type": "function_call_output", "call_id": calls[0].call_id, "output": "sun"})
        final = await ai.responses.create(model="local", input=items, extra_headers=THREAD)
        assert final.output_text == "It is sunny in Lisbon."
        assert not upstream.refusals
        last = upstream.requests[-1]["input"]
        assert [i.get("type", "message") for i in last][-2:] == [
            "function_call",
            "function_call_output",
        ]
        await proxy.proxy.settle()
        stored = await _thread_messages(proxy)
        parts = [type(p) for m in stored for p in m.parts]
        assert parts == [TextPart, ToolCallPart, ToolResultPart, TextPart]
        call = next(p for m in stored for p in m.parts if isinstance(p, ToolCallPart))
        result = next(p for m in stored for p in m.parts if isinstance(p, ToolResultPart))
        assert (call.tool_name, call.args, result.tool_call_id) == (
            "weather",
            {"city": "Lisbon"},
            call.tool_call_id,
        )


@pytest.mark.parametrize(
    ("extra", "why"),
    [
        ({"previous_response_id": "resp_1"}, "off; previous_response_id"),
        ({"conversation": "conv_1"}, "off; conversation"),
    ],
)
async def test_a_conversation_the_upstream_keeps_passes_through(
    extra: dict[str, Any], why: str
) -> None:
    """Raw HTTP: with the history on the upstream memory cannot bound it, so the request goes
    as it came and the header says why."""
    async with strict_server() as upstream, running_proxy(upstream.base_url) as proxy:
        body = {"model": "local", "input": [{"role": "user", "content": "hi"}], **extra}
        async with httpx.AsyncClient() as http:
            reply = await http.post(
                f"{proxy.base_url}/responses", json=body, headers={**THREAD, **AUTH}
            )
        assert reply.status_code == 200
        assert reply.headers["x-obsmem-memory"].startswith(why)
        assert upstream.requests == [body]
        assert proxy.proxy.memory_if_made is None


@pytest.mark.parametrize(
    ("item", "why"),
    [
        ({"type": "item_reference", "id": "msg_1"}, "an input item of type 'item_reference'"),
        (
            {"role": "user", "content": None},
            "a message content that is neither a string nor a list of parts",
        ),
    ],
)
async def test_an_item_memory_cannot_read_passes_through_and_says_so(
    item: dict[str, Any], why: str
) -> None:
    async with strict_server() as upstream, running_proxy(upstream.base_url) as proxy:
        body = {"model": "local", "input": [item]}
        async with httpx.AsyncClient() as http:
            reply = await http.post(
                f"{proxy.base_url}/responses", json=body, headers={**THREAD, **AUTH}
            )
        assert reply.headers["x-obsmem-memory"] == f"off; memory cannot read {why}"
        assert upstream.requests == [body]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("status", [429, 500])
async def test_an_upstream_error_reaches_the_client_unchanged(status: int, stream: bool) -> None:
    body = error_body(status, f"upstream says {status}")
    async with (
        FixedUpstream(status, body, {"Content-Type": "application/json"}) as upstream,
        running_proxy(upstream.base_url) as proxy,
    ):
        with pytest.raises(openai.APIStatusError) as raised:
            await client(proxy.base_url).responses.create(
                model="m", input="hi", stream=stream, extra_headers=THREAD
            )
        assert raised.value.status_code == status
        assert raised.value.response.content == body
        assert raised.value.response.headers["x-obsmem-memory"] == "on"


async def test_a_missing_thread_id_passes_through() -> None:
    async with strict_server() as upstream, running_proxy(upstream.base_url) as proxy:
        reply = await client(proxy.base_url).responses.with_raw_response.create(
            model="local", input="hi", temperature=0.2
        )
        assert reply.headers["x-obsmem-memory"].startswith("off; no thread id")
        assert upstream.requests == [{"model": "local", "input": "hi", "temperature": 0.2}]
        assert proxy.proxy.memory_if_made is None


def test_items_and_chat_messages_convert_both_ways() -> None:
    items: list[Any] = [
        {"role": "user", "content": [{"type": "input_text", "text": "Look"}]},
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Calling.", "annotations": []}],
        },
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call", "call_id": "c2", "name": "g", "arguments": '{"a":1}'},
        {"type": "function_call_output", "call_id": "c1", "output": "one"},
        {"type": "function_call_output", "call_id": "c2", "output": "two"},
        {"type": "reasoning", "id": "rs_1", "summary": []},
    ]
    chat = items_to_chat(items)
    assert [m["role"] for m in chat] == ["user", "assistant", "tool", "tool"]
    assert [c["id"] for c in chat[1]["tool_calls"]] == ["c1", "c2"]
    again = chat_to_items(chat)
    assert [i.get("type", i.get("role")) for i in again] == [
        "user",
        "assistant",
        "function_call",
        "function_call",
        "function_call_output",
        "function_call_output",
    ]
    assert items_to_chat(again) == chat
    response = {"output": [items[1], items[2]]}
    assert answer_of(response) == {
        "role": "assistant",
        "content": "Calling.",
        "tool_calls": [chat[1]["tool_calls"][0]],
    }


def test_a_breakpoint_of_the_clients_survives_both_ways() -> None:
    mark = {"mode": "explicit"}
    items: list[Any] = [
        {
            "role": "developer",
            "content": [{"type": "input_text", "text": "Rules.", "prompt_cache_breakpoint": mark}],
        },
        {"role": "user", "content": [{"type": "input_text", "text": "Hi"}]},
    ]
    chat = items_to_chat(items)
    assert chat[0]["content"] == [
        {"type": "text", "text": "Rules.", "prompt_cache_breakpoint": mark}
    ]
    assert chat[1]["content"] == "Hi", "a part without one is plain text, as before"
    assert chat_to_items(chat)[0] == items[0] | {"role": "developer"}


async def test_an_openai_upstream_gets_a_breakpoint_after_memory_in_the_input() -> None:
    async with (
        strict_server(answer=memory_aware(echo), multimodal=True) as upstream,
        running_proxy(upstream.base_url, cache_breakpoints=True) as proxy,
    ):
        ai = client(proxy.base_url)
        items: list[Any] = []
        for i in range(14):
            items.append({"role": "user", "content": turn(i)})
            response = await ai.responses.create(
                model="gpt-6.1-terra", instructions="Be terse.", input=items, extra_headers=THREAD
            )
            items += [item.model_dump(exclude_none=True) for item in response.output]
            await proxy.proxy.settle()
        assert not upstream.refusals
    sent = client_requests(upstream.requests)
    observed = [b for b in sent if "<observations>" in _input_text(b)]
    assert observed
    for body in observed:
        system, *rest = body["input"]
        assert system["role"] == "system"
        *_, last = system["content"]
        assert last["prompt_cache_breakpoint"] == {"mode": "explicit"}
        assert "<observations>" in json.dumps(system)
        assert "prompt_cache_breakpoint" not in json.dumps(rest)
        assert body["instructions"] == "Be terse.", "the instructions field takes none"
