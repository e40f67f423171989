"""The Responses API (``POST /v1/responses``) through the memory step chat requests take
(docs/inspector-and-proxy.md says how): ``input`` items are read as the chat messages they
stand for (:func:`items_to_chat`), memory's context goes upstream as items again
(:func:`chat_to_items`), and the answer's ``output`` items are stored as one assistant message
(:func:`answer_of`; a stream's ``response.completed`` event, :class:`ResponsesStreamReader`).
``reasoning`` items in the input are the upstream's own state: they are not stored, and not
sent back (the model reasons again).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, cast

from .streaming import EventReader

__all__ = [
    "ResponsesStreamReader",
    "Unsupported",
    "answer_of",
    "chat_to_items",
    "items_to_chat",
    "upstream_holds_history",
]

_JSON = dict[str, Any]

_SKIPPED = frozenset({"reasoning"})
BREAKPOINT = "prompt_cache_breakpoint"
"""OpenAI's prompt-cache breakpoint on a content part, carried between the two APIs' shapes."""


class Unsupported(ValueError):
    """The request has something memory cannot read; it passes through without memory."""


def upstream_holds_history(body: Mapping[str, Any]) -> str | None:
    """Why memory stays off for a request whose conversation the upstream keeps, or None."""
    for key in ("previous_response_id", "conversation"):
        if body.get(key):
            return f"{key}: the upstream holds this conversation"
    return None


def _text_of(parts: object) -> str | None:
    """The text of content parts when they are all text (``input_text``, ``output_text``,
    ``refusal``), else None."""
    if isinstance(parts, str):
        return parts
    if not isinstance(parts, list):
        return None
    texts: list[str] = []
    for part in cast(list[Any], parts):
        if not isinstance(part, Mapping):
            return None
        p = cast(Mapping[str, Any], part)
        kind = p.get("type")
        if BREAKPOINT in p:  # a part of the client's that a cache breakpoint ends: kept as one
            return None
        if kind in ("input_text", "output_text", "text") and isinstance(p.get("text"), str):
            texts.append(p["text"])
        elif kind == "refusal" and isinstance(p.get("refusal"), str):
            texts.append(p["refusal"])
        else:
            return None
    return "".join(texts)


def _chat_content(parts: object) -> str | list[_JSON]:
    """A message's content as chat content: a string, or text and image parts."""
    text = _text_of(parts)
    if text is not None:
        return text
    if not isinstance(parts, list):
        raise Unsupported("a message content that is neither a string nor a list of parts")
    out: list[_JSON] = []
    for part in cast(list[Any], parts):
        p = cast(Mapping[str, Any], part) if isinstance(part, Mapping) else {}
        kind = p.get("type")
        if kind in ("input_text", "output_text", "text"):
            out.append(_kept_breakpoint(p, {"type": "text", "text": str(p.get("text", ""))}))
        elif kind == "input_image" and isinstance(p.get("image_url"), str):
            image: _JSON = {"url": p["image_url"]}
            if p.get("detail"):
                image["detail"] = p["detail"]
            out.append(_kept_breakpoint(p, {"type": "image_url", "image_url": image}))
        else:
            raise Unsupported(f"a message part of type {kind!r}")
    return out


def _kept_breakpoint(source: Mapping[str, Any], part: _JSON) -> _JSON:
    """``part`` with ``source``'s prompt-cache breakpoint (OpenAI's, the same field on both
    APIs), when it has one."""
    if BREAKPOINT in source:
        part[BREAKPOINT] = source[BREAKPOINT]
    return part


def _output_text(output: object) -> str:
    text = _text_of(output)
    return text if text is not None else json.dumps(output)


def _chat_call(item: Mapping[str, Any], call_id: str) -> _JSON:
    """A ``function_call`` item as a chat tool call."""
    function = {"name": str(item.get("name", "")), "arguments": str(item.get("arguments", ""))}
    return {"id": call_id, "type": "function", "function": function}


def items_to_chat(value: object) -> list[_JSON]:
    """A Responses ``input`` (a string, or a list of items) as chat messages: messages by role,
    consecutive ``function_call`` items as one assistant message's ``tool_calls`` (after its
    text), ``function_call_output`` items as ``tool`` messages."""
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    if not isinstance(value, list):
        raise Unsupported("an input that is neither a string nor a list of items")
    out: list[_JSON] = []
    for raw in cast(list[Any], value):
        if not isinstance(raw, Mapping):
            raise Unsupported("an input item that is not an object")
        item = cast(Mapping[str, Any], raw)
        kind = item.get("type", "message")
        if kind in _SKIPPED:
            continue
        if kind == "message" and isinstance(item.get("role"), str):
            out.append({"role": item["role"], "content": _chat_content(item.get("content", ""))})
        elif kind == "function_call":
            call = _chat_call(item, str(item.get("call_id") or item.get("id") or ""))
            last = out[-1] if out else None
            if last is not None and last["role"] == "assistant":
                last.setdefault("tool_calls", []).append(call)
            else:
                out.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": str(item.get("call_id", "")),
                    "content": _output_text(item.get("output", "")),
                }
            )
        else:
            raise Unsupported(f"an input item of type {kind!r}")
    return out


def _input_content(content: object) -> str | list[_JSON]:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return "" if content is None else str(content)
    out: list[_JSON] = []
    for part in cast(list[Any], content):
        p = cast(Mapping[str, Any], part) if isinstance(part, Mapping) else {}
        if p.get("type") == "image_url":
            image = p.get("image_url")
            url = cast(Mapping[str, Any], image).get("url") if isinstance(image, Mapping) else image
            out.append(_kept_breakpoint(p, {"type": "input_image", "image_url": str(url)}))
        else:
            out.append(_kept_breakpoint(p, {"type": "input_text", "text": str(p.get("text", ""))}))
    return out


def chat_to_items(messages: Sequence[Mapping[str, Any]]) -> list[_JSON]:
    """Chat messages as Responses ``input`` items (the inverse of :func:`items_to_chat`)."""
    items: list[_JSON] = []
    for message in messages:
        role = message.get("role")
        if role == "tool":
            output = message.get("content")
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": str(message.get("tool_call_id", "")),
                    "output": output if isinstance(output, str) else json.dumps(output),
                }
            )
            continue
        content = message.get("content")
        if role != "assistant" or content:
            items.append({"role": role, "content": _input_content(content)})
        for raw in cast(list[Any], message.get("tool_calls") or []):
            call = cast(Mapping[str, Any], raw)
            function = cast(Mapping[str, Any], call.get("function") or {})
            items.append(
                {
                    "type": "function_call",
                    "call_id": str(call.get("id", "")),
                    "name": str(function.get("name", "")),
                    "arguments": str(function.get("arguments", "")),
                }
            )
    return items


def answer_of(response: object) -> _JSON | None:
    """A Responses answer (the response object) as one chat assistant message: its output text
    and function calls; None when it has neither."""
    if not isinstance(response, Mapping):
        return None
    output = cast(Mapping[str, Any], response).get("output")
    if not isinstance(output, list):
        return None
    texts: list[str] = []
    calls: list[_JSON] = []
    for raw in cast(list[Any], output):
        item = cast(Mapping[str, Any], raw) if isinstance(raw, Mapping) else {}
        if item.get("type") == "message":
            text = _text_of(item.get("content"))
            if text:
                texts.append(text)
        elif item.get("type") == "function_call":
            calls.append(_chat_call(item, str(item.get("call_id", ""))))
    if not texts and not calls:
        return None
    answer: _JSON = {"role": "assistant", "content": "\n\n".join(texts) if texts else None}
    if calls:
        answer["tool_calls"] = calls
    return answer


class ResponsesStreamReader(EventReader):
    """A streamed Responses answer, read on the side while its bytes pass through: the final
    response from the ``response.completed`` (or ``response.incomplete``) event."""

    def __init__(self) -> None:
        super().__init__()
        self._response: object = None

    def event(self, event: _JSON) -> None:
        if event.get("type") in ("response.completed", "response.incomplete"):
            self._response = event.get("response")

    def message(self) -> _JSON | None:
        return answer_of(self._response)
