"""What a context looks like in each provider's request shape, and whether the provider would
accept its tool traffic: OpenAI chat completions, OpenAI Responses and Anthropic Messages.

The mapping is pydantic-ai's own (the models' message mappers, called without any network), so
the check sees exactly what would be sent.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from pydantic_ai.models import ModelRequestParameters
from pydantic_ai.models.anthropic import AnthropicModel
from pydantic_ai.models.openai import OpenAIChatModel, OpenAIResponsesModel
from pydantic_ai.providers.anthropic import AnthropicProvider
from pydantic_ai.providers.openai import OpenAIProvider

from obsmem.convert import to_pydantic_ai
from obsmem.messages import Message

PROVIDERS = ("openai-chat", "openai-responses", "anthropic")


def _get(item: Any, name: str) -> Any:
    return item.get(name) if isinstance(item, dict) else getattr(item, name, None)


async def unpaired_calls(messages: Sequence[Message], provider: str) -> list[str]:
    """The tool-call ids that ``provider`` would see without their result (empty: accepted)."""
    history = to_pydantic_ai(messages)
    params = ModelRequestParameters()
    if provider == "openai-chat":
        chat = _models().chat
        mapped: list[Any] = await chat._map_messages(history, params)  # pyright: ignore[reportPrivateUsage]
        return _openai_chat(mapped)
    if provider == "openai-responses":
        responses = _models().responses
        _, items = await responses._map_messages(history, {}, params)  # pyright: ignore[reportPrivateUsage]
        return _responses(list(items))
    anthropic = _models().anthropic
    _, turns = await anthropic._map_message(history, params, {})  # pyright: ignore[reportPrivateUsage]
    return _anthropic(list(turns))


class _Models:
    """The three providers' models, whose message mappers the check calls (no request is made)."""

    def __init__(self) -> None:
        self.chat = OpenAIChatModel("gpt-4o", provider=OpenAIProvider(api_key="test"))
        self.responses = OpenAIResponsesModel("gpt-4o", provider=OpenAIProvider(api_key="test"))
        self.anthropic = AnthropicModel(
            "claude-sonnet-4-5", provider=AnthropicProvider(api_key="test")
        )


@functools.cache
def _models() -> _Models:
    """Made once: building a provider (its HTTP client) costs more than mapping a request."""
    return _Models()


def _openai_chat(messages: list[Any]) -> list[str]:
    """Each assistant message's tool calls must be answered by the tool messages right after."""
    missing: list[str] = []
    for i, message in enumerate(messages):
        calls = _get(message, "tool_calls") or []
        if _get(message, "role") != "assistant" or not calls:
            continue
        answered: set[str] = set()
        for later in messages[i + 1 :]:
            if _get(later, "role") != "tool":
                break
            answered.add(_get(later, "tool_call_id"))
        missing += [_get(c, "id") for c in calls if _get(c, "id") not in answered]
    return missing


def _responses(items: list[Any]) -> list[str]:
    """Every function call item needs a function call output item with its call id."""
    calls = [_get(i, "call_id") for i in items if _get(i, "type") == "function_call"]
    outputs = {_get(i, "call_id") for i in items if _get(i, "type") == "function_call_output"}
    return [c for c in calls if c not in outputs]


def _blocks(message: Any) -> list[Any]:
    content = _get(message, "content")
    return list(content) if isinstance(content, list) else []


def _anthropic(messages: list[Any]) -> list[str]:
    """Each assistant turn's tool_use blocks must be answered by tool_result blocks in the user
    turn that comes right after it."""
    missing: list[str] = []
    for i, message in enumerate(messages):
        uses = [_get(b, "id") for b in _blocks(message) if _get(b, "type") == "tool_use"]
        if _get(message, "role") != "assistant" or not uses:
            continue
        following = messages[i + 1] if i + 1 < len(messages) else None
        answered = {
            _get(b, "tool_use_id")
            for b in (_blocks(following) if following is not None else [])
            if _get(b, "type") == "tool_result"
        }
        missing += [u for u in uses if u not in answered]
    return missing
