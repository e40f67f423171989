"""What a LangGraph model call is sent, and how the graph state's messages are read."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
)

from obsmem.convert.langchain import from_langchain, stored_id
from obsmem.errors import ConfigError
from obsmem.messages import Message

__all__ = [
    "ModelInput",
    "checked",
    "joined_system",
    "leading_system",
    "observed_ids",
    "since_input",
    "state_messages",
    "step_from",
    "storable",
    "stored_seqs",
    "waiting_calls",
    "with_id",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelInput:
    """What one model call is sent, as memory assembled it."""

    system: SystemMessage | None
    """The graph's system messages, then memory's (observations, guidance), as one message:
    every provider, strict chat templates included, takes one leading system message. For an
    Anthropic actor its last block carries the prompt-cache breakpoint."""
    conversation: list[BaseMessage]
    """The raw messages memory sends (those it observed left out), this step's included."""
    observed: tuple[str, ...] = ()
    """Ids of graph-state messages memory has observed (with ``trim_checkpoint`` only)."""

    @property
    def messages(self) -> list[BaseMessage]:
        """The whole input: the system message, then the conversation."""
        head: list[BaseMessage] = [self.system] if self.system is not None else []
        return [*head, *self.conversation]

    @property
    def removals(self) -> list[RemoveMessage]:
        """``RemoveMessage`` s for the observed messages: return them in the node's state update
        (``{"messages": sent.removals}``) to keep the checkpoint to what memory sends raw."""
        return [RemoveMessage(id=message_id) for message_id in self.observed]


def joined_system(messages: Sequence[BaseMessage | None]) -> SystemMessage | None:
    """One system message for ``messages`` (texts joined by blank lines; content blocks kept
    as blocks), or None when there is nothing to say."""
    present = [m for m in messages if m is not None and m.content]
    if not present:
        return None
    if len(present) == 1 and isinstance(present[0], SystemMessage):
        return present[0]
    if all(isinstance(m.content, str) for m in present):
        return SystemMessage(content="\n\n".join(cast(str, m.content) for m in present))
    blocks: list[str | dict[Any, Any]] = []
    for message in present:
        content = message.content
        blocks.extend([{"type": "text", "text": content}] if isinstance(content, str) else content)
    return SystemMessage(content=blocks)


def with_id(reply: BaseMessage) -> BaseMessage:
    """A model's answer with an id of its own (the graph state keeps it), so the answer stored
    at once is known as stored at the next model call and by the post-model hook."""
    if not reply.id:
        reply.id = f"run-{uuid.uuid4()}"
    return reply


def leading_system(messages: Sequence[BaseMessage]) -> int:
    """How many system messages ``messages`` start with."""
    return next(
        (i for i, m in enumerate(messages) if not isinstance(m, SystemMessage)), len(messages)
    )


def checked(messages: Sequence[Any]) -> list[BaseMessage]:
    """``messages`` as LangChain messages, each with an id (given in place, so the graph state
    keeps it: it is what tells a stored message from a new one)."""
    for message in messages:
        if not isinstance(message, BaseMessage):
            raise ConfigError("state.messages", message, "give LangChain BaseMessage objects")
        if not message.id:
            message.id = str(uuid.uuid4())
    return cast(list[BaseMessage], list(messages))


def state_messages(state: Any) -> list[BaseMessage]:
    """The ``messages`` of a graph state (a mapping or an object), checked."""
    raw = state.get("messages") if isinstance(state, Mapping) else getattr(state, "messages", None)
    if not isinstance(raw, list):
        raise ConfigError(
            "state.messages", raw, "the graph state needs a 'messages' list of LangChain messages"
        )
    return checked(cast(list[Any], raw))


def since_input(messages: Sequence[BaseMessage]) -> list[BaseMessage]:
    """The messages after the last human message (the turn's traffic so far)."""
    last = max((i for i, m in enumerate(messages) if isinstance(m, HumanMessage)), default=-1)
    return list(messages[last + 1 :])


def waiting_calls(messages: Sequence[BaseMessage]) -> list[str]:
    """The ids of the last model message's calls that have no result in ``messages``."""
    answered = {m.tool_call_id for m in messages if isinstance(m, ToolMessage)}
    last = next((m for m in reversed(messages) if isinstance(m, AIMessage)), None)
    calls = last.tool_calls if last is not None else []
    return [str(c["id"]) for c in calls if c.get("id") and str(c["id"]) not in answered]


def step_from(
    messages: Sequence[BaseMessage], new: Sequence[BaseMessage], known: Mapping[str, int | None]
) -> int | None:
    """When this step's new messages are tool results, the seq of the stored model message whose
    calls they answer: it belongs to the step being answered and stays raw with them."""
    if not new or not isinstance(new[0], ToolMessage):
        return None
    at = next(i for i, m in enumerate(messages) if m is new[0])
    caller = next((m for m in reversed(messages[:at]) if isinstance(m, AIMessage)), None)
    return known.get(caller.id) if caller is not None and caller.id else None


def storable(
    messages: Sequence[BaseMessage], thread: str, context: Sequence[BaseMessage]
) -> list[Message]:
    """obsmem messages for ``messages`` (system messages left out), tool names taken from the
    calls in ``context``."""
    names = {
        str(c["id"]): c["name"]
        for m in context
        if isinstance(m, AIMessage)
        for c in m.tool_calls
        if c.get("id")
    }
    read = from_langchain(messages, thread=thread, tool_names=names)
    return [m for m in read if m.role != "system"]


def stored_seqs(thread: str, stored: Sequence[Message]) -> dict[str, int | None]:
    """The seq of each of ``stored`` (as stored in ``thread``), by LangChain message id."""
    prefix = stored_id(thread, "")
    return {m.id.removeprefix(prefix): m.seq for m in stored}


def observed_ids(
    thread: str,
    messages: Sequence[BaseMessage],
    known: Mapping[str, int | None],
    stored_input: Sequence[Message],
    through: int,
) -> tuple[str, ...]:
    """Ids of ``messages`` memory has observed: stored at or before seq ``through``."""
    if not through:
        return ()
    seqs = {**known, **stored_seqs(thread, stored_input)}
    return tuple(
        m.id for m in messages if m.id and (seq := seqs.get(m.id)) is not None and seq <= through
    )
