"""LangChain messages <-> obsmem messages.

:func:`from_langchain` reads LangChain ``BaseMessage`` s (as LangGraph's state, ``create_agent``
and a chat model hold them) into obsmem messages; :func:`to_langchain` writes them back.

* Both directions are lossless for messages read from LangChain: each keeps the LangChain
  message it came from (``message_to_dict``) under ``metadata["langchain"]``
  (:data:`METADATA_KEY`), and comes back exactly as it was.
* What a message says is also in its parts, for memory and every other front door: text,
  images (``image_url`` and ``image`` blocks, base64 data URLs decoded), reasoning (``reasoning``
  and Anthropic's ``thinking`` blocks), tool calls (``tool_calls`` and ``invalid_tool_calls``,
  which ``create_agent`` answers with an error) and tool results (``ToolMessage``, named after
  their call). A content block obsmem has no type for becomes a ``"langchain:content"``
  :class:`~obsmem.messages.DataPart`; a part whose block cannot be written again from its
  fields keeps the block in its own ``metadata["langchain"]``. So a message that lost its kept
  LangChain message still sends what it said, those blocks included.
* Messages of other frameworks become System/Human/AI/Tool messages; their reasoning and
  ``data-om-*`` parts are left out (a provider only takes its own reasoning back).
* ``thread=``: a message with an id is stored under ``lc-<thread>-<id>`` (:func:`stored_id`), so
  storing it again is a no-op and the same LangChain message is the same obsmem message in every
  process.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, cast

from obsmem import messages as _messages
from obsmem.errors import MissingExtraError

try:
    from langchain_core.messages import (
        AIMessage,
        BaseMessage,
        HumanMessage,
        SystemMessage,
        ToolMessage,
        message_to_dict,
        messages_from_dict,
    )
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise MissingExtraError(
        "obsmem.convert.langchain", "langgraph", package="langchain-core"
    ) from exc

__all__ = ["CONTENT_DATA", "METADATA_KEY", "from_langchain", "stored_id", "to_langchain"]

METADATA_KEY = "langchain"
"""Key of an obsmem message's ``metadata`` holding the LangChain message it was read from (and
of a part's ``metadata`` holding the content block it was read from)."""

CONTENT_DATA = "langchain:content"
"""Name of the data part carrying a LangChain content block obsmem has no type for."""

_Item = dict[str, Any]
_DETAILS = ("auto", "low", "high")
Block = str | dict[Any, Any]


def stored_id(thread: str, message_id: str) -> str:
    """The obsmem id of the LangChain message ``message_id`` in ``thread``."""
    return f"lc-{thread}-{message_id}"


# -- LangChain -> obsmem ---------------------------------------------------------------------------


def _image(url: str) -> _messages.ImagePart:
    if url.startswith("data:") and ";base64," in url:
        head, data = url.split(";base64,", 1)
        try:
            return _messages.ImagePart(
                media_type=head.removeprefix("data:"), data=base64.b64decode(data)
            )
        except ValueError:
            pass
    return _messages.ImagePart(url=url)


def _read_block(block: Any) -> _messages.Part:
    if isinstance(block, str):
        return _messages.TextPart(text=block)
    entry = cast(_Item, block) if isinstance(block, dict) else {}
    kind = entry.get("type")
    if kind == "text" and isinstance(entry.get("text"), str):
        return _messages.TextPart(text=entry["text"])
    if kind in ("reasoning", "thinking"):
        text = entry.get("reasoning", entry.get("thinking", ""))
        signature = entry.get("signature")
        return _messages.ReasoningPart(
            text=text if isinstance(text, str) else "",
            signature=signature if isinstance(signature, str) else None,
        )
    if kind == "image_url":
        image = entry.get("image_url")
        inner = cast(_Item, image) if isinstance(image, dict) else {"url": image}
        if isinstance(url := inner.get("url"), str):
            detail = inner.get("detail")
            return replace(_image(url), detail=detail if detail in _DETAILS else None)
    if kind == "image" and isinstance(entry.get("url"), str):
        return _messages.ImagePart(url=entry["url"])
    return _messages.DataPart(name=CONTENT_DATA, data=block)


def _part(block: Any) -> _messages.Part:
    """The part for a content block; the block kept in the part's metadata when writing the
    part again would not give it back."""
    part = _read_block(block)
    if isinstance(part, _messages.DataPart) or _block_of(part) == block:
        return part
    return replace(part, metadata={METADATA_KEY: block})


def _parts(content: Any) -> list[_messages.Part]:
    if isinstance(content, str):
        return [_messages.TextPart(text=content)] if content else []
    if isinstance(content, list):
        return [_part(b) for b in cast(list[Any], content)]
    return []


def _call_parts(message: AIMessage, names: dict[str, str]) -> list[_messages.Part]:
    """The tool calls of an AI message (invalid ones too: ``create_agent`` answers them with an
    error); a call without an id gets one from the message's id and its position."""
    parts: list[_messages.Part] = []
    for index, call in enumerate(message.tool_calls):
        call_id = call.get("id") or f"call-{message.id or 'lc'}-{index}"
        names[call_id] = call["name"]
        parts.append(
            _messages.ToolCallPart(tool_call_id=call_id, tool_name=call["name"], args=call["args"])
        )
    for bad in message.invalid_tool_calls:
        if bad.get("id"):
            call_id, name = str(bad["id"]), bad.get("name") or "unknown"
            names[call_id] = name
            parts.append(
                _messages.ToolCallPart(
                    tool_call_id=call_id, tool_name=name, args=bad.get("args") or ""
                )
            )
    return parts


def _read(message: BaseMessage, names: dict[str, str]) -> _messages.Message:
    kept = {METADATA_KEY: {"message": message_to_dict(message)}}
    if isinstance(message, AIMessage):
        parts = [*_parts(message.content), *_call_parts(message, names)]
        return _messages.Message(role="assistant", parts=tuple(parts), metadata=kept)
    if isinstance(message, ToolMessage):
        result = _messages.ToolResultPart(
            tool_call_id=message.tool_call_id,
            tool_name=message.name or names.get(message.tool_call_id, ""),
            content=message.content,
            is_error=message.status == "error",
        )
        return _messages.Message(role="tool", parts=(result,), metadata=kept)
    role = "system" if isinstance(message, SystemMessage) else "user"
    return _messages.Message(role=role, parts=tuple(_parts(message.content)), metadata=kept)


def from_langchain(
    messages: Sequence[BaseMessage],
    *,
    thread: str | None = None,
    tool_names: Mapping[str, str] | None = None,
) -> list[_messages.Message]:
    """One obsmem message per LangChain message (the original kept in ``metadata``).

    ``thread``: a message with an id is stored under ``lc-<thread>-<id>``, so storing it again
    is a no-op. ``tool_names``: tool names by call id, for results whose message has no name and
    whose call is not among ``messages`` (a result stored in a later batch)."""
    names = dict(tool_names or {})
    out: list[_messages.Message] = []
    for message in messages:
        read = _read(message, names)
        if thread is not None and message.id:
            read = replace(read, id=stored_id(thread, message.id))
        out.append(read)
    return out


# -- obsmem -> LangChain ---------------------------------------------------------------------------


def _image_url(part: _messages.ImagePart) -> str:
    if part.data is not None:
        return f"data:{part.media_type};base64,{base64.b64encode(part.data).decode()}"
    return part.url or ""


def _block_of(part: _messages.Part) -> Block | None:
    """The content block for ``part`` (None: it sends nothing)."""
    kept = part.metadata.get(METADATA_KEY)
    if isinstance(kept, str | dict):
        return cast(Block, kept)
    if isinstance(part, _messages.TextPart):
        return {"type": "text", "text": part.text}
    if isinstance(part, _messages.ImagePart):
        image: _Item = {"url": _image_url(part)}
        if part.detail is not None:
            image["detail"] = part.detail
        return {"type": "image_url", "image_url": image}
    if isinstance(part, _messages.FilePart):
        name = part.filename or part.url or "attachment"
        return {"type": "text", "text": f"[file {name} ({part.media_type})]"}
    if isinstance(part, _messages.DataPart) and part.name == CONTENT_DATA:
        return cast(Block, part.data)
    return None  # reasoning of another framework, data-om-* markers


def _content(parts: Sequence[_messages.Part]) -> str | list[Block]:
    blocks = [b for b in (_block_of(p) for p in parts) if b is not None]
    texts = [
        cast(_Item, b)["text"] for b in blocks if isinstance(b, dict) and b.get("type") == "text"
    ]
    plain = all(isinstance(b, dict) and set(b) == {"type", "text"} for b in blocks)
    if plain and len(texts) == len(blocks) and all(isinstance(t, str) for t in texts):
        return "\n".join(cast(list[str], texts))
    return blocks


def _tool_args(args: dict[str, Any] | str) -> dict[str, Any]:
    if isinstance(args, dict):
        return args
    try:
        parsed = json.loads(args)
    except ValueError:
        return {"input": args}
    return cast(dict[str, Any], parsed) if isinstance(parsed, dict) else {"input": args}


def _tool_message(part: _messages.ToolResultPart) -> ToolMessage:
    content = part.content
    body: str | list[Block]
    if isinstance(content, str):
        body = content
    elif isinstance(content, list) and all(
        isinstance(b, str | dict) for b in cast(list[Any], content)
    ):
        body = cast(list[Block], content)
    else:
        body = json.dumps(content, ensure_ascii=False)
    if part.attachments:
        blocks: list[Block] = [{"type": "text", "text": body}] if isinstance(body, str) else body
        body = [*blocks, *(b for b in map(_block_of, part.attachments) if b is not None)]
    return ToolMessage(
        content=body,
        tool_call_id=part.tool_call_id,
        name=part.tool_name or None,
        status="error" if part.is_error else "success",
    )


def _kept(message: _messages.Message) -> BaseMessage | None:
    kept = message.metadata.get(METADATA_KEY)
    if isinstance(kept, dict) and isinstance(cast(_Item, kept).get("message"), dict):
        return messages_from_dict([cast(_Item, kept)["message"]])[0]
    return None


def _write(message: _messages.Message) -> list[BaseMessage]:
    kept = _kept(message)
    if kept is not None:
        return [kept]
    parts = message.parts
    if message.role == "system":
        return [SystemMessage(content=_content(parts))]
    if message.role == "user":
        content = _content(parts)
        return [HumanMessage(content=content)] if content else []
    results = [p for p in parts if isinstance(p, _messages.ToolResultPart)]
    if message.role == "tool":
        return [_tool_message(p) for p in results]
    calls = [
        {"name": p.tool_name, "args": _tool_args(p.args), "id": p.tool_call_id, "type": "tool_call"}
        for p in parts
        if isinstance(p, _messages.ToolCallPart)
    ]
    shown = [
        p for p in parts if not isinstance(p, _messages.ToolCallPart | _messages.ToolResultPart)
    ]
    out: list[BaseMessage] = [AIMessage(content=_content(shown), tool_calls=calls)]
    return [*out, *(_tool_message(p) for p in results)]


def to_langchain(messages: Sequence[_messages.Message]) -> list[BaseMessage]:
    """LangChain messages for ``messages``: a message read from LangChain comes back as it was;
    others become System/Human/AI/Tool messages (reasoning of other frameworks and ``data-om-*``
    parts left out)."""
    return [m for message in messages for m in _write(message)]
