"""Observational memory as an OpenAI Agents SDK ``Session``.

``ObservationalSession(memory, session_id=thread, resource=...)`` implements the SDK's ``Session``
protocol (``get_items``, ``add_items``, ``pop_item``, ``clear_session``) on a Memory thread:

* ``get_items()`` (no limit) is the turn's context: memory work that is due runs, then the
  observations come back as ``system`` items followed by the raw (unobserved) items. The Runner
  appends the new input to it and sends it to the model.
* ``add_items(items)`` stores the turn: the input, then the model's messages, function calls,
  function call outputs and reasoning, in order. Each stored message keeps the SDK item it came
  from, so the SDK gets back exactly what it gave. A function call output stored in a later
  batch than its call (a run resumed after an approval) is named after its call, found in the
  thread.
* ``call_model_input_filter`` gives memory at every model call of a run: pass it as
  ``RunConfig(call_model_input_filter=session.call_model_input_filter)``. The Runner stores each
  step's items as they happen (``add_items`` before the next model call); the filter sends the
  model what memory assembled for that step, so activation, synchronous observation and
  buffering happen between the steps of a long tool loop. Without it, memory is assembled once
  per run and each later step is sent the Runner's whole growing item list: the first time a
  run calls the model again after a tool without the filter, the session says so with a
  WARNING on the ``obsmem`` logger (once per session). The SDK gives a session no say in a
  step's input (the Runner reads ``get_items()`` once, at the start of a run), so the filter
  cannot be put in for you.
* ``get_items(limit=n)`` is the raw tail: the newest ``n`` stored items, without those taken
  back. The SDK reads it to check its own writes (a run resumed after an approval does).
* ``pop_item()`` takes back the newest item and returns it (``Memory.retract_last``): storage
  keeps it, marked; it leaves the context and memory never observes it. The SDK pops items
  itself to undo a write it retries.
* ``clear_session()`` starts the conversation over, as ``on_clear`` says. By default
  (``"new_thread"``) nothing is forgotten: the session goes on in a new memory thread, and the
  old thread keeps its messages and what memory learned from them. ``on_clear="forget"``
  forgets this thread's memory as well (``Memory.forget_thread``, thread scope only).

``SessionSettings(limit=n)``, on the session or in ``RunConfig(session_settings=...)``, is
honoured on top of memory: the model gets memory's notes, at most ``n`` items of the history
from before the run, and the run's own items (as the SDK sends them with a plain session). The
Runner is never handed the limit itself, since it would read the raw tail instead of memory.

``ObservationalSession.wrap(inner, memory, resource=...)`` keeps an existing session (SQLite,
Redis, ...) as the full history: ``add_items``, ``pop_item`` and ``clear_session`` apply to both,
``get_items(limit=n)`` reads the inner session, and ``get_items()`` is the managed context.

Memory's cycles (observation, reflection, buffering, activation: the ``data-om-*`` events) are
spans of the SDK trace they run in (``obsmem.observation``, ``obsmem.buffering.observation``,
``obsmem.activation.observation``, ... with their token counts and the memory model's usage),
so any tracing processor sees them. ``session.subscribe(listener)`` hands the events of this
session's thread to your code, and ``session.stream_events(result)`` merges them into a
streamed run's events (the SDK's own stream has no room for events from outside the run).

Sync code (``Runner.run_sync``): ``with ObservationalSession(...) as session:`` (or
``own_loop=True`` and ``session.close()``) runs memory's work on the memory's own loop thread,
so the background buffering a call starts carries on between calls, and closes the memory at
the end.

With retrieval on, ``session.tools()`` is the ``recall`` tool to give the agent
(``Agent(tools=[*your_tools, *session.tools()])``); the filter tells the model about recall only
when the agent it calls has the tool.

Tool calls and their outputs are stored as obsmem tool-call and tool-result parts, so observation
never separates them and a thread started here continues in any other front door. Reasoning items
from another framework are not sent (the Responses API only accepts its own).

The module needs nothing from the SDK to be imported (install it with ``pip install
"obsmem[openai-agents]"``).
"""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import logging
import re
import threading
import weakref
from collections import deque
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeAlias, TypeVar, cast

from obsmem.errors import ConfigError
from obsmem.events import (
    ActivationEvent,
    BufferingEndEvent,
    BufferingFailedEvent,
    BufferingStartEvent,
    Event,
    ObservationEndEvent,
    ObservationFailedEvent,
    ObservationStartEvent,
)
from obsmem.llm import LLMRequest, LLMResult
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
from obsmem.window import RETRACTED_THROUGH_KEY, is_retracted

if TYPE_CHECKING:
    from agents import FunctionTool, Tool
    from agents.items import TResponseInputItem
    from agents.memory.session_settings import SessionSettings
    from agents.result import RunResultStreaming
    from agents.run_config import CallModelData, ModelInputData
    from agents.stream_events import StreamEvent
    from agents.tracing import Span, Trace

__all__ = [
    "METADATA_KEY",
    "ClearChoice",
    "MemoryStreamEvent",
    "ObservationalSession",
    "from_agents_items",
    "to_agents_items",
    "trace_memory",
]

METADATA_KEY = "openai_agents"
"""Key of an obsmem message's ``metadata`` holding the SDK item it was read from (and of a
session's first thread's metadata naming the thread it goes on in after a clear)."""

ClearChoice: TypeAlias = Literal["new_thread", "forget"]
"""What ``ObservationalSession.clear_session()`` does (the ``on_clear`` option): go on in a new
memory thread, forgetting nothing (``"new_thread"``, the default), or forget this thread's
memory (``"forget"``)."""

_Item = dict[str, Any]
log = logging.getLogger("obsmem")
_DATA_URL = re.compile(r"^data:([^;,]+)(?:;[^,]*)?;base64,(.*)$", re.DOTALL)
T = TypeVar("T")


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
    items: Sequence[Any],
    *,
    thread_id: str | None = None,
    resource_id: str | None = None,
    tool_names: Mapping[str, str] | None = None,
) -> list[Message]:
    """One obsmem message per Agents SDK item (the item kept in ``metadata``).

    A tool result is named after its call (an SDK output item carries only the call id). The
    call is looked up in ``items`` first, then in ``tool_names`` (call id -> tool name): give
    the names of earlier calls when a result comes in a later batch than its call (a run
    resumed after an approval)."""
    out: list[Message] = []
    names: dict[str, str] = dict(tool_names or {})
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
# memory cycles as spans of the SDK's tracing
# ---------------------------------------------------------------------------------------------

_UNTRACED = frozenset(
    {
        "type",
        "observations",
        "current_task",
        "suggested_response",
        "extracted_values",
        "extraction_failures",
        "config",
    }
)
"""Event fields a span leaves out: what memory wrote (traces leave the process; the recall tool
and ``memory.om`` show it) and the options."""

_CycleEnd: TypeAlias = (
    ObservationEndEvent | BufferingEndEvent | ObservationFailedEvent | BufferingFailedEvent
)
_MAX_USAGE = 256
"""Most cycles whose memory-model usage waits for their end event (older ones are dropped)."""
_MAX_EARLY = 256
"""Most events a session holds until its run's trace shows up (older ones are dropped)."""


def _span_name(event: Event) -> str:
    operation = str(getattr(event, "operation_type", "observation"))
    if isinstance(event, BufferingStartEvent | BufferingEndEvent | BufferingFailedEvent):
        return f"obsmem.buffering.{operation}"
    if isinstance(event, ActivationEvent):
        return f"obsmem.activation.{operation}"
    return f"obsmem.{operation}"


def _cycle_key(event: Event) -> tuple[str, str]:
    """Which open span an event belongs to (a buffered cycle and a synchronous one may share
    no id, but keep them apart anyway)."""
    buffered = isinstance(event, BufferingStartEvent | BufferingEndEvent | BufferingFailedEvent)
    return ("buffering" if buffered else "cycle", str(getattr(event, "cycle_id", "")))


def _span_fields(event: Event) -> dict[str, Any]:
    return {k: v for k, v in event.to_dict().items() if k not in _UNTRACED}


_Parent: TypeAlias = "Trace | Span[Any]"


def _current_parent() -> Trace | Span[Any] | None:
    """The SDK span (else trace) current here, if any."""
    from agents.tracing import get_current_span, get_current_trace

    return get_current_span() or get_current_trace()


class _CycleSpans:
    """Memory cycles as custom spans of the Agents SDK trace of the run they belong to.

    A cycle's start event opens a span under the span current where the work runs (a
    background task, and work sent to memory's own loop thread, carry the context they were
    started from). Work that runs outside any trace (the Runner reads a session's history
    before it starts the run's trace) goes to the session of its thread: under the run it
    last saw, or, at the start of a run, held until the run's trace shows up. An end or failed
    event closes the span with the token counts and the memory model's usage; an activation is
    a span of its own. With tracing disabled the SDK hands out no-op spans."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: dict[tuple[str, str], Span[Any]] = {}
        self._usage: dict[str, dict[str, Any]] = {}
        self.sessions: weakref.WeakValueDictionary[str, ObservationalSession] = (
            weakref.WeakValueDictionary()
        )
        """The session of each thread, for work that runs outside any trace."""

    def on_event(self, event: Event) -> None:
        if not isinstance(event, _TRACED_EVENTS):
            return
        parent = _current_parent()
        session = self.sessions.get(event.thread_id) if parent is None else None
        if session is not None and not session._traced(event):  # pyright: ignore[reportPrivateUsage]
            return
        self.record(event, session._trace_parent if session is not None else parent)  # pyright: ignore[reportPrivateUsage]

    def record(self, event: Event, parent: _Parent | None) -> None:
        """Open, close or make the span of ``event`` (under ``parent``; None: the current)."""
        if isinstance(event, ObservationStartEvent | BufferingStartEvent):
            span = self._started(event, parent)
            with self._lock:
                self._open[_cycle_key(event)] = span
        elif isinstance(
            event,
            ObservationEndEvent | BufferingEndEvent | ObservationFailedEvent | BufferingFailedEvent,
        ):
            self._finish(event, parent)
        elif isinstance(event, ActivationEvent):
            self._started(event, parent).finish()

    def on_call(self, request: LLMRequest, result: LLMResult) -> None:
        """Add a memory-model call's usage to its cycle."""
        if not request.cycle_id:
            return
        with self._lock:
            usage = self._usage.setdefault(
                request.cycle_id,
                {"model_calls": 0, "model_input_tokens": 0, "model_output_tokens": 0},
            )
            usage["model_calls"] += 1
            usage["model_input_tokens"] += result.input_tokens
            usage["model_output_tokens"] += result.output_tokens
            usage["model"] = result.model_name
            while len(self._usage) > _MAX_USAGE:
                del self._usage[next(iter(self._usage))]

    def _started(self, event: Event, parent: _Parent | None) -> Span[Any]:
        from agents.tracing import custom_span

        span = custom_span(_span_name(event), data=_span_fields(event), parent=parent)
        span.start()
        return span

    def _finish(self, event: _CycleEnd, parent: _Parent | None) -> None:
        from agents.tracing import SpanError

        with self._lock:
            span = self._open.pop(_cycle_key(event), None)
            usage = self._usage.pop(event.cycle_id, {})
        if span is None:  # started before memory was traced
            span = self._started(event, parent)
        data = cast(dict[str, Any], span.span_data.data)
        data.update(_span_fields(event))
        data.update(usage)
        if isinstance(event, ObservationFailedEvent | BufferingFailedEvent):
            span.set_error(SpanError(message=event.error, data={"event": event.type}))
        span.finish()


_TRACED_EVENTS = (
    ObservationStartEvent,
    ObservationEndEvent,
    ObservationFailedEvent,
    BufferingStartEvent,
    BufferingEndEvent,
    BufferingFailedEvent,
    ActivationEvent,
)
_TRACED: weakref.WeakKeyDictionary[Memory, _CycleSpans] = weakref.WeakKeyDictionary()
_TRACED_LOCK = threading.Lock()


def _spans_of(memory: Memory) -> _CycleSpans:
    with _TRACED_LOCK:
        spans = _TRACED.get(memory)
        if spans is not None:
            return spans
        spans = _TRACED[memory] = _CycleSpans()
    memory.subscribe(spans.on_event)
    memory.add_call_listener(spans.on_call)
    return spans


def trace_memory(memory: Memory) -> None:
    """Show ``memory``'s cycles as spans of the Agents SDK trace they run in (once per memory;
    every :class:`ObservationalSession` does it). Call it yourself for memory used inside SDK
    runs some other way."""
    _spans_of(memory)


@dataclass(frozen=True, slots=True)
class MemoryStreamEvent:
    """A memory event among a streamed run's events (:meth:`ObservationalSession.stream_events`),
    shaped like the SDK's stream events: ``type`` tells it apart."""

    event: Event
    """The ``data-om-*`` event (``event.type``; ``event.to_dict()`` is its JSON form)."""
    type: Literal["obsmem_memory_event"] = "obsmem_memory_event"


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


def _answered_elsewhere(items: Sequence[Any]) -> set[str]:
    """The call ids of the outputs in ``items`` that name no tool and whose call is not in
    ``items``: their call was stored in an earlier batch."""
    read = [_as_dict(item) for item in items]
    called = {
        d["call_id"]
        for d in read
        if str(d.get("type", "")).endswith("_call") and isinstance(d.get("call_id"), str)
    }
    return {
        d["call_id"]
        for d in read
        if str(d.get("type", "")).endswith("_output")
        and isinstance(d.get("call_id"), str)
        and not isinstance(d.get("name"), str)
        and d["call_id"] not in called
    }


_PAGE = 100


async def _call_names(memory: Memory, thread: str, wanted: set[str]) -> dict[str, str]:
    """The tool names of the calls ``wanted``, read from the thread, newest first (the call
    a late result answers is usually among the last messages)."""
    names: dict[str, str] = {}
    through: int | None = None
    while wanted - names.keys():
        page = await memory.store.list_messages(
            thread, through_seq=through, limit=_PAGE, newest_first=True
        )
        for message in page:
            for part in message.parts:
                if isinstance(part, ToolCallPart) and part.tool_call_id in wanted:
                    names.setdefault(part.tool_call_id, part.tool_name)
        oldest = page[-1].seq if page else None
        if len(page) < _PAGE or oldest is None or oldest <= 1:
            break
        through = oldest - 1
    return names


def _item_count(message: Message) -> int:
    return len(_write_message(message))


def _tied_to(message: Message, dropped: set[str]) -> bool:
    """A synthetic message memory put next to one of the ``dropped`` messages (its temporal-gap
    note, or the answer to its unanswered calls)."""
    for prefix in ("obsmem-gap-", "obsmem-interrupted-"):
        if message.id.startswith(prefix) and message.id.removeprefix(prefix) in dropped:
            return True
    return False


def _without_orphan_results(messages: Sequence[Message]) -> list[Message]:
    """``messages`` without the tool messages whose calls are not before them."""
    seen: set[str] = set()
    out: list[Message] = []
    for message in messages:
        calls = {p.tool_call_id for p in message.parts if isinstance(p, ToolCallPart)}
        results = [p for p in message.parts if isinstance(p, ToolResultPart)]
        if results and not calls and all(p.tool_call_id not in seen for p in results):
            continue
        seen |= calls
        out.append(message)
    return out


def _bounded(messages: Sequence[Message], limit: int | None, run_from: int | None) -> list[Message]:
    """Memory's context with at most ``limit`` items of the history from before this run (the
    messages stored from seq ``run_from`` on are this run's and all stay), as the SDK applies
    ``SessionSettings.limit`` to a plain session. Memory's notes stay in front, and no tool
    result is left without its call."""
    if limit is None:
        return list(messages)
    history = [
        i
        for i, m in enumerate(messages)
        if m.seq is not None and (run_from is None or m.seq < run_from)
    ]
    budget = max(limit, 0)
    kept: set[int] = set()
    for i in reversed(history):
        size = _item_count(messages[i])
        if size > budget:
            break
        budget -= size
        kept.add(i)
    dropped = {messages[i].id for i in history if i not in kept}
    if not dropped:
        return list(messages)
    shown = [m for m in messages if m.id not in dropped and not _tied_to(m, dropped)]
    return _without_orphan_results(shown)


def _limit_of(settings: SessionSettings | Mapping[str, Any] | None) -> int | None:
    raw = (
        settings.get("limit") if isinstance(settings, Mapping) else getattr(settings, "limit", None)
    )
    if raw is None:
        return None
    if not isinstance(raw, int) or isinstance(raw, bool) or raw < 0:
        raise ConfigError(
            "ObservationalSession.session_settings.limit",
            raw,
            "give the most items of earlier history to send as a whole number >= 0, or None",
        )
    return raw


def _clear_choice(memory: Memory, on_clear: str | None) -> ClearChoice:
    if on_clear is None:
        return "new_thread"
    if on_clear not in ("new_thread", "forget"):
        raise ConfigError(
            "ObservationalSession.on_clear",
            on_clear,
            'must be "new_thread" (start the conversation over, keep what memory learned) or '
            '"forget" (forget this thread\'s memory as well)',
        )
    if on_clear == "forget" and memory.options is not None and memory.options.scope == "resource":
        raise ConfigError(
            "ObservationalSession.on_clear",
            on_clear,
            "in resource scope the memory is shared by the resource's threads, so one session "
            'cannot forget it; use on_clear="new_thread"',
        )
    return on_clear


def _next_thread(metadata: Mapping[str, Any]) -> tuple[str | None, int]:
    """The thread a session goes on in after its clears (None: its first thread), and how many
    clears there were, from its first thread's metadata."""
    state: Any = metadata.get(METADATA_KEY)
    if not isinstance(state, dict):
        return None, 0
    state = cast(_Item, state)
    thread, clears = state.get("thread"), state.get("clears")
    return (
        thread if isinstance(thread, str) else None,
        clears if isinstance(clears, int) else 0,
    )


def _after_tools(items: Sequence[Any], after_tool: bool) -> tuple[bool, bool]:
    """Read a batch the Runner stored (it stores each step's items before the next model
    call): whether the model answered the tool output an earlier batch ended with
    (``after_tool``), so the run made more than one model call; and whether this batch ends
    with a tool's output."""
    roles = [_read_item(_as_dict(raw))[0] for raw in items]
    steps = [r for r in roles if r in ("assistant", "tool")]
    answered = after_tool and "assistant" in steps
    ends_with_tool = steps[-1] == "tool" if steps else after_tool
    return answered, ends_with_tool


_UNFILTERED = (
    "ObservationalSession %r: a run called the model again after a tool without the session's "
    "input filter, so memory was assembled only once, at the start of the run, and every later "
    "step was sent the Runner's whole growing item list (no observation, buffering or "
    "activation between the steps). Pass "
    "RunConfig(call_model_input_filter=session.call_model_input_filter) to Runner.run for "
    "memory at every model call. (Said once per session.)"
)


def _offers_recall(tools: Sequence[Any]) -> bool:
    """The agent has an enabled ``recall`` tool (a tool enabled per run counts as enabled)."""
    return any(
        getattr(t, "name", None) == "recall" and getattr(t, "is_enabled", True) is not False
        for t in tools
    )


@cache
def _settings_class() -> type[SessionSettings]:
    from agents.memory.session_settings import SessionSettings

    class MemorySessionSettings(SessionSettings):
        """What an :class:`ObservationalSession` shows the Runner: no limit, so the Runner
        reads memory's context rather than the raw tail. The limit of a
        ``RunConfig(session_settings=...)``, which the Runner lays over these, goes to the
        session, which applies it on top of memory."""

        _obsmem_session: ObservationalSession

        def resolve(self, override: SessionSettings | dict[str, Any] | None) -> SessionSettings:
            session = self._obsmem_session
            merged = SessionSettings(limit=session.limit).resolve(override)
            session._limit_for_next_run = merged.limit  # pyright: ignore[reportPrivateUsage]
            return SessionSettings()

    return MemorySessionSettings


class _SettingsAttribute:
    """``ObservationalSession.session_settings``: reads as settings without a limit that hand a
    RunConfig's limit to the session (``_settings_class``); setting it sets the session's
    limit. A descriptor, so that ``session.session_settings = SessionSettings(limit=20)`` (as on
    the SDK's own sessions) cannot make the Runner read the raw tail instead of memory."""

    def __get__(self, session: ObservationalSession | None, owner: type | None = None) -> Any:
        if session is None:
            return self
        settings = _settings_class()()
        object.__setattr__(settings, "_obsmem_session", session)
        return settings

    def __set__(self, session: ObservationalSession, value: Any) -> None:
        session.limit = _limit_of(value)


_UNSET: Any = object()


class InnerSession(Protocol):
    """The part of the SDK's ``Session`` protocol a wrapped session must have."""

    session_id: str

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]: ...

    async def add_items(self, items: list[TResponseInputItem]) -> None: ...

    async def pop_item(self) -> TResponseInputItem | None: ...

    async def clear_session(self) -> None: ...


class ObservationalSession:
    """An OpenAI Agents SDK session whose history is a Memory thread (see the module docstring).

    ``session = ObservationalSession(memory, session_id="chat-1", resource="user-1")``, then
    ``Runner.run(agent, "...", session=session,
    run_config=RunConfig(call_model_input_filter=session.call_model_input_filter))`` (the
    filter gives memory at every model call of a run).

    ``on_clear``: what :meth:`clear_session` does (:data:`ClearChoice`): ``"new_thread"`` (the
    default, also given by None) forgets nothing, ``"forget"`` forgets this thread's memory.
    ``session_settings``: ``SessionSettings(limit=n)`` sends at most ``n`` items of the history
    from before each run, after memory's notes. ``own_loop``: memory's work runs on the
    memory's own loop thread (sync code; ``with session:`` turns it on).
    """

    def __init__(
        self,
        memory: Memory,
        *,
        session_id: str,
        resource: str,
        inner: InnerSession | None = None,
        on_clear: ClearChoice | None = "new_thread",
        session_settings: SessionSettings | Mapping[str, Any] | None = None,
        own_loop: bool = False,
    ) -> None:
        self.memory = memory
        self._ref = ThreadRef.of({"resource": resource, "thread": session_id})
        self.session_id = session_id
        self.inner = inner
        self.on_clear: ClearChoice = _clear_choice(memory, on_clear)
        self.limit = _limit_of(session_settings)
        """Most items of the history from before a run sent to the model (None: no limit)."""
        self.own_loop = own_loop
        self._resolved = False
        """The thread this session goes on in (after clears) was read from the store."""
        self._step_from: int | None = None
        """The seq of the first message stored since the last model call (the step the
        next call answers: it stays raw)."""
        self._run_from: int | None = None
        """The seq of the first message the current run stored (its items are never cut by
        the limit)."""
        self._run_starting = False
        self._run_limit: int | None = None
        """The limit of the current run (the session's, or its RunConfig's)."""
        self._limit_for_next_run: int | None = _UNSET
        """The limit a RunConfig set for the run being prepared (see ``_settings_class``)."""
        self._approving: frozenset[str] = frozenset()
        """The agent's tools that may wait for an approval (``needs_approval``): a call of one
        stored without its output is held back until the output comes."""
        self._recall_tool: FunctionTool | None = None
        self.recall_offered = False
        """This session made a ``recall`` tool (:meth:`tools`), so ``get_items()`` tells the
        model how to use it. The input filter looks at the agent's own tools instead."""
        self._spans = _spans_of(memory)
        self._spans.sessions[session_id] = self
        self._trace_parent: Trace | Span[Any] | None = None
        """The span of the run this session last worked in (see ``_CycleSpans``)."""
        self._early: list[Event] | None = None
        """Memory events of a run that started before its trace did (the history read)."""
        self._in_run = False
        """A run started (the Runner read ``get_items()``)."""
        self._run_filtered = False
        """The current run called :meth:`call_model_input_filter`."""
        self._after_tool = False
        """The current run's last stored batch ended with a tool's output."""
        self._warned_unfiltered = False
        """This session logged that a run went through a tool loop without the input filter
        (it says so once)."""

    @classmethod
    def wrap(
        cls,
        inner: InnerSession,
        memory: Memory,
        *,
        resource: str,
        on_clear: ClearChoice | None = "new_thread",
        session_settings: SessionSettings | Mapping[str, Any] | None = None,
        own_loop: bool = False,
    ) -> ObservationalSession:
        """Observational memory over ``inner``, which keeps the full history (thread id: the inner
        session's ``session_id``). Adding, popping and clearing apply to both."""
        return cls(
            memory,
            session_id=inner.session_id,
            resource=resource,
            inner=inner,
            on_clear=on_clear,
            session_settings=session_settings,
            own_loop=own_loop,
        )

    def __repr__(self) -> str:
        wrapped = f", inner={self.inner!r}" if self.inner is not None else ""
        return (
            f"ObservationalSession(session_id={self.session_id!r}, "
            f"resource={self.ref.resource!r}, thread={self.ref.thread!r}{wrapped})"
        )

    @property
    def ref(self) -> ThreadRef:
        """The memory thread this session is on (a new one after a ``"new_thread"`` clear), as
        of its last call."""
        return self._ref

    # -- what the Runner reads -------------------------------------------------------------------

    if TYPE_CHECKING:
        session_settings: SessionSettings | None
        """The SDK's settings, as the Runner must see them: without a limit (memory applies
        :attr:`limit` itself, and a RunConfig's limit through these settings). Setting
        ``SessionSettings(limit=n)`` sets :attr:`limit`."""
    else:  # the protocol's plain attribute, read and set through _SettingsAttribute
        session_settings = _SettingsAttribute()

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The managed context (no ``limit``: the Runner's read at the start of a run), or the
        newest ``limit`` stored items."""
        if limit is not None:
            if self.inner is not None:
                return await self.inner.get_items(limit)
            return await self._on_memory(self._raw_tail(limit))
        self._start_run()
        return await self._on_memory(
            self._context(recall=self.recall_offered, keep_raw_from=None, refresh=True)
        )

    async def call_model_input_filter(self, data: CallModelData[Any]) -> ModelInputData:
        """``RunConfig.call_model_input_filter``: what memory assembled for this step, in place
        of the Runner's own input (whose items this session has already stored). It mentions
        recall only when the agent being called has the ``recall`` tool."""
        from agents.run_config import ModelInputData

        self._run_filtered = True
        self._see_trace()
        tools = data.agent.tools
        self._approving = frozenset(
            str(getattr(t, "name", "")) for t in tools if getattr(t, "needs_approval", False)
        )
        step, self._step_from = self._step_from, None
        items = await self._on_memory(
            self._context(recall=_offers_recall(tools), keep_raw_from=step)
        )
        return ModelInputData(input=items, instructions=data.model_data.instructions)

    # -- tools -----------------------------------------------------------------------------------

    def tools(self) -> list[Tool]:
        """The tools memory gives the agent, to pass in one go:
        ``Agent(tools=[*your_tools, *session.tools()])``. The ``recall`` tool when the memory
        has retrieval on; none otherwise."""
        return [self.recall_tool()] if self.memory.retrieval else []

    def recall_tool(self) -> FunctionTool:
        """The ``recall`` tool for this session's conversation, as an SDK ``FunctionTool``
        (the same one each time; :meth:`tools` gives it only when retrieval is on). It only
        reads this session's resource (and thread, in thread scope); arguments that do not fit
        come back to the model as a message saying what to send. Needs retrieval on."""
        from agents import FunctionTool

        self.memory.require_retrieval()
        if self._recall_tool is None:

            async def invoke(ctx: Any, arguments: str) -> str:
                request = parse_request(arguments)
                if isinstance(request, str):
                    return request
                return await self._on_memory(self._recall(request))

            self._recall_tool = FunctionTool(
                name="recall",
                description=RECALL_DESCRIPTION,
                params_json_schema=RecallRequest.model_json_schema(),
                on_invoke_tool=invoke,
                strict_json_schema=False,
            )
        self.recall_offered = True
        return self._recall_tool

    # -- what the Runner writes ------------------------------------------------------------------

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Store the items (and hand them to the inner session, if any)."""
        if not items:
            return
        self._see_trace()
        self._note_steps(items)
        if self.inner is not None:
            await self.inner.add_items(items)
        await self._on_memory(self._store(items))

    async def pop_item(self) -> TResponseInputItem | None:
        """Take back the newest item and return it (None when there is none). Memory keeps it in
        storage, marked: it leaves the context and is never observed (a message observed
        before stays in the observations). Wrapped, the inner session pops its newest item
        too, and that is the one returned."""
        popped = await self.inner.pop_item() if self.inner is not None else None
        message = await self._on_memory(self._retract())
        if self.inner is not None or message is None:
            return popped
        items = to_agents_items([message])
        item = items[-1] if items else {"role": "assistant", "content": message.text}
        return cast("TResponseInputItem", item)

    async def clear_session(self) -> None:
        """Start the conversation over, as ``on_clear`` says. ``"new_thread"`` (the default)
        forgets nothing: the session goes on in a new memory thread (remembered in the store,
        so every process goes on there) and the old thread keeps its messages and what memory
        learned (in resource scope, the resource's notes are still shown). ``"forget"`` also
        forgets this thread's memory. Wrapped, the inner session is cleared too."""
        await self._on_memory(self._clear(self.on_clear))
        if self.inner is not None:
            await self.inner.clear_session()

    # -- memory events ---------------------------------------------------------------------------

    def subscribe(self, listener: Callable[[Event], object]) -> Callable[[], None]:
        """Hand ``listener`` every ``data-om-*`` event of this session's thread (called where
        memory works: on memory's own loop thread with ``own_loop``); returns the function that
        stops it."""

        def relay(event: Event) -> None:
            if event.thread_id == self._ref.thread:
                listener(event)

        return self.memory.subscribe(relay)

    async def stream_events(
        self, result: RunResultStreaming
    ) -> AsyncIterator[StreamEvent | MemoryStreamEvent]:
        """``result.stream_events()`` (of ``Runner.run_streamed(..., session=this)``) with this
        session's memory events among them, as :class:`MemoryStreamEvent`, each before the SDK
        event that follows it. Background work that ends after the run is not in the stream
        (see :meth:`subscribe` and the spans)."""
        waiting: deque[MemoryStreamEvent] = deque()
        unsubscribe = self.subscribe(lambda event: waiting.append(MemoryStreamEvent(event)))
        try:
            async for event in result.stream_events():
                while waiting:
                    yield waiting.popleft()
                yield event
            while waiting:
                yield waiting.popleft()
        finally:
            unsubscribe()

    # -- lifecycle -------------------------------------------------------------------------------

    def close(self, *, cancel: bool = False) -> None:
        """The end of a sync script: finish memory's background work (``cancel=True``: abandon
        it), close the memory and stop its loop thread. The memory is closed for every session
        sharing it: close it once, when the last is done."""
        self.memory.close(cancel=cancel)

    async def aclose(self, *, cancel: bool = False) -> None:
        """:meth:`close` for async code."""
        if self.own_loop:
            await asyncio.to_thread(self.memory.close, cancel=cancel)
        else:
            await self.memory.aclose(cancel=cancel)

    def __enter__(self) -> ObservationalSession:
        """Sync code: memory works on its own loop thread from now on (enter before the first
        run), and the memory is closed at the end."""
        self.own_loop = True
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> ObservationalSession:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- memory's side ---------------------------------------------------------------------------

    async def _on_memory(self, work: Coroutine[Any, Any, T]) -> T:
        """Await ``work`` where memory lives: on its own loop thread (``own_loop``: a framework
        loop that only runs during a call would stall or end memory's background work), else
        on the caller's loop."""
        if self.own_loop:
            return await self.memory.on_own_loop(work)
        return await work

    def _start_run(self) -> None:
        """The Runner reads the history: a run starts, with the session's limit or the one its
        RunConfig just set."""
        given, self._limit_for_next_run = self._limit_for_next_run, _UNSET
        self._run_limit = self.limit if given is _UNSET else given
        self._run_from = None
        self._run_starting = True
        self._trace_parent, self._early = None, []
        self._in_run, self._run_filtered, self._after_tool = True, False, False

    def _note_steps(self, items: Sequence[Any]) -> None:
        """Say once, loudly, that a run went through a tool loop without the input filter: the
        model answered a tool's output (stored in an earlier batch, as the Runner stores each
        step) and the filter was never called in this run."""
        if not self._in_run:
            return
        answered, self._after_tool = _after_tools(items, self._after_tool)
        if not answered or self._run_filtered or self._warned_unfiltered:
            return
        if self.memory.om is None:  # no observational memory: nothing to give between steps
            return
        self._warned_unfiltered = True
        log.warning(_UNFILTERED, self.session_id)

    def _see_trace(self) -> None:
        """A call inside a run: remember the run's current span, and record there the memory
        work that ran before the run's trace started."""
        parent = _current_parent()
        if parent is None:
            return
        self._trace_parent = parent
        early, self._early = self._early, None
        for event in early or ():
            self._spans.record(event, parent)

    def _traced(self, event: Event) -> bool:
        """Whether memory work outside any trace is recorded now (under the run this session
        last saw), or held until the trace of the run that is starting shows up."""
        early = self._early
        if early is None:
            return True
        early.append(event)
        if len(early) > _MAX_EARLY:
            del early[0]
        return False

    async def _thread_ref(self, *, refresh: bool = False) -> ThreadRef:
        """The thread this session is on: the one its first thread names after a clear."""
        if self._resolved and not refresh:
            return self._ref
        first = await self.memory.thread(self.session_id)
        current, _ = _next_thread(first.metadata if first is not None else {})
        self._ref = ThreadRef(thread=current or self.session_id, resource=self._ref.resource)
        self._resolved = True
        self._spans.sessions[self._ref.thread] = self
        return self._ref

    async def _context(
        self, *, recall: bool, keep_raw_from: int | None, refresh: bool = False
    ) -> list[TResponseInputItem]:
        ref = await self._thread_ref(refresh=refresh)
        context = await self.memory.context(
            ref, (), actor_model=None, recall=recall, keep_raw_from=keep_raw_from
        )
        shown = _bounded(context.messages, self._run_limit, self._run_from)
        return cast("list[TResponseInputItem]", to_agents_items(shown))

    async def _store(self, items: Sequence[Any]) -> None:
        ref = await self._thread_ref()
        wanted = _answered_elsewhere(items)
        names = await _call_names(self.memory, ref.thread, wanted) if wanted else {}
        messages = from_agents_items(items, tool_names=names)
        stored = await self.memory.save(ref, messages, actor_model=None)
        first = next((m.seq for m in stored if m.seq is not None), None)
        if self._step_from is None:
            self._step_from = first
        if self._run_starting and first is not None:
            self._run_from, self._run_starting = first, False
        waiting = _waiting_calls(stored, self._approving)
        if waiting:
            await self.memory.hold_calls(ref, waiting)

    async def _raw_tail(self, limit: int) -> list[TResponseInputItem]:
        """The newest ``limit`` stored items, without those taken back."""
        if limit <= 0:
            return []
        ref = await self._thread_ref()
        thread = await self.memory.thread(ref.thread)
        if thread is None:
            return []
        forgotten = thread.metadata.get(RETRACTED_THROUGH_KEY)
        after = forgotten if isinstance(forgotten, int) else 0
        items: list[_Item] = []
        through: int | None = None
        while len(items) < limit:
            page = await self.memory.store.list_messages(
                ref.thread, after_seq=after, through_seq=through, limit=limit, newest_first=True
            )
            shown = [m for m in reversed(page) if not is_retracted(m, thread.metadata)]
            items = to_agents_items(shown) + items
            oldest = page[-1].seq if page else None
            if len(page) < limit or oldest is None or oldest <= after + 1:
                break
            through = oldest - 1
        return cast("list[TResponseInputItem]", items[-limit:])

    async def _retract(self) -> Message | None:
        return await self.memory.retract_last(await self._thread_ref())

    async def _recall(self, request: Mapping[str, Any]) -> str:
        recall = self.memory.recall_function(await self._thread_ref())
        return await recall(**request)

    async def _clear(self, choice: ClearChoice) -> None:
        ref = await self._thread_ref(refresh=True)
        if choice == "forget":
            await self.memory.forget_thread(ref)
        else:
            store = self.memory.store
            first = await store.create_thread(self.session_id, ref.resource)
            _, clears = _next_thread(first.metadata)
            thread = f"{self.session_id}~{clears + 1}"
            await store.create_thread(thread, ref.resource)
            await store.update_thread(
                self.session_id, metadata={METADATA_KEY: {"thread": thread, "clears": clears + 1}}
            )
            self._ref = ThreadRef(thread=thread, resource=ref.resource)
            self._spans.sessions[thread] = self
        self._step_from = self._run_from = None
        self._run_starting = False
