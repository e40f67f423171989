"""``create_react_agent``'s model, wrapped so a request refused as too long is compacted once and
sent again.

``create_react_agent`` calls its model itself, after the pre-model hook, and tells the hook
nothing of the answer, so the hook cannot retry. ``create_react_agent(lg.compacting(llm), tools,
pre_model_hook=lg.pre_model_hook, ...)`` wraps the chat model instead: when the model refuses
the request as longer than its context (OpenAI's ``context_length_exceeded``, Anthropic's
prompt-too-long, llama.cpp's and vLLM's context-size errors), memory compacts the thread once
and the wrapper sends the model memory's new, smaller context, with whatever the agent's
``prompt`` put in front of the hook's messages. It binds tools as the chat model does, and it
tells ``lg`` the actor's model (so the hooks know it too). It is not a ``BaseChatModel``:
``create_react_agent(response_format=...)`` needs the chat model itself.

It stores the answer at once, as the post-model hook does (so ``create_react_agent`` needs no
``post_model_hook`` for that; with one, the hook finds the answer stored and makes no store
call).

It also sends one system message: ``create_react_agent`` puts its ``prompt`` in front of the
hook's messages, which start with memory's system message once there are observations, and
strict chat templates (llama.cpp's, vLLM's) refuse a second one. The wrapper joins them (the
prompt first, memory's last, its prompt-cache breakpoint kept).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any

from langchain_core.messages import BaseMessage, SystemMessage
from langchain_core.prompt_values import PromptValue
from langchain_core.runnables import Runnable, RunnableConfig

from obsmem.errors import ConfigError

from .call_context import BoundCall, current_config, runtime_context
from .model_input import joined_system

if TYPE_CHECKING:
    from .memory import KeptInput, LangGraphMemory

__all__ = ["CompactingChatModel"]


def _one_system(value: Any) -> Any:
    """``value`` (a model's input) with its leading system messages joined into one."""
    messages = _messages(value)
    if messages is None:
        return value
    lead = next(
        (i for i, m in enumerate(messages) if not isinstance(m, SystemMessage)), len(messages)
    )
    if lead < 2:
        return value
    return [joined_system(messages[:lead]), *messages[lead:]]


def _with_id(reply: BaseMessage) -> BaseMessage:
    """``reply`` with an id (LangGraph keeps it in the state), so the post-model hook and the
    next run know the stored answer by it."""
    if not reply.id:
        reply.id = f"run-{uuid.uuid4()}"
    return reply


def _messages(value: Any) -> list[Any] | None:
    if isinstance(value, PromptValue):
        return list(value.to_messages())
    if isinstance(value, Sequence) and not isinstance(value, str):
        return list(value)  # pyright: ignore[reportUnknownArgumentType]
    return None


class CompactingChatModel(Runnable[Any, BaseMessage]):
    """A chat model (tools bound or not) that, refused as too long, has memory compact the
    thread once and is called again with the smaller context; made by
    :meth:`LangGraphMemory.compacting`."""

    def __init__(self, lg: LangGraphMemory, model: Runnable[Any, BaseMessage]) -> None:
        self.lg = lg
        self.model = model

    def __repr__(self) -> str:
        return f"CompactingChatModel({self.model!r})"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> CompactingChatModel:
        """The chat model's ``bind_tools``, still compacting (``create_react_agent`` calls it)."""
        return CompactingChatModel(self.lg, self.model.bind_tools(tools, **kwargs))  # type: ignore[attr-defined]

    def invoke(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> BaseMessage:
        kept = self._kept(input, config)
        if kept is None:  # not the hook's input: the post-model hook or the next run stores
            return self.model.invoke(_one_system(input), config, **kwargs)
        with self.lg.bind(config, model=self.model) as call:
            _, reply = call.exchange(
                self._attempts(call, input, kept),
                lambda sent: self.model.invoke(_one_system(sent), config, **kwargs),
            )
            call.run(self.lg.store_new(call.door, [*kept.state, _with_id(reply)]))
        return reply

    async def ainvoke(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> BaseMessage:
        kept = self._kept(input, config)
        if kept is None:
            return await self.model.ainvoke(_one_system(input), config, **kwargs)
        with self.lg.bind(config, model=self.model) as call:
            _, reply = await call.aexchange(
                self._attempts(call, input, kept),
                lambda sent: self.model.ainvoke(_one_system(sent), config, **kwargs),
            )
            await self.lg.store_new(call.door, [*kept.state, _with_id(reply)])
        return reply

    def _kept(self, input: Any, config: RunnableConfig | None) -> KeptInput | None:
        """What the pre-model hook made ``input`` (the model's whole input) from, or None when
        it did not (a call outside a graph run, or without the hook): the answer is then
        stored by the post-model hook or at the next run."""
        sent = _messages(input)
        if sent is None:
            return None
        try:
            ref = self.lg.ref(config if config is not None else current_config(), runtime_context())
        except ConfigError:
            return None
        return self.lg.last_input(ref.thread, sent)

    def _attempts(
        self, call: BoundCall, input: Any, kept: KeptInput
    ) -> Callable[[], Coroutine[Any, Any, Any]]:
        """The begin phase of the exchange: the hook's input as it came, then (after a
        compaction that keeps the current step raw) what the agent's prompt put in front of
        the hook's messages, and memory's new context."""
        sent = _messages(input) or []
        lead = sent[: len(sent) - len(kept.sent)]
        call.door.step_from = kept.step_from
        began = [False]

        async def begin() -> Any:
            if not began[0]:
                began[0] = True
                return input
            return [*lead, *(await self.lg.prepare(call.door, kept.state)).messages]

        return begin
