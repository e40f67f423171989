"""Mastra's stored values -> obsmem values: SQLite JSONB columns and messages.

``@mastra/libsql`` writes ``metadata`` columns with SQLite's ``jsonb()`` (a binary format that
SQLite before 3.45, which many Pythons link, cannot read), so :func:`decode_json` reads both
that and JSON text.

Mastra stores a message as ``{"format": 2, "parts": [...]}`` (older rows: a string or an AI SDK
content list). A Mastra assistant message holds a whole step loop: a tool invocation carries its
call *and* its result. obsmem keeps calls in assistant messages and results in ``tool``
messages (what every chat API expects), so such a message becomes several: the first keeps
Mastra's id, the next ones get ``<id>.1``, ``<id>.2``, ... and every piece names the Mastra id in
``metadata["mastra"]["id"]``. A provider-run tool (``providerExecuted``) keeps its call and
result in the assistant message, which is obsmem's form for those.
"""

from __future__ import annotations

import base64
import binascii
import json
import struct
from collections.abc import Mapping
from datetime import datetime
from typing import Any, cast

from .. import messages as _messages

__all__ = ["decode_json", "mastra_messages"]

JSON = dict[str, Any]


# ---------------------------------------------------------------------------------------------
# SQLite JSONB (https://sqlite.org/jsonb.html)
# ---------------------------------------------------------------------------------------------

_SIZE_BYTES = {12: 1, 13: 2, 14: 4, 15: 8}


def _jsonb_element(blob: bytes, at: int) -> tuple[Any, int]:
    """The value whose header starts at ``at``, and the offset just after it."""
    header = blob[at]
    kind, size = header & 0x0F, header >> 4
    at += 1
    if size in _SIZE_BYTES:
        width = _SIZE_BYTES[size]
        size = int.from_bytes(blob[at : at + width], "big")
        at += width
    end = at + size
    if end > len(blob):
        raise ValueError("JSONB element runs past the end of the value")
    payload = blob[at:end]
    if kind in (0, 1, 2):
        return (None, True, False)[kind], end
    if kind in (3, 4, 5, 6):  # INT, INT5, FLOAT, FLOAT5: the number's text
        return json.loads(payload.decode("ascii")) if kind in (3, 5) else _json5_number(
            payload
        ), end
    if kind == 7 or kind == 10:  # TEXT (nothing to unescape), TEXTRAW
        return payload.decode("utf-8"), end
    if kind in (8, 9):  # TEXTJ, TEXT5: JSON escapes inside
        return json.loads(b'"' + payload + b'"'), end
    if kind == 11:
        return _jsonb_items(blob, at, end), end
    if kind == 12:
        items = _jsonb_items(blob, at, end)
        return dict(zip(items[::2], items[1::2], strict=True)), end
    raise ValueError(f"JSONB element type {kind} is reserved")


def _json5_number(payload: bytes) -> int | float:
    text = payload.decode("ascii").lower().lstrip("+")
    sign, digits = (-1, text[1:]) if text.startswith("-") else (1, text)
    if digits.startswith("0x"):
        return sign * int(digits, 16)
    return sign * float(digits.replace("infinity", "inf"))


def _jsonb_items(blob: bytes, at: int, end: int) -> list[Any]:
    items: list[Any] = []
    while at < end:
        value, at = _jsonb_element(blob, at)
        items.append(value)
    return items


def decode_json(value: Any) -> Any:
    """A JSON column's value: JSON text, SQLite JSONB bytes, or NULL (None)."""
    if value is None:
        return None
    if isinstance(value, bytes):
        try:
            decoded, end = _jsonb_element(value, 0)
        except (ValueError, IndexError, UnicodeDecodeError, json.JSONDecodeError, struct.error):
            raise ValueError("not SQLite JSONB") from None
        if end != len(value):
            raise ValueError("not SQLite JSONB (bytes left over)")
        return decoded
    return json.loads(value)


# ---------------------------------------------------------------------------------------------
# Parts
# ---------------------------------------------------------------------------------------------


def _media(data: str, media_type: str, metadata: JSON) -> _messages.Part:
    """An ImagePart or FilePart from Mastra's ``data`` (a data: URL, bare base64, or a URL)."""
    raw: bytes | None = None
    url: str | None = None
    if data.startswith("data:") and "," in data:
        head, _, body = data.partition(",")
        media_type = head[5:].split(";")[0] or media_type
        raw = base64.b64decode(body) if ";base64" in head else body.encode()
    elif "://" in data:
        url = data
    else:
        try:
            raw = base64.b64decode(data, validate=True)
        except binascii.Error:
            url = data
    if media_type.startswith("image/"):
        return _messages.ImagePart(media_type=media_type, data=raw, url=url, metadata=metadata)
    return _messages.FilePart(media_type=media_type, data=raw, url=url, metadata=metadata)


def _extras(part: JSON, *known: str) -> JSON:
    """What of a Mastra part obsmem has no field for, kept under ``metadata["mastra"]``."""
    rest = {k: v for k, v in part.items() if k not in {"type", "createdAt", *known}}
    return {"mastra": rest} if rest else {}


def _reasoning(part: JSON) -> _messages.ReasoningPart:
    details = [d for d in part.get("details") or [] if isinstance(d, dict)]
    texts = [str(d.get("text", "")) for d in details if d.get("type") == "text"]
    signature = next((d["signature"] for d in details if d.get("signature")), None)
    text = part.get("reasoning") or part.get("text") or "\n".join(texts)
    return _messages.ReasoningPart(
        text=str(text), signature=signature, metadata=_extras(part, "reasoning")
    )


def _tool_parts(part: JSON) -> tuple[_messages.ToolCallPart, _messages.ToolResultPart | None]:
    """A tool invocation's call, and its result when it has one."""
    inv = cast(JSON, part.get("toolInvocation") or {})
    call_id, name = str(inv.get("toolCallId", "")), str(inv.get("toolName", ""))
    args = inv.get("args", {})
    call = _messages.ToolCallPart(
        tool_call_id=call_id,
        tool_name=name,
        args=args if isinstance(args, dict | str) else json.dumps(args),
        metadata=_extras(part, "toolInvocation", "resultOnly"),
    )
    state = inv.get("state")
    if state == "result":
        content, error = inv.get("result"), bool(inv.get("isError"))
    elif state in ("output-error", "output-denied"):
        content, error = inv.get("errorText") or inv.get("result") or state, True
    else:
        return call, None
    result = _messages.ToolResultPart(
        tool_call_id=call_id, tool_name=name, content=content, is_error=error
    )
    return call, result


def _part(part: JSON) -> _messages.Part:
    """One Mastra part that is neither a tool invocation nor a ``step-start``."""
    kind = str(part.get("type", ""))
    if kind == "text":
        return _messages.TextPart(text=str(part.get("text", "")), metadata=_extras(part, "text"))
    if kind == "reasoning":
        return _reasoning(part)
    if kind == "file":
        media_type = str(part.get("mimeType") or part.get("mediaType") or "")
        data = str(part.get("data") or part.get("url") or "")
        return _media(data, media_type, _extras(part, "data", "url", "mimeType", "mediaType"))
    if kind.startswith("data-"):
        return _messages.DataPart(name=kind, data=part.get("data"), metadata=_extras(part, "data"))
    return _messages.DataPart(
        name=f"mastra:{kind}", data=part
    )  # source, source-document, error, ...


def _attachments(content: JSON, parts: list[JSON]) -> list[JSON]:
    """``experimental_attachments`` Mastra did not also store as file parts, as file parts."""
    seen = {p.get("data") for p in parts if p.get("type") == "file"}
    out: list[JSON] = []
    for att in content.get("experimental_attachments") or []:
        if isinstance(att, dict) and att.get("url") not in seen:
            att = cast(JSON, att)
            out.append({"type": "file", "data": att.get("url"), "mimeType": att.get("contentType")})
    return out


def _v1_parts(content: Any) -> list[JSON]:
    """An AI SDK content value (older Mastra rows) as format-2 parts."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    out: list[JSON] = []
    for item in cast(list[Any], content if isinstance(content, list) else []):
        if not isinstance(item, dict):
            continue
        item = cast(JSON, item)
        kind = item.get("type")
        if kind in ("tool-call", "tool-result"):
            inv = {
                "toolCallId": item.get("toolCallId"),
                "toolName": item.get("toolName"),
                "args": item.get("args", item.get("input", {})),
                "state": "call" if kind == "tool-call" else "result",
                "result": item.get("result", item.get("output")),
                "isError": item.get("isError", False),
            }
            # an AI SDK tool-result (a ``tool`` row) answers a call stored in an earlier row
            only = kind == "tool-result"
            out.append({"type": "tool-invocation", "toolInvocation": inv, "resultOnly": only})
        elif kind in ("image", "file"):
            data = item.get("image", item.get("data", ""))
            media = item.get("mimeType") or item.get("mediaType") or "image/png"
            out.append({"type": "file", "data": str(data), "mimeType": media})
        else:
            out.append(item)
    return out


# ---------------------------------------------------------------------------------------------
# Messages
# ---------------------------------------------------------------------------------------------


class _Pieces:
    """Builds the obsmem messages of one Mastra message, splitting at tool results."""

    def __init__(self, role: _messages.Role, base: JSON) -> None:
        self.role: _messages.Role = role
        self.base = base
        self.done: list[tuple[_messages.Role, list[_messages.Part]]] = []
        self.current: list[_messages.Part] = []
        self.results: list[_messages.Part] = []

    def add(self, part: _messages.Part, *, tool_call: bool = False) -> None:
        """Add a part; content after tool results starts a new assistant message (parallel
        calls of one step stay together)."""
        if self.results and not tool_call:
            self.flush()
        self.current.append(part)

    def flush(self) -> None:
        if self.current:
            self.done.append((self.role, self.current))
        if self.results:
            self.done.append(("tool", self.results))
        self.current, self.results = [], []

    def messages(self, mastra_id: str) -> list[_messages.Message]:
        self.flush()
        out: list[_messages.Message] = []
        for n, (role, parts) in enumerate(self.done):
            meta = cast(JSON, json.loads(json.dumps(self.base["metadata"])))
            if len(self.done) > 1:
                meta.setdefault("mastra", {})["id"] = mastra_id
            out.append(
                _messages.Message(
                    id=mastra_id if n == 0 else f"{mastra_id}.{n}",
                    role=role,
                    parts=tuple(parts),
                    created_at=self.base["created_at"],
                    thread_id=self.base["thread_id"],
                    resource_id=self.base["resource_id"],
                    metadata=meta,
                )
            )
        return out


def mastra_messages(
    *,
    mastra_id: str,
    role: str,
    content: Any,
    created_at: datetime,
    thread_id: str,
    resource_id: str,
) -> list[_messages.Message]:
    """The obsmem messages for one stored Mastra message (empty for ``signal`` messages, which
    are Mastra's control signals, never part of the conversation)."""
    if role == "signal":
        return []
    if isinstance(content, Mapping) and content.get("format") == 2:
        body = cast(JSON, content)
        parts = [p for p in body.get("parts") or [] if isinstance(p, dict)]
        if not parts and isinstance(body.get("content"), str):
            parts = [{"type": "text", "text": body["content"]}]
        parts = cast(list[JSON], parts) + _attachments(body, cast(list[JSON], parts))
        extra = {k: body[k] for k in ("metadata", "providerMetadata") if body.get(k)}
    else:
        parts, extra = _v1_parts(content), {}
    obs_role: _messages.Role = role if role in ("user", "assistant", "system", "tool") else "user"
    metadata: JSON = {"mastra": extra} if extra else {}
    base = {"metadata": metadata, "created_at": created_at, "thread_id": thread_id}
    pieces = _Pieces(obs_role, {**base, "resource_id": resource_id})
    for raw in parts:
        if raw.get("type") == "tool-invocation":
            call, result = _tool_parts(raw)
            if raw.get("resultOnly") and result is not None:
                pieces.add(result)
                continue
            pieces.add(call, tool_call=True)
            if result is not None and raw.get("providerExecuted"):
                pieces.add(result, tool_call=True)
            elif result is not None:
                pieces.results.append(result)
        elif raw.get("type") == "step-start":
            if pieces.results:
                pieces.flush()
        else:
            pieces.add(_part(raw))
    return pieces.messages(mastra_id)
