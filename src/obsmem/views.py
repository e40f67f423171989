"""What the engine shows from a snapshot: the actor's context, the status event, and whether the
actor's prompt cache is already lost. Pure functions of (snapshot, options, time).

The difference from :mod:`obsmem.context`: this module *reads* a snapshot and the options
(metadata keys, thresholds, which messages are left out, what the actor may be told about
recall) and decides what goes in; :mod:`obsmem.context` only *lays out* what it is given
(a :class:`~obsmem.context.ContextInput`) as messages, and takes no store, snapshot or
options."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, tzinfo
from typing import Any, cast

from .context import ContextInput, build_context
from .events import StatusEvent
from .messages import Message
from .meta_keys import META_CURRENT_TASK, META_EXTRACTED, META_LAST_MODEL, META_SUGGESTED_RESPONSE
from .models import ModelSpec, model_id_of, prompt_cache_ttl_ms, provider_of
from .observations import strip_recall_ranges
from .options import ResolvedOptions
from .planner import activation_count, message_threshold, raw_cut
from .recall import recall_guidance
from .snapshot import Snapshot
from .window import ThreadWindow, held_calls, pending_calls, visible
from .working_memory import WorkingMemory, stored_working_memory, working_memory_message

__all__ = [
    "CacheSignals",
    "actor_context",
    "cache_signals",
    "left_out_count",
    "model_label",
    "status_event",
]


def actor_context(
    snapshot: Snapshot,
    options: ResolvedOptions,
    *,
    now: datetime,
    tz: tzinfo,
    working_memory: WorkingMemory | None,
    recall: bool,
    window: ThreadWindow | None = None,
    step_from: int | None = None,
) -> list[Message]:
    """The messages the actor gets from ``snapshot`` (after the caller's own instructions).
    Only an actor that has the ``recall`` tool (``recall``) is told about it: the guidance and
    the recall ranges of the log are left out for any other."""
    meta = snapshot.thread_metadata
    hints = options.observation.continuation_hints
    observations = snapshot.record.observations
    recalls = recall and options.retrieval is not None
    raw = window.messages if window is not None else visible(snapshot.main)
    cut = left_out_count(snapshot, options, window, step_from=step_from) if window else 0
    return build_context(
        ContextInput(
            observations=observations if recalls else strip_recall_ranges(observations),
            now=now,
            tz=tz,
            current_task=meta.get(META_CURRENT_TASK) if hints.current_task else None,
            suggested_response=(
                meta.get(META_SUGGESTED_RESPONSE) if hints.suggested_response else None
            ),
            extracted=_shared_values(options, meta),
            raw_messages=raw[cut:],
            left_out=raw[:cut],
            recall_available=recalls,
            pending_calls=pending_calls(raw, held_calls(meta)),
            other_threads=[(t.id, shown) for t in snapshot.threads[1:] if (shown := visible(t))],
            retrieval_instructions=recall_guidance(options.retrieval) if recalls else None,
            temporal_markers=options.temporal_markers,
            working_memory=_working_memory(snapshot, options, working_memory),
        )
    )


def _working_memory(
    snapshot: Snapshot, options: ResolvedOptions, wm: WorkingMemory | None
) -> Message | None:
    if wm is None:
        return None
    content = stored_working_memory(
        wm, thread_metadata=snapshot.thread_metadata, resource_metadata=snapshot.resource_metadata
    )
    return working_memory_message(
        content if content is not None else wm.blank(),
        managed=options.observation.manage_working_memory,
    )


def _shared_values(options: ResolvedOptions, meta: Mapping[str, Any]) -> dict[str, Any]:
    """Stored values of the extractors that share them (``include_previous_extraction``)."""
    stored = meta.get(META_EXTRACTED)
    if not isinstance(stored, Mapping):
        return {}
    values = cast(Mapping[str, Any], stored)
    out: dict[str, Any] = {}
    for extractor in (*options.observation.extract, *options.reflection.extract):
        slug = extractor.slug
        if extractor.include_previous_extraction and values.get(slug) is not None:
            out[slug] = values[slug]
    return out


def status_event(
    snapshot: Snapshot,
    windows: Sequence[ThreadWindow],
    options: ResolvedOptions,
    *,
    threshold: int,
    buffering: bool,
    reflecting: bool,
) -> StatusEvent:
    """``data-om-status`` for ``snapshot``: the windows against their thresholds, what is
    buffered and what activation would remove, the buffered reflection, what runs here."""
    record = snapshot.record
    pending = sum(w.total for w in windows)
    chunk_tokens = [c.message_tokens for c in record.chunks]
    floor = options.observation.retention_floor or 0
    projected = sum(
        chunk_tokens[
            : activation_count(
                chunk_tokens,
                pending_tokens=max(pending, threshold),
                retention_floor=floor,
                force_max=False,
            )
        ]
    )
    br = record.buffered_reflection
    return StatusEvent(
        record_id=record.id,
        thread_id=snapshot.subject.thread_id,
        resource_id=snapshot.subject.resource_id,
        generation=record.generation,
        message_tokens=pending,
        message_threshold=threshold,
        observation_tokens=record.observation_tokens,
        observation_threshold=options.reflection.observation_tokens,
        buffered_chunks=len(record.chunks),
        buffered_message_tokens=min(sum(chunk_tokens), pending),
        projected_message_removal=projected,
        buffered_observation_tokens=sum(c.token_count for c in record.chunks),
        buffering_status="running" if buffering else "idle",
        buffered_reflection_tokens=br.token_count if br else 0,
        buffered_reflection_input_tokens=br.input_tokens if br else 0,
        reflection_status="running" if reflecting else "complete" if br else "idle",
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class CacheSignals:
    """Whether the actor's prompt cache is already lost (idle too long, model changed)."""

    observation_idle: bool = False
    reflection_idle: bool = False
    provider_changed: bool = False
    """The actor's model changed and ``observation.activate_on_provider_change`` is on."""
    reflection_provider_changed: bool = False
    """The actor's model changed and ``reflection.activate_on_provider_change`` is on."""
    last_activity_at: datetime | None = None
    idle_ms: float | None = None
    """Since the assistant last spoke (None without a reply)."""
    previous_model: str | None = None
    current_model: str | None = None


def cache_signals(
    snapshot: Snapshot,
    options: ResolvedOptions,
    actor_model: ModelSpec | None,
    *,
    idle_seconds: float | None,
) -> CacheSignals:
    """The cache signals now: the actor's model against the one the thread last saw, and how
    long since the assistant last spoke (``idle_seconds``, None without a reply:
    :class:`obsmem.clocks.ReplyTimes`) against the idle settings."""
    obs, ref = options.observation, options.reflection
    current = model_label(actor_model) if actor_model is not None else None
    previous = snapshot.thread_metadata.get(META_LAST_MODEL) if current else None
    last = snapshot.last_reply_at
    idle_ms = idle_seconds * 1000 if idle_seconds is not None else None
    changed = current is not None and previous is not None and previous != current
    return CacheSignals(
        current_model=current,
        previous_model=previous,
        provider_changed=bool(obs.activate_on_provider_change and changed),
        reflection_provider_changed=bool(ref.activate_on_provider_change and changed),
        last_activity_at=last,
        idle_ms=idle_ms,
        observation_idle=_expired(obs.activate_after_idle, idle_ms, actor_model),
        reflection_idle=_expired(ref.activate_after_idle, idle_ms, actor_model),
    )


def _expired(
    setting: int | str | None, idle_ms: float | None, actor_model: ModelSpec | None
) -> bool:
    if setting is None or idle_ms is None:
        return False
    if setting == "auto":
        if actor_model is None:
            return False
        return idle_ms >= prompt_cache_ttl_ms(actor_model)
    return idle_ms >= float(setting)


def left_out_count(
    snapshot: Snapshot,
    options: ResolvedOptions,
    window: ThreadWindow,
    *,
    step_from: int | None = None,
) -> int:
    """How many of the thread's oldest raw messages the actor's context leaves out so the rest
    stays within ``block_after`` (while observation catches up or the Observer is away)."""
    limit = options.observation.block_after or message_threshold(
        options, snapshot.record.observation_tokens
    )
    return raw_cut(window, limit=limit, step_from=step_from)


def model_label(model: ModelSpec) -> str:
    """``provider/model`` for a spec (the name alone when the provider cannot be told)."""
    provider = provider_of(model)
    name = model_id_of(model)
    return f"{provider}/{name}" if provider else name
