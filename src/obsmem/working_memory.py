"""Working memory: a small document the agent keeps about the user (or one conversation).

A Markdown template (or, with ``schema``, a JSON object validated by a pydantic model) stored per
resource (default) or per thread. The actor sees it as a system message every turn. It is kept
current either by the agent itself through the ``update_working_memory`` tool, or, with
``observation.manage_working_memory=True``, by the Observer (the agent then gets no tool).
Updates made through the tool are never themselves observed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from .errors import ConfigError
from .messages import Message, TextPart, ToolCallPart, ToolResultPart
from .meta_keys import META_WORKING_MEMORY
from .neutral import neutral_text
from .stores import CoreStore, ResourcePatch, ThreadPatch

__all__ = [
    "DEFAULT_TEMPLATE",
    "TOOL_NAME",
    "WorkingMemory",
    "read_working_memory",
    "resolve_working_memory",
    "stored_working_memory",
    "strip_tool_traffic",
    "working_memory_message",
    "working_memory_patch",
    "write_working_memory",
]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
TOOL_NAME = "update_working_memory"
SECTION = "working-memory"
DEFAULT_TEMPLATE = """\
# About the user
- Name:
- Location:
- Occupation:
- Preferences:
- Goals:
- Important dates:
"""


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkingMemory:
    """How working memory is kept: ``scope`` "resource" (shared by the user's threads) or
    "thread"; a Markdown ``template`` or a pydantic ``schema``."""

    scope: Literal["resource", "thread"] = "resource"
    template: str = DEFAULT_TEMPLATE
    schema: type[BaseModel] | None = None

    def blank(self) -> str:
        if self.schema is not None:
            return json.dumps(_schema_skeleton(self.schema), indent=2)
        return self.template

    def describe(self) -> str:
        if self.schema is not None:
            shape = json.dumps(self.schema.model_json_schema(), indent=2)
            return f"a JSON object matching this JSON schema:\n{shape}"
        return f"Markdown following this template:\n{self.template}"


def resolve_working_memory(
    value: bool | Mapping[str, Any] | WorkingMemory | None,
) -> WorkingMemory | None:
    if value is None or value is False:
        return None
    if value is True:
        return WorkingMemory()
    if isinstance(value, WorkingMemory):
        return value
    allowed = {"enabled", "scope", "template", "schema"}
    unknown = set(value) - allowed
    if unknown:
        raise ConfigError(
            f"working_memory.{sorted(unknown)[0]}", value, f"allowed keys are {sorted(allowed)}"
        )
    if value.get("enabled") is False:
        return None
    scope = value.get("scope", "resource")
    if scope not in ("resource", "thread"):
        raise ConfigError("working_memory.scope", scope, 'must be "resource" or "thread"')
    schema = value.get("schema")
    if schema is not None and not (isinstance(schema, type) and issubclass(schema, BaseModel)):
        raise ConfigError("working_memory.schema", schema, "must be a pydantic model class")
    template = value.get("template", DEFAULT_TEMPLATE)
    if not isinstance(template, str) or not template.strip():
        raise ConfigError("working_memory.template", template, "must be non-empty Markdown")
    return WorkingMemory(scope=scope, template=template, schema=schema)


def _schema_skeleton(schema: type[BaseModel]) -> dict[str, Any]:
    return {name: None for name in schema.model_fields}


def stored_working_memory(
    wm: WorkingMemory, *, thread_metadata: Mapping[str, Any], resource_metadata: Mapping[str, Any]
) -> str | None:
    """The working memory a snapshot holds, or None when nothing was written yet."""
    source = resource_metadata if wm.scope == "resource" else thread_metadata
    value = source.get(META_WORKING_MEMORY)
    return value if isinstance(value, str) else None


def working_memory_patch(
    wm: WorkingMemory, text: str, *, thread_id: str, resource_id: str
) -> ThreadPatch | ResourcePatch:
    """The patch that stores ``text`` (already validated) as the working memory."""
    if wm.scope == "resource":
        return ResourcePatch(resource_id=resource_id, set=(((META_WORKING_MEMORY,), text),))
    return ThreadPatch(thread_id=thread_id, set=(((META_WORKING_MEMORY,), text),))


async def read_working_memory(
    store: CoreStore, wm: WorkingMemory, *, thread_id: str, resource_id: str
) -> str | None:
    """The stored working memory, or None when nothing was written yet."""
    if wm.scope == "resource":
        value = (await store.get_resource(resource_id)).get(META_WORKING_MEMORY)
    else:
        thread = await store.get_thread(thread_id)
        value = None if thread is None else thread.metadata.get(META_WORKING_MEMORY)
    return value if isinstance(value, str) else None


async def write_working_memory(
    store: CoreStore, wm: WorkingMemory, content: str, *, thread_id: str, resource_id: str
) -> str:
    """Validate and store new working memory; returns what was stored. A value that does not
    match the schema raises ValueError saying why (the agent sees it and can retry)."""
    text = content.strip()
    if not text:
        raise ValueError("working memory cannot be empty; send the whole updated document")
    if wm.schema is not None:
        try:
            model = wm.schema.model_validate_json(text)
        except ValidationError as exc:
            raise ValueError(f"working memory does not match its schema: {exc}") from exc
        text = model.model_dump_json(indent=2)
    if wm.scope == "resource":
        await store.update_resource(resource_id, {META_WORKING_MEMORY: text})
    else:
        await store.update_thread(thread_id, metadata={META_WORKING_MEMORY: text})
    return text


def strip_tool_traffic(messages: Sequence[Message]) -> list[Message]:
    """``messages`` without the working-memory tool's calls and results (never observed)."""
    out: list[Message] = []
    for message in messages:
        parts = tuple(
            p
            for p in message.parts
            if not (isinstance(p, ToolCallPart | ToolResultPart) and p.tool_name == TOOL_NAME)
        )
        if parts:
            out.append(message if len(parts) == len(message.parts) else message.with_parts(parts))
    return out


def working_memory_message(content: str, *, managed: bool) -> Message:
    """The system message that shows working memory to the actor. Its content is shown neutral
    (:mod:`obsmem.neutral`): working memory is written from conversations, and a stored
    ``</working_memory>`` must not end the block."""
    how = (
        "It is kept up to date for you; do not try to change it."
        if managed
        else f"When you learn something that belongs in it, call {TOOL_NAME} with the whole "
        "updated document."
    )
    text = (
        "<working_memory>\n"
        f"{neutral_text(content.strip())}\n"
        "</working_memory>\n"
        "This is what you know about the user across conversations. " + how
    )
    return Message(
        role="system",
        parts=(TextPart(text=text),),
        id="obsmem-working-memory",
        created_at=_EPOCH,
        metadata={"obsmem": {"synthetic": "working_memory"}},
    )
