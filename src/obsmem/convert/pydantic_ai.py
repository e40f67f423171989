"""pydantic-ai message lists <-> obsmem messages, losslessly.

Mapping
-------
* A ``ModelResponse`` becomes one ``assistant`` message: ``TextPart`` -> ``TextPart``,
  ``ThinkingPart`` -> ``ReasoningPart`` (signature kept), ``ToolCallPart`` -> ``ToolCallPart``,
  ``FilePart`` -> ``ImagePart``/``FilePart``. A native (provider-run) tool call and its return stay
  in the assistant message as a ``ToolCallPart`` and a ``ToolResultPart``.
* A ``ModelRequest`` becomes one obsmem message per request part: ``SystemPromptPart`` ->
  ``system``, ``UserPromptPart`` -> ``user`` (a list content becomes one obsmem part per item),
  ``ToolReturnPart`` -> ``tool`` with a ``ToolResultPart`` (``is_error`` for the ``failed`` and
  ``retried`` outcomes, attachments for the files in its content), ``RetryFeedbackPart`` ->
  ``user``. Going back, consecutive non-assistant messages merge into one ``ModelRequest``, in
  order; a message that began a request in pydantic-ai begins one again.
* Request parts and content items obsmem has no type for (instruction deltas, cache points,
  uploaded files, compaction, ...) travel whole in a ``DataPart`` named ``"pydantic-ai:<kind>"``.

Exactness
---------
Everything pydantic-ai holds that the obsmem fields do not is kept under ``metadata["pydantic_ai"]``
on the message (``"request"``/``"response"``: message fields, ``"part"``: request-part fields)
and on the parts (part and content-item fields), only where it differs from what obsmem would
write anyway. ``to_pydantic_ai(from_pydantic_ai(x))`` has the same
``ModelMessagesTypeAdapter`` JSON form as ``x``: the standard pydantic-ai's own persistence meets.

A message obsmem made (no ``metadata["pydantic_ai"]``) carries its id, thread, resource, seq,
metadata and part fields pydantic-ai has no place for in the pydantic-ai message's ``metadata``
under ``"obsmem"`` (never sent to a model), so ``from_pydantic_ai(to_pydantic_ai(m)) == m``.

``DataPart`` markers (``data-om-*`` and the like) are never sent to a model: ``to_pydantic_ai``
drops them, and drops a message left with nothing to send. The ``"pydantic-ai:<kind>"`` data
parts made here are the exception: they are restored.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any, cast

import pydantic_core
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter

from obsmem import messages as _messages
from obsmem.convert._pydantic_ai_parts import (
    DATA_PART_PREFIX,
    METADATA_KEY,
    ROLE_PART_KIND,
    JSONDict,
    dt_json,
    field_defaults,
    kept_fields,
    parse_dt,
    read_request_part,
    read_response_part,
    strip_meta,
    write_content_item,
    write_response_part,
    write_tool_return,
)

__all__ = ["DATA_PART_PREFIX", "ENVELOPE_KEY", "METADATA_KEY", "from_pydantic_ai", "to_pydantic_ai"]

ENVELOPE_KEY = "obsmem"
"""Key of a pydantic-ai message's ``metadata`` holding what obsmem had beyond pydantic-ai."""

# Fields of an obsmem part that the pydantic-ai form carries; the rest travel in the envelope.
_CARRIED: dict[str, frozenset[str]] = {
    "text": frozenset({"kind", "text"}),
    "image": frozenset({"kind", "media_type", "data", "url", "detail"}),
    "file": frozenset({"kind", "media_type", "data", "url"}),
    "tool-call": frozenset({"kind", "tool_call_id", "tool_name", "args"}),
    "tool-result": frozenset({"kind", "tool_call_id", "tool_name", "content", "is_error"}),
    "reasoning": frozenset({"kind", "text", "signature"}),
    "data": frozenset({"kind", "name", "data"}),
}

# ---------------------------------------------------------------------------------------------
# the envelope: what an obsmem-made message keeps inside the pydantic-ai message
# ---------------------------------------------------------------------------------------------


def _part_extras(part: _messages.Part) -> JSONDict | None:
    raw = _messages.part_to_dict(part)
    carried = _CARRIED[part.kind]
    if isinstance(part, _messages.FilePart) and part.media_type.startswith("image/"):
        carried = carried - {"kind"}
    extras = {k: v for k, v in raw.items() if k not in carried}
    if isinstance(part, _messages.ToolResultPart):
        extras.pop("attachments", None)
        atts = [_part_extras(a) for a in part.attachments]
        if any(atts):
            extras["attachments"] = atts
    return extras or None


def _apply_extras(part: _messages.Part, extras: JSONDict | None) -> _messages.Part:
    if not extras:
        return part
    raw = _messages.part_to_dict(part)
    raw.pop("metadata", None)
    att_extras = cast(list[JSONDict | None], extras.get("attachments", []))
    raw.update({k: v for k, v in extras.items() if k != "attachments"})
    if att_extras:
        raw["attachments"] = [
            _messages.part_to_dict(_apply_extras(_messages.part_from_dict(a), e))
            for a, e in zip(raw["attachments"], att_extras, strict=True)
        ]
    return _messages.part_from_dict(raw)


def _envelope(message: _messages.Message, sendable: Sequence[_messages.Part]) -> JSONDict:
    env: JSONDict = {"id": message.id}
    for key, value in (
        ("thread_id", message.thread_id),
        ("resource_id", message.resource_id),
        ("seq", message.seq),
    ):
        if value is not None:
            env[key] = value
    if message.metadata:
        env["metadata"] = message.metadata
    extras = [_part_extras(p) for p in sendable]
    if any(extras):
        env["parts"] = extras
    return env


def _from_envelope(
    env: JSONDict,
    role: _messages.Role,
    parts: Sequence[_messages.Part],
    created_at: datetime,
    thread_id: str | None,
    resource_id: str | None,
) -> _messages.Message:
    extras = cast(list[JSONDict | None], env.get("parts") or [None] * len(parts))
    if len(extras) != len(parts):
        raise ValueError(
            f"message {env.get('id')!r}: its obsmem envelope describes {len(extras)} parts but the "
            f"pydantic-ai message holds {len(parts)}; was it edited after to_pydantic_ai?"
        )
    restored = tuple(_apply_extras(strip_meta(p), e) for p, e in zip(parts, extras, strict=True))
    return _messages.Message(
        id=env["id"],
        role=cast(_messages.Role, env.get("role", role)),
        parts=restored,
        created_at=created_at,
        thread_id=thread_id if thread_id is not None else env.get("thread_id"),
        resource_id=resource_id if resource_id is not None else env.get("resource_id"),
        metadata=dict(env.get("metadata") or {}),
        seq=env.get("seq"),
    )


def _own_parts(env: JSONDict, present: int) -> int:
    """How many of a response's ``present`` parts its envelope's message has: pydantic-ai merges
    consecutive responses that no model sent into the first, keeping only its metadata, so the
    parts past that count came from the responses after it."""
    count = env.get("n")
    if not isinstance(count, int):
        extras = env.get("parts")
        count = len(cast(list[Any], extras)) if isinstance(extras, list) else present
    return min(count, present)


def _pop_envelope(dumped: JSONDict) -> Any:
    meta = dumped.get("metadata")
    if not isinstance(meta, dict) or ENVELOPE_KEY not in meta:
        return None
    rest = {k: v for k, v in cast(JSONDict, meta).items() if k != ENVELOPE_KEY}
    dumped["metadata"] = rest or None
    return cast(JSONDict, meta)[ENVELOPE_KEY]


# ---------------------------------------------------------------------------------------------
# from pydantic-ai
# ---------------------------------------------------------------------------------------------


def from_pydantic_ai(
    messages: Sequence[ModelMessage],
    *,
    thread_id: str | None = None,
    resource_id: str | None = None,
) -> list[_messages.Message]:
    """obsmem messages holding everything ``messages`` hold (see the module docstring)."""
    originals = list(messages)
    dumped = cast(list[JSONDict], ModelMessagesTypeAdapter.dump_python(originals, mode="json"))
    out: list[_messages.Message] = []
    for original, md in zip(originals, dumped, strict=True):
        env = _pop_envelope(md)
        part_classes = [type(p) for p in original.parts]
        if md["kind"] == "response":
            created_at = parse_dt(md.get("timestamp")) or _messages.utcnow()
            parts = [
                read_response_part(p, c) for p, c in zip(md["parts"], part_classes, strict=True)
            ]
            if isinstance(env, dict):
                env_d = cast(JSONDict, env)
                own = _own_parts(env_d, len(parts))
                out.append(
                    _from_envelope(
                        env_d, "assistant", parts[:own], created_at, thread_id, resource_id
                    )
                )
                if own < len(parts):  # merged in by pydantic-ai: the later responses' parts
                    out.append(
                        _messages.Message(
                            role="assistant",
                            parts=tuple(parts[own:]),
                            created_at=created_at,
                            thread_id=thread_id,
                            resource_id=resource_id,
                        )
                    )
                continue
            written = {"timestamp": dt_json(created_at), "kind": "response"}
            kept = kept_fields(
                md, written, field_defaults(type(original)), skip=frozenset({"parts"})
            )
            out.append(
                _messages.Message(
                    role="assistant",
                    parts=tuple(parts),
                    created_at=created_at,
                    thread_id=thread_id,
                    resource_id=resource_id,
                    metadata={METADATA_KEY: {"response": kept}},
                )
            )
            continue
        previous = out[-1].created_at if out else None
        out.extend(
            _read_request(md, part_classes, type(original), env, previous, thread_id, resource_id)
        )
    return out


def _read_request(
    md: JSONDict,
    part_classes: list[type],
    cls: type,
    env: Any,
    previous: datetime | None,
    thread_id: str | None,
    resource_id: str | None,
) -> Iterator[_messages.Message]:
    request_time = parse_dt(md.get("timestamp"))
    kept_request = kept_fields(
        md, {"kind": "request"}, field_defaults(cls), skip=frozenset({"parts"})
    )
    dumped_parts = cast(list[JSONDict], md["parts"])
    entries: list[Any] = list(cast(list[Any], env)) if isinstance(env, list) else []
    entries += [None] * max(0, len(dumped_parts) - _count_parts(entries))
    if not dumped_parts and not entries:
        entries = [None]
    index = 0
    last = request_time or previous or _messages.utcnow()
    for position, entry in enumerate(entries):
        if isinstance(entry, dict):
            entry_d = cast(JSONDict, entry)
            count = cast(int, entry_d.get("n", 1))
            parts: list[_messages.Part] = []
            role: _messages.Role = "user"
            created_at: datetime | None = None
            for dumped, klass in zip(
                dumped_parts[index : index + count],
                part_classes[index : index + count],
                strict=True,
            ):
                when = parse_dt(dumped.get("timestamp")) or last
                created_at = created_at or when
                role, new_parts, _ = read_request_part(dumped, klass, when)
                parts.extend(new_parts)
            index += count
            last = created_at or last
            yield _from_envelope(entry_d, role, parts, last, thread_id, resource_id)
            continue
        meta: JSONDict = {}
        if position == 0:
            meta["request"] = kept_request
        if index >= len(dumped_parts):  # an empty request
            yield _messages.Message(
                role="user",
                parts=(),
                created_at=last,
                thread_id=thread_id,
                resource_id=resource_id,
                metadata={METADATA_KEY: meta},
            )
            continue
        dumped = dumped_parts[index]
        when = parse_dt(dumped.get("timestamp")) or last
        role, parts, kept_part = read_request_part(dumped, part_classes[index], when)
        index += 1
        last = when
        meta["part"] = kept_part
        yield _messages.Message(
            role=role,
            parts=tuple(parts),
            created_at=when,
            thread_id=thread_id,
            resource_id=resource_id,
            metadata={METADATA_KEY: meta},
        )


def _count_parts(entries: list[Any]) -> int:
    return sum(cast(int, e.get("n", 1)) if isinstance(e, dict) else 1 for e in entries)


# ---------------------------------------------------------------------------------------------
# to pydantic-ai
# ---------------------------------------------------------------------------------------------


def to_pydantic_ai(messages: Sequence[_messages.Message]) -> list[ModelMessage]:
    """pydantic-ai messages for ``messages`` (see the module docstring).

    Consecutive non-assistant messages merge into one ``ModelRequest``; ``DataPart`` markers are
    dropped, and so is a message left with nothing to send.
    """
    out: list[JSONDict] = []
    request: JSONDict | None = None
    entries: list[JSONDict | None] = []

    def flush() -> None:
        nonlocal request, entries
        if request is not None:
            if any(e is not None for e in entries):
                meta = cast(JSONDict | None, request.get("metadata")) or {}
                request["metadata"] = {**meta, ENVELOPE_KEY: entries}
            out.append(request)
        request, entries = None, []

    for message in messages:
        pa = message.metadata.get(METADATA_KEY)
        if message.role == "assistant":
            flush()
            out.append(
                _write_response(message, cast(JSONDict, pa) if isinstance(pa, dict) else None)
            )
            continue
        if isinstance(pa, dict):
            pa_d = cast(JSONDict, pa)
            parts = _write_kept_request_part(message, pa_d)
            if "request" in pa_d or request is None:
                flush()
                request = {
                    "kind": "request",
                    "parts": [],
                    **cast(JSONDict, pa_d.get("request", {})),
                }
            request["parts"].extend(parts)
            entries.append(None)
            continue
        sendable = _sendable(message.parts)
        parts = _write_request_parts(message, sendable)
        if not parts:
            continue
        if request is None:
            request = {"kind": "request", "parts": [], "timestamp": dt_json(message.created_at)}
        request["parts"].extend(parts)
        entries.append({**_envelope(message, sendable), "role": message.role, "n": len(parts)})
    flush()
    return ModelMessagesTypeAdapter.validate_json(pydantic_core.to_json(out))


def _sendable(parts: Sequence[_messages.Part]) -> list[_messages.Part]:
    return [
        p
        for p in parts
        if not isinstance(p, _messages.DataPart) or p.name.startswith(DATA_PART_PREFIX)
    ]


def _write_response(message: _messages.Message, kept: JSONDict | None) -> JSONDict:
    sendable = _sendable(message.parts)
    if kept is None:
        result_ids = {p.tool_call_id for p in sendable if isinstance(p, _messages.ToolResultPart)}
        native = frozenset(result_ids)
    else:
        native = frozenset()
    when = message.created_at
    parts = [write_response_part(p, native_ids=native, created_at=when) for p in sendable]
    out: JSONDict = {
        "kind": "response",
        "parts": [p for p in parts if p is not None],
        "timestamp": dt_json(message.created_at),
    }
    if kept is not None:
        out.update(cast(JSONDict, kept.get("response", {})))
    else:
        # "n": how many parts are this message's, so a response pydantic-ai merged with the
        # next one (it joins consecutive responses no model sent) can be split again.
        out["metadata"] = {ENVELOPE_KEY: {**_envelope(message, sendable), "n": len(out["parts"])}}
    return out


def _write_kept_request_part(message: _messages.Message, pa: JSONDict) -> list[JSONDict]:
    """The one request part a message read from pydantic-ai came from (none for an empty one)."""
    if "part" not in pa:
        return []
    kept = dict(cast(JSONDict, pa["part"]))
    parts = _sendable(message.parts)
    if (
        len(parts) == 1
        and isinstance(parts[0], _messages.DataPart)
        and _is_part_dump(parts[0].data)
    ):
        return [cast(JSONDict, parts[0].data)]
    kind = kept.pop("part_kind", ROLE_PART_KIND[message.role])
    when = dt_json(message.created_at)
    if _is_tool_kind(kind, parts):
        result = cast(_messages.ToolResultPart, parts[0])
        return [{**write_tool_return(result, kind, message.created_at), **kept}]
    out: JSONDict = {"part_kind": kind, "timestamp": when}
    if kind == "user-prompt":
        content_list = kept.pop("content_list", False)
        items = [write_content_item(p) for p in parts]
        single = len(items) == 1 and isinstance(items[0], str) and not content_list
        out["content"] = items[0] if single else items
    else:
        out["content"] = "".join(p.text for p in parts if isinstance(p, _messages.TextPart))
    out.update(kept)
    return [out]


def _is_part_dump(data: Any) -> bool:
    return isinstance(data, dict) and "part_kind" in cast(JSONDict, data)


def _is_tool_kind(kind: str, parts: Sequence[_messages.Part]) -> bool:
    return (
        len(parts) == 1
        and isinstance(parts[0], _messages.ToolResultPart)
        and kind.endswith("-return")
    )


def _write_request_parts(
    message: _messages.Message, sendable: Sequence[_messages.Part]
) -> list[JSONDict]:
    """Request parts for a message obsmem made."""
    when = dt_json(message.created_at)
    out: list[JSONDict] = []
    group: list[Any] = []

    def flush_group() -> None:
        if group:
            single = len(group) == 1 and isinstance(group[0], str)
            content = group[0] if single else list(group)
            out.append({"part_kind": "user-prompt", "content": content, "timestamp": when})
            group.clear()

    for part in sendable:
        if isinstance(part, _messages.ToolResultPart):
            flush_group()
            out.append(write_tool_return(part, "tool-return", message.created_at))
        elif isinstance(part, _messages.DataPart) and _is_part_dump(part.data):
            flush_group()
            out.append(cast(JSONDict, part.data))
        elif message.role == "system":
            if not isinstance(part, _messages.TextPart):
                raise ValueError(
                    f"message {message.id}: a pydantic-ai system prompt holds text only, "
                    f"not a {part.kind!r} part; send images and files in a user message"
                )
            out.append({"part_kind": "system-prompt", "content": part.text, "timestamp": when})
        else:
            group.append(write_content_item(part))
    flush_group()
    return out
