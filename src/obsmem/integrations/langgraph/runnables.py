"""The runnables a :class:`~obsmem.integrations.langgraph.memory.LangGraphMemory` hands out:
its pre- and post-model hooks, the hold of waiting calls and the ``recall`` tool. They take the
``LangGraphMemory`` as an argument (only its type is imported), so ``memory`` imports this
module and never the other way, as with :mod:`.node` and :mod:`.compacting`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeAlias

from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.runnables import Runnable, RunnableConfig, RunnableLambda
from langchain_core.tools import BaseTool

from obsmem.recall import RECALL_DESCRIPTION, RecallRequest, invalid_request

from .call_context import run_sync, runtime_context
from .model_input import ModelInput, state_messages

if TYPE_CHECKING:
    from .memory import LangGraphMemory

__all__ = ["ModelHook", "hold", "post_hook", "pre_hook", "recall_tool_of"]

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
