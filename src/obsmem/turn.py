"""A turn's steps, between the engine's load and the context it returns: the input checked and
counted, the current step found, the planner asked what observation is due and its plan carried
out (activation, a synchronous observation, buffering or a catch-up started), then the same for
reflection, and the actor's context and status event assembled from the latest snapshot.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Generator, Sequence
from typing import Any

from . import cycles, planner, views
from .background import Background
from .cycles import Activation, Deps, Outcome
from .cycles.common import windows
from .cycles.writes import reload
from .errors import ConfigError, ConflictError
from .events import StatusEvent
from .messages import Message, check_json, holds_much
from .models import ModelSpec
from .outcomes import Outcomes
from .snapshot import Snapshot
from .tokens import TokenEstimator
from .window import ThreadWindow
from .working_memory import WorkingMemory

__all__ = ["Turns", "step_start"]
log = logging.getLogger("obsmem")


def step_start(stored: Sequence[Message], step_from: int | None = None) -> int | None:
    """The current step's first seq: the step being answered runs from the last new user
    message on (a whole history passed in at once is mostly backlog), or over all the new
    messages (a step of tool traffic); ``step_from``, when the front door stored the step
    before, starts it earlier."""
    users = [m for m in stored if m.role == "user"]
    first = (users[-1] if users else stored[0]).seq if stored else None
    step = [s for s in (step_from, first) if s]
    return min(step) if step else None


def _check_and_count(messages: Sequence[Message], estimator: TokenEstimator) -> None:
    for message in messages:
        check_json(message)
        estimator.count_message(message)


class Turns:
    """The steps of a turn for one engine (its deps, background tasks and outcomes)."""

    def __init__(self, deps: Deps, background: Background, outcomes: Outcomes) -> None:
        self._deps = deps
        self._background = background
        self._outcomes = outcomes

    # -- the input -------------------------------------------------------------------------------

    def windows(
        self, snapshot: Snapshot, actor_model: ModelSpec | None = None
    ) -> tuple[ThreadWindow, ...]:
        """The snapshot's windows: image and PDF costs by the actor's provider (this call's
        model, else the one the thread last saw; OpenAI's rules when neither is known)."""
        label = views.model_label(actor_model) if actor_model is not None else None
        return windows(self._deps, snapshot, label)

    async def counted(
        self, messages: Sequence[Any], actor_model: ModelSpec | None = None
    ) -> Sequence[Message]:
        """``messages`` with their token estimates cached in their parts, so every later read
        of the window (from any store, in any process) reuses them instead of re-counting.
        Large input (:func:`~obsmem.messages.holds_much`) is checked and counted on a
        worker thread: counting a pasted page of megabytes takes seconds of CPU, which on the
        event loop would stall every other conversation the process serves."""
        estimator = cycles.estimator_for(
            self._deps, views.model_label(actor_model) if actor_model is not None else None
        )
        if isinstance(messages, str | Message):
            raise ConfigError(
                "messages", type(messages).__name__, "pass a list of Message (Message.user(...))"
            )
        for index, message in enumerate(messages):
            if not isinstance(message, Message):
                raise ConfigError(
                    f"messages[{index}]",
                    type(message).__name__,
                    "must be an obsmem Message (Message.user(...), Message.assistant(...))",
                )
        if holds_much(messages):
            await asyncio.to_thread(_check_and_count, messages, estimator)
        else:
            _check_and_count(messages, estimator)
        return messages

    # -- observation -----------------------------------------------------------------------------

    async def observation_step(
        self,
        snapshot: Snapshot,
        windows: Sequence[ThreadWindow],
        signals: views.CacheSignals,
        *,
        step_from: int | None,
    ) -> tuple[Snapshot, StatusEvent]:
        """Ask the planner what observation is due, emit the status event, and carry the plan
        out: activate chunks, observe synchronously, start buffering or a catch-up; the
        snapshot after it, and the status event."""
        steps = {snapshot.subject.thread_id: step_from} if step_from else {}
        plan = self.observation_plan(snapshot, windows, signals, steps, step_from)
        status = self.status(snapshot, windows, plan.threshold)
        self._deps.bus.emit(status)
        with _unless_deleted():
            snapshot = await self._observe(snapshot, plan, signals, steps)
        return snapshot, status

    async def _observe(
        self,
        snapshot: Snapshot,
        plan: planner.ObservationPlan,
        signals: views.CacheSignals,
        steps: dict[str, int],
    ) -> Snapshot:
        """Carry out the observation plan; the snapshot after it."""
        deps = self._deps
        subject = snapshot.subject
        thread_id = subject.thread_id
        if plan.activate and plan.trigger is not None and not plan.observe_sync:
            why = Activation(
                trigger=plan.trigger,
                previous_model=signals.previous_model,
                current_model=signals.current_model,
                last_activity_at=signals.last_activity_at,
                idle_ms=signals.idle_ms,
            )
            activated = await cycles.activate_chunks(deps, snapshot, count=plan.activate, why=why)
            snapshot = activated or await reload(deps, subject)
        if plan.observe_sync:
            result = await cycles.observe_sync(
                deps,
                snapshot,
                keep_tokens=deps.options.observation.retention_floor or 0,
                step_from=steps,
                trigger="turn-sync",
            )
            snapshot = result.snapshot
            await self._outcomes.observer(snapshot, result.error, store=result.store)
            await self._outcomes.threads(result)
        if plan.start_buffering:
            self._background.spawn(f"obs:{subject.key}", self._background.buffer_loop(snapshot))
        if plan.catch_up:
            newest = snapshot.main.unobserved[-1].seq if snapshot.main.unobserved else None
            after = steps or {thread_id: (newest or 0) + 1}  # the catch-up leaves these alone
            self._background.spawn(
                f"catch-up:{subject.key}", self._background.catch_up(snapshot, after)
            )
        return snapshot

    def observation_plan(
        self,
        snapshot: Snapshot,
        windows: Sequence[ThreadWindow],
        signals: views.CacheSignals,
        steps: dict[str, int],
        step_from: int | None,
    ) -> planner.ObservationPlan:
        key = snapshot.subject.key
        record = snapshot.record
        running = self._background.running
        return planner.plan_observation(
            self._deps.options,
            pending_tokens=sum(w.total for w in windows),
            chunk_message_tokens=[c.message_tokens for c in record.chunks],
            observation_tokens=record.observation_tokens,
            buffering_in_flight=running(f"obs:{key}") or running(f"catch-up:{key}"),
            catching_up=running(f"catch-up:{key}"),
            step_tokens=windows[0].tokens_from(step_from),
            idle_expired=signals.observation_idle,
            provider_changed=signals.provider_changed,
            observer_backoff=self._outcomes.state(key).observer,
            now=self._deps.steady(),
            activatable=planner.activatable_chunks(record.chunks, steps),
        )

    # -- reflection ------------------------------------------------------------------------------

    async def reflection_step(self, snapshot: Snapshot, signals: views.CacheSignals) -> Snapshot:
        """Activate, run or start a reflection when the planner says so; the snapshot after."""
        with _unless_deleted():
            snapshot = await self._reflect(snapshot, signals)
        return snapshot

    def reflection_plan(
        self, snapshot: Snapshot, signals: views.CacheSignals
    ) -> planner.ReflectionPlan:
        """What the planner says about reflection for ``snapshot``'s log."""
        deps = self._deps
        record = snapshot.record
        key = snapshot.subject.key
        br = record.buffered_reflection
        tail_tokens = 0
        if br is not None:
            tail = "\n".join(record.observations.split("\n")[br.line_count :])
            tail_tokens = deps.estimator.count_text(tail)
        state = self._outcomes.state(key)
        return planner.plan_reflection(
            deps.options,
            observation_tokens=record.observation_tokens,
            has_buffered_reflection=br is not None,
            buffered_reflection_tokens=br.token_count if br else 0,
            unreflected_tail_tokens=tail_tokens,
            reflection_in_flight=self._background.running(f"refl:{key}"),
            idle_expired=signals.reflection_idle,
            provider_changed=signals.reflection_provider_changed,
            reflector_backoff=state.reflector,
            now=deps.steady(),
            suppressed_at=state.suppressed_reflection_at,
        )

    async def _reflect(self, snapshot: Snapshot, signals: views.CacheSignals) -> Snapshot:
        deps = self._deps
        record = snapshot.record
        key = snapshot.subject.key
        plan = self.reflection_plan(snapshot, signals)
        if plan.activate_buffered and plan.trigger is not None:
            activated = await cycles.activate_reflection(deps, snapshot, trigger=plan.trigger)
            snapshot = activated or await reload(deps, snapshot.subject)
        elif plan.reflect_sync:
            outcome = await cycles.reflect_now(deps, snapshot, trigger="turn-sync")
            after: int | None = None
            if isinstance(outcome, Outcome) and outcome.snapshot is not None:
                snapshot = outcome.snapshot
                after = snapshot.record.observation_tokens
            await self._outcomes.reflector(snapshot, *Outcomes.ended(outcome))
            self._outcomes.update(
                key,
                suppressed_reflection_at=planner.suppression_after(
                    record.observation_tokens, after, threshold=plan.threshold
                ),
            )
        if plan.start_buffering:
            self._background.spawn(f"refl:{key}", self._background.reflection_task(snapshot))
        return snapshot

    # -- context and status ----------------------------------------------------------------------

    def context(
        self,
        snapshot: Snapshot,
        *,
        working_memory: WorkingMemory | None,
        recall: bool,
        step_from: int | None = None,
        window: ThreadWindow | None = None,
    ) -> list[Message]:
        main = window or self.windows(snapshot)[0]
        return views.actor_context(
            snapshot,
            self._deps.options,
            now=self._deps.now(),
            tz=self._deps.tz,
            working_memory=working_memory,
            recall=recall,
            window=main,
            step_from=step_from,
        )

    def status(
        self, snapshot: Snapshot, windows: Sequence[ThreadWindow], threshold: int
    ) -> StatusEvent:
        key = snapshot.subject.key
        return views.status_event(
            snapshot,
            windows,
            self._deps.options,
            threshold=threshold,
            buffering=self._background.running(f"obs:{key}"),
            reflecting=self._background.running(f"refl:{key}"),
        )

    def signals(self, snapshot: Snapshot, actor_model: ModelSpec | None) -> views.CacheSignals:
        idle = self._deps.replies.idle_seconds(snapshot.subject.thread_id, snapshot.last_reply_at)
        return views.cache_signals(snapshot, self._deps.options, actor_model, idle_seconds=idle)


@contextlib.contextmanager
def _unless_deleted() -> Generator[None]:
    """A turn whose thread is deleted while its memory work runs (here or by another worker)
    goes on with the snapshot it has: the work stores nothing, and neither will the reply."""
    try:
        yield
    except ConflictError as exc:
        if exc.current is not None:
            raise
        log.info("obsmem: %s; the turn goes on without it", exc)
