"""Observational memory as an OpenAI Agents SDK ``Session``.

``ObservationalSession(memory, session_id=thread, resource=...)`` implements the SDK's ``Session``
protocol (``get_items``, ``add_items``, ``pop_item``, ``clear_session``) on a Memory thread:

* ``get_items()`` (no limit) is the turn's context: memory work that is due runs, then the
  observations come back as ``system`` items followed by the raw (unobserved) items. The Runner
  appends the new input to it and sends it to the model.
* ``add_items(items)`` stores the turn: the input, then the model's messages, function calls,
  function call outputs and reasoning, in order. Each stored message keeps the SDK item it came
  from, so the SDK gets back exactly what it gave.
* ``call_model_input_filter`` gives memory at every model call of a run: pass it as
  ``RunConfig(call_model_input_filter=session.call_model_input_filter)``. The Runner stores each
  step's items as they happen (``add_items`` before the next model call); the filter sends the
  model what memory assembled for that step, so activation, synchronous observation and
  buffering happen between the steps of a long tool loop. Without it, memory is assembled once
  per run.
* ``get_items(limit=n)`` is the raw tail (the newest ``n`` stored items), which the SDK reads to
  check its own writes. Leave ``SessionSettings.limit`` unset: with it the Runner would read the raw
  tail instead of the managed context.
* Memory never deletes a stored message, so ``pop_item`` and ``clear_session`` raise; start a new
  conversation with a new ``session_id``.

``ObservationalSession.wrap(inner, memory, resource=...)`` keeps an existing session (SQLite,
Redis, ...) as the full history: ``add_items`` writes to both, ``get_items(limit=n)``,
``pop_item`` and ``clear_session`` go to the inner session, and ``get_items()`` is the managed
context. Popping or clearing the inner session does not change what memory has stored.

Tool calls and their outputs are stored as obsmem tool-call and tool-result parts, so observation
never separates them and a thread started here continues in any other front door. Reasoning items
from another framework are not sent (the Responses API only accepts its own).

The module needs nothing from the SDK at run time (install it with ``pip install
"obsmem[openai-agents]"``).
"""

from __future__ import annotations

import base64
import copy
import json
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, cast

from obsmem.errors import ObsmemError
from obsmem.memory import Memory, ThreadRef
from obsmem.messages import (
    DataPart,
    FilePart,
    ImagePart,
    Message,
    Part,
    ReasoningPart,
    Role,
    TextPart,
    ToolCallPart,
    ToolResultPart,
)
from obsmem.recall import RECALL_DESCRIPTION, RecallRequest, parse_request

if TYPE_CHECKING:
    from agents import FunctionTool
    from agents.items import TResponseInputItem
    from agents.memory.session_settings import SessionSettings
    from agents.run_config import CallModelData, ModelInputData

__all__ = [
    "METADATA_KEY",
    "ObservationalSession",
    "from_agents_items",
    "to_agents_items",
]

METADATA_KEY = "openai_agents"
"""Key of an obsmem message's ``metadata`` holding the SDK item it was read from."""

_Item = dict[str, Any]
_DATA_URL = re.compile(r"^data:([^;,]+)(?:;[^,]*)?;base64,(.*)$", re.DOTALL)


# ---------------------------------------------------------------------------------------------
# SDK items -> obsmem messages
# ---------------------------------------------------------------------------------------------


def _as_dict(item: Any) -> _Item:
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


def _content_part(item: Any) -> Part:
    if isinstance(item, str):
        return TextPart(text=item)
    entry = cast(_Item, item) if isinstance(item, dict) else {}
    kind = entry.get("type")
    text = entry.get("text")
    if kind in ("input_text", "output_text", "text") and isinstance(text, str):
        return TextPart(text=text)
    if kind == "refusal" and isinstance(entry.get("refusal"), str):
        return TextPart(text=entry["refusal"])
    if kind == "input_image" and isinstance(entry.get("image_url"), str):
        url: str = entry["image_url"]
        decoded = _decode(url)
        if decoded is not None:
            return ImagePart(media_type=decoded[0], data=decoded[1])
        return ImagePart(url=url)
    if kind == "input_file":
        name = entry.get("filename") if isinstance(entry.get("filename"), str) else None
        data = entry.get("file_data")
        decoded = _decode(data) if isinstance(data, str) else None
        if decoded is not None:
            return FilePart(media_type=decoded[0], data=decoded[1], filename=name)
        ref = entry.get("file_url") or entry.get("file_id")
        if isinstance(ref, str):
            return FilePart(media_type="application/octet-stream", url=ref, filename=name)
    return DataPart(name="openai-agents:content", data=item)


def _content_parts(content: Any) -> list[Part]:
    if isinstance(content, str):
        return [TextPart(text=content)]
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


def _read_item(item: _Item) -> tuple[Role, list[Part]]:
    kind = item.get("type")
    role = item.get("role")
    call_id = item.get("call_id")
    if kind in (None, "message") and isinstance(role, str):
        mapped: Role = (
            "assistant"
            if role == "assistant"
            else "system"
            if role in ("system", "developer")
            else "user"
        )
        return mapped, _content_parts(item.get("content"))
    if kind == "reasoning":
        summary = item.get("summary")
        texts = [
            cast(_Item, s).get("text", "")
            for s in (cast(list[Any], summary) if isinstance(summary, list) else [])
            if isinstance(s, dict)
        ]
        return "assistant", [ReasoningPart(text="\n\n".join(t for t in texts if t))]
    if isinstance(kind, str) and isinstance(call_id, str):
        if kind.endswith("_output"):
            name = item.get("name")
            tool = name if isinstance(name, str) else kind.removesuffix("_output")
            return "tool", [
                ToolResultPart(tool_call_id=call_id, tool_name=tool, content=item.get("output"))
            ]
        if kind.endswith("_call"):
            name = item.get("name")
            tool = name if isinstance(name, str) else kind
            raw = item.get("arguments", item.get("input", item.get("action")))
            return "assistant", [
                ToolCallPart(tool_call_id=call_id, tool_name=tool, args=_args(raw))
            ]
    return "assistant", [DataPart(name="openai-agents:item", data=item)]


def from_agents_items(
    items: Sequence[Any], *, thread_id: str | None = None, resource_id: str | None = None
) -> list[Message]:
    """One obsmem message per Agents SDK item (the item kept in ``metadata``)."""
    out: list[Message] = []
    names: dict[str, str] = {}
    for raw in items:
        item = _as_dict(raw)
        role, parts = _read_item(item)
        fixed: list[Part] = []
        for part in parts:
            if isinstance(part, ToolCallPart):
                names[part.tool_call_id] = part.tool_name
            elif isinstance(part, ToolResultPart) and part.tool_call_id in names:
                part = ToolResultPart(
                    tool_call_id=part.tool_call_id,
                    tool_name=names[part.tool_call_id],
                    content=part.content,
                )
            fixed.append(part)
        out.append(
            Message(
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


def _input_content(part: Part) -> _Item | None:
    match part:
        case TextPart():
            return {"type": "input_text", "text": part.text}
        case ImagePart():
            url = _data_url(part.media_type, part.data) if part.data is not None else part.url
            return {"type": "input_image", "image_url": url, "detail": part.detail or "auto"}
        case FilePart() if part.data is not None:
            entry: _Item = {
                "type": "input_file",
                "file_data": _data_url(part.media_type, part.data),
            }
            if part.filename:
                entry["filename"] = part.filename
            return entry
        case FilePart():
            return {"type": "input_text", "text": f"[file {part.filename or ''} at {part.url}]"}
        case _:
            return None


def _output(content: Any) -> str:
    return content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)


def _write_message(message: Message) -> list[_Item]:
    kept = message.metadata.get(METADATA_KEY)
    if isinstance(kept, dict) and isinstance(cast(_Item, kept).get("item"), dict):
        return [copy.deepcopy(cast(_Item, kept)["item"])]
    parts = [p for p in message.parts if not isinstance(p, DataPart)]
    if message.role in ("system", "user"):
        contents = [c for c in (_input_content(p) for p in parts) if c is not None]
        if not contents:
            return []
        if all(c["type"] == "input_text" for c in contents):
            text = "\n".join(c["text"] for c in contents)
            return [{"role": message.role, "content": text}]
        return [{"role": message.role, "content": contents}]
    out: list[_Item] = []
    text = "\n".join(p.text for p in parts if isinstance(p, TextPart))
    if text:
        out.append({"role": "assistant", "content": text})
    for part in parts:
        if isinstance(part, ToolCallPart):
            args = part.args if isinstance(part.args, str) else json.dumps(part.args)
            out.append(
                {
                    "type": "function_call",
                    "call_id": part.tool_call_id,
                    "name": part.tool_name,
                    "arguments": args,
                }
            )
        elif isinstance(part, ToolResultPart):
            out.append(
                {
                    "type": "function_call_output",
                    "call_id": part.tool_call_id,
                    "output": _output(part.content),
                }
            )
    return out


def to_agents_items(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Agents SDK input items for ``messages``: an item read from the SDK comes back as it was;
    other messages become ``system``/``user``/``assistant`` messages, ``function_call`` and
    ``function_call_output`` items (reasoning and data parts of other frameworks are left out)."""
    return [item for message in messages for item in _write_message(message)]


# ---------------------------------------------------------------------------------------------
# the session
# ---------------------------------------------------------------------------------------------


def _waiting_calls(stored: Sequence[Message], approving: frozenset[str]) -> list[str]:
    """The calls in ``stored`` of tools that need approval, stored without their output."""
    parts = [p for m in stored for p in m.parts]
    answered = {p.tool_call_id for p in parts if isinstance(p, ToolResultPart)}
    return [
        p.tool_call_id
        for p in parts
        if isinstance(p, ToolCallPart)
        and p.tool_name in approving
        and p.tool_call_id not in answered
    ]


class InnerSession(Protocol):
    """The part of the SDK's ``Session`` protocol a wrapped session must have."""

    session_id: str

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]: ...

    async def add_items(self, items: list[TResponseInputItem]) -> None: ...

    async def pop_item(self) -> TResponseInputItem | None: ...

    async def clear_session(self) -> None: ...


class ObservationalSession:
    """An OpenAI Agents SDK session whose history is a Memory thread (see the module docstring).

    ``Runner.run(agent, "...", session=ObservationalSession(memory, session_id="chat-1",
    resource="user-1"))``.
    """

    session_settings: SessionSettings | None = None

    def __init__(
        self,
        memory: Memory,
        *,
        session_id: str,
        resource: str,
        inner: InnerSession | None = None,
    ) -> None:
        self.memory = memory
        self.ref = ThreadRef.of({"resource": resource, "thread": session_id})
        self.session_id = session_id
        self.inner = inner
        self._step_from: int | None = None
        """The seq of the first message stored since the last model call (the step the
        next call answers: it stays raw)."""
        self._approving: frozenset[str] = frozenset()
        """The agent's tools that may wait for an approval (``needs_approval``): a call of one
        stored without its output is held back until the output comes."""
        self.recall_offered = False
        """This session made a ``recall`` tool (:meth:`recall_tool`), so ``get_items()`` tells
        the model how to use it. The input filter looks at the agent's own tools instead."""

    @classmethod
    def wrap(cls, inner: InnerSession, memory: Memory, *, resource: str) -> ObservationalSession:
        """Observational memory over ``inner``, which keeps the full history (thread id: the inner
        session's ``session_id``)."""
        return cls(memory, session_id=inner.session_id, resource=resource, inner=inner)

    def __repr__(self) -> str:
        wrapped = f", inner={self.inner!r}" if self.inner is not None else ""
        return (
            f"ObservationalSession(session_id={self.session_id!r}, "
            f"resource={self.ref.resource!r}{wrapped})"
        )

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The managed context (no ``limit``), or the newest ``limit`` stored items."""
        if limit is None:
            context = await self.memory.context(
                self.ref, (), actor_model=None, recall=self.recall_offered
            )
            return cast("list[TResponseInputItem]", to_agents_items(context.messages))
        if self.inner is not None:
            return await self.inner.get_items(limit)
        if limit <= 0:
            return []
        items: list[_Item] = []
        before: int | None = None
        while len(items) < limit:
            page = await self.memory.store.list_messages(
                self.ref.thread,
                through_seq=before,
                limit=limit,
                newest_first=True,
            )
            if not page:
                break
            items = to_agents_items(list(reversed(page))) + items
            first = page[-1].seq
            if first is None or first <= 1:
                break
            before = first - 1
        return cast("list[TResponseInputItem]", items[-limit:])

    async def call_model_input_filter(self, data: CallModelData[Any]) -> ModelInputData:
        """``RunConfig.call_model_input_filter``: what memory assembled for this step, in place
        of the Runner's own input (whose items this session has already stored)."""
        from agents.run_config import ModelInputData

        tools = data.agent.tools
        recall = any(getattr(tool, "name", None) == "recall" for tool in tools)
        self._approving = frozenset(
            str(getattr(t, "name", "")) for t in tools if getattr(t, "needs_approval", False)
        )
        step, self._step_from = self._step_from, None
        context = await self.memory.context(
            self.ref, (), actor_model=None, recall=recall, keep_raw_from=step
        )
        items = cast("list[TResponseInputItem]", to_agents_items(context.messages))
        return ModelInputData(input=items, instructions=data.model_data.instructions)

    def recall_tool(self) -> FunctionTool:
        """The ``recall`` tool for this session's conversation, as an SDK ``FunctionTool``:
        ``Agent(..., tools=[session.recall_tool()])``. It only reads this session's resource
        (and thread, in thread scope); arguments that do not fit come back to the model as a
        message saying what to send. Needs retrieval on."""
        from agents import FunctionTool

        recall = self.memory.recall_function(self.ref)

        async def invoke(ctx: Any, arguments: str) -> str:
            request = parse_request(arguments)
            return request if isinstance(request, str) else await recall(**request)

        self.recall_offered = True
        return FunctionTool(
            name="recall",
            description=RECALL_DESCRIPTION,
            params_json_schema=RecallRequest.model_json_schema(),
            on_invoke_tool=invoke,
            strict_json_schema=False,
        )

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Store the items (and hand them to the inner session, if any)."""
        if not items:
            return
        if self.inner is not None:
            await self.inner.add_items(items)
        messages = from_agents_items(items)
        stored = await self.memory.save(self.ref, messages, actor_model=None)
        first = next((m.seq for m in stored if m.seq is not None), None)
        if self._step_from is None:
            self._step_from = first
        waiting = _waiting_calls(stored, self._approving)
        if waiting:
            await self.memory.hold_calls(self.ref, waiting)

    async def pop_item(self) -> TResponseInputItem | None:
        if self.inner is not None:
            return await self.inner.pop_item()
        raise ObsmemError(
            "ObservationalSession.pop_item: observational memory never deletes a stored message; "
            "wrap a session that can (ObservationalSession.wrap(inner, memory, resource=...))"
        )

    async def clear_session(self) -> None:
        if self.inner is not None:
            await self.inner.clear_session()
            return
        raise ObsmemError(
            "ObservationalSession.clear_session: observational memory never deletes stored "
            "messages; start a new conversation with a new session_id, or clear its memory with "
            "memory.om.clear(thread_id, resource_id)"
        )
