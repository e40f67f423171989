"""What the MCP tools are sent, checked: every problem is a :class:`BadArguments` that says
what to send instead (the server answers it as a tool error)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, cast

from ..errors import ConfigError, ObsmemError, check_id
from ..messages import Message, TextPart

__all__ = [
    "MAX_CONTENT_CHARS",
    "MAX_MESSAGES",
    "MAX_WORKING_MEMORY_CHARS",
    "ROLES",
    "BadArguments",
    "kind",
    "parse_messages",
]

MAX_MESSAGES = 100
"""The most messages one ``remember`` call stores."""
MAX_CONTENT_CHARS = 200_000
"""The longest message text ``remember`` takes."""
MAX_WORKING_MEMORY_CHARS = 20_000
"""The longest working memory ``update_working_memory`` takes."""
ROLES = ("user", "assistant", "system")


class BadArguments(ObsmemError):
    """A tool was called with arguments it cannot use; the message says what to send."""


def kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, int | float):
        return f"the number {value!r}"
    if isinstance(value, str):
        return f"the string {value[:40]!r}"
    return {"list": "a list", "dict": "an object"}.get(type(value).__name__, type(value).__name__)


def parse_messages(value: object, *, thread: str | None = None) -> list[Message]:
    """The messages of a ``remember`` call, checked; BadArguments naming the first problem
    and what to send instead. A message's own ``id`` (the client's) is stored as
    ``<thread>/<id>``, so a call sent again stores it once."""
    shape = '[{"role": "user", "content": "..."}]'
    if not isinstance(value, list) or not value:
        raise BadArguments(
            f"messages must be a non-empty list of messages such as {shape}, not {kind(value)}"
            if not isinstance(value, list)
            else f"messages is empty: send at least one message, such as {shape}"
        )
    items = cast(list[object], value)
    if len(items) > MAX_MESSAGES:
        raise BadArguments(
            f"{len(items)} messages in one call: send at most {MAX_MESSAGES} per call"
        )
    messages = [_message(item, index, thread) for index, item in enumerate(items)]
    ids = [m.id for m in messages]
    for index, mid in enumerate(ids):
        if mid in ids[:index]:
            raise BadArguments(
                f"messages[{index}].id is also the id of messages[{ids.index(mid)}]: give each "
                "message its own id"
            )
    return messages


def _message(item: object, index: int, thread: str | None) -> Message:
    where = f"messages[{index}]"
    if not isinstance(item, Mapping):
        raise BadArguments(
            f'{where} must be an object such as {{"role": "user", "content": "..."}}, '
            f"not {kind(item)}"
        )
    fields = cast(Mapping[str, object], item)
    unknown = sorted(set(fields) - {"role", "content", "created_at", "id"})
    if unknown:
        raise BadArguments(
            f"{where} has {', '.join(repr(k) for k in unknown)}: a message has only role, "
            "content and (optionally) created_at and id"
        )
    role = fields.get("role")
    if role not in ROLES:
        raise BadArguments(
            f"{where}.role is {kind(role)}: use one of {', '.join(repr(r) for r in ROLES)}"
        )
    content = _content(fields.get("content"), where)
    created = _created_at(fields.get("created_at"), where)
    kwargs: dict[str, Any] = {"created_at": created} if created is not None else {}
    given = fields.get("id")
    if given is not None:
        if not isinstance(given, str):
            raise BadArguments(f"{where}.id must be a string, not {kind(given)}")
        try:
            check_id(f"{where}.id", given)
        except ConfigError as exc:
            raise BadArguments(f"{where}.id {given[:40]!r}: {exc.rule}") from None
        kwargs["id"] = f"{thread}/{given}" if thread is not None else given
    return Message(role=role, parts=(TextPart(text=content),), **kwargs)


def _content(value: object, where: str) -> str:
    if isinstance(value, list):  # OpenAI-style [{"type": "text", "text": ...}] parts
        texts: list[str] = []
        for part in cast(list[object], value):
            text = (
                cast(Mapping[str, object], part).get("text") if isinstance(part, Mapping) else None
            )
            if not isinstance(text, str):
                raise BadArguments(
                    f'{where}.content: each part must be {{"type": "text", "text": "..."}}; '
                    "only text can be remembered"
                )
            texts.append(text)
        value = "\n".join(texts)
    if not isinstance(value, str):
        raise BadArguments(
            f"{where}.content must be the message text (a string), not {kind(value)}"
        )
    if not value.strip():
        raise BadArguments(f"{where}.content is empty: send the message's text")
    if len(value) > MAX_CONTENT_CHARS:
        raise BadArguments(
            f"{where}.content has {len(value):,} characters: send at most "
            f"{MAX_CONTENT_CHARS:,} per message (split it into several messages)"
        )
    if any(c == "\x00" or "\ud800" <= c <= "\udfff" for c in value):
        raise BadArguments(f"{where}.content holds NUL characters or lone surrogates: remove them")
    return value


def _created_at(value: object, where: str) -> datetime | None:
    if value is None:
        return None
    example = "2025-12-04T14:30:00Z"
    if not isinstance(value, str):
        raise BadArguments(
            f"{where}.created_at must be an ISO 8601 time such as {example!r}, not {kind(value)}"
        )
    try:
        parsed = datetime.fromisoformat(value.strip())
    except ValueError:
        raise BadArguments(
            f"{where}.created_at {value[:40]!r} is not an ISO 8601 time: write it as {example!r}"
        ) from None
    if parsed.tzinfo is None or parsed.utcoffset() is None:
        raise BadArguments(
            f"{where}.created_at {value!r} has no time zone: add one, as in {example!r}"
        )
    return parsed
