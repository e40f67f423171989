"""Door: the step every front door takes, for one (memory, conversation).

A front door (``Agent``, the pydantic-ai capability and history processor, LangGraph, LangChain,
the Agents SDK) adapts a framework's hooks to memory. What they share lives here, once:

- :meth:`Door.step` stores what is new in one memory step, holds the calls that wait, and
  returns what the model sees; it remembers the current step's first seq (``step_from``);
- :meth:`Door.reply` stores the model's answer and its tool traffic;
- :meth:`Door.concerns` is the one event filter: a thread's stream gets the events whose
  ``thread_id`` is the thread, or whose ``thread_ids`` contain it (a resource-scope cycle
  covering the thread);
- :meth:`Door.recall_function` is the ``recall`` tool's answer, bound to the conversation, and
  :meth:`Door.answer_recall` answers a model's raw arguments with it;
- the actor's model and the recall flag always reach memory (images counted by the provider's
  rules, a provider change noticed);
- :meth:`Door.run_sync` is how sync framework code reaches memory's own loop.

Each framework file keeps only what is its own: hook signatures, framework state, channels.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Coroutine, Mapping, Sequence
from typing import Any, TypeVar

from obsmem.events import Event, Listener
from obsmem.memory import Memory, MemoryContext, RecallFunction, ThreadRef
from obsmem.messages import Message
from obsmem.models import ModelSpec
from obsmem.models.overflow import ContextOverflow, fit_advice
from obsmem.recall import parse_request

__all__ = ["Door", "concerns", "step_start"]

T = TypeVar("T")

log = logging.getLogger("obsmem")


def concerns(event: object, thread: str) -> bool:
    """The event belongs in ``thread``'s stream: it names the thread, or it is a resource-scope
    cycle whose ``thread_ids`` cover it."""
    return getattr(event, "thread_id", None) == thread or thread in getattr(event, "thread_ids", ())


def step_start(stored: Sequence[Message]) -> int | None:
    """The first seq of the step a model answers among the messages a memory step stored: the
    last user message on (a turn's input), or all of them (a step's tool traffic); as
    ``prepare`` keeps them raw."""
    users = [m for m in stored if m.role == "user"]
    first = users[-1] if users else stored[0] if stored else None
    return first.seq if first is not None else None


class Door:
    """One conversation's way into ``memory`` from a front door.

    ``actor_model``: the model answering (updated per step with :attr:`actor_model` when the
    framework only says it then). ``recall``: the model has the ``recall`` tool, so its context
    says how to use it (only when retrieval is on)."""

    def __init__(
        self,
        memory: Memory,
        ref: ThreadRef,
        *,
        actor_model: ModelSpec | None = None,
        recall: bool = False,
    ) -> None:
        self.memory = memory
        self.ref = ref
        self.actor_model: ModelSpec | None = actor_model
        self.recall = recall and memory.retrieval
        self.stored: list[Message] = []
        """What this door stored, in order (as stored, with ``seq``)."""
        self.step_from: int | None = None
        """The current step's first seq (it stays raw in a compaction)."""

    def __repr__(self) -> str:
        return f"Door(thread={self.ref.thread!r}, resource={self.ref.resource!r})"

    @property
    def thread(self) -> str:
        return self.ref.thread

    # -- the step --------------------------------------------------------------------------------

    async def step(
        self,
        new: Sequence[Message],
        *,
        step_from: int | None = None,
        waiting: Collection[str] = (),
        actor_model: ModelSpec | None = None,
    ) -> MemoryContext:
        """Store ``new`` (a turn's input, or a step's tool traffic) and return what the model
        sees, in one memory step. ``step_from``: the current step's first seq when it was
        stored already (it stays raw, as the new messages do). ``waiting``: tool calls that
        wait on purpose (an approval across turns); memory holds them."""
        if actor_model is not None:
            self.actor_model = actor_model
        if waiting:
            await self.memory.hold_calls(self.ref, waiting)
        context = await self.memory.context(
            self.ref,
            new,
            actor_model=self.actor_model,
            recall=self.recall,
            keep_raw_from=step_from,
        )
        self.stored += context.stored_input
        self.step_from = step_start(context.stored_input) or step_from or self.step_from
        return context

    async def reply(
        self,
        messages: Sequence[Message],
        *,
        waiting: Collection[str] = (),
        actor_model: ModelSpec | None = None,
    ) -> list[Message]:
        """Store the model's answer (and its tool traffic); the calls in ``waiting`` are held
        until their results come."""
        if actor_model is not None:
            self.actor_model = actor_model
        stored: list[Message] = []
        if messages:
            stored = await self.memory.save(self.ref, messages, actor_model=self.actor_model)
            self.stored += stored
        if waiting:
            await self.memory.hold_calls(self.ref, waiting)
        return stored

    # -- a request the model refused as too long --------------------------------------------------

    async def compact_after(self, overflow: ContextOverflow) -> bool:
        """Compact the thread once because the actor's model refused a request as longer than
        its context: everything before the current step is observed down to the retention floor
        (at most a quarter of the model's context, when its answer names it), and the
        ``obsmem`` logger says so with the thresholds that would fit. True when the context
        shrank, so the front door sends the request again; False when memory is off or nothing
        could be observed (the front door raises the model's error)."""
        om = self.memory.om
        if om is None:
            return False
        limit = overflow.limit
        shrank = await om.compact(
            self.ref.thread,
            self.ref.resource,
            step_from=self.step_from,
            keep_tokens=limit // 4 if limit else None,
            trigger="overflow",
        )
        requested = overflow.requested
        request = f"the request ({requested:,} tokens)" if requested else "a request"
        window = (
            f"the model's context is {limit:,} tokens"
            if limit
            else "the model refused it as too long"
        )
        advice = (
            fit_advice(
                limit,
                message_tokens=om.options.observation.message_tokens,
                observation_tokens=om.options.reflection.observation_tokens,
            )
            if limit
            else None
        )
        tail = f"; {advice}" if advice else ""
        if shrank:
            log.warning(
                "obsmem compacted thread %s because %s did not fit: %s%s",
                self.ref.thread,
                request,
                window,
                tail,
            )
        else:
            log.warning(
                "obsmem could not compact thread %s (nothing before the current step is left to "
                "observe), so %s that did not fit is not sent again: %s (%s)%s",
                self.ref.thread,
                request,
                window,
                overflow.message,
                tail,
            )
        return shrank

    # -- events ----------------------------------------------------------------------------------

    def concerns(self, event: object) -> bool:
        """The event belongs in this conversation's stream (see :func:`concerns`)."""
        return concerns(event, self.ref.thread)

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Receive this conversation's events only; returns the unsubscribe function."""

        def relay(event: Event) -> None:
            if self.concerns(event):
                listener(event)

        return self.memory.subscribe(relay)

    # -- recall and sync code --------------------------------------------------------------------

    def recall_function(self) -> RecallFunction:
        """The ``recall`` tool's answer for this conversation (ConfigError when retrieval is
        off)."""
        return self.memory.recall_function(self.ref)

    async def answer_recall(self, arguments: str | Mapping[str, Any] | None) -> str:
        """The ``recall`` tool's answer to a model's raw arguments (JSON text or a mapping); when
        they do not fit, the message telling the model what to send instead."""
        request = parse_request(arguments)
        if isinstance(request, str):
            return request
        return await self.recall_function()(**request)

    def run_sync(self, work: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``work`` from sync framework code on memory's own loop (:meth:`Memory.run_sync`),
        so the background work a turn starts carries on between calls."""
        return self.memory.run_sync(work, timeout)
