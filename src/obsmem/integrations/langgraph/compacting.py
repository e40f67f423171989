"""``create_react_agent``'s model, wrapped (:meth:`LangGraphMemory.compacting`).

``create_react_agent`` calls its model itself, after the pre-model hook, and tells the hook
nothing of the answer, so only a wrapped model can retry a request refused as too long (memory
compacts the thread once and the wrapper sends the smaller context), store the answer at once
(a post-model hook then finds it stored), tell ``lg`` the actor's model, and join the agent's
``prompt`` and memory's system message into one (strict chat templates refuse a second). It is
not a ``BaseChatModel``: ``create_react_agent(response_format=...)`` needs the chat model itself.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any

from langchain_core.messages import BaseMessage
from langchain_core.prompt_values import PromptValue
from langchain_core.runnables import Runnable, RunnableConfig

from obsmem.errors import ConfigError

from .call_context import BoundCall, current_config, runtime_context
from .model_input import joined_system, leading_system, with_id

if TYPE_CHECKING:
    from .memory import KeptInput, LangGraphMemory

__all__ = ["CompactingChatModel"]


def _one_system(value: Any) -> Any:
    """``value`` (a model's input) with its leading system messages joined into one."""
    messages = _messages(value)
    if messages is None or (lead := leading_system(messages)) < 2:
        return value
    return [joined_system(messages[:lead]), *messages[lead:]]


def _messages(value: Any) -> list[Any] | None:
    if isinstance(value, PromptValue):
        return list(value.to_messages())
    if isinstance(value, Sequence) and not isinstance(value, str):
        return list(value)  # pyright: ignore[reportUnknownArgumentType]
    return None


class CompactingChatModel(Runnable[Any, BaseMessage]):
    """A chat model (tools bound or not) wrapped by :meth:`LangGraphMemory.compacting`."""

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
            call.run(self.lg.store_new(call.door, [*kept.state, with_id(reply)]))
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
            await self.lg.store_new(call.door, [*kept.state, with_id(reply)])
        return reply

    def _kept(self, input: Any, config: RunnableConfig | None) -> KeptInput | None:
        """What the pre-model hook made ``input`` (the model's whole input) from, or None when
        it did not (outside a graph run, or without the hook)."""
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
        compaction) what the agent's prompt put in front of it, and memory's new context."""
        sent = _messages(input) or []
        lead = sent[: len(sent) - len(kept.sent)]
        call.door.step_from = kept.step_from
        first = [input]

        async def begin() -> Any:
            if first:
                return first.pop()
            return [*lead, *(await self.lg.prepare(call.door, kept.state)).messages]

        return begin
