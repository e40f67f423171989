"""Observational memory for ``langchain.agents.create_agent``, as middleware (the guide is
``docs/langgraph.md``): before every model call it stores what is new and sends the agent's
system prompt and memory's observations as one system message, then the raw messages; after
every model call it stores the model's message at once. The conversation is read per call as
:class:`~obsmem.integrations.langgraph.LangGraphMemory` reads it.

Order in ``middleware=[...]``: middleware that edits a request's messages (reminders, context
editing) belongs after this one, so nothing it adds is stored; middleware that chooses a
request's tools (``LLMToolSelectorMiddleware``) belongs before it, so the context mentions
``recall`` only when the tool is still offered. Listed before ``HumanInTheLoopMiddleware``, it
stores the model message of an approval at the resume instead (memory never observes waiting
calls as interrupted, and each result is stored with its call, once). Add
``AnthropicPromptCachingMiddleware`` after it for a breakpoint on the newest message too.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, cast

from obsmem.errors import MissingExtraError
from obsmem.memory import Memory
from obsmem.models import ModelSpec

from .langgraph import BoundCall, IdFrom, LangGraphMemory, ModelInput, joined_system
from .langgraph.models import actor_model_of, with_cache_breakpoint

try:  # missing, or before 1.0 (no agent middleware)
    from langchain.agents.middleware import (
        AgentMiddleware,
        AgentState,
        ExtendedModelResponse,
        ModelRequest,
        ModelResponse,
    )
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise MissingExtraError(
        "obsmem.integrations.langchain", "langgraph", package="langchain"
    ) from exc
from langchain_core.messages import AIMessage, AnyMessage
from langchain_core.tools import BaseTool
from langgraph.runtime import Runtime
from langgraph.types import Command

__all__ = ["ObservationalMemoryMiddleware"]

_Result = ModelResponse[Any] | AIMessage | ExtendedModelResponse[Any]


class ObservationalMemoryMiddleware(AgentMiddleware[AgentState[Any], Any, Any]):
    """Gives a ``create_agent`` agent observational memory (see the module docstring).

    ``resource``/``thread``: fix the conversation (ids, or functions of the runtime context);
    left None they are read per call. ``recall``: offer the ``recall`` tool when the memory has
    retrieval on. ``trim_checkpoint``: messages memory has observed leave the agent's state.
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
        context, writer = getattr(runtime, "context", None), getattr(runtime, "stream_writer", None)
        return self.langgraph.bind(
            context=context, writer=writer, model=self.actor_model, recall=recall
        )

    def _request_bind(self, request: ModelRequest[Any]) -> BoundCall:
        """:meth:`_bind` for a model call: its model is the actor's, and the context may
        mention ``recall`` only when this call offers the tool (and retrieval is on: Door)."""
        self.actor_model = actor_model_of(request.model) or self.actor_model
        offered = any(_tool_name(t) == "recall" for t in request.tools)
        return self._bind(request.runtime, recall=offered)

    # -- before and around the model -------------------------------------------------------------

    def wrap_model_call(
        self, request: ModelRequest[Any], handler: Callable[[ModelRequest[Any]], ModelResponse[Any]]
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
    command = Command(update={"messages": sent.removals})
    return ExtendedModelResponse(model_response=response, command=command)
