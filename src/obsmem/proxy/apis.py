"""The endpoints the proxy gives memory: how each one's requests carry the conversation and its
answers carry the reply (:data:`CHAT` for ``/v1/chat/completions``, :data:`RESPONSES` for
``/v1/responses``). Both go through the same memory step, on chat messages."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast

from .responses import (
    ResponsesStreamReader,
    answer_of,
    chat_to_items,
    items_to_chat,
    upstream_holds_history,
)
from .streaming import EventReader, StreamAssembler

__all__ = ["CHAT", "RESPONSES", "Api"]


def _chat_messages(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    raw = body.get("messages")
    if not isinstance(raw, list):
        raise ValueError("the request has no messages list")
    return cast(list[dict[str, Any]], raw)


def _chat_answer(data: Any) -> Mapping[str, Any] | None:
    return cast(Mapping[str, Any], data["choices"][0]["message"])


@dataclass(frozen=True, slots=True)
class Api:
    """How one endpoint's requests carry the conversation and its answers carry the reply."""

    messages_of: Callable[[Mapping[str, Any]], list[dict[str, Any]]]
    """The client's messages, as chat messages."""
    with_messages: Callable[[Mapping[str, Any], list[dict[str, Any]]], dict[str, Any]]
    """The request with memory's chat messages in place of the client's."""
    answer_of: Callable[[Any], Mapping[str, Any] | None]
    """The answer of a reply body, as a chat assistant message."""
    reader: Callable[[], EventReader]
    memory_off: Callable[[Mapping[str, Any]], str | None] = lambda _: None
    """Why memory stays off for a request (it passes through unchanged), or None."""


CHAT = Api(
    messages_of=_chat_messages,
    with_messages=lambda body, messages: {**body, "messages": messages},
    answer_of=_chat_answer,
    reader=StreamAssembler,
)
RESPONSES = Api(
    messages_of=lambda body: items_to_chat(body.get("input")),
    with_messages=lambda body, messages: {**body, "input": chat_to_items(messages)},
    answer_of=answer_of,
    reader=ResponsesStreamReader,
    memory_off=upstream_holds_history,
)
