"""What each thread page shows, read from the store and laid out for its template.

One function per page; each returns the template's context as a dict. The actor's context is
built by the same pure function the engine uses (:func:`obsmem.context.build_context`) from the
stored log, hints, extracted values, working memory and the unobserved tail.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC
from typing import TYPE_CHECKING, Any

from ..context import ContextInput, build_context
from ..messages import Message, utcnow
from ..meta_keys import (
    META_CURRENT_TASK,
    META_EXTRACTED,
    META_SUGGESTED_RESPONSE,
    META_WORKING_MEMORY,
)
from ..observations import strip_recall_ranges
from ..records import OMRecord, Thread
from ..working_memory import working_memory_message
from .chart import chart_data, sawtooth_svg
from .diff import generation_diffs
from .queries import (
    ESTIMATOR,
    TAIL_CAP,
    CycleQuery,
    Thresholds,
    cycle_calls,
    generations,
    head_of,
    messages_of,
    pages_of,
    queue_of,
    resource_metadata,
    thread_cycle,
    thread_cycles,
    thread_groups,
    thread_state,
    unobserved_tail,
)
from .render import PER_PAGE, group_links, log_blocks, message_views, part_view

if TYPE_CHECKING:
    from ..stores.base import Store

__all__ = [
    "CHART_MESSAGES",
    "chart_page",
    "cycle_page",
    "cycles_page",
    "generations_page",
    "thread_page",
]

CHART_MESSAGES = 3_000
"""The chart replays at most the newest this many messages of a thread."""


def _memory_values(thread: Thread, resource_meta: Mapping[str, Any]) -> dict[str, Any]:
    meta = thread.metadata
    extracted = meta.get(META_EXTRACTED)
    wm = meta.get(META_WORKING_MEMORY) or resource_meta.get(META_WORKING_MEMORY)
    return {
        "extracted": dict(extracted) if isinstance(extracted, Mapping) else {},
        "working_memory": wm if isinstance(wm, str) else None,
        "current_task": meta.get(META_CURRENT_TASK),
        "suggested_response": meta.get(META_SUGGESTED_RESPONSE),
    }


def actor_context(
    record: OMRecord | None, values: Mapping[str, Any], tail: list[Message]
) -> list[Message]:
    """The messages the actor would be sent now (after its own instructions)."""
    wm = values.get("working_memory")
    extracted: Mapping[str, Any] = values.get("extracted") or {}
    return build_context(
        ContextInput(
            observations=strip_recall_ranges(record.observations) if record else "",
            now=utcnow(),
            tz=UTC,
            current_task=values.get("current_task"),
            suggested_response=values.get("suggested_response"),
            extracted={k: v for k, v in extracted.items() if not str(k).startswith("_")},
            raw_messages=tail,
            working_memory=working_memory_message(wm, managed=False) if wm else None,
        )
    )


async def thread_page(
    store: Store, thread: Thread, page: int | None, thresholds: Thresholds
) -> dict[str, Any]:
    """The thread page: one page of raw messages, the log, chunks, the actor's context and the
    stored values (``page`` None: the newest page)."""
    key, record = await head_of(store, thread)
    resource_meta = await resource_metadata(store, thread.resource_id)
    pages = pages_of(thread.message_count, PER_PAGE)
    page = pages if page is None else min(max(page, 1), pages)
    messages = await messages_of(store, thread, (page - 1) * PER_PAGE, page * PER_PAGE)
    groups = await thread_groups(store, thread)
    links = group_links(groups, thread.id)
    blocks = log_blocks(record.observations, links) if record else []
    in_log = {b.group.group.id for b in blocks if b.group is not None}
    tail, capped = await unobserved_tail(store, thread, record)
    queue = await queue_of(store, key)
    values = _memory_values(thread, resource_meta)
    context = actor_context(record, values, tail)
    cycles = await thread_cycles(store, thread, CycleQuery(limit=1))
    return {
        "thread": thread,
        "key": key,
        "record": record,
        "state": await thread_state(
            store, thread, record, thresholds, resource_meta, (tail, capped), queue=queue
        ),
        "page": page,
        "pages": pages,
        "messages": message_views(messages, record, links, ESTIMATOR.count_message),
        "blocks": blocks,
        "groups": links,
        "in_log": in_log,
        "chunks": record.chunks if record else (),
        "context": [(m, [part_view(p) for p in m.parts]) for m in context],
        "context_tokens": ESTIMATOR.count_messages(context),
        "tail_capped": capped,
        "tail_cap": TAIL_CAP,
        "latest_cycle": cycles[0] if cycles else None,
        "queue": queue.line() if queue is not None else None,
        "live": await live_state(store, thread),
        **values,
    }


async def generations_page(store: Store, thread: Thread) -> dict[str, Any]:
    """Every generation of the thread's log, and each reflection as a diff."""
    key, _ = await head_of(store, thread)
    history, reflections = await generations(store, thread, key)
    return {
        "thread": thread,
        "key": key,
        "history": history,
        "diffs": generation_diffs(history, reflections),
    }


async def cycles_page(store: Store, thread: Thread, query: CycleQuery) -> dict[str, Any]:
    """The thread's cycle ledger, filtered."""
    rows = await thread_cycles(store, thread, query)
    return {"thread": thread, "cycles": rows, "query": query}


async def cycle_page(store: Store, thread: Thread, cycle_id: str) -> dict[str, Any] | None:
    """One cycle of the thread with what its model calls were shown and answered (None: the
    thread's ledger has no such cycle)."""
    cycle = await thread_cycle(store, thread, cycle_id)
    if cycle is None:
        return None
    return {"thread": thread, "cycle": cycle, "calls": await cycle_calls(store, cycle)}


async def chart_page(store: Store, thread: Thread, thresholds: Thresholds) -> dict[str, Any]:
    """The sawtooth of the newest ``CHART_MESSAGES`` messages."""
    after = max(0, thread.message_count - CHART_MESSAGES)
    messages = await messages_of(store, thread, after)
    cycles = await thread_cycles(store, thread, CycleQuery(limit=1_000))
    groups = await thread_groups(store, thread)
    data = chart_data(
        messages,
        cycles,
        groups,
        thread_id=thread.id,
        tokens=ESTIMATOR.count_message,
        count_text=ESTIMATOR.count_text,
        message_tokens=thresholds.message_tokens,
        observation_tokens=thresholds.observation_tokens,
    )
    return {
        "thread": thread,
        "chart": data,
        "svg": sawtooth_svg(data),
        "partial": after > 0,
        "chart_messages": CHART_MESSAGES,
    }


async def live_state(store: Store, thread: Thread) -> dict[str, Any]:
    """What the live thread page polls: it reloads its sections when any of these change."""
    _, record = await head_of(store, thread)
    cycles = await thread_cycles(store, thread, CycleQuery(limit=1))
    return {
        "messages": thread.message_count,
        "updated_at": thread.updated_at.isoformat(),
        "generation": record.generation if record else None,
        "version": record.version if record else None,
        "cycle": cycles[0].cycle_id if cycles else None,
    }
