"""``create_react_agent``'s hooks, waiting calls and the ``recall`` tool, over
:class:`~obsmem.integrations.langgraph.memory.LangGraphMemory`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeAlias

from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.runnables import Runnable, RunnableConfig, RunnableLambda
from langchain_core.tools import BaseTool

from obsmem.memory import Memory
from obsmem.recall import RECALL_DESCRIPTION, RecallRequest, invalid_request

from .call_context import run_sync, runtime_context
from .model_input import ModelInput, state_messages
from .models import ActorModel

if TYPE_CHECKING:
    from .memory import LangGraphMemory

__all__ = [
    "ModelHook",
    "hold",
    "hold_waiting_calls",
    "post_hook",
    "post_model_hook",
    "pre_hook",
    "pre_model_hook",
    "recall_tool",
    "recall_tool_of",
]

ModelHook: TypeAlias = Runnable[Any, dict[str, Any]]
"""A LangGraph node as a runnable: ``state -> state update``, sync and async."""


def _pre_update(sent: ModelInput) -> dict[str, Any]:
    update: dict[str, Any] = {"llm_input_messages": sent.messages}
    if sent.observed:
        update["messages"] = sent.removals
    return update


def pre_hook(lg: LangGraphMemory) -> ModelHook:
    """``lg``'s pre-model hook: stores what is new and returns ``{"llm_input_messages": ...}``
    (plus the removals, with ``trim_checkpoint``)."""

    def pre(state: Any, config: RunnableConfig) -> dict[str, Any]:
        return _pre_update(lg.model_input(state_messages(state), config))

    async def apre(state: Any, config: RunnableConfig) -> dict[str, Any]:
        return _pre_update(await lg.amodel_input(state_messages(state), config))

    return RunnableLambda(pre, apre, name="obsmem_pre_model_hook")


def post_hook(lg: LangGraphMemory) -> ModelHook:
    """``lg``'s post-model hook: stores the model's answer at once; changes nothing."""

    def post(state: Any, config: RunnableConfig) -> dict[str, Any]:
        lg.save(state_messages(state), config)
        return {}

    async def apost(state: Any, config: RunnableConfig) -> dict[str, Any]:
        await lg.asave(state_messages(state), config)
        return {}

    return RunnableLambda(post, apost, name="obsmem_post_model_hook")


async def hold(lg: LangGraphMemory, state: Any, config: RunnableConfig) -> list[str]:
    """Store what is new in ``state`` and hold the last model message's unanswered calls
    (:meth:`LangGraphMemory.ahold`)."""
    door = lg.door(lg.ref(config, runtime_context()))
    messages = state_messages(state)
    answered = {m.tool_call_id for m in messages if isinstance(m, ToolMessage)}
    last = next((m for m in reversed(messages) if isinstance(m, AIMessage)), None)
    calls = last.tool_calls if last is not None else []
    waiting = [str(c["id"]) for c in calls if c.get("id") and str(c["id"]) not in answered]
    await lg.store_new(door, messages, waiting=waiting)
    return waiting


def recall_tool_of(lg: LangGraphMemory) -> BaseTool:
    """The ``recall`` tool for the call's conversation as ``lg`` finds it (sync and async)."""
    from langchain_core.tools import StructuredTool

    async def arecall(config: RunnableConfig, **arguments: Any) -> str:
        return await lg.door(lg.ref(config, runtime_context())).answer_recall(arguments)

    def recall(config: RunnableConfig, **arguments: Any) -> str:
        door = lg.door(
            lg.ref(config, runtime_context())
        )  # here: the run's context is this thread's
        return run_sync(door, door.answer_recall(arguments))

    return StructuredTool.from_function(
        func=recall,
        coroutine=arecall,
        name="recall",
        description=RECALL_DESCRIPTION,
        args_schema=RecallRequest,
        handle_validation_error=invalid_request,
    )


# -- the hooks as functions ------------------------------------------------------------------------


def pre_model_hook(
    memory: Memory,
    *,
    resource: str | None = None,
    thread: str | None = None,
    model: ActorModel | None = None,
    recall: bool = False,
    trim_checkpoint: bool = False,
) -> ModelHook:
    """A ``pre_model_hook`` for ``create_react_agent`` giving it observational memory
    (``model``: the agent's chat model, so memory knows the actor; ``recall=True`` when the
    agent has :func:`recall_tool`). See :class:`LangGraphMemory`."""
    from .memory import LangGraphMemory

    return LangGraphMemory(
        memory,
        resource=resource,
        thread=thread,
        model=model,
        recall=recall,
        trim_checkpoint=trim_checkpoint,
    ).pre_model_hook


def post_model_hook(
    memory: Memory,
    *,
    resource: str | None = None,
    thread: str | None = None,
    model: ActorModel | None = None,
) -> ModelHook:
    """A ``post_model_hook`` that stores each model answer at once (pair it with
    :func:`pre_model_hook`; both find what is new in the store, so they share no state)."""
    from .memory import LangGraphMemory

    return LangGraphMemory(memory, resource=resource, thread=thread, model=model).post_model_hook


async def hold_waiting_calls(
    memory: Memory,
    state: Any,
    config: RunnableConfig,
    *,
    resource: str | None = None,
    thread: str | None = None,
) -> list[str]:
    """After ``ainvoke`` returned on an interrupt: hold the waiting calls back until their
    results come (see :meth:`LangGraphMemory.ahold`)."""
    from .memory import LangGraphMemory

    return await LangGraphMemory(memory, resource=resource, thread=thread).ahold(state, config)


def recall_tool(
    memory: Memory, *, resource: str | None = None, thread: str | None = None
) -> BaseTool:
    """The ``recall`` tool as a LangChain tool for the call's conversation (or the one given);
    see :meth:`LangGraphMemory.recall_tool`. Pass ``recall=True`` to the pre-model hook too."""
    from .memory import LangGraphMemory

    return LangGraphMemory(memory, resource=resource, thread=thread).recall_tool()
