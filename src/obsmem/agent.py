"""Agent: an LLM agent with memory, the seed's API.

``Agent(id, instructions, model, memory=None, tools=())`` runs the actor through pydantic-ai.
Every call stores the input once, sends the instructions, then what memory assembled (observations
and raw messages), and stores the reply with its tool traffic. Memory works at every model step
of a call: each step's tool calls and results are stored as they happen, and the context is
assembled again before the next request.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterable, AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeAlias, cast

import pydantic_ai
from pydantic_ai import Agent as PydanticAgent
from pydantic_ai import messages as pa
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.exceptions import ModelRetry
from pydantic_ai.models import Model
from pydantic_ai.tools import (
    DeferredToolRequests,
    DeferredToolResults,
    RunContext,
    Tool,
    ToolDenied,
)
from pydantic_ai.usage import UsageLimits

from .convert import from_pydantic_ai, to_pydantic_ai
from .errors import ConfigError
from .events import Event
from .integrations.door import concerns
from .integrations.pydantic_ai import (
    ObservationalMemoryCapability,
    for_model,
    mark_as_context,
    merged_requests,
)
from .memory import Memory, ThreadRef
from .messages import FilePart, ImagePart, Message, TextPart, ToolCallPart
from .models import ModelByInputTokens, ModelSpec, resolve_model
from .tokens import HeuristicEstimator
from .working_memory import TOOL_NAME

__all__ = ["Agent", "GenerateResult", "StreamPart", "TextDelta", "ToolCall", "ToolResult"]

AgentInput: TypeAlias = str | Message | Sequence[Message] | Sequence[str | ImagePart | FilePart]
MemoryRef: TypeAlias = ThreadRef | Mapping[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class GenerateResult:
    """The outcome of one call."""

    text: str
    messages: list[Message]
    """The reply as stored: assistant messages and tool results, in order."""
    context: list[Message]
    """What the model was sent after the instructions (memory, then raw messages)."""
    events: list[Event] = field(default_factory=list[Event])
    """The ``data-om-*`` events of this thread emitted during the call."""
    input_tokens: int = 0
    output_tokens: int = 0
    pending: tuple[ToolCallPart, ...] = ()
    """Tool calls waiting for approval (tools made with ``requires_approval=True``): the call
    ended on them, ``text`` is empty, and ``generate(None, memory=..., approvals={id: True})``
    goes on from there."""
    cut_off: bool = False
    """The last model response stopped at its output cap (the agent's ``max_output_tokens``, or
    the provider's own limit), so ``text`` may end mid-sentence."""


Approvals: TypeAlias = Mapping[str, bool | str]
"""Per waiting tool-call id: True (run it), False (refuse it) or the refusal message."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TextDelta:
    type: ClassVar[str] = "text-delta"
    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class _ToolPart:
    """Which tool call a stream part is about."""

    tool_call_id: str
    tool_name: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCall(_ToolPart):
    """The model asked for a tool call (``args`` as the model gave them)."""

    type: ClassVar[str] = "tool-call"
    args: Any


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolResult(_ToolPart):
    """A tool call's result, as the model will see it."""

    type: ClassVar[str] = "tool-result"
    content: Any


@dataclass(frozen=True, slots=True, kw_only=True)
class Finish:
    type: ClassVar[str] = "finish"
    result: GenerateResult


StreamPart: TypeAlias = TextDelta | ToolCall | ToolResult | Finish | Event
ToolLike: TypeAlias = Tool[Any] | Callable[..., Any]


DEFAULT_MAX_STEPS = 200
"""The most model requests one ``generate``/``stream`` call makes (a long tool loop's steps)."""


class Agent:
    """An agent whose conversations are remembered by ``memory``."""

    def __init__(
        self,
        id: str,
        instructions: str,
        model: ModelSpec,
        memory: Memory | None = None,
        tools: Sequence[ToolLike] = (),
        *,
        max_steps: int = DEFAULT_MAX_STEPS,
        max_output_tokens: int | None = None,
    ) -> None:
        """``max_output_tokens``: the most tokens one model response may take, sent as
        ``max_tokens`` and enforced as the answer streams in (a server may ignore
        ``max_tokens``): past it (as obsmem estimates tokens) the request is closed and the
        response ends there, as if the server had stopped at the cap (``GenerateResult.cut_off``).
        None: no cap. With a cap, :meth:`stream` yields a model response's text once the
        response is read (to its end or to the cap), not as it arrives."""
        if not id:
            raise ConfigError("id", id, "an agent needs a non-empty id")
        steps = cast(object, max_steps)
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise ConfigError("max_steps", steps, "give the most model requests of a call (>= 1)")
        cap = cast(object, max_output_tokens)
        if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 1):
            raise ConfigError(
                "max_output_tokens", cap, "give the most tokens of one model response (>= 1)"
            )
        self.max_steps = max_steps
        self.max_output_tokens = max_output_tokens
        self.id = id
        self.instructions = instructions
        self.model = model
        self.memory = memory
        self.tools = tuple(tools)
        self._estimator = HeuristicEstimator()

    def __repr__(self) -> str:
        return f"Agent(id={self.id!r}, model={self.model!r}, memory={self.memory!r})"

    # -- public API ------------------------------------------------------------------------------

    async def generate(
        self,
        input: AgentInput | None,
        *,
        memory: MemoryRef | None = None,
        approvals: Approvals | None = None,
    ) -> GenerateResult:
        """Answer ``input``; with ``memory={"resource": ..., "thread": ...}`` the exchange is
        remembered. A call that ends on tools waiting for approval returns them as
        ``pending``; go on with ``input=None`` and ``approvals`` (the thread kept the calls)."""
        result: GenerateResult | None = None
        async for part in self._run(input, memory, approvals, streaming=False):
            if isinstance(part, Finish):
                result = part.result
        assert result is not None
        return result

    async def stream(
        self,
        input: AgentInput | None,
        *,
        memory: MemoryRef | None = None,
        approvals: Approvals | None = None,
    ) -> AsyncIterator[StreamPart]:
        """Like :meth:`generate`, yielding text deltas, tool calls and results, and every
        ``data-om-*`` event of the thread as they happen, then a final ``Finish``."""
        async for part in self._run(input, memory, approvals, streaming=True):
            yield part

    def generate_sync(
        self,
        input: AgentInput | None,
        *,
        memory: MemoryRef | None = None,
        approvals: Approvals | None = None,
    ) -> GenerateResult:
        """:meth:`generate` for scripts (not from inside a running event loop). With a memory it
        runs on the memory's own loop (:meth:`Memory.run_sync`), so background memory work
        carries on between calls; end the script with ``memory.close()``."""
        work = self.generate(input, memory=memory, approvals=approvals)
        if self.memory is not None:
            return self.memory.run_sync(work)
        return asyncio.run(work)

    # -- the run ---------------------------------------------------------------------------------

    async def _run(
        self,
        input: AgentInput | None,
        memory: MemoryRef | None,
        approvals: Approvals | None,
        *,
        streaming: bool,
    ) -> AsyncIterator[StreamPart]:
        queue: asyncio.Queue[StreamPart | None] = asyncio.Queue()
        ref = ThreadRef.of(memory) if memory is not None else None
        if ref is not None and self.memory is None:
            raise ConfigError("memory", memory, "this agent was created without a Memory")
        resume = _deferred_results(input, ref, approvals)
        events: list[Event] = []
        unsubscribe: Callable[[], None] = lambda: None  # noqa: E731
        if ref is not None and self.memory is not None:

            def listen(event: Event) -> None:
                if concerns(event, ref.thread):
                    events.append(event)
                    queue.put_nowait(event)

            unsubscribe = self.memory.subscribe(listen)
        task = asyncio.create_task(
            self._turn(input, ref, resume, queue, events, streaming=streaming)
        )
        getter: asyncio.Future[StreamPart | None] | None = None
        try:
            while True:
                getter = asyncio.ensure_future(queue.get())
                done, _ = await asyncio.wait({getter, task}, return_when=asyncio.FIRST_COMPLETED)
                if getter in done:
                    item = getter.result()
                    if item is None:
                        break
                    yield item
                    if isinstance(item, Finish):
                        break
                else:
                    task.result()  # re-raise the run's error
                    while not queue.empty():
                        item = queue.get_nowait()
                        if item is not None:
                            yield item
                    break
            await task
        finally:
            unsubscribe()
            if getter is not None:  # cancelled while waiting: left pending, it would leak
                getter.cancel()
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def _turn(
        self,
        input: AgentInput | None,
        ref: ThreadRef | None,
        resume: DeferredToolResults | None,
        queue: asyncio.Queue[StreamPart | None],
        events: list[Event],
        *,
        streaming: bool,
    ) -> None:
        new = _input_messages(input) if input is not None else []
        tools = list(self.tools)
        capabilities: list[_StepMemory] = []
        if ref is not None and self.memory is not None:
            # The input is stored and the first request's context assembled here (it also
            # picks the model by input size); every later step of the run goes through memory
            # again (the capability), so a long tool loop stays inside memory's bounds.
            memory_steps = _StepMemory(self.memory, ref, self.instructions)
            sent = await memory_steps.first_step(new, self.model)
            capabilities.append(memory_steps)
            if self.memory.agent_updates_working_memory:
                tools.append(_working_memory_tool(self.memory, ref))
            if self.memory.retrieval:
                tools.append(self.memory.recall_tool(ref))
        else:
            sent = list(new)
        model = self._actor_model(sent)
        history = to_pydantic_ai(sent)
        if capabilities:  # the instructions first, then memory's context
            instructions = pa.ModelRequest(parts=[pa.SystemPromptPart(self.instructions)])
            history = for_model(merged_requests([instructions, *history]), model)
        if resume is not None:
            _check_waiting(history, resume)
        for step in capabilities:
            step.started_from(history)
        # pydantic-ai's first-run banner (a Logfire advertisement) would describe this agent,
        # which is obsmem's, built anew each turn: off, by the switch pydantic-ai documents for
        # a library that runs agents for its users.
        pydantic_ai.BANNER_ENABLED = False
        agent = PydanticAgent(
            model,
            instructions=None if capabilities else self.instructions,
            tools=tools,
            capabilities=capabilities,
            output_type=[str, DeferredToolRequests],
        )
        handler = _stream_handler(queue) if streaming else None
        run = await agent.run(
            None,
            message_history=history,
            event_stream_handler=handler,
            usage_limits=UsageLimits(request_limit=self.max_steps),
            deferred_tool_results=resume,
        )
        reply = capabilities[0].stored if capabilities else from_pydantic_ai(run.new_messages())
        usage = run.usage
        output = run.output
        waiting = output if isinstance(output, DeferredToolRequests) else None
        result = GenerateResult(
            text="" if waiting is not None else str(output),
            pending=_pending_calls(waiting, reply),
            cut_off=_cut_off(run.new_messages()),
            messages=reply,
            context=sent,
            events=events,
            input_tokens=usage.input_tokens or 0,
            output_tokens=usage.output_tokens or 0,
        )
        queue.put_nowait(Finish(result=result))

    def _actor_model(self, context: Sequence[Message]) -> Model:
        spec = self.model
        if isinstance(spec, ModelByInputTokens):
            spec = spec.resolve(self._estimator.count_messages(context))
        model = resolve_model(spec)
        if self.max_output_tokens is None:
            return model
        from .models.output_cap import OutputCapped

        return OutputCapped(model, self.max_output_tokens)


class _StepMemory(ObservationalMemoryCapability):
    """Memory at every model step of one ``Agent`` call: the run starts from the context the
    agent already assembled; each later step's traffic is stored and the context assembled
    again before the next request. The agent offers ``recall`` itself."""

    def __init__(self, memory: Memory, ref: ThreadRef, instructions: str) -> None:
        super().__init__(memory, resource=ref.resource, thread=ref.thread, recall=True)
        self.fixed = ref
        # The agent's instructions lead every request, before memory (SPEC §6: the stable
        # prefix a prompt cache keeps).
        self._state.system_prompts.append(instructions)

    async def first_step(self, new: Sequence[Message], actor_model: ModelSpec) -> list[Message]:
        """Store the call's input and return the first request's context (it also picks the
        model by input size). The input stays raw in a compaction after the model refused it
        as too long (the capability's retry, for every step); the reply is what comes after."""
        state = self._state
        context = await state.step(new, actor_model=actor_model)
        state.stored.clear()
        return context.messages

    def started_from(self, history: list[pa.ModelMessage]) -> None:
        """The run's starting history: memory's context, its input already stored."""
        mark_as_context(history, self.fixed.thread)

    @property
    def stored(self) -> list[Message]:
        """The run's reply as stored: each step's tool traffic, then the final answer."""
        return list(self._state.stored)

    def get_toolset(self) -> Any:
        return None

    async def for_run(self, ctx: RunContext[Any]) -> AbstractCapability[Any]:
        return self  # made for this one run

    async def wrap_run(self, ctx: RunContext[Any], *, handler: Any) -> Any:
        return await handler()  # the agent streams memory's events itself


def _working_memory_tool(memory: Memory, ref: ThreadRef) -> Tool[Any]:
    async def update_working_memory(content: str) -> str:
        try:
            await memory.update_working_memory(ref, content)
        except ValueError as exc:
            raise ModelRetry(str(exc)) from exc
        return "Working memory updated."

    return Tool(
        update_working_memory,
        name=TOOL_NAME,
        description=(
            "Replace your working memory about the user with the whole updated document "
            "(keep everything still true, add what you learned, fix what changed)."
        ),
    )


def _deferred_results(
    input: AgentInput | None, ref: ThreadRef | None, approvals: Approvals | None
) -> DeferredToolResults | None:
    """pydantic-ai's results for the calls ``approvals`` answers (None: a new turn)."""
    if approvals is None:
        if input is None:
            raise ConfigError("input", None, "give the user's input, or approvals to go on")
        return None
    if input is not None:
        raise ConfigError(
            "approvals", dict(approvals), "go on with input=None: the thread holds the calls"
        )
    if ref is None:
        raise ConfigError(
            "approvals", dict(approvals), "going on needs memory={...}: the thread keeps the calls"
        )
    if not approvals:
        raise ConfigError("approvals", {}, "answer at least one waiting call")
    return DeferredToolResults(
        approvals={
            call_id: ToolDenied(answer) if isinstance(answer, str) else answer
            for call_id, answer in approvals.items()
        }
    )


def _check_waiting(history: Sequence[pa.ModelMessage], resume: DeferredToolResults) -> None:
    """The answered calls must be the thread's latest step, still waiting."""
    last = history[-1] if history else None
    waiting = (
        {p.tool_call_id for p in last.parts if isinstance(p, pa.ToolCallPart)}
        if isinstance(last, pa.ModelResponse)
        else set()
    )
    unknown = sorted(set(resume.approvals) - waiting)
    if unknown:
        raise ConfigError(
            "approvals",
            unknown,
            "answer the calls the thread's last step is waiting on "
            f"({', '.join(sorted(waiting)) or 'none is waiting'})",
        )


def _pending_calls(
    waiting: DeferredToolRequests | None, reply: Sequence[Message]
) -> tuple[ToolCallPart, ...]:
    if waiting is None:
        return ()
    ids = {c.tool_call_id for c in [*waiting.approvals, *waiting.calls]}
    return tuple(
        p for m in reply for p in m.parts if isinstance(p, ToolCallPart) and p.tool_call_id in ids
    )


def _cut_off(messages: Sequence[pa.ModelMessage]) -> bool:
    """Whether the run's last model response stopped at its output cap."""
    responses = [m for m in messages if isinstance(m, pa.ModelResponse)]
    return bool(responses) and responses[-1].finish_reason == "length"


def _input_messages(input: AgentInput) -> list[Message]:
    if isinstance(input, str):
        return [Message.user(input)]
    if isinstance(input, Message):
        return [input]
    items = list(input)
    if all(isinstance(i, Message) for i in items):
        return [i for i in items if isinstance(i, Message)]
    parts: list[TextPart | ImagePart | FilePart] = []
    for item in items:
        if isinstance(item, str):
            parts.append(TextPart(text=item))
        elif isinstance(item, ImagePart | FilePart):
            parts.append(item)
        else:
            raise ConfigError(
                "input", item, "give text, a Message, Messages, or text with ImagePart/FilePart"
            )
    return [Message(role="user", parts=tuple(parts))]


def _stream_handler(
    queue: asyncio.Queue[StreamPart | None],
) -> Callable[[RunContext[Any], AsyncIterable[Any]], Any]:
    async def handle(ctx: RunContext[Any], stream: AsyncIterable[Any]) -> None:
        async for event in stream:
            if isinstance(event, pa.PartStartEvent) and isinstance(event.part, pa.TextPart):
                if event.part.content:
                    queue.put_nowait(TextDelta(text=event.part.content))
            elif isinstance(event, pa.PartDeltaEvent) and isinstance(event.delta, pa.TextPartDelta):
                if event.delta.content_delta:
                    queue.put_nowait(TextDelta(text=event.delta.content_delta))
            elif isinstance(event, pa.FunctionToolCallEvent):
                part = event.part
                queue.put_nowait(
                    ToolCall(
                        tool_call_id=part.tool_call_id, tool_name=part.tool_name, args=part.args
                    )
                )
            elif isinstance(event, pa.FunctionToolResultEvent):
                result = event.part
                queue.put_nowait(
                    ToolResult(
                        tool_call_id=result.tool_call_id,
                        tool_name=result.tool_name,
                        content=result.content,
                    )
                )

    return handle
