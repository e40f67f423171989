"""Observational memory for a plain ``pydantic_ai.Agent`` (the README's pydantic-ai section shows
both): :class:`ObservationalMemoryCapability` (recommended), which stores and assembles memory
before every model request of a run and stores the final answer after it, and
:func:`history_processor` for ``ProcessHistory(...)``, which never sees the run's final answer:
it is stored when the processor next sees it (pass ``message_history=result.all_messages()``).

What is new is told by a mark in the pydantic-ai messages' ``metadata``: every message this module
stored or sent is marked with its thread, and every unmarked message is new. System prompt parts
(``system_prompt=``) are sent first on every request and never stored; prefer ``instructions=``,
which pydantic-ai sends outside the message history.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias, cast

from pydantic_ai import messages as pa
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import CapabilityEvent
from pydantic_ai.models import Model, ModelRequestContext
from pydantic_ai.run import AgentRunResult
from pydantic_ai.settings import ModelSettings
from pydantic_ai.tools import DeferredToolRequests, RunContext

from obsmem.convert.pydantic_ai import from_pydantic_ai, to_pydantic_ai
from obsmem.errors import ConfigError
from obsmem.events import Event
from obsmem.integrations.door import Door
from obsmem.memory import Memory, ThreadRef
from obsmem.messages import Message
from obsmem.models import ModelSpec
from obsmem.models.overflow import is_context_overflow
from obsmem.window import mark_deferred

__all__ = [
    "MARK_KEY",
    "HistoryProcessorFunc",
    "IdFrom",
    "MemoryEvent",
    "ObservationalMemoryCapability",
    "history_processor",
    "mark_as_context",
]

MARK_KEY = "obsmem_integration"
"""Key of a pydantic-ai message's ``metadata`` marking it as stored in (or sent from) a thread."""

_Mark = Literal["stored", "context"]


def _mark_of(message: pa.ModelMessage, thread: str) -> _Mark | None:
    meta = message.metadata
    mark: Any = meta.get(MARK_KEY) if isinstance(meta, dict) else None
    if not isinstance(mark, dict) or mark.get("thread") != thread:
        return None
    kind = mark.get("kind")
    return kind if kind in ("stored", "context") else None


def _mark(messages: Sequence[pa.ModelMessage], thread: str, kind: _Mark) -> None:
    for message in messages:
        message.metadata = {**(message.metadata or {}), MARK_KEY: {"thread": thread, "kind": kind}}


def mark_as_context(messages: Sequence[pa.ModelMessage], thread: str) -> None:
    """Mark ``messages`` as memory's context for ``thread`` (already stored; never stored
    again)."""
    _mark(messages, thread, "context")


def _is_input(message: pa.ModelMessage) -> bool:
    """A request carrying a user prompt starts a turn; tool returns and retries continue one."""
    return isinstance(message, pa.ModelRequest) and any(
        isinstance(p, pa.UserPromptPart) for p in message.parts
    )


def _storable(messages: Sequence[pa.ModelMessage]) -> list[Message]:
    """obsmem messages for ``messages``, without the system prompt (sent each time, not kept)."""
    return [m for m in from_pydantic_ai(messages) if m.role != "system"]


def merged_requests(messages: Sequence[pa.ModelMessage]) -> list[pa.ModelMessage]:
    """Consecutive requests merged into one, as pydantic-ai would merge them (dropping marks)."""
    out: list[pa.ModelMessage] = []
    for message in messages:
        last = out[-1] if out else None
        if isinstance(message, pa.ModelRequest) and isinstance(last, pa.ModelRequest):
            out[-1] = pa.ModelRequest(parts=[*last.parts, *message.parts], timestamp=last.timestamp)
        else:
            out.append(message)
    return out


def for_model(messages: list[pa.ModelMessage], model: Model | None) -> list[pa.ModelMessage]:
    """``messages`` (their requests already merged, :func:`merged_requests`) as ``model``'s
    server takes them: for a strict chat template (one leading system message and alternating
    turns, as the model's profile says with ``openai_chat_supports_multiple_system_messages=
    False``; obsmem's models for an ``OPENAI_BASE_URL`` server do), each run of text-only user
    parts joined into one user turn."""
    profile: Any = model.profile if model is not None else {}
    if profile.get("openai_chat_supports_multiple_system_messages") is not False:
        return messages
    return [_joined_user_text(m) for m in messages]


def _joined_user_text(message: pa.ModelMessage) -> pa.ModelMessage:
    """``message`` with each run of text-only user parts joined into one (memory's notes and the
    user's message become one user turn, as strict chat templates require)."""
    if not isinstance(message, pa.ModelRequest):
        return message
    parts: list[pa.ModelRequestPart] = []
    for part in message.parts:
        last = parts[-1] if parts else None
        if (
            isinstance(part, pa.UserPromptPart)
            and isinstance(part.content, str)
            and isinstance(last, pa.UserPromptPart)
            and isinstance(last.content, str)
        ):
            parts[-1] = pa.UserPromptPart(
                content=f"{last.content}\n\n{part.content}", timestamp=last.timestamp
            )
        else:
            parts.append(part)
    if len(parts) == len(message.parts):
        return message
    return pa.ModelRequest(parts=parts, timestamp=message.timestamp)


class _Thread(Door):
    """The door of both pydantic-ai front doors: the agent's system prompt parts, and which
    framework messages this door stored or sent (marks on the messages)."""

    def __init__(self, memory: Memory, ref: ThreadRef, *, recall: bool) -> None:
        super().__init__(memory, ref, recall=recall)
        self.system_prompts: list[str] = []

    def collect_system_prompts(self, messages: Sequence[pa.ModelMessage]) -> None:
        """Remember the agent's system prompt parts (all but those this module sent)."""
        prompts, thread = self.system_prompts, self.ref.thread
        for message in messages:
            if not isinstance(message, pa.ModelRequest) or _mark_of(message, thread) == "context":
                continue
            for part in message.parts:
                if isinstance(part, pa.SystemPromptPart) and part.content not in prompts:
                    prompts.append(part.content)

    def new(
        self, messages: Sequence[pa.ModelMessage]
    ) -> tuple[list[pa.ModelMessage], list[pa.ModelMessage]]:
        """The unmarked messages, split into reply traffic and the input of a new turn."""
        unmarked = [m for m in messages if _mark_of(m, self.ref.thread) is None]
        start = next((i for i, m in enumerate(unmarked) if _is_input(m)), len(unmarked))
        return unmarked[:start], unmarked[start:]

    async def save(
        self,
        messages: Sequence[pa.ModelMessage],
        model: ModelSpec | None,
        deferred: frozenset[str] = frozenset(),
    ) -> None:
        """Store ``messages``; the calls in ``deferred`` wait on purpose (an approval, an
        external result) and are stored marked so (``window.is_deferred``)."""
        storable = [mark_deferred(m, deferred) for m in _storable(messages)]
        if storable:
            await self.reply(storable, actor_model=model)
        _mark(messages, self.ref.thread, "stored")

    async def refresh(
        self, messages: Sequence[pa.ModelMessage], model: Model | None
    ) -> list[pa.ModelMessage] | None:
        """Memory's context for a request of ``messages``, storing what is new in them; None
        when nothing is new and the context was sent already."""
        reply, new_input = self.new(messages)
        if reply or new_input or all(_mark_of(m, self.ref.thread) != "context" for m in messages):
            return await self.context(messages, [*reply, *new_input], model)
        return None

    async def context(
        self,
        all_messages: Sequence[pa.ModelMessage],
        new: Sequence[pa.ModelMessage],
        model: Model | None,
        *,
        keep_raw_from: int | None = None,
    ) -> list[pa.ModelMessage]:
        """Store ``new`` (a turn's input, or a step's tool traffic) and return the system prompt
        plus what memory assembled, in one memory step."""
        context = await self.step(_storable(new), step_from=keep_raw_from, actor_model=model)
        _mark(new, self.ref.thread, "stored")
        self.collect_system_prompts(all_messages)
        system: list[pa.ModelMessage] = (
            [pa.ModelRequest(parts=[pa.SystemPromptPart(c) for c in self.system_prompts])]
            if self.system_prompts
            else []
        )
        managed = for_model(merged_requests([*system, *to_pydantic_ai(context.messages)]), model)
        _mark(managed, self.ref.thread, "context")
        return managed


IdFrom: TypeAlias = Callable[[RunContext[Any]], str]
"""A thread or resource id read from the run (``lambda ctx: ctx.deps.user_id``)."""


@dataclass(kw_only=True)
class MemoryEvent(CapabilityEvent, namespace="obsmem", name="memory"):
    """A memory event (``data-om-*``) of the run's thread, in the run's own event stream
    (``event_stream_handler``, ``run_stream_events``, the UI adapters)."""

    om_type: str = ""
    """The obsmem event type: ``data-om-observation-end``, ``data-om-activation``, ..."""
    fields: dict[str, Any] = field(default_factory=dict[str, Any])
    """The event's fields (``event.to_dict()``)."""


class ObservationalMemoryCapability(AbstractCapability[Any]):
    """Gives a pydantic-ai agent observational memory (see the module docstring).

    ``pydantic_ai.Agent(model, capabilities=[ObservationalMemoryCapability(memory,
    resource="user-1", thread="chat-1")])``; then ``await agent.run("...")`` each turn. One
    module-level agent can serve every user: give ``resource`` and ``thread`` as functions of the
    run context (``thread=lambda ctx: ctx.deps.chat_id``), or leave them out and pass them per
    run as ``agent.run(..., metadata={"resource": "user-1", "thread": "chat-1"})``.
    """

    def __init__(
        self,
        memory: Memory,
        *,
        resource: str | IdFrom | None = None,
        thread: str | IdFrom | None = None,
        recall: bool = True,
    ) -> None:
        self.memory = memory
        self.resource = resource
        self.thread = thread
        self.recall = recall
        """Offer the ``recall`` tool (when the memory has retrieval on)."""
        fixed = isinstance(resource, str) and isinstance(thread, str)
        self.ref: ThreadRef | None = (
            ThreadRef.of({"resource": resource, "thread": thread}) if fixed else None
        )
        """The conversation, when fixed at construction (else each run's)."""
        self._thread = _Thread(memory, self.ref, recall=recall) if self.ref else None
        self._events: list[Event] = []
        self._compacted_at: int | None = None
        """The run step whose request overflowed the model's context and was compacted (each
        step is compacted and retried at most once)."""
        self._resend = False

    def __repr__(self) -> str:
        return f"ObservationalMemoryCapability(resource={self.resource!r}, thread={self.thread!r})"

    def get_model_settings(self) -> Any:
        """Prompt caching on, unless the agent's or model's settings already say anything
        about caching (see :func:`prompt_cache_settings`)."""
        return prompt_cache_settings

    def get_toolset(self) -> Any:
        """The ``recall`` tool, when the memory has retrieval on (bound to the run's thread)."""
        if self.ref is None or not (self.recall and self.memory.retrieval):
            return None  # without fixed ids, each run's capability (``for_run``) offers it
        from pydantic_ai.toolsets import FunctionToolset

        return FunctionToolset([self.memory.recall_tool(self.ref)])

    def ref_for(self, ctx: RunContext[Any]) -> ThreadRef:
        """This run's conversation: the fixed ids, the functions' answers, or run metadata."""
        if self.ref is not None:
            return self.ref
        metadata = ctx.metadata or {}
        ids: dict[str, str] = {}
        for name, given in (("resource", self.resource), ("thread", self.thread)):
            value = given(ctx) if callable(given) else given or metadata.get(name)
            if not isinstance(value, str) or not value:
                raise ConfigError(
                    name,
                    value,
                    f'say which {name} this run belongs to: {name}="..." or '
                    f"{name}=lambda ctx: ctx.deps.<field> when building the capability, or "
                    f'agent.run(..., metadata={{"{name}": "..."}})',
                )
            ids[name] = value
        return ThreadRef.of(ids)

    async def for_run(self, ctx: RunContext[Any]) -> AbstractCapability[Any]:
        """A fresh instance per run, for the run's conversation: what was stored belongs to
        one run."""
        ref = self.ref_for(ctx)
        return ObservationalMemoryCapability(
            self.memory, resource=ref.resource, thread=ref.thread, recall=self.recall
        )

    async def wrap_run(self, ctx: RunContext[Any], *, handler: Any) -> AgentRunResult[Any]:
        """Collect the thread's memory events while the run lasts (sent on at each hook)."""
        unsubscribe = self._state.subscribe(self._events.append)
        try:
            return await handler()
        finally:
            unsubscribe()

    async def _emit_events(self, ctx: RunContext[Any]) -> None:
        events, self._events = self._events, []
        for event in events:
            await ctx.emit(MemoryEvent(om_type=event.type, fields=event.to_dict()))

    @property
    def _state(self) -> _Thread:
        """The per-run state (every run's capability is made for its conversation)."""
        if self._thread is None:  # pragma: no cover - for_run gives every run a fixed ref
            raise RuntimeError("the capability's thread is known only inside a run")
        return self._thread

    async def before_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        """Store what happened since the last request and send memory's context for this
        step (one memory step: one store round trip, plus any memory work that is due)."""
        managed = await self._state.refresh(ctx.messages, request_context.model)
        if managed is not None:
            request_context.messages = managed
        await self._emit_events(ctx)
        return request_context

    async def on_model_request_error(
        self, ctx: RunContext[Any], *, request_context: ModelRequestContext, error: Exception
    ) -> pa.ModelResponse:
        """After a "too long" refusal, compact the thread once and make the request again
        (pydantic-ai's ``RetryModelRequest``: same step, the failed attempt unseen). Any other
        error, or a second overflow of the same step, raises the model's error."""
        from pydantic_ai import exceptions

        retry: object = getattr(exceptions, "RetryModelRequest", None)
        again = isinstance(retry, type) and self._compacted_at != ctx.run_step
        if not again or not is_context_overflow(error):
            raise error
        self._compacted_at = ctx.run_step
        if not await self._state.retry_after(error):
            await self._emit_events(ctx)
            raise error
        self._resend = True
        raise cast(type[Exception], retry)()

    async def prepare_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        """The attempt after a compaction sends memory's context again, as it is now."""
        if self._resend:
            self._resend = False
            state = self._state
            request_context.messages = await state.context(
                ctx.messages, [], request_context.model, keep_raw_from=state.step_from
            )
            await self._emit_events(ctx)
        return request_context

    async def after_run(
        self, ctx: RunContext[Any], *, result: AgentRunResult[Any]
    ) -> AgentRunResult[Any]:
        state = self._state
        reply, late_input = state.new(result.all_messages())
        await state.save([*reply, *late_input], _actor(ctx), _deferred(result.output))
        await self._emit_events(ctx)
        return result


_CACHE_SETTINGS = (
    "cache",
    "anthropic_cache",
    "bedrock_cache",
    "openrouter_cache",
    "openai_prompt_cache",
    "openai_cache",
)


def prompt_cache_settings(ctx: RunContext[Any]) -> ModelSettings | None:
    """pydantic-ai's portable ``cache`` setting, unless the model's or agent's settings say
    anything about caching (``False`` included). Memory keeps the front of every request stable
    until the next memory cycle, so providers that cache at explicit breakpoints (Anthropic,
    Bedrock, OpenRouter) get one at the end of the system prompt and one on the newest message;
    those that cache every prefix (OpenAI, Gemini) need nothing."""
    settings: Mapping[str, Any] = ctx.model_settings or {}
    if any(key.startswith(_CACHE_SETTINGS) for key in settings):
        return None
    return ModelSettings(cache=True)


def _deferred(output: object) -> frozenset[str]:
    """The calls a run ended on to wait for (pydantic-ai's ``DeferredToolRequests``)."""
    if not isinstance(output, DeferredToolRequests):
        return frozenset()
    return frozenset(c.tool_call_id for c in [*output.calls, *output.approvals])


def _actor(ctx: RunContext[Any]) -> Model | None:
    model: object = ctx.model
    return model if isinstance(model, Model) else None


HistoryProcessorFunc: TypeAlias = Callable[
    [RunContext[Any], list[pa.ModelMessage]], Awaitable[list[pa.ModelMessage]]
]


def history_processor(
    memory: Memory, *, resource: str, thread: str, recall: bool = False
) -> HistoryProcessorFunc:
    """A history processor giving an agent observational memory of one thread, for
    ``pydantic_ai.capabilities.ProcessHistory`` (see the module docstring). ``recall=True``: the
    agent has ``memory.recall_tool(...)``, so the context tells the model how to use it."""
    state = _Thread(memory, ThreadRef.of({"resource": resource, "thread": thread}), recall=recall)

    async def process(
        ctx: RunContext[Any], messages: list[pa.ModelMessage]
    ) -> list[pa.ModelMessage]:
        reply, new_input = state.new(messages)
        if reply and new_input:
            # The last run's answer, stored as the reply of the model that gave it, so the
            # thread records that model (a provider change of this run is noticed).
            await state.save(reply, state.actor_model)
        managed = await state.refresh(messages, _actor(ctx))
        return messages if managed is None else managed

    return process
