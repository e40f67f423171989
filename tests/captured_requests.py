"""Provider APIs answered in-process, for tests that look at the exact request bodies.

Each model is pydantic-ai's own (OpenAI chat completions, OpenAI Responses, Anthropic Messages,
Gemini generateContent) with an HTTP client whose transport keeps every request body and answers
from a script: a text answer, or a tool call, in that API's response shape. Nothing leaves the
process.

:func:`prefix_units` cuts a request body into the pieces a provider's prompt cache reads in
order (tools, system, then each message), with the cache markers themselves left out, so a test
can check how much of one request the next one repeats byte for byte.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from typing import Any

import httpx2
from pydantic_ai.models import Model

PROVIDERS = ("openai-chat", "openai-responses", "anthropic", "gemini")


@dataclass(frozen=True)
class Call:
    """A tool call to answer with."""

    name: str
    args: dict[str, Any]


Step = str | Call


@dataclass
class CapturedApi:
    provider: str
    script: list[Step] = field(default_factory=list[Step])
    """The answers, in order; when it runs out every answer is ``"ok"``."""
    requests: list[dict[str, Any]] = field(default_factory=list[dict[str, Any]])
    model_name: str = ""
    """The model to name (each API's usual one when empty)."""
    _ids: itertools.count[int] = field(default_factory=itertools.count)

    def model(self) -> Model:
        client = httpx2.AsyncClient(transport=httpx2.MockTransport(self._handle), timeout=600)
        if self.provider in ("openai-chat", "openai-responses"):
            from pydantic_ai.models.openai import OpenAIChatModel, OpenAIResponsesModel
            from pydantic_ai.providers.openai import OpenAIProvider

            provider = OpenAIProvider(api_key="test", http_client=client)
            if self.provider == "openai-chat":
                return OpenAIChatModel(self.model_name or "gpt-4o", provider=provider)
            return OpenAIResponsesModel(self.model_name or "gpt-4o", provider=provider)
        if self.provider == "anthropic":
            from pydantic_ai.models.anthropic import AnthropicModel
            from pydantic_ai.providers.anthropic import AnthropicProvider

            return AnthropicModel(
                "claude-sonnet-4-5", provider=AnthropicProvider(api_key="test", http_client=client)
            )
        from pydantic_ai.models.google import GoogleModel
        from pydantic_ai.providers.google import GoogleProvider

        return GoogleModel(
            self.model_name or "gemini-2.5-flash",
            provider=GoogleProvider(api_key="test", http_client=client),
        )

    def _handle(self, request: httpx2.Request) -> httpx2.Response:
        body = json.loads(request.content or b"{}")
        self.requests.append(body)
        step = self.script.pop(0) if self.script else "ok"
        answer = self._answer(step)
        if body.get("stream") and self.provider == "anthropic":
            return httpx2.Response(
                200,
                content=_anthropic_events(answer).encode(),
                headers={"content-type": "text/event-stream"},
            )
        if "streamGenerateContent" in request.url.path:  # Gemini streams one event per chunk
            return httpx2.Response(
                200,
                content=f"data: {json.dumps(answer)}\r\n\r\n".encode(),
                headers={"content-type": "text/event-stream"},
            )
        return httpx2.Response(200, json=answer)

    def _answer(self, step: Step) -> dict[str, Any]:
        n = next(self._ids)
        call_id = f"call_{n}"
        if self.provider == "openai-chat":
            message: dict[str, Any] = {"role": "assistant", "content": None}
            if isinstance(step, Call):
                message["tool_calls"] = [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": step.name, "arguments": json.dumps(step.args)},
                    }
                ]
            else:
                message["content"] = step
            return {
                "id": f"chatcmpl-{n}",
                "object": "chat.completion",
                "created": 0,
                "model": "gpt-4o",
                "choices": [
                    {
                        "index": 0,
                        "message": message,
                        "finish_reason": "tool_calls" if isinstance(step, Call) else "stop",
                    }
                ],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
            }
        if self.provider == "openai-responses":
            item: dict[str, Any] = (
                {
                    "type": "function_call",
                    "id": f"fc_{n}",
                    "call_id": call_id,
                    "name": step.name,
                    "arguments": json.dumps(step.args),
                    "status": "completed",
                }
                if isinstance(step, Call)
                else {
                    "type": "message",
                    "id": f"msg_{n}",
                    "status": "completed",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": step, "annotations": []}],
                }
            )
            return {
                "id": f"resp_{n}",
                "object": "response",
                "created_at": 0,
                "model": "gpt-4o",
                "status": "completed",
                "output": [item],
                "parallel_tool_calls": True,
                "tool_choice": "auto",
                "tools": [],
                "usage": {
                    "input_tokens": 10,
                    "output_tokens": 5,
                    "total_tokens": 15,
                    "input_tokens_details": {"cached_tokens": 0},
                    "output_tokens_details": {"reasoning_tokens": 0},
                },
            }
        if self.provider == "anthropic":
            block: dict[str, Any] = (
                {"type": "tool_use", "id": f"toolu_{n}", "name": step.name, "input": step.args}
                if isinstance(step, Call)
                else {"type": "text", "text": step}
            )
            return {
                "id": f"msg_{n}",
                "type": "message",
                "role": "assistant",
                "model": "claude-sonnet-4-5",
                "content": [block],
                "stop_reason": "tool_use" if isinstance(step, Call) else "end_turn",
                "stop_sequence": None,
                "usage": {"input_tokens": 10, "output_tokens": 5},
            }
        part: dict[str, Any] = (
            {"functionCall": {"name": step.name, "args": step.args}}
            if isinstance(step, Call)
            else {"text": step}
        )
        return {
            "candidates": [
                {"content": {"role": "model", "parts": [part]}, "finishReason": "STOP", "index": 0}
            ],
            "usageMetadata": {
                "promptTokenCount": 10,
                "candidatesTokenCount": 5,
                "totalTokenCount": 15,
            },
            "modelVersion": "gemini-2.5-flash",
        }


def _anthropic_events(message: dict[str, Any]) -> str:
    """``message`` as the server-sent events of a streamed Anthropic answer."""
    events: list[dict[str, Any]] = [
        {
            "type": "message_start",
            "message": {**message, "content": [], "stop_reason": None, "usage": message["usage"]},
        }
    ]
    for index, block in enumerate(message["content"]):
        if block["type"] == "text":
            start = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": block["text"]}
        else:
            start = {**block, "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        events += [
            {"type": "content_block_start", "index": index, "content_block": start},
            {"type": "content_block_delta", "index": index, "delta": delta},
            {"type": "content_block_stop", "index": index},
        ]
    events += [
        {
            "type": "message_delta",
            "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
            "usage": {"output_tokens": message["usage"]["output_tokens"]},
        },
        {"type": "message_stop"},
    ]
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events)


def _without_cache_marks(value: Any) -> Any:
    """``value`` without ``cache_control`` keys: a marker moves to the newest block every turn
    but is not part of the cached text."""
    if isinstance(value, dict):
        return {
            k: _without_cache_marks(v)
            for k, v in value.items()  # pyright: ignore[reportUnknownVariableType]
            if k != "cache_control"
        }
    if isinstance(value, list):
        return [_without_cache_marks(v) for v in value]  # pyright: ignore[reportUnknownVariableType]
    return value


def _dump(value: Any) -> str:
    return json.dumps(_without_cache_marks(value), ensure_ascii=False, sort_keys=True)


def prefix_units(provider: str, body: dict[str, Any]) -> list[str]:
    """The request in the order a prompt cache reads it: tools, system, then the messages."""
    if provider == "openai-chat":
        return [_dump(body.get("tools")), *map(_dump, body["messages"])]
    if provider == "openai-responses":
        return [
            _dump(body.get("tools")),
            _dump(body.get("instructions")),
            *map(_dump, body["input"]),
        ]
    if provider == "anthropic":
        system = body.get("system")
        blocks = system if isinstance(system, list) else [system] if system else []
        return [_dump(body.get("tools")), *map(_dump, blocks), *map(_dump, body["messages"])]
    return [
        _dump(body.get("tools")),
        _dump(body.get("systemInstruction")),
        *map(_dump, body["contents"]),
    ]


def shared_prefix(a: list[str], b: list[str]) -> int:
    """How many leading units ``b`` repeats from ``a``."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n
