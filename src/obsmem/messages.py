"""Messages and their parts: the one message type every part of obsmem speaks.

A :class:`Message` is a frozen dataclass with a tuple of typed parts. Parts carry a ``kind``
literal so a stored JSON form maps back to the right class. ``to_dict``/``from_dict`` give the
lossless JSON form the stores persist (bytes as base64, datetimes as ISO 8601 with offset).

Conversions to and from pydantic-ai message lists and OpenAI chat-completions dicts live in
:mod:`obsmem.convert`.
"""

from __future__ import annotations

import base64
import re
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from datetime import UTC, datetime
from typing import Any, Literal, TypeAlias, cast, get_args

__all__ = [
    "DataPart",
    "FilePart",
    "ImagePart",
    "Message",
    "Part",
    "ReasoningPart",
    "Role",
    "TextPart",
    "ToolCallPart",
    "ToolResultPart",
    "check_json",
    "holds_much",
    "message_from_dict",
    "message_to_dict",
    "new_message_id",
    "part_from_dict",
    "part_to_dict",
    "utcnow",
]

Role: TypeAlias = Literal["user", "assistant", "system", "tool"]
ROLES: frozenset[str] = frozenset(get_args(Role))
ImageDetail: TypeAlias = Literal["auto", "low", "high"]


def utcnow() -> datetime:
    """The current time, timezone-aware (UTC)."""
    return datetime.now(UTC)


def new_message_id() -> str:
    return f"msg-{uuid.uuid4().hex}"


@dataclass(frozen=True, slots=True, kw_only=True)
class TextPart:
    text: str
    metadata: dict[str, Any] = field(default_factory=dict[str, Any])
    kind: Literal["text"] = "text"


@dataclass(frozen=True, slots=True, kw_only=True)
class _Attachment:
    """What images and files have alike: the bytes inline (``data``) or a ``url``."""

    data: bytes | None = None
    url: str | None = None
    filename: str | None = None
    token_estimate: int | None = None
    """Set by the caller, it wins over every estimate obsmem would make."""
    metadata: dict[str, Any] = field(default_factory=dict[str, Any])

    def __post_init__(self) -> None:
        if self.data is None and self.url is None:
            raise ValueError(f"{type(self).__name__} needs data= (bytes) or url=")


@dataclass(frozen=True, slots=True, kw_only=True)
class ImagePart(_Attachment):
    """An image, inline (``data``) or by ``url``.

    ``token_estimate`` set by the caller wins over every estimate obsmem would make.
    """

    media_type: str = "image/png"
    width: int | None = None
    height: int | None = None
    detail: ImageDetail | None = None
    kind: Literal["image"] = "image"


@dataclass(frozen=True, slots=True, kw_only=True)
class FilePart(_Attachment):
    """A non-image attachment (PDF, text, audio, ...), inline (``data``) or by ``url``."""

    media_type: str
    kind: Literal["file"] = "file"


@dataclass(frozen=True, slots=True, kw_only=True)
class _ToolPart:
    """Which tool call a part belongs to."""

    tool_call_id: str
    tool_name: str
    metadata: dict[str, Any] = field(default_factory=dict[str, Any])


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCallPart(_ToolPart):
    """The model asked for a tool. ``args`` is a JSON object, or the raw JSON string as sent."""

    args: dict[str, Any] | str = field(default_factory=dict[str, Any])
    kind: Literal["tool-call"] = "tool-call"


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolResultPart(_ToolPart):
    """A tool's answer. ``content`` is any JSON value; ``attachments`` holds images or files the
    tool returned (a screenshot, a downloaded PDF). ``is_error`` marks a failed call."""

    content: Any = None
    is_error: bool = False
    attachments: tuple[ImagePart | FilePart, ...] = ()
    kind: Literal["tool-result"] = "tool-result"


@dataclass(frozen=True, slots=True, kw_only=True)
class ReasoningPart:
    text: str
    signature: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict[str, Any])
    kind: Literal["reasoning"] = "reasoning"


@dataclass(frozen=True, slots=True, kw_only=True)
class DataPart:
    """Structured data that is stored but never sent to a model (``data-om-*`` markers and the
    like). ``name`` is the data type, for example ``"data-om-activation"``."""

    name: str
    data: Any = None
    metadata: dict[str, Any] = field(default_factory=dict[str, Any])
    kind: Literal["data"] = "data"


Part: TypeAlias = (
    TextPart | ImagePart | FilePart | ToolCallPart | ToolResultPart | ReasoningPart | DataPart
)
PART_TYPES = (TextPart, ImagePart, FilePart, ToolCallPart, ToolResultPart, ReasoningPart, DataPart)


_TEXT_FIELDS: dict[type, tuple[str, ...]] = {
    TextPart: ("text",),
    ReasoningPart: ("text",),
    ToolCallPart: ("tool_call_id", "tool_name"),
    ToolResultPart: ("tool_call_id", "tool_name"),
    DataPart: ("name",),
}


def _check_part_fields(part: Part, index: int) -> None:
    """The fields of ``part`` that must be strings are strings (``bytes``, ``None`` or a number
    there would fail later, at the store or in a cycle)."""
    for name in _TEXT_FIELDS.get(type(part), ()):
        value = getattr(part, name)
        if not isinstance(value, str):
            from .errors import ConfigError

            raise ConfigError(
                f"Message.parts[{index}].{name}",
                value,
                "must be a string"
                + (" (decode the bytes first)" if isinstance(value, bytes) else ""),
            )


_JSON_SCALARS = (str, int, float, bool, type(None))
MAX_JSON_DEPTH = 200
"""Deepest nesting a message's JSON values may have (every store's JSON handles it)."""


def _not_json(value: Any, depth: int) -> str | None:
    """What keeps ``value`` from being JSON data, or None."""
    if isinstance(value, _JSON_SCALARS):
        return None
    if depth >= MAX_JSON_DEPTH:
        return f"nested too deeply (more than {MAX_JSON_DEPTH} levels)"
    if isinstance(value, dict):
        for key, item in cast(dict[Any, Any], value).items():
            if not isinstance(key, str | int | float | bool) and key is not None:
                return f"a key of type {type(key).__name__}"
            problem = _not_json(item, depth + 1)
            if problem is not None:
                return problem
        return None
    if isinstance(value, list | tuple):
        for item in cast(list[Any], value):
            problem = _not_json(item, depth + 1)
            if problem is not None:
                return problem
        return None
    return f"Object of type {type(value).__name__} is not JSON serializable"


MUCH_DATA = 256 * 1024
"""About this much text and data (characters and bytes) in messages is worth moving off the
event loop: checking, counting and writing it takes tens of milliseconds or more."""


def holds_much(messages: Iterable[Message]) -> bool:
    """Whether ``messages`` hold about :data:`MUCH_DATA` or more of text and data: a walk over
    their parts' values that stops there (every value costs at least 16, so it is short)."""
    left = MUCH_DATA
    stack: list[Any] = [getattr(p, f.name) for m in messages for p in m.parts for f in fields(p)]
    while stack and left > 0:
        value = stack.pop()
        left -= max(16, len(value)) if isinstance(value, str | bytes) else 16
        if isinstance(value, dict):
            stack.extend(cast(dict[Any, Any], value).values())
        elif isinstance(value, list | tuple):
            stack.extend(cast(list[Any], value))
    return left <= 0


_UNSHOWABLE = re.compile("[\x00\ud800-\udfff]")


def display_text(text: str | None) -> str | None:
    """``text`` as every store can keep it in a text column: NUL and lone surrogates become
    U+FFFD. For text a model or a hook wrote (observations, titles, hints); message text and
    metadata keep them exactly."""
    return None if text is None else _UNSHOWABLE.sub("\ufffd", text)


def check_json(message: Message) -> None:
    """Raise ConfigError naming the field when ``message`` holds what JSON cannot store (a set,
    an object, nesting too deep): every store keeps metadata, tool arguments and results as
    JSON, and this is checked before anything is written (a walk over the values, no
    serialising: the stores serialise once, when they write)."""

    def check(field: str, value: Any) -> None:
        problem = _not_json(value, 0)
        if problem is not None:
            from .errors import ConfigError

            raise ConfigError(
                field,
                type(value).__name__,
                f"must be JSON data (dicts, lists, strings, numbers): {problem}",
            )

    check("Message.metadata", message.metadata)
    for index, part in enumerate(message.parts):
        where = f"Message.parts[{index}]"
        check(f"{where}.metadata", part.metadata)
        if isinstance(part, ToolCallPart):
            check(f"{where}.args", part.args)
        elif isinstance(part, ToolResultPart):
            check(f"{where}.content", part.content)
        elif isinstance(part, DataPart):
            check(f"{where}.data", part.data)


@dataclass(frozen=True, slots=True, kw_only=True)
class Message:
    """One message of a conversation.

    ``seq`` is the message's position in its thread (1, 2, 3, ...). The store assigns it on
    append; a message not yet stored has ``seq=None``.
    """

    role: Role
    parts: tuple[Part, ...]
    id: str = field(default_factory=new_message_id)
    created_at: datetime = field(default_factory=utcnow)
    thread_id: str | None = None
    resource_id: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict[str, Any])
    seq: int | None = None

    def __post_init__(self) -> None:
        if self.created_at.tzinfo is None or self.created_at.utcoffset() is None:
            raise ValueError(
                f"Message {self.id}: created_at must be timezone-aware; "
                "use datetime.now(UTC) or attach a tzinfo"
            )
        if not isinstance(self.parts, tuple):  # pyright: ignore[reportUnnecessaryIsInstance]
            object.__setattr__(self, "parts", tuple(self.parts))
        if self.role not in ROLES:
            from .errors import ConfigError

            raise ConfigError(
                "Message.role",
                self.role,
                "use 'user', 'assistant', 'system' or 'tool' (an OpenAI 'developer' message is "
                "a 'system' message)",
            )
        for index, part in enumerate(self.parts):
            if not isinstance(part, PART_TYPES):  # pyright: ignore[reportUnnecessaryIsInstance]
                from .errors import ConfigError

                raise ConfigError(
                    "Message.parts",
                    part,
                    "give obsmem parts (TextPart, ToolCallPart, ToolResultPart, ...); "
                    "Message.user(text) builds a text message",
                )
            _check_part_fields(part, index)

    @classmethod
    def user(cls, text: str, **kwargs: Any) -> Message:
        return cls(role="user", parts=(TextPart(text=text),), **kwargs)

    @classmethod
    def assistant(cls, text: str, **kwargs: Any) -> Message:
        return cls(role="assistant", parts=(TextPart(text=text),), **kwargs)

    @classmethod
    def system(cls, text: str, **kwargs: Any) -> Message:
        return cls(role="system", parts=(TextPart(text=text),), **kwargs)

    @property
    def text(self) -> str:
        """The text parts joined by newlines."""
        return "\n".join(p.text for p in self.parts if isinstance(p, TextPart))

    def with_parts(self, parts: Iterable[Part]) -> Message:
        return replace(self, parts=tuple(parts))


# ---------------------------------------------------------------------------------------------
# JSON form
# ---------------------------------------------------------------------------------------------


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def _unb64(data: str | None) -> bytes | None:
    return None if data is None else base64.b64decode(data)


def _attachment_to_dict(part: ImagePart | FilePart) -> dict[str, Any]:
    return part_to_dict(part)


def part_to_dict(part: Part) -> dict[str, Any]:
    """A JSON-ready dict of ``part`` (bytes become base64)."""
    out: dict[str, Any]
    match part:
        case TextPart():
            out = {"kind": "text", "text": part.text}
        case ImagePart():
            out = {
                "kind": "image",
                "media_type": part.media_type,
                "data": _b64(part.data),
                "url": part.url,
                "filename": part.filename,
                "width": part.width,
                "height": part.height,
                "detail": part.detail,
                "token_estimate": part.token_estimate,
            }
        case FilePart():
            out = {
                "kind": "file",
                "media_type": part.media_type,
                "data": _b64(part.data),
                "url": part.url,
                "filename": part.filename,
                "token_estimate": part.token_estimate,
            }
        case ToolCallPart():
            out = {
                "kind": "tool-call",
                "tool_call_id": part.tool_call_id,
                "tool_name": part.tool_name,
                "args": part.args,
            }
        case ToolResultPart():
            out = {
                "kind": "tool-result",
                "tool_call_id": part.tool_call_id,
                "tool_name": part.tool_name,
                "content": part.content,
                "is_error": part.is_error,
                "attachments": [_attachment_to_dict(a) for a in part.attachments],
            }
        case ReasoningPart():
            out = {"kind": "reasoning", "text": part.text, "signature": part.signature}
        case DataPart():
            out = {"kind": "data", "name": part.name, "data": part.data}
    if part.metadata:
        out["metadata"] = part.metadata
    return {k: v for k, v in out.items() if v is not None}


def _attachment_from_dict(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The fields images and files have alike, from :func:`part_to_dict`'s form."""
    return {
        "data": _unb64(raw.get("data")),
        "url": raw.get("url"),
        "filename": raw.get("filename"),
        "token_estimate": raw.get("token_estimate"),
    }


def part_from_dict(raw: Mapping[str, Any]) -> Part:
    """The inverse of :func:`part_to_dict`."""
    kind = raw.get("kind")
    meta = dict(raw.get("metadata") or {})
    match kind:
        case "text":
            return TextPart(text=raw["text"], metadata=meta)
        case "image":
            return ImagePart(
                **_attachment_from_dict(raw),
                media_type=raw.get("media_type", "image/png"),
                width=raw.get("width"),
                height=raw.get("height"),
                detail=raw.get("detail"),
                metadata=meta,
            )
        case "file":
            return FilePart(
                **_attachment_from_dict(raw), media_type=raw["media_type"], metadata=meta
            )
        case "tool-call":
            return ToolCallPart(
                tool_call_id=raw["tool_call_id"],
                tool_name=raw["tool_name"],
                args=raw.get("args", {}),
                metadata=meta,
            )
        case "tool-result":
            attachments: list[ImagePart | FilePart] = []
            for a in raw.get("attachments", ()):
                p = part_from_dict(a)
                if not isinstance(p, ImagePart | FilePart):
                    raise ValueError(f"tool-result attachment of kind {a.get('kind')!r}")
                attachments.append(p)
            return ToolResultPart(
                tool_call_id=raw["tool_call_id"],
                tool_name=raw["tool_name"],
                content=raw.get("content"),
                is_error=bool(raw.get("is_error", False)),
                attachments=tuple(attachments),
                metadata=meta,
            )
        case "reasoning":
            return ReasoningPart(text=raw["text"], signature=raw.get("signature"), metadata=meta)
        case "data":
            return DataPart(name=raw["name"], data=raw.get("data"), metadata=meta)
        case _:
            raise ValueError(f"unknown message part kind {kind!r}")


def message_to_dict(message: Message) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": message.id,
        "role": message.role,
        "parts": [part_to_dict(p) for p in message.parts],
        "created_at": message.created_at.isoformat(),
        "thread_id": message.thread_id,
        "resource_id": message.resource_id,
        "metadata": message.metadata,
    }
    if message.seq is not None:
        out["seq"] = message.seq
    return out


def message_from_dict(raw: Mapping[str, Any]) -> Message:
    return Message(
        id=raw["id"],
        role=raw["role"],
        parts=tuple(part_from_dict(p) for p in raw["parts"]),
        created_at=datetime.fromisoformat(raw["created_at"]),
        thread_id=raw.get("thread_id"),
        resource_id=raw.get("resource_id"),
        metadata=dict(raw.get("metadata") or {}),
        seq=raw.get("seq"),
    )
