"""The ``Session`` an Agents SDK ``Runner`` is given: :class:`ObservationalSession`."""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping, Sequence
from contextlib import aclosing
from typing import TYPE_CHECKING, Any, Protocol, TypedDict, TypeVar, Unpack, cast

from obsmem.convert.openai_agents import (
    METADATA_KEY,
    from_agents_items,
    item_count,
    to_agents_items,
)
from obsmem.events import Event
from obsmem.integrations.door import Door
from obsmem.integrations.openai_agents import history
from obsmem.integrations.openai_agents.history import UNSET, ClearChoice
from obsmem.integrations.openai_agents.models import (
    actor_model_of,
    cache_breakpoint,
    through_litellm,
    with_cache_breakpoint,
)
from obsmem.integrations.openai_agents.tracing import MemoryStreamEvent, RunTrace, spans_of
from obsmem.memory import Memory, ThreadRef
from obsmem.messages import Message
from obsmem.recall import RECALL_DESCRIPTION, RecallRequest

if TYPE_CHECKING:
    from agents import FunctionTool, Tool
    from agents.items import TResponseInputItem
    from agents.memory.session_settings import SessionSettings
    from agents.models.interface import Model
    from agents.result import RunResultStreaming
    from agents.run_config import CallModelData, ModelInputData
    from agents.stream_events import StreamEvent

    from .compacting import CompactingModel

__all__ = ["InnerSession", "ObservationalSession"]

_WITHOUT_FILTER = (
    "ObservationalSession %r: a run went without the session's input filter after runs with "
    "it, so its model was sent the context memory assembled at the last model call of the "
    "run before (memory did not run for it). Pass "
    "RunConfig(call_model_input_filter=session.call_model_input_filter) to every run."
)

log = logging.getLogger("obsmem")
T = TypeVar("T")


class InnerSession(Protocol):
    """The part of the SDK's ``Session`` protocol a wrapped session must have."""

    session_id: str

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]: ...

    async def add_items(self, items: list[TResponseInputItem]) -> None: ...

    async def pop_item(self) -> TResponseInputItem | None: ...

    async def clear_session(self) -> None: ...


class _Options(TypedDict, total=False):
    """The options :meth:`ObservationalSession.wrap` passes on."""

    on_clear: ClearChoice | None
    session_settings: SessionSettings | Mapping[str, Any] | None
    own_loop: bool
    model: Any


class ObservationalSession:
    """An OpenAI Agents SDK session whose history is a Memory thread (see the package
    docstring): ``Runner.run(agent, "...", session=session,
    run_config=RunConfig(call_model_input_filter=session.call_model_input_filter))``.

    ``on_clear``: what :meth:`clear_session` does (:data:`ClearChoice`; None: ``"new_thread"``).
    ``session_settings``: ``SessionSettings(limit=n)``. ``own_loop``: memory's work runs on the
    memory's own loop thread (``with session:`` turns it on). ``model``: the model the Runner
    calls when it is not the agent's own (a ``RunConfig.model``, the Runner's default), which
    the input filter cannot see, so memory knows the actor.
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
        model: Any = None,
    ) -> None:
        self.memory = memory
        self.model = model
        """The model the Runner calls in place of the agent's (None: the agent's own)."""
        self._ref = ThreadRef.of({"resource": resource, "thread": session_id})
        self.session_id = session_id
        self.inner = inner
        self.on_clear: ClearChoice = history.clear_choice(memory, on_clear)
        self.limit = history.limit_of(session_settings)
        """Most items of the history from before a run sent to the model (None: no limit)."""
        self.own_loop = own_loop
        self._resolved = False
        """The thread this session goes on in (after clears) was read from the store."""
        self._step_from: int | None = None
        """The first seq stored since the last model call (the step the next call answers)."""
        self._run_from: int | None = None
        """The first seq the current run stored (its items are never cut by the limit)."""
        self._run_starting = False
        self._input: list[Any] | None = None
        """The run's input, not stored yet: the input filter stores it in its step (one store
        call), else the next batch does."""
        self._filtered_before = False
        """The last run called the input filter, so :meth:`get_items` at the start of a run
        reads no store: the filter replaces what it returns."""
        self._shown: list[Any] | None = None
        """What the filter last sent the model, and the items stored since (None: read it
        from memory)."""
        self._door = Door(memory, self._ref, actor_model=actor_model_of(model))
        self._run_limit: int | None = None
        self._limit_for_next_run: int | None = UNSET
        """The limit a RunConfig set for the run being prepared (see ``settings_class``)."""
        self._litellm = through_litellm(model)
        """The agent's model is LiteLLM's (which takes a breakpoint for Anthropic)."""
        self._approving: frozenset[str] = frozenset()
        """The agent's tools that may wait for an approval (``needs_approval``)."""
        self._recall_tool: FunctionTool | None = None
        self.recall_offered = False
        """This session made a ``recall`` tool, so ``get_items()`` tells the model about it."""
        self._spans = spans_of(memory)
        self._trace = RunTrace(self._spans)
        self._spans.runs[session_id] = self._trace
        self._in_run = self._run_filtered = self._after_tool = False
        """A run started; it called the input filter; its last batch ended with a tool output."""
        self._warned_unfiltered = False

    @classmethod
    def wrap(
        cls, inner: InnerSession, memory: Memory, *, resource: str, **options: Unpack[_Options]
    ) -> ObservationalSession:
        """Observational memory over ``inner``, which keeps the full history (thread id: the inner
        session's ``session_id``). Adding, popping and clearing apply to both."""
        return cls(memory, session_id=inner.session_id, resource=resource, inner=inner, **options)

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
    else:  # the protocol's plain attribute, read and set through history.SettingsAttribute
        session_settings = history.SettingsAttribute()

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The managed context (no ``limit``: the Runner's read at the start of a run), or the
        newest ``limit`` stored items."""
        if limit is not None:
            await self._on_memory(self._store_input())
            if self.inner is not None:
                return await self.inner.get_items(limit)
            return await self._on_memory(self._raw_tail(limit))
        filtered_before = self._filtered_before
        self._start_run()
        if filtered_before and self._resolved and self._shown is not None:
            return cast("list[TResponseInputItem]", list(self._shown))
        return await self._on_memory(
            self._context(recall=self.recall_offered, keep_raw_from=None, refresh=True)
        )

    async def call_model_input_filter(self, data: CallModelData[Any]) -> ModelInputData:
        """``RunConfig.call_model_input_filter``: what memory assembled for this step, in place
        of the Runner's own input (whose items this session has already stored). It mentions
        recall only when the agent being called has the ``recall`` tool."""
        from agents.run_config import ModelInputData

        self._run_filtered = self._filtered_before = True
        self._trace.see()
        tools = data.agent.tools
        self._approving = frozenset(
            str(getattr(t, "name", "")) for t in tools if getattr(t, "needs_approval", False)
        )
        step, self._step_from = self._step_from, None
        new, self._input = self._input or [], None
        called = self.model if self.model is not None else data.agent.model
        self._door.actor_model = actor_model_of(called) or self._door.actor_model
        if called is not None:
            self._litellm = through_litellm(called)
        items = await self._on_memory(
            self._context(recall=history.offers_recall(tools), keep_raw_from=step, new=new)
        )
        self._shown = list(items)
        return ModelInputData(input=items, instructions=data.model_data.instructions)

    # -- a request the model refused as too long --------------------------------------------------

    def compacting(self, model: Model) -> CompactingModel:
        """``model`` (an SDK ``Model``) for ``Agent(model=...)``, compacting once and sending
        again a step refused as too long (see :mod:`.compacting`)."""
        from .compacting import CompactingModel

        return CompactingModel(model, self)

    async def after_overflow(
        self, error: BaseException, tools: Sequence[Any]
    ) -> list[TResponseInputItem] | None:
        """The current step's input again after ``error`` refused it as too long and memory
        compacted the thread; None otherwise (the caller raises ``error``)."""
        if not await self._on_memory(self._door.retry_after(error)):
            return None
        items = await self._on_memory(
            self._context(recall=history.offers_recall(tools), keep_raw_from=self._door.step_from)
        )
        self._shown = list(items)
        return items

    # -- tools -----------------------------------------------------------------------------------

    def tools(self) -> list[Tool]:
        """The tools memory gives the agent (``Agent(tools=[*your_tools, *session.tools()])``):
        the ``recall`` tool when the memory has retrieval on."""
        return [self.recall_tool()] if self.memory.retrieval else []

    def recall_tool(self) -> FunctionTool:
        """The ``recall`` tool for this session's conversation, as an SDK ``FunctionTool`` (the
        same one each time). Needs retrieval on."""
        from agents import FunctionTool

        self.memory.require_retrieval()
        if self._recall_tool is None:

            async def invoke(ctx: Any, arguments: str) -> str:
                return await self._on_memory(self._answer_recall(arguments))

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
        self._trace.see()
        self._note_steps(items)
        if self.inner is not None:
            await self.inner.add_items(items)
        if self._run_starting and self._filtered_before and self._input is None:
            self._input = list(items)  # the run's input: stored by the filter's step
            return
        if self._in_run and not self._run_filtered and self._filtered_before:
            self._filtered_before = False  # this run went without the filter
            log.warning(_WITHOUT_FILTER, self.session_id)
        await self._on_memory(self._store(items))

    async def pop_item(self) -> TResponseInputItem | None:
        """Take back the newest item and return it (None when there is none): storage keeps it,
        marked, and memory never observes it. Wrapped, the inner session's popped item is
        returned."""
        popped = await self.inner.pop_item() if self.inner is not None else None
        await self._on_memory(self._store_input())
        self._shown = None
        message = await self._on_memory(self._retract())
        if self.inner is not None or message is None:
            return popped
        items = to_agents_items([message])
        item = items[-1] if items else {"role": "assistant", "content": message.text}
        return cast("TResponseInputItem", item)

    async def clear_session(self) -> None:
        """Start the conversation over, as ``on_clear`` says: ``"new_thread"`` goes on in a new
        memory thread (remembered in the store, so every process goes on there), the old one
        kept; ``"forget"`` also forgets this thread's memory. Wrapped, the inner session is
        cleared too."""
        await self._on_memory(self._clear(self.on_clear))
        if self.inner is not None:
            await self.inner.clear_session()

    # -- memory events ---------------------------------------------------------------------------

    def subscribe(self, listener: Callable[[Event], object]) -> Callable[[], None]:
        """Hand ``listener`` every ``data-om-*`` event of this session's thread (called where
        memory works); returns the function that stops it."""
        return self._door.subscribe(listener)

    async def stream_events(
        self, result: RunResultStreaming
    ) -> AsyncIterator[StreamEvent | MemoryStreamEvent]:
        """``result.stream_events()`` (of ``Runner.run_streamed(..., session=this)``) with this
        session's memory events among them, as :class:`MemoryStreamEvent` s (background work
        that ends after the run is not in the stream: see :meth:`subscribe`)."""
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
        """Await ``work`` where memory lives: on its own loop thread with ``own_loop`` (a loop
        that only runs during a call would stall memory's background work)."""
        if self.own_loop:
            return await self.memory.on_own_loop(work)
        return await work

    def _start_run(self) -> None:
        """The Runner reads the history: a run starts, with the session's limit or the one its
        RunConfig just set."""
        given, self._limit_for_next_run = self._limit_for_next_run, UNSET
        self._run_limit = self.limit if given is UNSET else given
        self._run_from = None
        self._run_starting = True
        self._trace.start_run()
        self._in_run, self._run_filtered, self._after_tool = True, False, False
        self._input = None

    def _note_steps(self, items: Sequence[Any]) -> None:
        """Say once, loudly, that a run went through a tool loop without the input filter: the
        model answered a tool's output stored in an earlier batch and the filter was never
        called in this run (with observational memory off there is nothing to miss)."""
        if not self._in_run:
            return
        answered, self._after_tool = history.after_tools(items, self._after_tool)
        if not answered or self._run_filtered or self._warned_unfiltered or self.memory.om is None:
            return
        self._warned_unfiltered = True
        log.warning(history.UNFILTERED, self.session_id)

    async def _thread_ref(self, *, refresh: bool = False) -> ThreadRef:
        """The thread this session is on: the one its first thread names after a clear."""
        if self._resolved and not refresh:
            return self._ref
        first = await self.memory.thread(self.session_id)
        current, _ = history.next_thread(first.metadata if first is not None else {})
        self._go_on_in(current or self.session_id)
        self._resolved = True
        return self._ref

    def _go_on_in(self, thread: str) -> None:
        """This session's conversation is ``thread`` from now on."""
        self._ref = self._door.ref = ThreadRef(thread=thread, resource=self._ref.resource)
        self._spans.runs[thread] = self._trace

    async def _context(
        self,
        *,
        recall: bool,
        keep_raw_from: int | None,
        refresh: bool = False,
        new: Sequence[Any] = (),
    ) -> list[TResponseInputItem]:
        """The step: store ``new`` (the run's input) and assemble the context, in one store
        call (a late result's tool name is looked up first)."""
        await self._thread_ref(refresh=refresh)
        self._door.recall = recall and self.memory.retrieval
        messages = await self._messages(new) if new else []
        context = await self._door.step(
            messages,
            step_from=keep_raw_from,
            waiting=history.waiting_calls(messages, self._approving),
        )
        self._stored(context.stored_input)
        shown = history.bounded(context.messages, self._run_limit, self._run_from)
        mark = cache_breakpoint(self._door.actor_model, litellm=self._litellm)
        items = with_cache_breakpoint(to_agents_items(shown), mark)
        return cast("list[TResponseInputItem]", items)

    async def _messages(self, items: Sequence[Any]) -> list[Message]:
        ref = await self._thread_ref()
        wanted = history.answered_elsewhere(items)
        names = await history.call_names(self.memory, ref.thread, wanted) if wanted else {}
        return from_agents_items(items, tool_names=names)

    def _stored(self, stored: Sequence[Message]) -> int | None:
        """The first seq of what was just stored (the run's first, when it starts)."""
        first = next((m.seq for m in stored if m.seq is not None), None)
        if self._run_starting and first is not None:
            self._run_from, self._run_starting = first, False
        return first

    async def _store_input(self) -> None:
        """Store the run's input if the filter has not (the Runner reads its writes back)."""
        if self._input:
            await self._store(())  # _store takes the pending input first

    async def _store(self, items: Sequence[Any]) -> None:
        pending, self._input = self._input or [], None
        batch = [*pending, *items]
        messages = await self._messages(batch)
        stored = await self._door.reply(
            messages, waiting=history.waiting_calls(messages, self._approving)
        )
        first = self._stored(stored)
        if self._step_from is None:
            self._step_from = first
        if self._shown is not None:
            self._shown += batch

    async def _raw_tail(self, limit: int) -> list[TResponseInputItem]:
        """The newest ``limit`` stored items, without those taken back."""
        if limit <= 0:
            return []
        shown: list[Message] = []
        ref = await self._thread_ref()
        async with aclosing(self.memory.shown_tail(ref.thread, page=limit)) as tail:
            async for message in tail:
                shown.append(message)
                if sum(map(item_count, shown)) >= limit:
                    break
        return cast("list[TResponseInputItem]", to_agents_items(shown[::-1])[-limit:])

    async def _retract(self) -> Message | None:
        return await self.memory.retract_last(await self._thread_ref())

    async def _answer_recall(self, arguments: str) -> str:
        await self._thread_ref()
        return await self._door.answer_recall(arguments)

    async def _clear(self, choice: ClearChoice) -> None:
        ref = await self._thread_ref(refresh=True)
        if choice == "forget":
            await self.memory.forget_thread(ref)
        else:
            first = await self.memory.open_thread(self.session_id, ref.resource)
            _, clears = history.next_thread(first.metadata)
            thread = f"{self.session_id}~{clears + 1}"
            await self.memory.open_thread(thread, ref.resource)
            moved = {METADATA_KEY: {"thread": thread, "clears": clears + 1}}
            await self.memory.open_thread(self.session_id, ref.resource, **moved)
            self._go_on_in(thread)
        self._step_from = self._run_from = None
        self._run_starting = False
        self._input, self._shown = None, None
