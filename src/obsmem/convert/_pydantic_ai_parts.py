"""Reading and writing single pydantic-ai parts and content items (JSON form) as obsmem parts.

The pieces :mod:`obsmem.convert.pydantic_ai` assembles into whole messages; see that module for
the mapping and for what "exact" means.
"""

from __future__ import annotations

import base64
import dataclasses
import functools
import hashlib
import json
from datetime import datetime
from typing import Any, cast

import pydantic_core

from obsmem import messages as _messages

__all__ = [
    "DATA_PART_PREFIX",
    "METADATA_KEY",
    "ROLE_PART_KIND",
    "JSONDict",
    "dt_json",
    "field_defaults",
    "kept_fields",
    "parse_dt",
    "read_request_part",
    "read_response_part",
    "strip_meta",
    "write_content_item",
    "write_response_part",
    "write_tool_return",
]

METADATA_KEY = "pydantic_ai"
"""Key of ``Message.metadata`` / ``part.metadata`` holding what pydantic-ai had beyond obsmem."""
DATA_PART_PREFIX = "pydantic-ai:"
"""Name prefix of the ``DataPart`` carrying a pydantic-ai part or item obsmem has no type for."""

JSONDict = dict[str, Any]
_MISSING = object()
_DETAILS = ("auto", "low", "high")
_FILE_ITEM_KINDS = frozenset({"binary", "image-url", "document-url", "audio-url", "video-url"})
ROLE_PART_KIND: dict[str, str] = {
    "system": "system-prompt",
    "user": "user-prompt",
    "tool": "tool-return",
}


# ---------------------------------------------------------------------------------------------
# small helpers
# ---------------------------------------------------------------------------------------------


def _b64(data: bytes) -> str:
    # pydantic-ai's JSON form uses URL-safe base64.
    return base64.urlsafe_b64encode(data).decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def dt_json(value: datetime) -> str:
    return cast(str, pydantic_core.to_jsonable_python(value))


def parse_dt(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    parsed = datetime.fromisoformat(value)
    return parsed if parsed.tzinfo is not None else None


def _identifier(value: str | bytes) -> str:
    raw = value.encode("utf-8") if isinstance(value, str) else value
    return hashlib.sha1(raw, usedforsecurity=False).hexdigest()[:6]


def _is_file_item(value: Any) -> bool:
    return isinstance(value, dict) and cast(JSONDict, value).get("kind") in _FILE_ITEM_KINDS


@functools.cache
def field_defaults(cls: type) -> dict[str, Any]:
    """JSON form of each dataclass field's default, to leave defaults out of the metadata."""
    out: dict[str, Any] = {}
    if not dataclasses.is_dataclass(cls):
        return out
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        if f.default is not dataclasses.MISSING:
            value: Any = f.default
        elif f.default_factory is not dataclasses.MISSING:
            value = f.default_factory()
        else:
            continue
        try:
            out[f.name] = pydantic_core.to_jsonable_python(value)
        except pydantic_core.PydanticSerializationError:
            continue
    return out


def kept_fields(
    dumped: JSONDict,
    written: JSONDict,
    defaults: dict[str, Any],
    skip: frozenset[str] = frozenset(),
) -> JSONDict:
    """The entries of ``dumped`` that neither ``written`` nor the defaults reproduce."""
    out: JSONDict = {}
    for key, value in dumped.items():
        if key in skip:
            continue
        if key in written:
            if written[key] != value:
                out[key] = value
        elif defaults.get(key, _MISSING) != value:
            out[key] = value
    return out


def _pa_meta(meta: dict[str, Any]) -> JSONDict:
    raw = meta.get(METADATA_KEY)
    return cast(JSONDict, raw) if isinstance(raw, dict) else {}


def _with_meta(meta: dict[str, Any], residual: JSONDict) -> dict[str, Any]:
    return {**meta, METADATA_KEY: residual} if residual else dict(meta)


def strip_meta(part: _messages.Part) -> _messages.Part:
    """``part`` without the pydantic-ai fields kept in its metadata (and its attachments')."""
    if isinstance(part, _messages.ToolResultPart) and part.attachments:
        atts = tuple(
            cast(_messages.ImagePart | _messages.FilePart, strip_meta(a)) for a in part.attachments
        )
        part = dataclasses.replace(part, attachments=atts)
    if METADATA_KEY not in part.metadata:
        return part
    meta = {k: v for k, v in part.metadata.items() if k != METADATA_KEY}
    return dataclasses.replace(part, metadata=meta)


# ---------------------------------------------------------------------------------------------
# writing pydantic-ai JSON from obsmem parts (shared by both origins)
# ---------------------------------------------------------------------------------------------


def _write_item(part: _messages.ImagePart | _messages.FilePart) -> JSONDict:
    """A user-content / tool-return file item, without any kept pydantic-ai fields."""
    vendor = (
        {"detail": part.detail} if isinstance(part, _messages.ImagePart) and part.detail else None
    )
    if part.data is not None:
        return {
            "data": _b64(part.data),
            "media_type": part.media_type,
            "vendor_metadata": vendor,
            "kind": "binary",
            "identifier": _identifier(part.data),
        }
    assert part.url is not None
    if isinstance(part, _messages.ImagePart):
        kind = "image-url"
    elif part.media_type.startswith("audio/"):
        kind = "audio-url"
    elif part.media_type.startswith("video/"):
        kind = "video-url"
    else:
        kind = "document-url"
    return {
        "url": part.url,
        "force_download": False,
        "vendor_metadata": vendor,
        "kind": kind,
        "media_type": part.media_type,
        "identifier": _identifier(part.url),
    }


def _apply_item(part: _messages.ImagePart | _messages.FilePart, kept: JSONDict) -> JSONDict:
    return {**_write_item(part), **kept}


def write_content_item(part: _messages.Part) -> Any:
    kept = _pa_meta(part.metadata)
    match part:
        case _messages.TextPart():
            return {"content": part.text, **kept} if kept else part.text
        case _messages.ImagePart() | _messages.FilePart():
            return _apply_item(part, kept)
        case _messages.DataPart() if part.name.startswith(DATA_PART_PREFIX):
            return part.data
        case _:
            raise ValueError(
                f"a {part.kind!r} part cannot go in a pydantic-ai user prompt; "
                "put tool calls and reasoning in an assistant message"
            )


def _write_tool_content(part: _messages.ToolResultPart, layout: Any) -> Any:
    files = [_apply_item(a, _pa_meta(a.metadata)) for a in part.attachments]
    if not files:
        return part.content
    if isinstance(layout, dict):
        lay = cast(JSONDict, layout)
        if lay.get("single"):
            return files[0]
        at = cast(list[int], lay["files_at"])
        n = cast(int, lay["n"])
        data_slots = n - len(at)
        if data_slots == 0:
            data: list[Any] = []
        elif data_slots == 1:
            data = [part.content]
        else:
            data = list(cast(list[Any], part.content))
        out: list[Any] = []
        file_iter, data_iter = iter(files), iter(data)
        for i in range(n):
            out.append(next(file_iter) if i in at else next(data_iter))
        return out
    return files if part.content is None else [part.content, *files]


def write_tool_return(
    part: _messages.ToolResultPart, kind: str, created_at: datetime | None
) -> JSONDict:
    kept = _pa_meta(part.metadata)
    out: JSONDict = {
        "part_kind": kind,
        "tool_name": part.tool_name,
        "tool_call_id": part.tool_call_id,
        "content": _write_tool_content(part, kept.get("layout")),
        "outcome": "failed" if part.is_error else "success",
    }
    if created_at is not None:
        out["timestamp"] = dt_json(created_at)
    out.update({k: v for k, v in kept.items() if k != "layout"})
    return out


def write_response_part(
    part: _messages.Part, *, native_ids: frozenset[str], created_at: datetime | None = None
) -> JSONDict | None:
    kept = _pa_meta(part.metadata)
    out: JSONDict
    match part:
        case _messages.TextPart():
            out = {"part_kind": "text", "content": part.text}
        case _messages.ReasoningPart():
            out = {"part_kind": "thinking", "content": part.text, "signature": part.signature}
        case _messages.ToolCallPart():
            kind = "builtin-tool-call" if part.tool_call_id in native_ids else "tool-call"
            out = {
                "part_kind": kind,
                "tool_name": part.tool_name,
                "args": part.args,
                "tool_call_id": part.tool_call_id,
            }
        case _messages.ToolResultPart():
            return write_tool_return(part, "builtin-tool-return", created_at)
        case _messages.ImagePart() | _messages.FilePart():
            if part.data is None:
                raise ValueError(
                    "pydantic-ai keeps a model-made file as bytes only; "
                    f"this assistant {part.kind} part has only url={part.url!r}"
                )
            item_kept = cast(JSONDict, kept.get("item", {}))
            kept = {k: v for k, v in kept.items() if k != "item"}
            out = {"part_kind": "file", "content": _apply_item(part, item_kept)}
        case _messages.DataPart():
            return part.data if part.name.startswith(DATA_PART_PREFIX) else None
    out.update(kept)
    return out


# ---------------------------------------------------------------------------------------------
# reading pydantic-ai JSON into obsmem parts
# ---------------------------------------------------------------------------------------------


def _read_item(item: JSONDict) -> _messages.ImagePart | _messages.FilePart:
    kind = item["kind"]
    media_type = cast(str, item.get("media_type") or "application/octet-stream")
    vendor = item.get("vendor_metadata")
    detail = cast(dict[str, Any], vendor).get("detail") if isinstance(vendor, dict) else None
    if detail not in _DETAILS:
        detail = None
    data = _unb64(item["data"]) if kind == "binary" else None
    url = None if kind == "binary" else cast(str, item["url"])
    part: _messages.ImagePart | _messages.FilePart
    if kind == "image-url" or (kind == "binary" and media_type.startswith("image/")):
        part = _messages.ImagePart(media_type=media_type, data=data, url=url, detail=detail)
    else:
        part = _messages.FilePart(media_type=media_type, data=data, url=url)
    kept = kept_fields(item, _write_item(part), {})
    return dataclasses.replace(part, metadata=_with_meta({}, kept))


def _read_content_item(item: Any) -> _messages.Part:
    if isinstance(item, str):
        return _messages.TextPart(text=item)
    if _is_file_item(item):
        return _read_item(cast(JSONDict, item))
    as_dict = cast(JSONDict, item)
    if as_dict.get("kind") == "text-content" and isinstance(as_dict.get("content"), str):
        kept = {k: v for k, v in as_dict.items() if k != "content"}
        return _messages.TextPart(text=as_dict["content"], metadata={METADATA_KEY: kept})
    return _messages.DataPart(name=f"{DATA_PART_PREFIX}{as_dict.get('kind')}", data=item)


def _read_tool_return(
    dumped: JSONDict, written_extra: JSONDict, defaults: dict[str, Any]
) -> _messages.Part:
    raw = dumped.get("content")
    layout: Any = None
    attachments: list[_messages.ImagePart | _messages.FilePart] = []
    content: Any = raw
    if _is_file_item(raw):
        attachments = [_read_item(cast(JSONDict, raw))]
        content = None
        layout = {"single": True}
    elif isinstance(raw, list) and any(_is_file_item(x) for x in cast(list[Any], raw)):
        items = cast(list[Any], raw)
        at = [i for i, x in enumerate(items) if _is_file_item(x)]
        data = [x for x in items if not _is_file_item(x)]
        attachments = [_read_item(cast(JSONDict, items[i])) for i in at]
        content = data[0] if len(data) == 1 else (data or None)
        start = 0 if content is None else 1
        if at != list(range(start, start + len(at))) or len(data) > 1:
            layout = {"files_at": at, "n": len(items)}
    outcome = dumped.get("outcome", "success")
    part = _messages.ToolResultPart(
        tool_call_id=cast(str, dumped["tool_call_id"]),
        tool_name=cast(str, dumped["tool_name"]),
        content=content,
        is_error=outcome in ("failed", "retried"),
        attachments=tuple(attachments),
    )
    written = {
        "part_kind": dumped["part_kind"],
        "tool_name": part.tool_name,
        "tool_call_id": part.tool_call_id,
        "outcome": "failed" if part.is_error else "success",
        **written_extra,
    }
    kept = kept_fields(dumped, written, defaults, skip=frozenset({"content"}))
    if layout is not None:
        kept["layout"] = layout
    return dataclasses.replace(part, metadata=_with_meta({}, kept))


def _is_tool_return(dumped: JSONDict) -> bool:
    kind = dumped.get("part_kind")
    return (
        isinstance(kind, str)
        and kind.endswith("-return")
        and isinstance(dumped.get("tool_call_id"), str)
        and isinstance(dumped.get("tool_name"), str)
    )


def read_response_part(dumped: JSONDict, cls: type) -> _messages.Part:
    kind = dumped.get("part_kind")
    defaults = field_defaults(cls)
    if _is_tool_return(dumped):
        part = _read_tool_return(dumped, {}, defaults)
        kept = _pa_meta(part.metadata)
        if kind == "builtin-tool-return":
            kept = {k: v for k, v in kept.items() if k != "part_kind"}
        else:
            kept = {**kept, "part_kind": kind}
        return dataclasses.replace(part, metadata=_with_meta({}, kept))
    new: _messages.Part
    if kind == "text":
        new = _messages.TextPart(text=dumped["content"])
    elif kind == "thinking":
        new = _messages.ReasoningPart(text=dumped["content"], signature=dumped.get("signature"))
    elif kind == "file" and _is_file_item(dumped.get("content")):
        new = _read_item(cast(JSONDict, dumped["content"]))
    elif (
        isinstance(kind, str)
        and kind.endswith("-call")
        and isinstance(dumped.get("tool_name"), str)
        and isinstance(dumped.get("tool_call_id"), str)
    ):
        args = dumped.get("args")
        new = _messages.ToolCallPart(
            tool_call_id=dumped["tool_call_id"],
            tool_name=dumped["tool_name"],
            args=cast(dict[str, Any] | str, args) if isinstance(args, dict | str) else {},
        )
    else:
        return _messages.DataPart(name=f"{DATA_PART_PREFIX}{kind}", data=dumped)
    item_kept = _pa_meta(new.metadata)
    plain = strip_meta(new)
    written = write_response_part(plain, native_ids=frozenset())
    assert written is not None
    if isinstance(new, _messages.ToolCallPart):
        written["part_kind"] = kind  # the default write says "tool-call"; keep others as read
        if kind != "tool-call":
            item_kept = {"part_kind": kind}
    kept = {**kept_fields(dumped, written, defaults), **item_kept}
    if isinstance(new, _messages.ImagePart | _messages.FilePart):
        kept = kept_fields(dumped, written, defaults, skip=frozenset({"content"}))
        if item_kept:
            kept["item"] = item_kept
    return dataclasses.replace(plain, metadata=_with_meta({}, kept))


def read_request_part(
    dumped: JSONDict, cls: type, when: datetime
) -> tuple[_messages.Role, list[_messages.Part], JSONDict]:
    """The role, obsmem parts and kept fields of one request part."""
    kind = cast(str, dumped.get("part_kind"))
    defaults = field_defaults(cls)
    written: JSONDict = {"timestamp": dt_json(when)} if "timestamp" in dumped else {}
    if kind == "system-prompt":
        role: _messages.Role = "system"
        parts: list[_messages.Part] = [_messages.TextPart(text=dumped["content"])]
        written["content"] = dumped["content"]
    elif kind == "user-prompt":
        role = "user"
        content = dumped["content"]
        if isinstance(content, str):
            parts = [_messages.TextPart(text=content)]
        else:
            parts = [_read_content_item(x) for x in cast(list[Any], content)]
        written["content"] = content
        kept = kept_fields(dumped, {**written, "part_kind": kind}, defaults)
        single = len(parts) == 1 and isinstance(parts[0], _messages.TextPart)
        if not isinstance(content, str) and single and not _pa_meta(parts[0].metadata):
            kept["content_list"] = True
        return role, parts, kept
    elif kind == "retry-feedback":
        role = "user"
        content = dumped["content"]
        text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
        parts = [_messages.TextPart(text=text)]
        written["content"] = text
    elif _is_tool_return(dumped):
        part = _read_tool_return(dumped, written, defaults)
        kept = _pa_meta(part.metadata)
        layout = kept.pop("layout", None)
        if kind != "tool-return":
            kept["part_kind"] = kind
        else:
            kept.pop("part_kind", None)
        part_meta: JSONDict = {"layout": layout} if layout is not None else {}
        return "tool", [dataclasses.replace(part, metadata=_with_meta({}, part_meta))], kept
    else:
        return "system", [_messages.DataPart(name=f"{DATA_PART_PREFIX}{kind}", data=dumped)], {}
    written["part_kind"] = ROLE_PART_KIND[role]
    return role, parts, kept_fields(dumped, written, defaults)
