"""The Observer call of a cycle: what it is shown (attachments the model can read, the log
before), the transform hooks around it, and what came back."""

from __future__ import annotations

import fnmatch
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..answers import ParsedOutput
from ..context import with_temporal_markers
from ..events import call_hook
from ..extractors import Exchange
from ..messages import Message, display_text
from ..meta_keys import (
    META_CURRENT_TASK,
    META_SUGGESTED_RESPONSE,
)
from ..models import model_input_capabilities
from ..observer import ObserverInput, observe_exchange
from ..options import ResolvedOptions
from ..records import OMRecord
from ..snapshot import Snapshot
from ..working_memory import strip_tool_traffic
from .common import Deps, wants_title

log = logging.getLogger("obsmem")


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


@dataclass(frozen=True, slots=True, kw_only=True)
class ObserverRun:
    """An Observer answer (after the transform hooks) and the exchange extractors look at."""

    parsed: ParsedOutput
    exchange: Exchange


async def run_observer(
    deps: Deps,
    snapshot: Snapshot,
    *,
    thread_id: str,
    messages: Sequence[Message] = (),
    threads: Sequence[tuple[str, Sequence[Message]]] = (),
    previous: str,
    cycle_id: str,
    operation: str,
    budget: float,
    sections: Sequence[tuple[str, str]] = (),
    prior_values: Mapping[str, Any] | None = None,
) -> ObserverRun | None:
    """One Observer call with the transform hooks, asking for the extractors' inline
    ``sections``. None means "nothing to observe" (a ``before_observation`` hook returned no
    messages)."""
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
    state = snapshot.thread(thread_id)
    meta = state.thread.metadata if state is not None else {}
    exchange = await observe_exchange(
        ObserverInput(
            messages=messages,
            threads=threads,
            previous_observations=previous,
            previous_observer_tokens=obs.previous_observer_tokens,
            prior_current_task=meta.get(META_CURRENT_TASK),
            prior_suggested_response=meta.get(META_SUGGESTED_RESPONSE),
            prior_thread_title=state.thread.title if state is not None else None,
            ask_thread_title=obs.thread_title and wants_title(state, snapshot.record.generation),
            continuation_hints=obs.continuation_hints.any,
            instruction=obs.instruction,
            extra_sections=sections,
            prior_values=prior_values or {},
            tz=deps.tz,
            part_cap=obs.max_part_tokens,
        ),
        caller=deps.caller,
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
        text = await call_transform(deps.hooks.after_observation, parsed.observations)
        parsed = replace(parsed, observations=text)
    return ObserverRun(
        parsed=parsed,
        exchange=Exchange(
            seen=exchange.seen,
            answer=exchange.result.text,
            model=obs.model,
            model_settings=obs.model_settings,
        ),
    )


async def call_transform(hook: Callable[[str], Any] | None, text: str) -> str:
    """A transform hook's replacement for ``text`` (``text`` itself when it returns no text)."""
    changed = await call_hook(hook, text)
    return (display_text(changed) or "") if isinstance(changed, str) else text


def previous_for_observer(record: OMRecord) -> str:
    if not record.chunks:
        return record.observations
    pending = "\n\n".join(c.observations for c in record.chunks)
    return f"{record.observations}\n\n--- BUFFERED (pending activation) ---\n\n{pending}".strip()
