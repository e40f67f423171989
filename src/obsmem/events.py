"""The ``data-om-*`` events, the event bus and the hooks.

Every event is a frozen dataclass whose ``type`` is the Mastra name (``data-om-status`` ...) and
whose fields are snake_case. ``to_dict()`` gives the JSON form (``{"type": ..., **fields}``).
Listeners are plain callables; a listener that raises is logged and never breaks memory work.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any, ClassVar, Generic, Literal, TypeAlias, TypeVar

from .messages import Message

__all__ = [
    "ActivationEvent",
    "BufferingEndEvent",
    "BufferingFailedEvent",
    "BufferingStartEvent",
    "Event",
    "EventBus",
    "HookContext",
    "Hooks",
    "Listeners",
    "ObservationEndEvent",
    "ObservationFailedEvent",
    "ObservationStartEvent",
    "OperationType",
    "StatusEvent",
    "ThreadUpdateEvent",
]

log = logging.getLogger("obsmem")

OperationType: TypeAlias = Literal["observation", "reflection"]


class _EventBase:
    type: ClassVar[str]

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.type}
        for f in fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            out[f.name] = value.isoformat() if isinstance(value, datetime) else value
        return out


@dataclass(frozen=True, slots=True, kw_only=True)
class StatusEvent(_EventBase):
    """The message and observation windows at one step."""

    type: ClassVar[str] = "data-om-status"
    record_id: str | None
    thread_id: str
    resource_id: str | None
    generation: int
    message_tokens: int
    message_threshold: int
    observation_tokens: int
    observation_threshold: int
    buffered_chunks: int
    buffered_message_tokens: int
    projected_message_removal: int
    buffered_observation_tokens: int
    buffering_status: Literal["idle", "running"]
    buffered_reflection_tokens: int
    buffered_reflection_input_tokens: int
    reflection_status: Literal["idle", "running", "complete"]


@dataclass(frozen=True, slots=True, kw_only=True)
class _CycleEvent(_EventBase):
    """What every event of a cycle says: which cycle, what it does, and whose log."""

    cycle_id: str
    operation_type: OperationType
    record_id: str | None
    thread_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class _ThreadsEvent(_CycleEvent):
    thread_ids: tuple[str, ...] = ()
    """Every thread whose messages (or log) the cycle worked on, as at its start."""


@dataclass(frozen=True, slots=True, kw_only=True)
class _StartEvent(_ThreadsEvent):
    started_at: datetime
    config: Mapping[str, Any] = field(default_factory=dict[str, Any])


@dataclass(frozen=True, slots=True, kw_only=True)
class _EndEvent(_ThreadsEvent):
    completed_at: datetime
    duration_ms: float
    observations: str | None = None
    extracted_values: Mapping[str, Any] = field(default_factory=dict[str, Any])
    extraction_failures: tuple[Mapping[str, Any], ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class _FailedEvent(_ThreadsEvent):
    failed_at: datetime
    duration_ms: float
    tokens_attempted: int
    error: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ObservationStartEvent(_StartEvent):
    type: ClassVar[str] = "data-om-observation-start"
    tokens_to_observe: int
    trigger: Trigger | None = None
    """Why it runs now: ``turn-sync`` (past ``block_after``), ``manual``, ``catch-up``, or
    ``overflow`` (the actor's model refused a request as longer than its context)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ObservationEndEvent(_EndEvent):
    type: ClassVar[str] = "data-om-observation-end"
    tokens_observed: int
    observation_tokens: int
    """Tokens of this cycle's output."""
    current_task: str | None = None
    suggested_response: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ObservationFailedEvent(_FailedEvent):
    type: ClassVar[str] = "data-om-observation-failed"
    retrying: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class BufferingStartEvent(_StartEvent):
    type: ClassVar[str] = "data-om-buffering-start"
    tokens_to_buffer: int


@dataclass(frozen=True, slots=True, kw_only=True)
class BufferingEndEvent(_EndEvent):
    type: ClassVar[str] = "data-om-buffering-end"
    tokens_buffered: int
    buffered_tokens: int
    """Total observation tokens now waiting in buffered chunks (or the buffered reflection)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class BufferingFailedEvent(_FailedEvent):
    type: ClassVar[str] = "data-om-buffering-failed"


@dataclass(frozen=True, slots=True, kw_only=True)
class ActivationEvent(_CycleEvent):
    type: ClassVar[str] = "data-om-activation"
    activated_at: datetime
    chunks_activated: int
    tokens_activated: int
    """Message tokens that left the context (observation) or log tokens replaced (reflection)."""
    observation_tokens: int
    """The log's size after activation."""
    messages_activated: int
    generation: int
    triggered_by: Literal["threshold", "ttl", "provider_change"] | None = None
    observations: str | None = None
    last_activity_at: datetime | None = None
    ttl_expired_ms: float | None = None
    previous_model: str | None = None
    current_model: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ThreadUpdateEvent(_EventBase):
    type: ClassVar[str] = "data-om-thread-update"
    cycle_id: str
    thread_id: str
    old_title: str | None
    new_title: str
    timestamp: datetime


Event: TypeAlias = (
    StatusEvent
    | ObservationStartEvent
    | ObservationEndEvent
    | ObservationFailedEvent
    | BufferingStartEvent
    | BufferingEndEvent
    | BufferingFailedEvent
    | ActivationEvent
    | ThreadUpdateEvent
)
Listener: TypeAlias = Callable[[Event], object]


_L = TypeVar("_L", bound=Callable[..., object])


class Listeners(Generic[_L]):
    """Callables to be told of something, in the order they were added."""

    __slots__ = ("_items",)

    def __init__(self) -> None:
        self._items: list[_L] = []

    def add(self, listener: _L) -> Callable[[], None]:
        """Add ``listener``; returns the function that removes it."""
        self._items.append(listener)

        def remove() -> None:
            if listener in self._items:
                self._items.remove(listener)

        return remove

    def __iter__(self) -> Iterator[_L]:
        """The listeners as they are now (one told may remove itself, or add another)."""
        return iter(tuple(self._items))


class EventBus:
    """Delivers events to listeners, in order, synchronously. Listener errors are logged."""

    def __init__(self) -> None:
        self._listeners: Listeners[Listener] = Listeners()

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Add a listener; returns a function that removes it."""
        return self._listeners.add(listener)

    def emit(self, event: Event) -> None:
        for listener in self._listeners:
            try:
                listener(event)
            except Exception:
                log.exception("obsmem event listener failed on %s", event.type)


# -- hooks -------------------------------------------------------------------------------------

Trigger: TypeAlias = Literal["manual", "turn-sync", "async-buffer", "catch-up", "overflow"]


@dataclass(frozen=True, slots=True, kw_only=True)
class HookContext:
    """What lifecycle hooks receive."""

    thread_id: str
    resource_id: str | None
    cycle_id: str
    operation_type: OperationType
    trigger: Trigger
    observations: str | None = None
    error: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = None


MaybeAwaitable: TypeAlias = Awaitable[Any] | Any


@dataclass(frozen=True, slots=True, kw_only=True)
class Hooks:
    """Lifecycle hooks (told, never asked) and transform hooks (may change what is observed or
    stored). Each may be a plain function or a coroutine function. A transform hook that raises
    fails the cycle (the old state stays); a lifecycle hook that raises is logged."""

    on_observation_start: Callable[[HookContext], MaybeAwaitable] | None = None
    on_observation_end: Callable[[HookContext], MaybeAwaitable] | None = None
    on_reflection_start: Callable[[HookContext], MaybeAwaitable] | None = None
    on_reflection_end: Callable[[HookContext], MaybeAwaitable] | None = None
    before_observation: Callable[[Sequence[Message]], MaybeAwaitable] | None = None
    """Receives the messages to observe; returns the messages to show the Observer. Returning an
    empty list skips the model call, but the messages still count as observed."""
    after_observation: Callable[[str], MaybeAwaitable] | None = None
    """Receives the new observations; returns what to store."""
    before_reflection: Callable[[str], MaybeAwaitable] | None = None
    after_reflection: Callable[[str], MaybeAwaitable] | None = None


async def call_hook(hook: Callable[..., Any] | None, arg: Any) -> Any:
    """Call a hook that may be sync or async; None when there is no hook."""
    if hook is None:
        return None
    result = hook(arg)
    if inspect.isawaitable(result):
        return await result
    return result


async def notify(hook: Callable[[HookContext], Any] | None, ctx: HookContext) -> None:
    """Call a lifecycle hook, logging (not raising) its errors."""
    try:
        await call_hook(hook, ctx)
    except Exception:
        log.exception("obsmem lifecycle hook failed (%s)", ctx.operation_type)
