"""Observational memory for ``langchain.agents.create_agent``, as middleware.

``create_agent(model, tools, middleware=[ObservationalMemoryMiddleware(memory)],
checkpointer=...)``; then ``agent.invoke(...)`` or ``await agent.ainvoke(...)`` (streaming too)
with ``config={"configurable": {"thread_id": ..., "resource_id": ...}}``.

* Before **every** model call of a run (``wrap_model_call``) it stores what is new in the agent's
  messages (the turn's input once, then each step's tool results, as they happen) and sends the
  model what memory assembled for that step: the agent's system prompt and memory's observations
  as one system message, then the raw messages, this turn's included. Activation, synchronous
  observation and buffering happen between the steps of a tool loop.
* After every model call (``after_model``) it stores the model's message at once, so the final
  answer is in memory when the run returns, not at the next call.
* One compiled agent serves every user: the thread is ``thread_id`` and the resource (the user)
  ``resource_id`` (or ``user_id``) of the run's runtime context (``context={...}``, a mapping or
  an object with those attributes) or ``config["configurable"]``, read on every call (see
  :meth:`~obsmem.integrations.langgraph.LangGraphMemory.ref`). ``resource=``/``thread=`` fix them,
  or read them from the runtime context as functions (``resource=lambda ctx: ctx.user.id``).
* The thread's memory events (``data-om-*``, as ``event.to_dict()``) that happen during a model
  call or while its answer is stored go to LangGraph's custom stream:
  ``agent.stream(..., stream_mode="custom")`` shows them.
* ``trim_checkpoint=True``: messages memory has observed leave the agent's state
  (``RemoveMessage``), so the checkpointer keeps only what memory still sends raw; the whole
  conversation stays in obsmem's store.
* With retrieval on (``Memory(observational_memory={"retrieval": True})``) the middleware gives
  the agent the ``recall`` tool (``recall=False``: it does not). The context mentions recall only
  when the model call offers a tool named ``recall``.
* The actor is the agent's model (``request.model`` of each model call, as ``create_agent`` was
  given it): ``ChatAnthropic(...)`` is ``anthropic/...`` to memory, so images are counted by its
  provider's rules and a provider change activates buffered observations early (with
  ``activateOnProviderChange``). For Anthropic models, and OpenAI's from GPT-5.6 on, the one
  system message (the agent's prompt and memory's observations, which change only with a memory
  cycle) ends with a prompt-cache breakpoint (``cache_control``, ``prompt_cache_breakpoint``);
  Gemini and earlier OpenAI models cache prefixes on their own.
  For a breakpoint on the newest message too, add langchain-anthropic's
  ``AnthropicPromptCachingMiddleware`` after this one.
* Approvals (``HumanInTheLoopMiddleware``, or ``interrupt()`` in a tool) pause a run with its
  tool calls waiting as the thread's latest step (listed before ``HumanInTheLoopMiddleware``,
  whose ``after_model`` then runs first, this middleware stores the model message at the resume
  instead): memory never observes them as interrupted, and on ``Command(resume=...)`` each
  result is stored with its call, once. A new input instead of the resume abandons them:
  LangGraph drops the interrupt, and memory shows the model those calls as interrupted.

Order in ``middleware=[...]``: middleware that edits the messages of a request (reminders,
context editing) belongs after this one, so it edits memory's context and nothing it adds is
stored; middleware that chooses a request's tools (``LLMToolSelectorMiddleware``) belongs before
it, so the context mentions ``recall`` only when the tool is still offered.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, cast

from obsmem.errors import MissingExtraError
from obsmem.memory import Memory
from obsmem.models import ModelSpec

from .langgraph import BoundCall, IdFrom, LangGraphMemory, ModelInput, joined_system
from .langgraph.models import actor_model_of, with_cache_breakpoint

try:
    from langchain.agents.middleware import (
        AgentMiddleware,
        AgentState,
        ExtendedModelResponse,
        ModelRequest,
        ModelResponse,
    )
    from langchain_core.messages import AIMessage, AnyMessage
    from langchain_core.tools import BaseTool
    from langgraph.runtime import Runtime
    from langgraph.types import Command
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise MissingExtraError(
        "obsmem.integrations.langchain", "langgraph", package="langchain"
    ) from exc

__all__ = ["ObservationalMemoryMiddleware"]

_Result = ModelResponse[Any] | AIMessage | ExtendedModelResponse[Any]


class ObservationalMemoryMiddleware(AgentMiddleware[AgentState[Any], Any, Any]):
    """Gives a ``create_agent`` agent observational memory (see the module docstring).

    ``resource``/``thread``: fix the conversation, or read it from the runtime context with a
    function (``resource=lambda ctx: ctx.user.id``); by default ``thread_id`` and
    ``resource_id``/``user_id`` are read per call, so one agent serves every user.
    ``recall``: offer the ``recall`` tool when the memory has retrieval on.
    ``trim_checkpoint``: keep the checkpointed messages to those memory has not observed.
    """

    def __init__(
        self,
        memory: Memory,
        *,
        resource: str | IdFrom | None = None,
        thread: str | IdFrom | None = None,
        recall: bool = True,
        trim_checkpoint: bool = False,
    ) -> None:
        super().__init__()
        self.memory = memory
        self.langgraph = LangGraphMemory(
            memory, resource=resource, thread=thread, trim_checkpoint=trim_checkpoint
        )
        """The memory work, shared with the LangGraph hooks."""
        self.tools: Sequence[BaseTool] = (
            [self.langgraph.recall_tool()] if recall and memory.retrieval else []
        )
        self.actor_model: ModelSpec | None = None
        """The agent's model as memory names it, from the last model call (``after_model`` is
        not told the model; it passes this one on)."""

    def __repr__(self) -> str:
        return (
            f"ObservationalMemoryMiddleware(resource={self.langgraph.resource!r}, "
            f"thread={self.langgraph.thread!r}, tools={[t.name for t in self.tools]!r})"
        )

    def _bind(self, runtime: Runtime[Any] | None, *, recall: bool = False) -> BoundCall:
        """The call's door (its conversation from the config and runtime context, the actor's
        model, the recall flag) and its custom stream."""
        model, lg = self.actor_model, self.langgraph
        if runtime is None:
            return lg.bind(model=model, recall=recall)
        context, writer = runtime.context, runtime.stream_writer
        return lg.bind(context=context, writer=writer, model=model, recall=recall)

    def _request_bind(self, request: ModelRequest[Any]) -> BoundCall:
        """:meth:`_bind` for a model call: its model is the actor's."""
        self.actor_model = actor_model_of(request.model) or self.actor_model
        return self._bind(request.runtime, recall=self._offers_recall(request))

    def _offers_recall(self, request: ModelRequest[Any]) -> bool:
        """This model call offers a ``recall`` tool (so the context may mention it)."""
        return self.memory.retrieval and any(_tool_name(t) == "recall" for t in request.tools)

    # -- before and around the model -------------------------------------------------------------

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> _Result:
        """Store what is new, send memory's context for this step, call the model. When the
        model refuses the request as longer than its context, compact the thread once and call
        it again with the smaller context (a second refusal, or a compaction that cannot shrink
        the context, raises the model's error)."""
        with self._request_bind(request) as call:
            sent, response = call.exchange(
                lambda: self.langgraph.prepare(call.door, request.messages),
                lambda sent: handler(_with_memory(request, sent, call.door.actor_model)),
            )
        return _with_removals(response, sent)

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> _Result:
        """:meth:`wrap_model_call` for ``ainvoke``/``astream``."""
        with self._request_bind(request) as call:
            sent, response = await call.aexchange(
                lambda: self.langgraph.prepare(call.door, request.messages),
                lambda sent: handler(_with_memory(request, sent, call.door.actor_model)),
            )
        return _with_removals(response, sent)

    # -- after the model -------------------------------------------------------------------------

    def after_model(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Store the model's message(s) at once; changes nothing in the state."""
        with self._bind(runtime) as call:
            call.run(self.langgraph.store_new(call.door, state["messages"]))
        return None

    async def aafter_model(
        self, state: AgentState[Any], runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        """:meth:`after_model` for ``ainvoke``/``astream``."""
        with self._bind(runtime) as call:
            await self.langgraph.store_new(call.door, state["messages"])
        return None


def _tool_name(tool: BaseTool | dict[str, Any]) -> str | None:
    if isinstance(tool, BaseTool):
        return tool.name
    function = tool.get("function")
    name = cast(dict[str, Any], function).get("name") if isinstance(function, dict) else None
    return name if isinstance(name, str) else tool.get("name")


def _with_memory(
    request: ModelRequest[Any], sent: ModelInput, actor: ModelSpec | None
) -> ModelRequest[Any]:
    """``request`` with memory's context: the agent's system prompt and memory's as one system
    message (ending with the cache breakpoint the actor's provider needs), then the messages
    memory sends."""
    system = joined_system([request.system_message, sent.system])
    return request.override(
        system_message=with_cache_breakpoint(system, actor),
        messages=cast(list[AnyMessage], sent.conversation),
    )


def _with_removals(response: ModelResponse[Any], sent: ModelInput) -> _Result:
    """The model's response, plus the removal of the observed messages from the state (with
    ``trim_checkpoint``)."""
    if not sent.observed:
        return response
    update: dict[str, Any] = {"messages": sent.removals}
    return ExtendedModelResponse(model_response=response, command=Command(update=update))
