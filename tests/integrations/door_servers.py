"""The door table's server columns: ``obsmem proxy`` (the real app, served by uvicorn in front of
the loopback strict server, driven over HTTP as a chat client drives it) and ``obsmem mcp`` (the
real MCP server, in-process behind the official SDK's client, with the client's own tool loop).
They offer the capabilities of :class:`~.door_cases.DoorRun`."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncGenerator, Mapping
from typing import Any

import httpx

from obsmem import Memory
from obsmem.convert.openai_chat import from_openai_chat
from obsmem.memory import ThreadRef
from obsmem.messages import Message, TextPart, ToolCallPart, ToolResultPart
from obsmem.stores import Store
from tests.proxy.helpers import AUTH, RunningProxy, running_proxy
from tests.proxy.test_door import OWNER
from tests.strict_server import ToolCalls, strict_server

from .door_cases import THREAD, Actor
from .drivers import Tools
from .helpers import RESOURCE

LOOKUP = {
    "type": "function",
    "function": {
        "name": "lookup",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
    },
}
MAX_REQUEST_BYTES = 64 * 1024
"""The proxy's request limit in the table (the smallest it takes is 1 KiB)."""


class ProxyRun:
    """A chat client of ``obsmem proxy``: it sends its whole history each request (as chat
    clients do), runs the tools the model calls, and reads the ``x-obsmem-memory`` header."""

    events = None  # an HTTP answer has no event stream: the header is the report

    def __init__(
        self, proxy: RunningProxy, http: httpx.AsyncClient, actor: Actor, tools: Tools
    ) -> None:
        self.proxy = proxy
        self.http = http
        self.brain = actor
        self.tools = tools
        self.history: list[dict[str, Any]] = []
        self.header = ""

    @property
    def ref(self) -> ThreadRef:
        return ThreadRef(thread=f"{OWNER}:{THREAD}", resource=OWNER)

    @property
    def memory(self) -> Memory:
        memory = self.proxy.proxy.memory_if_made
        assert memory is not None, "the proxy made no memory yet"
        return memory

    async def _post(self, body: Mapping[str, Any]) -> httpx.Response:
        headers = {**AUTH, "X-Obsmem-Thread": THREAD}
        return await self.http.post(
            f"{self.proxy.base_url}/chat/completions", json=body, headers=headers
        )

    async def turn(self, text: str) -> str:
        self.history.append({"role": "user", "content": text})
        while True:
            reply = await self._post(
                {"model": "local", "messages": self.history, "tools": [LOOKUP]}
            )
            assert reply.status_code == 200, reply.text
            self.header = reply.headers["x-obsmem-memory"]
            message = reply.json()["choices"][0]["message"]
            self.history.append(
                {k: v for k, v in message.items() if k in ("role", "content", "tool_calls")}
            )
            calls = message.get("tool_calls") or []
            if not calls:
                return str(message["content"])
            for call in calls:
                result = self.tools.lookup(**json.loads(call["function"]["arguments"]))
                self.history.append({"role": "tool", "tool_call_id": call["id"], "content": result})

    async def settle(self) -> None:
        await self.proxy.proxy.settle()

    async def report(self) -> str:
        return self.header

    async def over_limit(self) -> str:
        said = [*self.history, {"role": "user", "content": "x" * (MAX_REQUEST_BYTES + 1)}]
        reply = await self._post({"model": "local", "messages": said})
        assert reply.status_code == 413, reply.text
        return str(reply.json()["error"]["message"])


@contextlib.asynccontextmanager
async def open_proxy(
    store: Store, options: Mapping[str, Any], actor: Actor
) -> AsyncGenerator[ProxyRun]:
    """The proxy on ``store`` with ``options`` (its memory models: the options' Observer); the
    upstream is ``actor``, which refuses a request too long as a server does (HTTP 400)."""
    actor.raises = False

    def answer(body: dict[str, Any]) -> str | ToolCalls:
        text, calls = actor.step(from_openai_chat(body["messages"]))
        return ToolCalls(*[(name, args) for _, name, args in calls]) if calls else text

    def refuse(body: dict[str, Any]) -> tuple[int, str] | None:
        refused = actor.refusal(from_openai_chat(body["messages"]))
        return None if refused is None else (400, refused)

    async with (
        strict_server(answer=answer, refuse=refuse) as upstream,
        running_proxy(
            upstream.base_url,
            store=store,
            options=dict(options),
            memory_model=options["observation"]["model"],
            max_request_bytes=MAX_REQUEST_BYTES,
        ) as proxy,
        httpx.AsyncClient(timeout=60) as http,
    ):
        yield ProxyRun(proxy, http, actor, Tools())


class McpRun:
    """An MCP client of ``obsmem mcp``: each turn it stores the user's message (``remember``),
    gives its model ``memory_context``, runs the tools the model calls (``recall`` through the
    server), and stores the answer; the tools' results are its report."""

    events = None  # MCP answers tool calls: a result, no event stream

    def __init__(self, memory: Memory, client: Any, actor: Actor, tools: Tools) -> None:
        self.memory = memory
        self.client = client
        self.brain = actor
        self.tools = tools
        self.said = ""

    @property
    def ref(self) -> ThreadRef:
        return ThreadRef(thread=THREAD, resource=RESOURCE)

    async def _call(self, tool: str, arguments: Mapping[str, Any]) -> Any:
        result = await self.client.call_tool(tool, dict(arguments))
        assert not result.is_error, (tool, result.content)
        return result

    async def _remember(self, role: str, text: str) -> None:
        result = await self._call("remember", {"messages": [{"role": role, "content": text}]})
        self.said = "\n".join(c.text for c in result.content)

    async def _run_tool(self, name: str, arguments: dict[str, Any]) -> str:
        if name == "recall":
            result = await self._call("recall", arguments)
            return "\n".join(c.text for c in result.content)
        return self.tools.lookup(**arguments)

    async def turn(self, text: str) -> str:
        await self._remember("user", text)
        context = (
            await self._call("memory_context", {"include_messages": True})
        ).structured_content
        messages = [Message.system(context["context"] or "No memory yet.")]
        messages += [
            Message(role=m["role"], parts=(TextPart(text=m["text"]),)) for m in context["messages"]
        ]
        while True:
            answer, calls = self.brain.step(messages)
            if not calls:
                break
            parts = [ToolCallPart(tool_name=n, args=a, tool_call_id=c) for c, n, a in calls]
            messages.append(Message(role="assistant", parts=tuple(parts)))
            for cid, name, arguments in calls:
                result = await self._run_tool(name, arguments)
                part = ToolResultPart(tool_name=name, tool_call_id=cid, content=result)
                messages.append(Message(role="tool", parts=(part,)))
        await self._remember("assistant", answer)
        return answer

    async def settle(self) -> None:
        await self.memory.settle()

    async def report(self) -> str:
        return self.said

    async def over_limit(self) -> str:
        from obsmem.mcp_server import MAX_CONTENT_CHARS

        too_long = [{"role": "user", "content": "x" * (MAX_CONTENT_CHARS + 1)}]
        result = await self.client.call_tool("remember", {"messages": too_long})
        assert result.is_error, result.content
        return "\n".join(c.text for c in result.content)


@contextlib.asynccontextmanager
async def open_mcp(
    store: Store, options: Mapping[str, Any], actor: Actor
) -> AsyncGenerator[McpRun]:
    """``obsmem mcp``'s server for resource ``user-1``, bound to thread ``t1``, in-process
    behind the SDK's own client."""
    from mcp import Client

    from obsmem.mcp_server.server import build_server
    from obsmem.mcp_server.tools import MemoryTools

    memory = Memory(store, observational_memory=dict(options))
    server = build_server(MemoryTools(memory, resource=RESOURCE, thread=THREAD))
    try:
        async with Client(server) as client:
            yield McpRun(memory, client, actor, Tools())
    finally:
        await memory.aclose()
