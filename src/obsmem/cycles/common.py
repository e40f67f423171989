"""Shared pieces of the memory cycles: dependencies, thread hints, the Observer call."""

from __future__ import annotations

import fnmatch
import logging
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, tzinfo
from typing import TYPE_CHECKING, Any

from ..context import with_temporal_markers
from ..embeddings import Embedder
from ..errors import ModelError, StoreError
from ..events import (
    EventBus,
    HookContext,
    Hooks,
    ThreadUpdateEvent,
    call_hook,
)
from ..extractors import Exchange
from ..messages import Message
from ..models import model_input_capabilities
from ..observations import ParsedOutput, boundary_line
from ..observer import ObserverInput, observe_exchange
from ..options import ResolvedOptions
from ..records import OMRecord
from ..stores import Store
from ..tokens import TokenEstimator
from ..working_memory import WorkingMemory, strip_tool_traffic

if TYPE_CHECKING:
    from .extraction import ExtractionPlan

log = logging.getLogger("obsmem")

META_CURRENT_TASK = "om:current_task"
META_SUGGESTED_RESPONSE = "om:suggested_response"
META_EXTRACTED = "om:extracted"
META_LAST_MODEL = "om:last_actor_model"
COMMIT_ATTEMPTS = 20


@dataclass(slots=True, kw_only=True)
class Deps:
    """What every cycle needs: the store, the options and the outside world."""

    store: Store
    options: ResolvedOptions
    estimator: TokenEstimator
    bus: EventBus
    hooks: Hooks
    tz: tzinfo
    clock: Callable[[], datetime]
    sync_timeout: float
    background_timeout: float
    working_memory: WorkingMemory | None = None
    """Set when the Observer keeps working memory (``manage_working_memory``)."""
    config: Mapping[str, Any] = field(default_factory=dict[str, Any])
    embedder: Embedder | None = None
    """Set when retrieval has vector search: every new observation group is embedded."""

    def now(self) -> datetime:
        return self.clock()


def new_cycle_id(kind: str) -> str:
    return f"{kind}-{uuid.uuid4().hex[:16]}"


def attachment_filter(options: ResolvedOptions) -> Callable[[str], bool]:
    setting = options.observation.observe_attachments
    if setting is True:
        return lambda _: True
    if setting is False:
        return lambda _: False
    if setting == "auto":
        caps = model_input_capabilities(options.observer_model)
        patterns = [p for cap, p in _CAPABILITY_MIME.items() if cap in caps]
    else:
        patterns = list(setting)
    return lambda mime: any(fnmatch.fnmatch(mime.lower(), p) for p in patterns)


_CAPABILITY_MIME = {
    "image": "image/*",
    "pdf": "application/pdf",
    "audio": "audio/*",
    "video": "video/*",
}


def ms_since(start: float) -> float:
    return round((time.monotonic() - start) * 1000, 1)


# -- thread metadata -------------------------------------------------------------------------


async def apply_hints(
    deps: Deps,
    thread_id: str,
    *,
    current_task: str | None,
    suggested_response: str | None,
    thread_title: str | None,
    cycle_id: str,
) -> None:
    """Store the hints a cycle produced. Missing hints never blank stored ones (invariant 9)."""
    patch: dict[str, Any] = {}
    if current_task:
        patch[META_CURRENT_TASK] = current_task
    if suggested_response:
        patch[META_SUGGESTED_RESPONSE] = suggested_response
    thread = await deps.store.get_thread(thread_id)
    if thread is None:
        return
    new_title: str | None = None
    title = (thread_title or "").strip()
    if (
        deps.options.observation.thread_title
        and len(title) >= 3
        and title != thread.title
        and not thread.metadata.get("title_pinned")
    ):
        new_title = title
    if patch or new_title:
        await deps.store.update_thread(thread_id, title=new_title, metadata=patch)
    if new_title:
        deps.bus.emit(
            ThreadUpdateEvent(
                cycle_id=cycle_id,
                thread_id=thread_id,
                old_title=thread.title,
                new_title=new_title,
                timestamp=deps.now(),
            )
        )


async def prior_hints(deps: Deps, thread_id: str) -> tuple[str | None, str | None, str | None]:
    thread = await deps.store.get_thread(thread_id)
    if thread is None:
        return None, None, None
    meta = thread.metadata
    return meta.get(META_CURRENT_TASK), meta.get(META_SUGGESTED_RESPONSE), thread.title


# -- observer calls ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class ObserverRun:
    """An Observer answer (after the transform hooks) and the exchange extractors look at."""

    parsed: ParsedOutput
    exchange: Exchange


async def run_observer(
    deps: Deps,
    *,
    thread_id: str,
    messages: Sequence[Message] = (),
    threads: Sequence[tuple[str, Sequence[Message]]] = (),
    previous: str,
    cycle_id: str,
    operation: str,
    budget: float,
    plan: ExtractionPlan | None = None,
) -> ObserverRun | None:
    """One Observer call with the transform hooks, asking for ``plan``'s inline sections. None
    means "nothing to observe" (a ``before_observation`` hook returned no messages)."""
    obs = deps.options.observation
    if deps.hooks.before_observation is not None and not threads:
        changed = await call_hook(deps.hooks.before_observation, list(messages))
        if changed is not None:
            messages = list(changed)
            if not messages:
                return None
    messages = strip_tool_traffic(messages)
    threads = [(t, strip_tool_traffic(m)) for t, m in threads]
    if deps.options.temporal_markers:
        # The Observer sees the same "N hours later" lines the actor saw.
        messages = with_temporal_markers(messages, deps.tz)
        threads = [(t, with_temporal_markers(m, deps.tz)) for t, m in threads]
    current_task, suggested, title = await prior_hints(deps, thread_id)
    exchange = await observe_exchange(
        ObserverInput(
            messages=messages,
            threads=threads,
            previous_observations=previous,
            previous_observer_tokens=obs.previous_observer_tokens,
            prior_current_task=current_task,
            prior_suggested_response=suggested,
            prior_thread_title=title,
            ask_thread_title=obs.thread_title,
            continuation_hints=obs.continuation_hints.any,
            instruction=obs.instruction,
            extra_sections=plan.inline_sections if plan is not None else (),
            prior_values=plan.prompt_values if plan is not None else {},
            tz=deps.tz,
        ),
        model=obs.model,
        model_settings=obs.model_settings,
        estimator=deps.estimator,
        timeout=budget,
        attachment_filter=attachment_filter(deps.options),
        cycle_id=cycle_id,
        operation=operation,
    )
    parsed = exchange.parsed
    if deps.hooks.after_observation is not None:
        changed_text = await call_hook(deps.hooks.after_observation, parsed.observations)
        if isinstance(changed_text, str):
            parsed = _with_observations(parsed, changed_text)
    return ObserverRun(
        parsed=parsed,
        exchange=Exchange(
            seen=exchange.seen,
            answer=exchange.result.text,
            model=obs.model,
            model_settings=obs.model_settings,
        ),
    )


def _with_observations(parsed: ParsedOutput, text: str) -> ParsedOutput:
    from dataclasses import replace

    return replace(parsed, observations=text)


def previous_for_observer(record: OMRecord) -> str:
    if not record.chunks:
        return record.observations
    pending = "\n\n".join(c.observations for c in record.chunks)
    return f"{record.observations}\n\n--- BUFFERED (pending activation) ---\n\n{pending}".strip()


# -- helpers -------------------------------------------------------------------------------------


def describe_error(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "timed out"
    if isinstance(exc, ModelError | StoreError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


def hook_failed(ctx: HookContext, exc: BaseException) -> HookContext:
    from dataclasses import replace

    return replace(ctx, error=describe_error(exc))


def hook_done(ctx: HookContext, observations: str) -> HookContext:
    from dataclasses import replace

    return replace(ctx, observations=observations)


def join_log(log: str, addition: str, *, at: datetime) -> str:
    """Append ``addition`` to the log after a message-boundary line (or start the log)."""
    addition = addition.strip()
    if not addition:
        return log
    if not log.strip():
        return addition
    return log.rstrip() + boundary_line(at) + addition
