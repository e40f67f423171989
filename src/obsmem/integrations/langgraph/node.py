"""A whole model node for a hand-built graph: memory's context in, the model's answer out and
stored, and a request the model refused as too long compacted once and sent again.

``graph.add_node("model", lg.model_node(llm))`` (see
:meth:`~obsmem.integrations.langgraph.memory.LangGraphMemory.model_node`) is the node that
``model_input``, ``llm.invoke`` and ``save`` make by hand, plus what a node written by hand
does not do: when the model refuses the request as longer than its context (OpenAI's
``context_length_exceeded``, Anthropic's prompt-too-long, llama.cpp's and vLLM's context-size
errors), memory compacts the thread once and the node calls the model again with the smaller
context, as ``Agent`` and the ``create_agent`` middleware do. Its state update is the answer
(and, with ``trim_checkpoint``, the removals of what memory observed).
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from langchain_core.messages import BaseMessage
from langchain_core.runnables import Runnable, RunnableConfig, RunnableLambda

from .model_input import ModelInput, state_messages

if TYPE_CHECKING:
    from .memory import LangGraphMemory

__all__ = ["model_node"]


def _update(sent: ModelInput, reply: BaseMessage) -> dict[str, Any]:
    return {"messages": [*sent.removals, reply]}


def _with_id(reply: BaseMessage) -> BaseMessage:
    """The answer with an id of its own (kept by the graph's state), so the message stored now
    is known as stored at the next model call."""
    if not reply.id:
        reply.id = f"obsmem-{uuid.uuid4().hex}"
    return reply


def model_node(
    lg: LangGraphMemory, model: Runnable[Any, BaseMessage], *, recall: bool | None = None
) -> Runnable[Any, dict[str, Any]]:
    """``lg``'s model node calling ``model`` (a chat model, tools bound or not), sync and
    async; ``recall`` as in :meth:`LangGraphMemory.model_input`."""

    def node(state: Any, config: RunnableConfig) -> dict[str, Any]:
        messages = state_messages(state)
        with lg.bind(config, model=model, recall=recall) as call:
            sent, reply = call.exchange(
                lambda: lg.prepare(call.door, messages),
                lambda sent: model.invoke(sent.messages, config),
            )
            reply = _with_id(reply)
            call.run(lg.store_new(call.door, [*messages, reply]))
        return _update(sent, reply)

    async def anode(state: Any, config: RunnableConfig) -> dict[str, Any]:
        messages = state_messages(state)
        with lg.bind(config, model=model, recall=recall) as call:
            sent, reply = await call.aexchange(
                lambda: lg.prepare(call.door, messages),
                lambda sent: model.ainvoke(sent.messages, config),
            )
            reply = _with_id(reply)
            await lg.store_new(call.door, [*messages, reply])
        return _update(sent, reply)

    return RunnableLambda(node, anode, name="obsmem_model_node")
