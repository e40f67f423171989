"""Observational memory for LangGraph agents (``langgraph.prebuilt.create_react_agent``).

``create_react_agent(model, tools, pre_model_hook=pre_model_hook(memory, resource=...,
thread=...))``: before every model call the hook stores what is new in the graph state (the
turn's input, then each step's tool calls and results as they happen) and returns
``{"llm_input_messages": [...]}``, what memory assembled for that step (observations as system
messages, then the raw messages, this turn's included). Activation, synchronous observation and
buffering happen between the steps of a tool loop. The graph state keeps its full history.

* New messages are those the thread has not stored: each LangChain message is stored under an id
  derived from its own (LangGraph gives every state message one), so the store's idempotent append
  and one look-up per call tell them apart, across processes and restarts.
* The input of a turn (from the first new ``HumanMessage`` on) is stored once; AI messages with
  ``tool_calls`` and ``ToolMessage`` results are stored as tool calls and tool results, pairs kept.
  ``SystemMessage`` s in the state are sent first on every call and never stored.
* The last answer of a turn is stored at the next call, or at once with
  ``post_model_hook(memory, ...)`` (recommended when the thread may continue elsewhere).
* ``thread=None`` takes the thread from the run's ``config["configurable"]["thread_id"]``.

Both hooks are async: run the graph with ``ainvoke``/``astream``. With LangGraph 1.x
``create_react_agent`` is deprecated in favour of ``langchain.agents.create_agent`` (the
``langchain`` package, whose middleware replaces these hooks); this module targets
``langgraph.prebuilt`` as installed by ``pip install "obsmem[langgraph]"``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeAlias, cast

from obsmem.errors import ConfigError, MissingExtraError
from obsmem.memory import Memory, ThreadRef
from obsmem.messages import (
    DataPart,
    FilePart,
    ImagePart,
    Message,
    Part,
    ReasoningPart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
)
from obsmem.recall import RECALL_DESCRIPTION, RecallRequest, invalid_request, parse_request

try:
    from langchain_core.messages import (
        AIMessage,
        BaseMessage,
        HumanMessage,
        SystemMessage,
        ToolMessage,
        message_to_dict,
        messages_from_dict,
    )
    from langchain_core.runnables import RunnableConfig
    from langchain_core.tools import BaseTool
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise MissingExtraError(
        "obsmem.integrations.langgraph", "langgraph", package="langchain-core"
    ) from exc

__all__ = [
    "METADATA_KEY",
    "LangGraphMemory",
    "ModelHook",
    "from_langchain",
    "hold_waiting_calls",
    "post_model_hook",
    "pre_model_hook",
    "recall_tool",
    "to_langchain",
]

METADATA_KEY = "langchain"
"""Key of an obsmem message's ``metadata`` holding the LangChain message it was read from."""

ModelHook: TypeAlias = Callable[[Any, RunnableConfig], Awaitable[dict[str, Any]]]
"""An async LangGraph node function: ``(state, config) -> state update``."""

_Item = dict[str, Any]


# ---------------------------------------------------------------------------------------------
# LangChain messages -> obsmem messages
# ---------------------------------------------------------------------------------------------


def _image(url: str) -> ImagePart:
    if url.startswith("data:") and ";base64," in url:
        import base64

        head, data = url.split(";base64,", 1)
        try:
            return ImagePart(media_type=head.removeprefix("data:"), data=base64.b64decode(data))
        except ValueError:
            pass
    return ImagePart(url=url)


def _block(block: Any) -> Part:
    if isinstance(block, str):
        return TextPart(text=block)
    entry = cast(_Item, block) if isinstance(block, dict) else {}
    kind = entry.get("type")
    if kind == "text" and isinstance(entry.get("text"), str):
        return TextPart(text=entry["text"])
    if kind in ("reasoning", "thinking"):
        text = entry.get("reasoning", entry.get("thinking", ""))
        return ReasoningPart(text=text if isinstance(text, str) else "")
    if kind == "image_url":
        image = entry.get("image_url")
        url = cast(_Item, image).get("url") if isinstance(image, dict) else image
        if isinstance(url, str):
            return _image(url)
    if kind == "image" and isinstance(entry.get("url"), str):
        return ImagePart(url=entry["url"])
    return DataPart(name="langchain:content", data=block)


def _blocks(content: Any) -> list[Part]:
    if isinstance(content, str):
        return [TextPart(text=content)] if content else []
    if isinstance(content, list):
        return [_block(b) for b in cast(list[Any], content)]
    return []


def _read(message: BaseMessage, names: dict[str, str]) -> Message:
    kept = {METADATA_KEY: {"message": message_to_dict(message)}}
    if isinstance(message, AIMessage):
        parts = [p for p in _blocks(message.content) if not isinstance(p, DataPart)]
        for call in message.tool_calls:
            call_id = call.get("id") or f"call-{uuid.uuid4().hex}"
            names[call_id] = call["name"]
            parts.append(
                ToolCallPart(tool_call_id=call_id, tool_name=call["name"], args=call["args"])
            )
        return Message(role="assistant", parts=tuple(parts), metadata=kept)
    if isinstance(message, ToolMessage):
        name = message.name or names.get(message.tool_call_id, "")
        result = ToolResultPart(
            tool_call_id=message.tool_call_id,
            tool_name=name,
            content=message.content,
            is_error=message.status == "error",
        )
        return Message(role="tool", parts=(result,), metadata=kept)
    role = "system" if isinstance(message, SystemMessage) else "user"
    return Message(role=role, parts=tuple(_blocks(message.content)), metadata=kept)


def from_langchain(messages: Sequence[BaseMessage], *, thread: str | None = None) -> list[Message]:
    """One obsmem message per LangChain message (the original kept in ``metadata``).

    With ``thread``, a message with an id is stored under ``lc-<thread>-<id>``, so storing it again
    is a no-op.
    """
    names: dict[str, str] = {}
    out: list[Message] = []
    for message in messages:
        read = _read(message, names)
        if thread is not None and message.id:
            read = Message(
                id=_stored_id(thread, message.id),
                role=read.role,
                parts=read.parts,
                metadata=read.metadata,
            )
        out.append(read)
    return out


def _stored_id(thread: str, message_id: str) -> str:
    return f"lc-{thread}-{message_id}"


# ---------------------------------------------------------------------------------------------
# obsmem messages -> LangChain messages
# ---------------------------------------------------------------------------------------------


def _content(parts: Sequence[Part]) -> str | list[str | dict[Any, Any]]:
    blocks: list[str | dict[Any, Any]] = []
    for part in parts:
        if isinstance(part, TextPart):
            blocks.append({"type": "text", "text": part.text})
        elif isinstance(part, ImagePart):
            if part.data is not None:
                import base64

                url = f"data:{part.media_type};base64,{base64.b64encode(part.data).decode()}"
            else:
                url = part.url or ""
            blocks.append({"type": "image_url", "image_url": {"url": url}})
        elif isinstance(part, FilePart):
            name = part.filename or part.url or "attachment"
            blocks.append({"type": "text", "text": f"[file {name} ({part.media_type})]"})
    if all(isinstance(b, dict) and b.get("type") == "text" for b in blocks):
        return "\n".join(cast(str, cast(_Item, b)["text"]) for b in blocks)
    return blocks


def _tool_args(args: dict[str, Any] | str) -> dict[str, Any]:
    if isinstance(args, dict):
        return args
    try:
        parsed = json.loads(args)
    except ValueError:
        return {"input": args}
    return cast(dict[str, Any], parsed) if isinstance(parsed, dict) else {"input": args}


def _tool_message(part: ToolResultPart) -> ToolMessage:
    content = part.content
    text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
    return ToolMessage(
        content=text,
        tool_call_id=part.tool_call_id,
        name=part.tool_name or None,
        status="error" if part.is_error else "success",
    )


def _write(message: Message) -> list[BaseMessage]:
    kept = message.metadata.get(METADATA_KEY)
    if isinstance(kept, dict) and isinstance(cast(_Item, kept).get("message"), dict):
        return list(messages_from_dict([cast(_Item, kept)["message"]]))
    parts = [p for p in message.parts if not isinstance(p, DataPart | ReasoningPart)]
    if message.role == "system":
        return [SystemMessage(content=_content(parts))]
    if message.role == "user":
        return [HumanMessage(content=_content(parts))] if parts else []
    if message.role == "tool":
        return [_tool_message(p) for p in parts if isinstance(p, ToolResultPart)]
    calls = [
        {"name": p.tool_name, "args": _tool_args(p.args), "id": p.tool_call_id, "type": "tool_call"}
        for p in parts
        if isinstance(p, ToolCallPart)
    ]
    text = [p for p in parts if isinstance(p, TextPart | ImagePart | FilePart)]
    out: list[BaseMessage] = [AIMessage(content=_content(text), tool_calls=calls)]
    out.extend(_tool_message(p) for p in parts if isinstance(p, ToolResultPart))
    return out


def to_langchain(messages: Sequence[Message]) -> list[BaseMessage]:
    """LangChain messages for ``messages``: a message read from LangChain comes back as it was;
    others become System/Human/AI/Tool messages (reasoning and data parts are left out)."""
    return [m for message in messages for m in _write(message)]


# ---------------------------------------------------------------------------------------------
# the hooks
# ---------------------------------------------------------------------------------------------


def _state_messages(state: Any) -> list[BaseMessage]:
    raw = state.get("messages") if isinstance(state, Mapping) else getattr(state, "messages", None)
    if not isinstance(raw, list):
        raise ConfigError(
            "state.messages", raw, "the graph state needs a 'messages' list of LangChain messages"
        )
    messages = cast(list[Any], raw)
    for message in messages:
        if not isinstance(message, BaseMessage):
            raise ConfigError("state.messages", message, "give LangChain BaseMessage objects")
        if not message.id:
            message.id = str(uuid.uuid4())
    return cast(list[BaseMessage], messages)


class LangGraphMemory:
    """Observational memory for one LangGraph agent; ``.pre_model_hook`` and
    ``.post_model_hook`` share it. ``thread=None``: the thread is the run's ``thread_id``."""

    def __init__(
        self, memory: Memory, *, resource: str, thread: str | None = None, recall: bool = False
    ) -> None:
        if thread is not None:
            ThreadRef.of({"resource": resource, "thread": thread})
        self.memory = memory
        self.resource = resource
        self.thread = thread
        self.recall = recall
        """The agent has the ``recall`` tool (:meth:`recall_tool`), so the context tells the
        model how to use it; otherwise the context never mentions recall."""

    def __repr__(self) -> str:
        return f"LangGraphMemory(resource={self.resource!r}, thread={self.thread!r})"

    def _ref(self, config: RunnableConfig | None) -> ThreadRef:
        thread = self.thread
        if thread is None:
            configurable = (config or {}).get("configurable") or {}
            thread = configurable.get("thread_id")
        if not isinstance(thread, str | int) or thread == "":
            raise ConfigError(
                "thread",
                thread,
                "give thread= or run the graph with config={'configurable': {'thread_id': ...}}",
            )
        return ThreadRef.of({"resource": self.resource, "thread": str(thread)})

    async def _new(self, ref: ThreadRef, messages: Sequence[BaseMessage]) -> list[BaseMessage]:
        ids = [_stored_id(ref.thread, m.id) for m in messages if m.id]
        stored = await self.memory.store.get_messages(ids, resource_id=ref.resource)
        known = {m.id for m in stored}
        return [m for m in messages if m.id and _stored_id(ref.thread, m.id) not in known]

    async def _save(self, ref: ThreadRef, messages: Sequence[BaseMessage]) -> None:
        storable = [m for m in from_langchain(messages, thread=ref.thread) if m.role != "system"]
        if storable:
            await self.memory.save(ref, storable, actor_model=None)

    async def pre_model_hook(self, state: Any, config: RunnableConfig) -> dict[str, Any]:
        """Store what is new (input, or the last step's tool traffic) and return
        ``{"llm_input_messages": [...]}``: the state's system messages, then what memory
        assembled for this step."""
        ref = self._ref(config)
        messages = _state_messages(state)
        new = await self._new(ref, messages)
        storable = [m for m in from_langchain(new, thread=ref.thread) if m.role != "system"]
        context = await self.memory.context(ref, storable, actor_model=None, recall=self.recall)
        system = [m for m in messages if isinstance(m, SystemMessage)]
        return {"llm_input_messages": [*system, *to_langchain(context.messages)]}

    async def hold(self, state: Any, config: RunnableConfig) -> list[str]:
        """After a run stopped on an ``interrupt`` (an approval asked of a person), hold its
        waiting tool calls back until their results come, even if the conversation goes on
        meanwhile: memory never observes them as interrupted. Returns the held call ids."""
        ref = self._ref(config)
        messages = _state_messages(state)
        answered = {m.tool_call_id for m in messages if isinstance(m, ToolMessage)}
        last = next((m for m in reversed(messages) if isinstance(m, AIMessage)), None)
        waiting = [
            str(c["id"]) for c in (last.tool_calls if last is not None else []) if c.get("id")
        ]
        waiting = [c for c in waiting if c not in answered]
        await self._save(ref, await self._new(ref, messages))
        await self.memory.hold_calls(ref, waiting)
        return waiting

    def recall_tool(self) -> BaseTool:
        """The ``recall`` tool as a LangChain tool, for ``create_react_agent`` and
        ``langchain.agents.create_agent`` alike (add it to the agent's tools, and build the
        hooks with ``recall=True``). It reads only this resource (and, in thread scope, the
        run's thread, taken as the hooks take it); arguments that do not fit come back to the
        model as a message saying what to send. Needs retrieval on."""
        from langchain_core.tools import StructuredTool

        self.memory.require_retrieval()

        async def recall(config: RunnableConfig, **arguments: Any) -> str:
            request = parse_request(arguments)
            if isinstance(request, str):
                return request
            return await self.memory.recall_function(self._ref(config))(**request)

        return StructuredTool.from_function(
            coroutine=recall,
            name="recall",
            description=RECALL_DESCRIPTION,
            args_schema=RecallRequest,
            handle_validation_error=invalid_request,
        )

    async def post_model_hook(self, state: Any, config: RunnableConfig) -> dict[str, Any]:
        """Store the model's new message(s) right away; changes nothing in the state."""
        ref = self._ref(config)
        messages = _state_messages(state)
        new = await self._new(ref, messages)
        await self._save(ref, [m for m in new if not isinstance(m, HumanMessage | SystemMessage)])
        return {}


def pre_model_hook(
    memory: Memory, *, resource: str, thread: str | None = None, recall: bool = False
) -> ModelHook:
    """A ``pre_model_hook`` for ``create_react_agent`` giving it observational memory
    (``recall=True`` when the agent has :func:`recall_tool`)."""
    return LangGraphMemory(memory, resource=resource, thread=thread, recall=recall).pre_model_hook


async def hold_waiting_calls(
    memory: Memory, state: Any, config: RunnableConfig, *, resource: str, thread: str | None = None
) -> list[str]:
    """After ``ainvoke`` returned on an interrupt: hold the waiting calls back until their
    results come (see :meth:`LangGraphMemory.hold`)."""
    return await LangGraphMemory(memory, resource=resource, thread=thread).hold(state, config)


def recall_tool(memory: Memory, *, resource: str, thread: str | None = None) -> BaseTool:
    """The ``recall`` tool as a LangChain tool bound to ``resource`` (and ``thread``, or the
    run's ``thread_id``); see :meth:`LangGraphMemory.recall_tool`."""
    return LangGraphMemory(memory, resource=resource, thread=thread).recall_tool()


def post_model_hook(memory: Memory, *, resource: str, thread: str | None = None) -> ModelHook:
    """A ``post_model_hook`` that stores each model answer at once (pair it with
    :func:`pre_model_hook`; both find what is new in the store, so they need no shared state)."""
    return LangGraphMemory(memory, resource=resource, thread=thread).post_model_hook
