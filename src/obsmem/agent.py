"""Agent: an LLM agent with memory, the seed's API.

``Agent(id, instructions, model, memory=None, tools=())`` runs the actor through pydantic-ai.
Every call stores the input once, sends the instructions, then what memory assembled (observations
and raw messages), and stores the reply with its tool traffic.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterable, AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeAlias

from pydantic_ai import Agent as PydanticAgent
from pydantic_ai import messages as pa
from pydantic_ai.exceptions import ModelRetry
from pydantic_ai.models import Model
from pydantic_ai.tools import RunContext, Tool

from .convert import from_pydantic_ai, to_pydantic_ai
from .errors import ConfigError
from .events import Event
from .memory import Memory, ThreadRef
from .messages import FilePart, ImagePart, Message, TextPart
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


@dataclass(frozen=True, slots=True, kw_only=True)
class TextDelta:
    type: ClassVar[str] = "text-delta"
    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCall:
    type: ClassVar[str] = "tool-call"
    tool_call_id: str
    tool_name: str
    args: Any


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolResult:
    type: ClassVar[str] = "tool-result"
    tool_call_id: str
    tool_name: str
    content: Any


@dataclass(frozen=True, slots=True, kw_only=True)
class Finish:
    type: ClassVar[str] = "finish"
    result: GenerateResult


StreamPart: TypeAlias = TextDelta | ToolCall | ToolResult | Finish | Event
ToolLike: TypeAlias = Tool[Any] | Callable[..., Any]


class Agent:
    """An agent whose conversations are remembered by ``memory``."""

    def __init__(
        self,
        id: str,
        instructions: str,
        model: ModelSpec,
        memory: Memory | None = None,
        tools: Sequence[ToolLike] = (),
    ) -> None:
        if not id:
            raise ConfigError("id", id, "an agent needs a non-empty id")
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
        self, input: AgentInput, *, memory: MemoryRef | None = None
    ) -> GenerateResult:
        """Answer ``input``; with ``memory={"resource": ..., "thread": ...}`` the exchange is
        remembered."""
        result: GenerateResult | None = None
        async for part in self._run(input, memory, streaming=False):
            if isinstance(part, Finish):
                result = part.result
        assert result is not None
        return result

    async def stream(
        self, input: AgentInput, *, memory: MemoryRef | None = None
    ) -> AsyncIterator[StreamPart]:
        """Like :meth:`generate`, yielding text deltas, tool calls and results, and every
        ``data-om-*`` event of the thread as they happen, then a final ``Finish``."""
        async for part in self._run(input, memory, streaming=True):
            yield part

    def generate_sync(
        self, input: AgentInput, *, memory: MemoryRef | None = None
    ) -> GenerateResult:
        """:meth:`generate` for scripts (not from inside a running event loop)."""
        return asyncio.run(self.generate(input, memory=memory))

    # -- the run ---------------------------------------------------------------------------------

    async def _run(
        self, input: AgentInput, memory: MemoryRef | None, *, streaming: bool
    ) -> AsyncIterator[StreamPart]:
        queue: asyncio.Queue[StreamPart | None] = asyncio.Queue()
        ref = ThreadRef.of(memory) if memory is not None else None
        if ref is not None and self.memory is None:
            raise ConfigError("memory", memory, "this agent was created without a Memory")
        events: list[Event] = []
        unsubscribe: Callable[[], None] = lambda: None  # noqa: E731
        if ref is not None and self.memory is not None:

            def listen(event: Event) -> None:
                if getattr(event, "thread_id", None) == ref.thread:
                    events.append(event)
                    queue.put_nowait(event)

            unsubscribe = self.memory.subscribe(listen)
        task = asyncio.create_task(self._turn(input, ref, queue, events, streaming=streaming))
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
                    getter.cancel()
                    task.result()  # re-raise the run's error
                    while not queue.empty():
                        item = queue.get_nowait()
                        if item is not None:
                            yield item
                    break
            await task
        finally:
            unsubscribe()
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def _turn(
        self,
        input: AgentInput,
        ref: ThreadRef | None,
        queue: asyncio.Queue[StreamPart | None],
        events: list[Event],
        *,
        streaming: bool,
    ) -> None:
        new = _input_messages(input)
        if ref is not None and self.memory is not None:
            context = await self.memory.context(ref, new, actor_model=self.model)
            sent = context.messages
        else:
            sent = list(new)
        history = to_pydantic_ai(sent)
        model = self._actor_model(sent)
        tools = list(self.tools)
        if ref is not None and self.memory is not None and self.memory.agent_updates_working_memory:
            tools.append(_working_memory_tool(self.memory, ref))
        if ref is not None and self.memory is not None and self.memory.retrieval:
            tools.append(self.memory.recall_tool(ref))
        agent = PydanticAgent(model, instructions=self.instructions, tools=tools)
        handler = _stream_handler(queue) if streaming else None
        run = await agent.run(None, message_history=history, event_stream_handler=handler)
        reply = from_pydantic_ai(run.new_messages())
        if ref is not None and self.memory is not None:
            reply = await self.memory.save(ref, reply, actor_model=self.model)
        usage = run.usage
        result = GenerateResult(
            text=str(run.output),
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
        return resolve_model(spec)


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
