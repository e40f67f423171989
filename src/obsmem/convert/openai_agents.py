"""OpenAI Agents SDK input items <-> obsmem messages, losslessly.

Mapping
-------
* One obsmem message per SDK item. Message items (``{"role": ..., "content": ...}``, with or
  without ``"type": "message"``): ``system`` and ``developer`` -> ``system``, ``assistant`` ->
  ``assistant``, everything else -> ``user``. ``content`` as a string -> one ``TextPart``; as a
  list -> one part per entry: ``input_text``/``output_text``/``text`` and ``refusal`` ->
  ``TextPart``, ``input_image`` -> ``ImagePart`` (a ``data:`` URL decodes into ``data`` bytes and
  ``media_type``), ``input_file`` -> ``FilePart`` (``file_data`` decoded; a ``file_url`` or
  ``file_id`` becomes ``url``; ``filename`` kept). Entries of other types travel whole in a
  ``DataPart`` named ``"openai-agents:content"``.
* ``reasoning`` -> an ``assistant`` message with one ``ReasoningPart`` (the summary texts).
* A ``*_call`` item with a ``call_id`` (``function_call``, ``custom_tool_call``, ...) -> an
  ``assistant`` message with one ``ToolCallPart`` (``arguments`` parsed when they are a JSON
  object); a ``*_output`` item -> a ``tool`` message with one ``ToolResultPart`` named after its
  call (found in the same batch, or in ``tool_names``: a result stored in a later batch than its
  call).
* Any other item travels whole in a ``DataPart`` named ``"openai-agents:item"``.

Exactness
---------
Each message keeps the item it was read from under ``metadata["openai_agents"]["item"]``, and
:func:`to_agents_items` gives that item back as it was: ``to_agents_items(from_agents_items(x))
== x``, through the stores' JSON form too. SDK items have no room for obsmem ids, timestamps or
metadata, so ``from_agents_items(to_agents_items(m))`` gives back the roles and parts of ``m``
with new ids, except what the Responses API has no place for: reasoning made by another
framework (the API only accepts its own reasoning items) and a file known only by its URL
(written as a text line naming it, since the chat-completions models the SDK drives take no
file URL).

Going out, ``DataPart`` markers are dropped (never sent to a model), as is a message left with
nothing to send; the ``"openai-agents:..."`` data parts made here are restored. A failed tool
result's output starts with ``"Error: "``; images and files attached to tool results follow the
tool outputs in one ``user`` message.
"""

from __future__ import annotations

import base64
import copy
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, cast

from obsmem import messages as _messages

__all__ = [
    "CONTENT_DATA_PART",
    "ITEM_DATA_PART",
    "METADATA_KEY",
    "from_agents_items",
    "item_count",
    "item_dict",
    "item_role",
    "to_agents_items",
]

METADATA_KEY = "openai_agents"
"""Key of an obsmem message's ``metadata`` holding the SDK item it was read from (and of a
session's first thread's metadata naming the thread it goes on in after a clear)."""
ITEM_DATA_PART = "openai-agents:item"
"""Name of the ``DataPart`` carrying an SDK item obsmem has no type for."""
CONTENT_DATA_PART = "openai-agents:content"
"""Name of the ``DataPart`` carrying a content entry obsmem has no type for."""

_Item = dict[str, Any]
_DATA_URL = re.compile(r"^data:([^;,]+)(?:;[^,]*)?;base64,(.*)$", re.DOTALL)


# ---------------------------------------------------------------------------------------------
# SDK items -> obsmem messages
# ---------------------------------------------------------------------------------------------


def item_dict(item: Any) -> _Item:
    """An SDK item as a plain dict (the SDK hands out dicts and pydantic models)."""
    if isinstance(item, Mapping):
        return dict(cast(Mapping[str, Any], item))
    dump = getattr(item, "model_dump", None)
    if callable(dump):
        return cast(_Item, dump(exclude_unset=True, mode="json"))
    raise TypeError(f"an Agents SDK item is a dict or a pydantic model, not {type(item).__name__}")


def _decode(url: str) -> tuple[str, bytes] | None:
    m = _DATA_URL.match(url)
    if m is None:
        return None
    try:
        return m.group(1), base64.b64decode(m.group(2))
    except ValueError:
        return None


def _content_part(item: Any) -> _messages.Part:
    if isinstance(item, str):
        return _messages.TextPart(text=item)
    entry = cast(_Item, item) if isinstance(item, dict) else {}
    kind = entry.get("type")
    text = entry.get("text")
    if kind in ("input_text", "output_text", "text") and isinstance(text, str):
        return _messages.TextPart(text=text)
    if kind == "refusal" and isinstance(entry.get("refusal"), str):
        return _messages.TextPart(text=entry["refusal"])
    if kind == "input_image" and isinstance(entry.get("image_url"), str):
        url: str = entry["image_url"]
        decoded = _decode(url)
        if decoded is not None:
            return _messages.ImagePart(media_type=decoded[0], data=decoded[1])
        return _messages.ImagePart(url=url)
    if kind == "input_file":
        name = entry.get("filename") if isinstance(entry.get("filename"), str) else None
        data = entry.get("file_data")
        decoded = _decode(data) if isinstance(data, str) else None
        if decoded is not None:
            return _messages.FilePart(media_type=decoded[0], data=decoded[1], filename=name)
        ref = entry.get("file_url") or entry.get("file_id")
        if isinstance(ref, str):
            return _messages.FilePart(media_type="application/octet-stream", url=ref, filename=name)
    return _messages.DataPart(name=CONTENT_DATA_PART, data=item)


def _content_parts(content: Any) -> list[_messages.Part]:
    if isinstance(content, str):
        return [_messages.TextPart(text=content)]
    if isinstance(content, list):
        return [_content_part(c) for c in cast(list[Any], content)]
    return []


def _args(arguments: Any) -> dict[str, Any] | str:
    if isinstance(arguments, dict):
        return cast(dict[str, Any], arguments)
    if isinstance(arguments, str):
        try:
            parsed = json.loads(arguments)
        except ValueError:
            return arguments
        return cast(dict[str, Any], parsed) if isinstance(parsed, dict) else arguments
    return {}


def _message_role(role: str) -> _messages.Role:
    if role == "assistant":
        return "assistant"
    return "system" if role in ("system", "developer") else "user"


def _read_item(item: _Item) -> tuple[_messages.Role, list[_messages.Part]]:
    kind = item.get("type")
    role = item.get("role")
    call_id = item.get("call_id")
    if kind in (None, "message") and isinstance(role, str):
        return _message_role(role), _content_parts(item.get("content"))
    if kind == "reasoning":
        summary = item.get("summary")
        texts = [
            cast(_Item, s).get("text", "")
            for s in (cast(list[Any], summary) if isinstance(summary, list) else [])
            if isinstance(s, dict)
        ]
        return "assistant", [_messages.ReasoningPart(text="\n\n".join(t for t in texts if t))]
    if isinstance(kind, str) and isinstance(call_id, str):
        name = item.get("name")
        if kind.endswith("_output"):
            tool = name if isinstance(name, str) else kind.removesuffix("_output")
            return "tool", [
                _messages.ToolResultPart(
                    tool_call_id=call_id, tool_name=tool, content=item.get("output")
                )
            ]
        if kind.endswith("_call"):
            tool = name if isinstance(name, str) else kind
            raw = item.get("arguments", item.get("input", item.get("action")))
            return "assistant", [
                _messages.ToolCallPart(tool_call_id=call_id, tool_name=tool, args=_args(raw))
            ]
    return "assistant", [_messages.DataPart(name=ITEM_DATA_PART, data=item)]


def item_role(item: Any) -> _messages.Role:
    """The obsmem role an SDK item is read as."""
    return _read_item(item_dict(item))[0]


def from_agents_items(
    items: Sequence[Any],
    *,
    thread_id: str | None = None,
    resource_id: str | None = None,
    tool_names: Mapping[str, str] | None = None,
) -> list[_messages.Message]:
    """One obsmem message per Agents SDK item (the item kept in ``metadata``).

    A tool result is named after its call (an SDK output item carries only the call id). The
    call is looked up in ``items`` first, then in ``tool_names`` (call id -> tool name): give
    the names of earlier calls when a result comes in a later batch than its call (a run
    resumed after an approval). ``items`` are not changed."""
    out: list[_messages.Message] = []
    names: dict[str, str] = dict(tool_names or {})
    for raw in items:
        item = item_dict(raw)
        role, parts = _read_item(item)
        fixed: list[_messages.Part] = []
        for part in parts:
            if isinstance(part, _messages.ToolCallPart):
                names[part.tool_call_id] = part.tool_name
            elif isinstance(part, _messages.ToolResultPart) and part.tool_call_id in names:
                part = _messages.ToolResultPart(
                    tool_call_id=part.tool_call_id,
                    tool_name=names[part.tool_call_id],
                    content=part.content,
                )
            fixed.append(part)
        out.append(
            _messages.Message(
                role=role,
                parts=tuple(fixed),
                thread_id=thread_id,
                resource_id=resource_id,
                metadata={METADATA_KEY: {"item": copy.deepcopy(item)}},
            )
        )
    return out


# ---------------------------------------------------------------------------------------------
# obsmem messages -> SDK items
# ---------------------------------------------------------------------------------------------


def _data_url(media_type: str, data: bytes) -> str:
    return f"data:{media_type};base64,{base64.b64encode(data).decode('ascii')}"


def _input_content(part: _messages.Part) -> _Item | None:
    match part:
        case _messages.TextPart():
            return {"type": "input_text", "text": part.text}
        case _messages.ImagePart():
            url = _data_url(part.media_type, part.data) if part.data is not None else part.url
            return {"type": "input_image", "image_url": url, "detail": part.detail or "auto"}
        case _messages.FilePart() if part.data is not None:
            entry: _Item = {
                "type": "input_file",
                "file_data": _data_url(part.media_type, part.data),
            }
            if part.filename:
                entry["filename"] = part.filename
            return entry
        case _messages.FilePart():
            return {"type": "input_text", "text": f"[file {part.filename or ''} at {part.url}]"}
        case _messages.DataPart() if part.name == CONTENT_DATA_PART:
            return copy.deepcopy(cast(_Item, part.data))
        case _:
            return None


def _output(part: _messages.ToolResultPart) -> str:
    content = part.content
    text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
    return f"Error: {text}" if part.is_error else text


def _kept_item(message: _messages.Message) -> _Item | None:
    kept = message.metadata.get(METADATA_KEY)
    if isinstance(kept, dict):
        item = cast(_Item, kept).get("item")
        if isinstance(item, dict):
            return copy.deepcopy(cast(_Item, item))
    return None


def _write_input(role: str, parts: Sequence[_messages.Part]) -> list[_Item]:
    contents = [c for c in (_input_content(p) for p in parts) if c is not None]
    if not contents:
        return []
    if all(c.get("type") == "input_text" and set(c) == {"type", "text"} for c in contents):
        return [{"role": role, "content": "\n".join(c["text"] for c in contents)}]
    return [{"role": role, "content": contents}]


def _write_assistant(parts: Sequence[_messages.Part]) -> list[_Item]:
    out: list[_Item] = []
    text = "\n".join(p.text for p in parts if isinstance(p, _messages.TextPart))
    if text:
        out.append({"role": "assistant", "content": text})
    attachments: list[_messages.Part] = []
    for part in parts:
        match part:
            case _messages.ToolCallPart():
                args = part.args if isinstance(part.args, str) else json.dumps(part.args)
                out.append(
                    {
                        "type": "function_call",
                        "call_id": part.tool_call_id,
                        "name": part.tool_name,
                        "arguments": args,
                    }
                )
            case _messages.ToolResultPart():
                out.append(
                    {
                        "type": "function_call_output",
                        "call_id": part.tool_call_id,
                        "output": _output(part),
                    }
                )
                attachments.extend(part.attachments)
            case _messages.DataPart() if part.name == ITEM_DATA_PART:
                out.append(copy.deepcopy(cast(_Item, part.data)))
            case _:
                pass  # text is written above; other parts have no assistant item
    return out + _write_input("user", attachments)


def _write_message(message: _messages.Message) -> list[_Item]:
    kept = _kept_item(message)
    if kept is not None:
        return [kept]
    if message.role in ("system", "user"):
        parts = [p for p in message.parts if not isinstance(p, _messages.ToolResultPart)]
        results = [p for p in message.parts if isinstance(p, _messages.ToolResultPart)]
        return _write_assistant(results) + _write_input(message.role, parts)
    return _write_assistant(message.parts)


def item_count(message: _messages.Message) -> int:
    """How many SDK items :func:`to_agents_items` writes for ``message``."""
    return len(_write_message(message))


def to_agents_items(messages: Sequence[_messages.Message]) -> list[dict[str, Any]]:
    """Agents SDK input items for ``messages``: an item read from the SDK comes back as it was;
    other messages become ``system``/``user``/``assistant`` messages, ``function_call`` and
    ``function_call_output`` items (reasoning and data parts of other frameworks are left out;
    see the module docstring)."""
    return [item for message in messages for item in _write_message(message)]
