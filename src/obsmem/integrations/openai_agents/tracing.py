"""Memory in the Agents SDK's own channels: memory cycles as spans of the SDK trace they run
in, and memory events among a streamed run's events (:class:`MemoryStreamEvent`)."""

from __future__ import annotations

import threading
import weakref
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeAlias, cast

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
from obsmem.memory import Memory

if TYPE_CHECKING:
    from agents.tracing import Span, Trace

__all__ = ["MemoryStreamEvent", "RunTrace", "spans_of", "trace_memory"]

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

_Buffering: TypeAlias = BufferingStartEvent | BufferingEndEvent | BufferingFailedEvent
_CycleEnd: TypeAlias = (
    ObservationEndEvent | BufferingEndEvent | ObservationFailedEvent | BufferingFailedEvent
)
_MAX_USAGE = 256
"""Most cycles whose memory-model usage waits for their end event (older ones are dropped)."""
_MAX_EARLY = 256
"""Most events a session holds until its run's trace shows up (older ones are dropped)."""


def _span_name(event: Event) -> str:
    operation = str(getattr(event, "operation_type", "observation"))
    if isinstance(event, _Buffering):
        return f"obsmem.buffering.{operation}"
    if isinstance(event, ActivationEvent):
        return f"obsmem.activation.{operation}"
    return f"obsmem.{operation}"


def _cycle_key(event: Event) -> tuple[str, str]:
    """Which open span an event belongs to (a buffered cycle and a synchronous one may share
    no id, but keep them apart anyway)."""
    kind = "buffering" if isinstance(event, _Buffering) else "cycle"
    return (kind, str(getattr(event, "cycle_id", "")))


def _span_fields(event: Event) -> dict[str, Any]:
    return {k: v for k, v in event.to_dict().items() if k not in _UNTRACED}


_Parent: TypeAlias = "Trace | Span[Any]"


def _current_parent() -> Trace | Span[Any] | None:
    """The SDK span (else trace) current here, if any."""
    from agents.tracing import get_current_span, get_current_trace

    return get_current_span() or get_current_trace()


class RunTrace:
    """Where a session's memory work outside any trace goes: under the run the session last
    saw, or, at the start of a run (before the Runner starts its trace), held until it shows."""

    def __init__(self, spans: CycleSpans) -> None:
        self._spans = spans
        self.parent: Trace | Span[Any] | None = None
        """The span of the run this session last worked in."""
        self._early: deque[Event] | None = None
        """Memory events of a run that started before its trace did (the history read; the
        newest :data:`_MAX_EARLY`)."""

    def start_run(self) -> None:
        """A run starts: its trace is not there yet."""
        self.parent, self._early = None, deque(maxlen=_MAX_EARLY)

    def see(self) -> None:
        """A call inside a run: remember the run's current span, and record there the memory
        work that ran before the run's trace started."""
        parent = _current_parent()
        if parent is None:
            return
        self.parent = parent
        early, self._early = self._early, None
        for event in early or ():
            self._spans.record(event, parent)

    def take(self, event: Event) -> bool:
        """Whether memory work outside any trace is recorded now (under :attr:`parent`), or
        held until the trace of the run that is starting shows up."""
        if self._early is None:
            return True
        self._early.append(event)
        return False


class CycleSpans:
    """Memory cycles as custom spans of the Agents SDK trace they run in (work outside any
    trace goes to the :class:`RunTrace` of its thread's session). A cycle's start event opens a
    span, its end or failed event closes it with the token counts and the memory model's usage;
    an activation is a span of its own."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: dict[tuple[str, str], Span[Any]] = {}
        self._usage: dict[str, dict[str, Any]] = {}
        self.runs: weakref.WeakValueDictionary[str, RunTrace] = weakref.WeakValueDictionary()
        """The run trace of each thread's session, for work that runs outside any trace."""

    def on_event(self, event: Event) -> None:
        if not isinstance(event, _TRACED_EVENTS):
            return
        parent = _current_parent()
        run = self.runs.get(event.thread_id) if parent is None else None
        if run is not None and not run.take(event):
            return
        self.record(event, run.parent if run is not None else parent)

    def record(self, event: Event, parent: _Parent | None) -> None:
        """Open, close or make the span of ``event`` (under ``parent``; None: the current)."""
        if isinstance(event, ObservationStartEvent | BufferingStartEvent):
            span = self._started(event, parent)
            with self._lock:
                self._open[_cycle_key(event)] = span
        elif isinstance(event, _CycleEnd):
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


_TRACED_EVENTS = ObservationStartEvent | BufferingStartEvent | _CycleEnd | ActivationEvent
_TRACED: weakref.WeakKeyDictionary[Memory, CycleSpans] = weakref.WeakKeyDictionary()
_TRACED_LOCK = threading.Lock()


def spans_of(memory: Memory) -> CycleSpans:
    """The spans of ``memory``'s cycles (made, and subscribed, on first use)."""
    with _TRACED_LOCK:
        spans = _TRACED.get(memory)
        if spans is not None:
            return spans
        spans = _TRACED[memory] = CycleSpans()
    memory.subscribe(spans.on_event)
    memory.add_call_listener(spans.on_call)
    return spans


def trace_memory(memory: Memory) -> None:
    """Show ``memory``'s cycles as spans of the Agents SDK trace they run in (once per memory;
    every :class:`ObservationalSession` does it). Call it yourself for memory used inside SDK
    runs some other way."""
    spans_of(memory)


@dataclass(frozen=True, slots=True)
class MemoryStreamEvent:
    """A memory event among a streamed run's events (:meth:`ObservationalSession.stream_events`),
    shaped like the SDK's stream events: ``type`` tells it apart."""

    event: Event
    """The ``data-om-*`` event (``event.type``; ``event.to_dict()`` is its JSON form)."""
    type: Literal["obsmem_memory_event"] = "obsmem_memory_event"
