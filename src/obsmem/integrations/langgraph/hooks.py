"""``create_react_agent``'s hooks, waiting calls and the ``recall`` tool as functions of a
:class:`~obsmem.memory.Memory`: each makes a
:class:`~obsmem.integrations.langgraph.memory.LangGraphMemory` and hands out its runnable."""

from __future__ import annotations

from typing import Any, TypedDict, Unpack

from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool

from obsmem.memory import Memory

from .call_context import IdFrom
from .memory import LangGraphMemory, ModelHook
from .models import ActorModel

__all__ = [
    "HookOptions",
    "ModelHook",
    "hold_waiting_calls",
    "post_model_hook",
    "pre_model_hook",
    "recall_tool",
]


class HookOptions(TypedDict, total=False):
    """The :class:`LangGraphMemory` options a hook function takes (see there)."""

    resource: str | IdFrom | None
    thread: str | IdFrom | None
    model: ActorModel | None
    recall: bool
    trim_checkpoint: bool


def pre_model_hook(memory: Memory, **options: Unpack[HookOptions]) -> ModelHook:
    """A ``pre_model_hook`` for ``create_react_agent`` giving it observational memory
    (``model``: the agent's chat model, so memory knows the actor; ``recall=True`` when the
    agent has :func:`recall_tool`). See :class:`LangGraphMemory`."""
    return LangGraphMemory(memory, **options).pre_model_hook


def post_model_hook(memory: Memory, **options: Unpack[HookOptions]) -> ModelHook:
    """A ``post_model_hook`` that stores each model answer at once (pair it with
    :func:`pre_model_hook`; both find what is new in the store, so they share no state)."""
    return LangGraphMemory(memory, **options).post_model_hook


async def hold_waiting_calls(
    memory: Memory, state: Any, config: RunnableConfig, **options: Unpack[HookOptions]
) -> list[str]:
    """After ``ainvoke`` returned on an interrupt: hold the waiting calls back until their
    results come (see :meth:`LangGraphMemory.ahold`)."""
    return await LangGraphMemory(memory, **options).ahold(state, config)


def recall_tool(memory: Memory, **options: Unpack[HookOptions]) -> BaseTool:
    """The ``recall`` tool as a LangChain tool for the call's conversation (or the one given);
    see :meth:`LangGraphMemory.recall_tool`. Pass ``recall=True`` to the pre-model hook too."""
    return LangGraphMemory(memory, **options).recall_tool()
