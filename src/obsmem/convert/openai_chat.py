"""OpenAI chat-completions message dicts <-> obsmem messages, losslessly.

Mapping
-------
* Roles: ``system`` and ``developer`` -> ``system``; ``user``, ``assistant`` and ``tool`` keep
  their names.
* ``content`` as a string -> one ``TextPart``; as a list -> one part per item: ``text`` ->
  ``TextPart``, ``image_url`` -> ``ImagePart`` (a ``data:`` URL decodes into ``data`` bytes and
  ``media_type``; ``detail`` kept), ``file`` -> ``FilePart`` (``file_data`` data URL decoded,
  ``filename`` kept; a ``file_id`` becomes ``url``), ``input_audio`` -> ``FilePart`` (audio bytes),
  ``refusal`` -> ``TextPart``. Items of other types travel whole in a ``DataPart`` named
  ``"openai-chat:content"``.
* Assistant ``reasoning_content`` (DeepSeek) -> ``ReasoningPart``; ``refusal`` -> ``TextPart``;
  each function ``tool_calls`` entry -> ``ToolCallPart`` with ``args`` the JSON string as sent.
* A ``tool`` message -> a ``tool`` message with one ``ToolResultPart`` whose ``content`` is the
  message content as given and whose ``tool_name`` comes from the earlier matching call.

Exactness
---------
Whatever the obsmem form does not reproduce (a ``developer`` role, ``name`` fields, a list content
holding one text item, ``content: None``, unknown keys, ...) is kept in
``metadata["openai_chat"]`` as the difference from what :func:`to_openai_chat` writes, so
``to_openai_chat(from_openai_chat(x)) == x``. OpenAI dicts have no room for obsmem ids,
timestamps or metadata, so ``from_openai_chat(to_openai_chat(m))`` gives back the roles and parts
of ``m`` with new ids.

Going out, ``DataPart`` markers are dropped (never sent to a model), as is a message left with
nothing to send; the ``"openai-chat:..."`` data parts made here are restored. Tool results held
in a non-tool message become ``tool`` messages; images and files attached to tool results follow
the tool messages in one ``user`` message (chat completions takes no images in tool messages). A
provider-run tool call (a ``ToolCallPart`` answered by a ``ToolResultPart`` in the same assistant
message) is not sent.
"""

from __future__ import annotations

import base64
import binascii
import json
import mimetypes
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any, cast

from obsmem import messages as _messages

__all__ = ["DATA_PART_PREFIX", "METADATA_KEY", "from_openai_chat", "to_openai_chat"]

METADATA_KEY = "openai_chat"
"""Key of ``Message.metadata`` / ``part.metadata`` holding what an OpenAI dict had beyond obsmem."""
DATA_PART_PREFIX = "openai-chat:"
"""Name prefix of the ``DataPart`` carrying an OpenAI item obsmem has no type for."""

_JSON = dict[str, Any]
_ABSENT = "__absent__"
_DETAILS = ("auto", "low", "high")
_AUDIO_FORMATS = {"wav": "audio/wav", "mp3": "audio/mpeg"}
_ROLES: dict[str, _messages.Role] = {
    "system": "system",
    "developer": "system",
    "user": "user",
    "assistant": "assistant",
    "tool": "tool",
}


# ---------------------------------------------------------------------------------------------
# differences: what the original had that the written form does not
# ---------------------------------------------------------------------------------------------


def _diff(original: Mapping[str, Any], written: Mapping[str, Any]) -> _JSON:
    out: _JSON = {}
    for key, value in original.items():
        if key not in written:
            out[key] = value
        elif written[key] != value:
            mine = written[key]
            if isinstance(value, dict) and isinstance(mine, dict):
                out[key] = _diff(cast(_JSON, value), cast(_JSON, mine))
            else:
                out[key] = value
    absent = [k for k in written if k not in original]
    if absent:
        out[_ABSENT] = absent
    return out


def _merge(written: _JSON, diff: Mapping[str, Any]) -> _JSON:
    out = dict(written)
    for key, value in diff.items():
        if key == _ABSENT:
            continue
        mine = out.get(key)
        if isinstance(value, dict) and isinstance(mine, dict):
            out[key] = _merge(cast(_JSON, mine), cast(_JSON, value))
        else:
            out[key] = value
    for key in cast(list[str], diff.get(_ABSENT, [])):
        out.pop(key, None)
    return out


def _oc(meta: Mapping[str, Any]) -> _JSON:
    raw = meta.get(METADATA_KEY)
    return cast(_JSON, raw) if isinstance(raw, dict) else {}


# ---------------------------------------------------------------------------------------------
# data URLs
# ---------------------------------------------------------------------------------------------


def _data_url(media_type: str, data: bytes) -> str:
    return f"data:{media_type};base64,{base64.b64encode(data).decode('ascii')}"


def _decode_data_url(url: str) -> tuple[str, bytes] | None:
    """``(media_type, bytes)`` when ``url`` is a data URL that encodes back to itself."""
    if not url.startswith("data:") or ";base64," not in url:
        return None
    media_type, payload = url[5:].split(";base64,", 1)
    if not media_type or ";" in media_type or "," in media_type:
        return None
    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        return None
    return (media_type, data) if _data_url(media_type, data) == url else None


def _b64decode(text: Any) -> bytes | None:
    if not isinstance(text, str):
        return None
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None


def _guess(name: str | None, default: str) -> str:
    guessed = mimetypes.guess_type(name)[0] if name else None
    return guessed or default


# ---------------------------------------------------------------------------------------------
# writing OpenAI dicts
# ---------------------------------------------------------------------------------------------


def _write_item(part: _messages.Part) -> _JSON | None:
    """A content item for ``part``, with its kept differences; ``None`` for no item."""
    oc = _oc(part.metadata)
    item: _JSON
    match part:
        case _messages.TextPart():
            if oc.get("type") == "refusal":
                item = {"type": "refusal", "refusal": part.text}
            else:
                item = {"type": "text", "text": part.text}
        case _messages.ImagePart():
            url = part.url if part.data is None else _data_url(part.media_type, part.data)
            image: _JSON = {"url": url}
            if part.detail is not None:
                image["detail"] = part.detail
            item = {"type": "image_url", "image_url": image}
        case _messages.FilePart():
            item = _write_file(part, oc)
        case _messages.DataPart():
            return cast(_JSON, part.data) if part.name == f"{DATA_PART_PREFIX}content" else None
        case _:
            return None
    return _merge(item, cast(_JSON, oc.get("diff", {})))


def _write_file(part: _messages.FilePart, oc: _JSON) -> _JSON:
    if oc.get("as") == "file_id" and part.url is not None:
        return {"type": "file", "file": {"file_id": part.url}}
    if part.data is None:
        name = f" {part.filename}" if part.filename else ""
        return {"type": "text", "text": f"[file{name} ({part.media_type}): {part.url}]"}
    if part.media_type.startswith("audio/") and oc.get("as") != "file":
        fmt = next((f for f, m in _AUDIO_FORMATS.items() if m == part.media_type), None)
        audio = {"data": base64.b64encode(part.data).decode("ascii")}
        audio["format"] = fmt or part.media_type.removeprefix("audio/")
        return {"type": "input_audio", "input_audio": audio}
    file: _JSON = {"file_data": _data_url(part.media_type, part.data)}
    if part.filename is not None:
        file["filename"] = part.filename
    return {"type": "file", "file": file}


def _write_args(args: dict[str, Any] | str) -> str:
    return (
        args
        if isinstance(args, str)
        else json.dumps(args, ensure_ascii=False, separators=(",", ":"))
    )


def _write_tool_call(part: _messages.ToolCallPart | _messages.DataPart) -> _JSON:
    if isinstance(part, _messages.DataPart):
        return cast(_JSON, part.data)
    call: _JSON = {
        "id": part.tool_call_id,
        "type": "function",
        "function": {"name": part.tool_name, "arguments": _write_args(part.args)},
    }
    return _merge(call, cast(_JSON, _oc(part.metadata).get("diff", {})))


def _write_tool_content(part: _messages.ToolResultPart) -> Any:
    content = part.content
    if isinstance(content, list) and all(
        isinstance(x, dict) and cast(_JSON, x).get("type") == "text"
        for x in cast(list[Any], content)
    ):
        return cast(list[Any], content)
    text = (
        ""
        if content is None
        else content
        if isinstance(content, str)
        else json.dumps(content, ensure_ascii=False)
    )
    return f"Error: {text}" if part.is_error else text


def _is_content(part: _messages.Part) -> bool:
    if isinstance(part, _messages.DataPart):
        return part.name == f"{DATA_PART_PREFIX}content"
    if isinstance(part, _messages.TextPart):
        return _oc(part.metadata).get("as") != "refusal"
    return isinstance(part, _messages.ImagePart | _messages.FilePart)


def _write_content(parts: Sequence[_messages.Part]) -> Any:
    content = [p for p in parts if _is_content(p)]
    if not content:
        return None
    if (
        len(content) == 1
        and isinstance(content[0], _messages.TextPart)
        and not _oc(content[0].metadata)
    ):
        return content[0].text
    items = [_write_item(p) for p in content]
    return [i for i in items if i is not None]


def _write_assistant(message: _messages.Message, include_reasoning: bool) -> _JSON:
    parts = message.parts
    provider_run = {p.tool_call_id for p in parts if isinstance(p, _messages.ToolResultPart)}
    out: _JSON = {"role": "assistant", "content": _write_content(parts)}
    reasoning = [p.text for p in parts if isinstance(p, _messages.ReasoningPart)]
    if reasoning and include_reasoning:
        out["reasoning_content"] = "\n\n".join(reasoning)
    refusals = [
        p.text
        for p in parts
        if isinstance(p, _messages.TextPart) and _oc(p.metadata).get("as") == "refusal"
    ]
    if refusals:
        out["refusal"] = "\n\n".join(refusals)
    calls = [
        _write_tool_call(p)
        for p in parts
        if (isinstance(p, _messages.ToolCallPart) and p.tool_call_id not in provider_run)
        or (isinstance(p, _messages.DataPart) and p.name == f"{DATA_PART_PREFIX}tool_call")
    ]
    if calls:
        out["tool_calls"] = calls
    return out


def _write_message(
    message: _messages.Message, include_reasoning: bool
) -> tuple[list[_JSON], list[_messages.Part]]:
    """The dicts for one message, and the tool-result attachments that must follow them."""
    if message.role == "assistant":
        written = [_write_assistant(message, include_reasoning)]
        return [_merge(written[0], _oc(message.metadata))], []
    out: list[_JSON] = []
    attachments: list[_messages.Part] = []
    for part in message.parts:
        if isinstance(part, _messages.ToolResultPart):
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": part.tool_call_id,
                    "content": _write_tool_content(part),
                }
            )
            attachments.extend(part.attachments)
        elif isinstance(part, _messages.ReasoningPart | _messages.ToolCallPart):
            raise ValueError(
                f"message {message.id}: a {message.role} message cannot hold a {part.kind!r} "
                "part in OpenAI chat; put it in an assistant message"
            )
    rest = [p for p in message.parts if not isinstance(p, _messages.ToolResultPart)]
    if message.role != "tool" and (any(_is_content(p) for p in rest) or not message.parts):
        out.append({"role": message.role, "content": _write_content(rest)})
    if len(out) == 1:
        out[0] = _merge(out[0], _oc(message.metadata))
    return out, attachments


def to_openai_chat(
    messages: Sequence[_messages.Message], *, include_reasoning: bool = True
) -> list[dict[str, Any]]:
    """OpenAI chat-completions message dicts for ``messages`` (see the module docstring).

    ``include_reasoning=False`` leaves reasoning out (``reasoning_content`` is a DeepSeek field;
    some providers reject it).
    """
    out: list[_JSON] = []
    pending: list[_messages.Part] = []

    def flush() -> None:
        if pending:
            items = [_write_item(p) for p in pending]
            out.append({"role": "user", "content": [i for i in items if i is not None]})
            pending.clear()

    for message in messages:
        if message.parts and all(
            isinstance(p, _messages.DataPart) and not p.name.startswith(DATA_PART_PREFIX)
            for p in message.parts
        ):
            continue
        parts = tuple(
            p
            for p in message.parts
            if not isinstance(p, _messages.DataPart) or p.name.startswith(DATA_PART_PREFIX)
        )
        written, attachments = _write_message(message.with_parts(parts), include_reasoning)
        if any(w["role"] != "tool" for w in written):
            flush()
        out.extend(written)
        pending.extend(attachments)
    flush()
    return out


# ---------------------------------------------------------------------------------------------
# reading OpenAI dicts
# ---------------------------------------------------------------------------------------------


def _with_diff(
    part: _messages.Part, item: Mapping[str, Any], extra: _JSON | None = None
) -> _messages.Part:
    """``part`` keeping whatever of ``item`` its written form does not reproduce."""
    oc: _JSON = dict(extra or {})
    meta = {**part.metadata, METADATA_KEY: oc}
    probe = _replace_meta(part, meta)
    written = (
        _write_item(probe)
        if not isinstance(part, _messages.ToolCallPart)
        else _write_tool_call(part)
    )
    diff = _diff(item, written or {})
    if diff:
        oc["diff"] = diff
    return _replace_meta(part, {**part.metadata, METADATA_KEY: oc} if oc else dict(part.metadata))


def _replace_meta(part: _messages.Part, meta: dict[str, Any]) -> _messages.Part:
    return replace(part, metadata=meta)


def _read_item(item: Mapping[str, Any]) -> _messages.Part:
    kind = item.get("type")
    if kind == "text" and isinstance(item.get("text"), str):
        return _with_diff(_messages.TextPart(text=item["text"]), item)
    if kind == "refusal" and isinstance(item.get("refusal"), str):
        return _with_diff(_messages.TextPart(text=item["refusal"]), item, {"type": "refusal"})
    if kind == "image_url" and isinstance(item.get("image_url"), dict):
        image = cast(_JSON, item["image_url"])
        url = image.get("url")
        if isinstance(url, str):
            detail = image.get("detail")
            detail = detail if detail in _DETAILS else None
            decoded = _decode_data_url(url)
            if decoded is not None and decoded[0].startswith("image/"):
                part = _messages.ImagePart(media_type=decoded[0], data=decoded[1], detail=detail)
            else:
                part = _messages.ImagePart(
                    media_type=_guess(url, "image/png"), url=url, detail=detail
                )
            return _with_diff(part, item)
    if kind == "file" and isinstance(item.get("file"), dict):
        read = _read_file(item, cast(_JSON, item["file"]))
        if read is not None:
            return read
    if kind == "input_audio" and isinstance(item.get("input_audio"), dict):
        audio = cast(_JSON, item["input_audio"])
        data = _b64decode(audio.get("data"))
        fmt = audio.get("format")
        if data is not None and isinstance(fmt, str):
            part = _messages.FilePart(media_type=_AUDIO_FORMATS.get(fmt, f"audio/{fmt}"), data=data)
            return _with_diff(part, item)
    return _messages.DataPart(name=f"{DATA_PART_PREFIX}content", data=dict(item))


def _read_file(item: Mapping[str, Any], file: _JSON) -> _messages.Part | None:
    filename = file.get("filename")
    filename = filename if isinstance(filename, str) else None
    file_data = file.get("file_data")
    if isinstance(file_data, str):
        decoded = _decode_data_url(file_data)
        if decoded is not None:
            media_type, data = decoded
        else:
            raw = _b64decode(file_data)
            if raw is None:
                return None
            media_type, data = _guess(filename, "application/octet-stream"), raw
        part = _messages.FilePart(media_type=media_type, data=data, filename=filename)
        extra = {"as": "file"} if media_type.startswith("audio/") else None
        return _with_diff(part, item, extra)
    file_id = file.get("file_id")
    if isinstance(file_id, str):
        part = _messages.FilePart(
            media_type=_guess(filename, "application/octet-stream"),
            url=file_id,
            filename=filename,
        )
        return _with_diff(part, item, {"as": "file_id"})
    return None


def _read_content(content: Any) -> list[_messages.Part]:
    if isinstance(content, str):
        return [_messages.TextPart(text=content)]
    if isinstance(content, list):
        return [
            _read_item(cast(_JSON, x))
            if isinstance(x, dict)
            else _messages.DataPart(name=f"{DATA_PART_PREFIX}content", data=x)
            for x in cast(list[Any], content)
        ]
    return []


def _read_args(arguments: str) -> dict[str, Any] | str:
    """The arguments as a JSON object when they parse as one, else the string as sent."""
    try:
        parsed = json.loads(arguments)
    except ValueError:
        return arguments
    return cast(dict[str, Any], parsed) if isinstance(parsed, dict) else arguments


def _read_tool_call(call: Any, names: dict[str, str]) -> _messages.Part:
    if isinstance(call, dict):
        c = cast(_JSON, call)
        fn = c.get("function")
        if (
            c.get("type", "function") == "function"
            and isinstance(c.get("id"), str)
            and isinstance(fn, dict)
            and isinstance(cast(_JSON, fn).get("name"), str)
            and isinstance(cast(_JSON, fn).get("arguments"), str)
        ):
            f = cast(_JSON, fn)
            names[c["id"]] = f["name"]
            part = _messages.ToolCallPart(
                tool_call_id=c["id"], tool_name=f["name"], args=_read_args(f["arguments"])
            )
            return _with_diff(part, c)
    return _messages.DataPart(name=f"{DATA_PART_PREFIX}tool_call", data=call)


def from_openai_chat(
    messages: Sequence[Mapping[str, Any]],
    *,
    thread_id: str | None = None,
    resource_id: str | None = None,
    created_at: datetime | None = None,
) -> list[_messages.Message]:
    """obsmem messages holding everything ``messages`` hold (see the module docstring).

    OpenAI dicts carry no time: every message gets ``created_at`` (default: now).
    """
    when = created_at or _messages.utcnow()
    names: dict[str, str] = {}
    out: list[_messages.Message] = []
    for index, raw in enumerate(messages):
        role_name = raw.get("role")
        role = _ROLES.get(role_name) if isinstance(role_name, str) else None
        if role is None:
            raise ValueError(
                f"messages[{index}] has role {role_name!r}; OpenAI chat messages obsmem reads "
                f"have one of {sorted(_ROLES)}"
            )
        parts: list[_messages.Part] = []
        if role == "tool":
            call_id = raw.get("tool_call_id")
            if not isinstance(call_id, str):
                raise ValueError(f"messages[{index}] is a tool message without a tool_call_id")
            parts.append(
                _messages.ToolResultPart(
                    tool_call_id=call_id,
                    tool_name=names.get(call_id, ""),
                    content=raw.get("content"),
                )
            )
        else:
            reasoning = raw.get("reasoning_content")
            if role == "assistant" and isinstance(reasoning, str):
                parts.append(_messages.ReasoningPart(text=reasoning))
            parts.extend(_read_content(raw.get("content")))
            refusal = raw.get("refusal")
            if role == "assistant" and isinstance(refusal, str):
                parts.append(
                    _messages.TextPart(text=refusal, metadata={METADATA_KEY: {"as": "refusal"}})
                )
            calls = raw.get("tool_calls")
            if role == "assistant" and isinstance(calls, list):
                parts.extend(_read_tool_call(c, names) for c in cast(list[Any], calls))
        message = _messages.Message(
            role=role,
            parts=tuple(parts),
            created_at=when,
            thread_id=thread_id,
            resource_id=resource_id,
        )
        written, _ = _write_message(message, include_reasoning=True)
        if len(written) != 1:  # pragma: no cover - one OpenAI dict always writes one dict
            raise AssertionError(f"messages[{index}] wrote {len(written)} dicts")
        diff = _diff(raw, written[0])
        if diff:
            message = replace(message, metadata={METADATA_KEY: diff})
        out.append(message)
    return out
