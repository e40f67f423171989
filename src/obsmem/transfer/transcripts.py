"""Plain transcripts: an OpenAI-style chat transcript read as one thread of an import.

A transcript is a JSON list of chat messages, an object with such a list under ``messages``, or
JSON Lines of messages, tool calls and ``tool`` results included. The messages are converted the
way the proxy converts a client's conversation (:func:`obsmem.proxy.history.new_messages`: the
same parts and the same message ids the proxy would give them), and the leading system messages
are left out as the proxy leaves them (they are the application's instructions, not the
conversation). The thread comes with no log: memory builds on its first turn (a thread older than
memory is caught up lazily, SPEC §4).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal, cast

from ..messages import utcnow
from .format import FORMAT, DataRecord, Header, MessageRow, ThreadRow
from .importing import ImportInputError

__all__ = ["detect", "transcript_records"]

Kind = Literal["obsmem", "openai", "mastra"]


def detect(path: Path) -> Kind:
    """``obsmem`` for an export file (its first line is the header), ``openai`` for a chat
    transcript (a JSON list or object, or JSON Lines of messages), ``mastra`` for a SQLite
    database (what Mastra's ``@mastra/libsql`` store writes)."""
    with path.open("rb") as raw:
        if raw.read(16) == b"SQLite format 3\x00":
            return "mastra"
    with path.open("rb") as lines:
        first = next((line for line in lines if line.strip()), b"")
    try:
        value = json.loads(first)
    except ValueError:
        return "openai"  # a JSON document over several lines: only a transcript is
    if isinstance(value, dict) and cast(dict[str, Any], value).get("format") == FORMAT:
        return "obsmem"
    return "openai"


def _messages(path: Path) -> list[Mapping[str, Any]]:
    """The transcript's messages; ImportInputError naming the line of one that is not."""
    text = path.read_text(encoding="utf-8")
    try:
        whole = json.loads(text)
    except ValueError:
        whole = None
        found: list[Any] = []
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                found.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ImportInputError(
                    f"{path}, line {number}: not JSON ({exc.msg}); a transcript is a JSON list "
                    "of chat messages or one message a line (nothing was imported)"
                ) from None
    else:
        found = whole if isinstance(whole, list) else [whole]
        if isinstance(whole, dict) and "messages" in whole:
            found = cast(dict[str, Any], whole)["messages"]
    for index, item in enumerate(found, start=1):
        if not isinstance(item, dict) or "role" not in item:
            where = f"line {index}" if whole is None else f"message {index}"
            raise ImportInputError(
                f"{path}, {where}: not a chat message (an object with a role); give an OpenAI "
                "chat transcript (nothing was imported)"
            )
    return cast(list[Mapping[str, Any]], found)


def transcript_records(
    path: str | Path, *, thread: str, resource: str
) -> Iterator[Header | DataRecord]:
    """The import of ``path`` as thread ``thread`` of ``resource``: header, thread, messages."""
    from ..memory import ThreadRef
    from ..proxy.history import fingerprint, new_messages, split_instructions

    path = Path(path)
    _, conversation = split_instructions(_messages(path))
    ref = ThreadRef(thread=thread, resource=resource)
    try:
        prints = [fingerprint(m) for m in conversation]
        messages, _ = new_messages(conversation, 0, ref, prints, None, set())
    except (ValueError, KeyError, TypeError) as exc:
        raise ImportInputError(f"{path}: {exc} (nothing was imported)") from None
    now = utcnow()
    yield Header.now({"thread": thread})
    yield ThreadRow(
        id=thread,
        resource_id=resource,
        message_count=len(messages),
        created_at=now,
        updated_at=now,
    )
    for seq, message in enumerate(messages, start=1):
        yield MessageRow.of(replace(message, seq=seq, thread_id=thread, resource_id=resource))
