"""Door: the step protocol every front door follows, for one (memory, conversation).

The protocol is written here once, as phases (``docs/writing-a-door.md`` is the guide), so each
framework file keeps only what is its own: hook signatures, framework state, channels.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Collection, Coroutine, Mapping, Sequence
from typing import Any, TypeVar

from obsmem.events import Event, Listener
from obsmem.memory import Memory, MemoryContext, RecallFunction, ThreadRef
from obsmem.messages import Message
from obsmem.models import ModelSpec
from obsmem.models.overflow import ContextOverflow, context_overflow, fit_advice
from obsmem.recall import parse_request
from obsmem.records import ThreadCopy
from obsmem.turn import step_start

__all__ = ["Door", "concerns", "step_start"]

P = TypeVar("P")
R = TypeVar("R")
T = TypeVar("T")

log = logging.getLogger("obsmem")


def concerns(event: object, thread: str) -> bool:
    """The event belongs in ``thread``'s stream: it names the thread, or it is a resource-scope
    cycle whose ``thread_ids`` cover it."""
    return getattr(event, "thread_id", None) == thread or thread in getattr(event, "thread_ids", ())


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
        expect: ThreadCopy | None = None,
    ) -> MemoryContext:
        """Store ``new`` (a turn's input, or a step's tool traffic) and return what the model
        sees, in one memory step. ``step_from``: the current step's first seq when it was
        stored already (it stays raw, as the new messages do). ``waiting``: tool calls that
        wait on purpose (an approval across turns); memory holds them. ``expect``: the door's
        copy of the thread, checked by the step's load (``Memory.context``)."""
        if actor_model is not None:
            self.actor_model = actor_model
        if waiting and expect is not None:
            raise ValueError(
                "Door.step cannot hold calls (waiting=) and check a copy of the thread "
                "(expect=) at once: holding them writes before the checked load. Hold them "
                "with memory.hold_calls first, then take the copy from the thread as read"
            )
        if waiting:
            await self.memory.hold_calls(self.ref, waiting)
        context = await self.memory.context(
            self.ref,
            new,
            actor_model=self.actor_model,
            recall=self.recall,
            step_from=step_from,
            expect=expect,
        )
        self.stored += context.stored_input
        self.step_from = step_start(context.stored_input, step_from) or self.step_from
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

    # -- the exchange: begin, send, and on overflow compact once and send again -----------------

    async def exchange(
        self, begin: Callable[[], Awaitable[P]], send: Callable[[P], Awaitable[R]]
    ) -> tuple[P, R]:
        """Begin the step (``begin``, made with :meth:`step`), send it, and after a "too long"
        refusal compact once, begin and send again (:meth:`retry_after`). Returns what was sent
        last and the model's answer; any other error, or a second refusal, raises the model's
        error. Finishing (:meth:`reply`) is the door's: some frameworks store it in a later hook."""
        prepared = await begin()
        try:
            return prepared, await send(prepared)
        except Exception as error:
            if not await self.retry_after(error):
                raise
        prepared = await begin()
        return prepared, await send(prepared)

    def exchange_sync(
        self,
        begin: Callable[[], P],
        send: Callable[[P], R],
        run: Callable[[Coroutine[Any, Any, bool]], bool] | None = None,
    ) -> tuple[P, R]:
        """:meth:`exchange` for sync framework code; ``run`` reaches memory's loop
        (:meth:`run_sync` unless the framework has its own way)."""
        prepared = begin()
        try:
            return prepared, send(prepared)
        except Exception as error:
            if not (run or self.run_sync)(self.retry_after(error)):
                raise
        prepared = begin()
        return prepared, send(prepared)

    async def retry_after(self, refusal: BaseException | ContextOverflow | None) -> bool:
        """The overflow phase: whether to send the step again after ``refusal`` (a model's
        error, or the overflow an HTTP answer showed): True only when it was a "too long"
        refusal and memory compacted the thread (:meth:`compact_after`)."""
        if isinstance(refusal, BaseException):
            refusal = context_overflow(refusal)
        return refusal is not None and await self.compact_after(refusal)

    async def compact_after(self, overflow: ContextOverflow) -> bool:
        """Compact the thread once after an overflow: everything before the current step is
        observed down to the retention floor (at most a quarter of the model's context, when its
        answer names it), and the ``obsmem`` logger says so with the thresholds that would fit.
        True when the context shrank; False when memory is off or nothing could be observed."""
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
        window, tail = "the model refused it as too long", ""
        if limit:
            window = f"the model's context is {limit:,} tokens"
            advice = fit_advice(
                limit,
                message_tokens=om.options.observation.message_tokens,
                observation_tokens=om.options.reflection.observation_tokens,
            )
            tail = f"; {advice}" if advice else ""
        if not shrank:
            window += f" ({overflow.message})"
        template = (
            "obsmem compacted thread %s because %s did not fit: %s%s"
            if shrank
            else "obsmem could not compact thread %s (nothing before the current step is left to "
            "observe), so %s that did not fit is not sent again: %s%s"
        )
        log.warning(template, self.ref.thread, request, window, tail)
        return shrank

    # -- events ----------------------------------------------------------------------------------

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Receive this conversation's events only (:func:`concerns`); returns the unsubscribe
        function."""

        def relay(event: Event) -> None:
            if concerns(event, self.ref.thread):
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
