"""Observation groups for retrieval: each cycle's output with the range of messages it came from.

With ``retrieval`` on, every buffered chunk, synchronous observation and reflection stores an
:class:`~obsmem.records.ObservationGroup` in the same transaction as the state change, and its
text in the log starts with a ``[recall range FIRST:LAST]`` line naming the first and last message
ids, so the agent can page back to the exact wording with the ``recall`` tool. With vector search,
each group is embedded after its commit (best effort: a failed embedding leaves search without
that group, never memory without it).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence

from ..errors import ModelError
from ..messages import Message
from ..observations import strip_recall_ranges
from ..recall import searchable
from ..records import GroupEmbedding, MessageRange, ObservationGroup
from .common import Deps

__all__ = ["group_for", "index_groups", "label", "reflection_group", "retrieval_on"]

log = logging.getLogger("obsmem")


def retrieval_on(deps: Deps) -> bool:
    return deps.options.retrieval is not None


def label(text: str, group: ObservationGroup) -> str:
    """``text`` with its recall range on the first line."""
    return f"[recall range {group.start_id}:{group.end_id}]\n{strip_recall_ranges(text).strip()}"


def group_for(
    deps: Deps,
    key: str,
    *,
    cycle_id: str,
    resource_id: str | None,
    thread_id: str,
    messages: Sequence[Message],
    observations: str,
) -> ObservationGroup:
    return ObservationGroup(
        id=uuid.uuid4().hex[:16],
        key=key,
        resource_id=resource_id,
        thread_id=thread_id,
        cycle_id=cycle_id,
        start_id=messages[0].id,
        end_id=messages[-1].id,
        observations=strip_recall_ranges(observations).strip(),
        ranges=(
            MessageRange(
                thread_id=thread_id,
                first_seq=messages[0].seq or 1,
                last_seq=messages[-1].seq or messages[0].seq or 1,
            ),
        ),
        created_at=messages[-1].created_at,
        metadata={"kind": "observation"},
    )


async def reflection_group(
    deps: Deps,
    key: str,
    *,
    cycle_id: str,
    resource_id: str | None,
    thread_id: str,
    observations: str,
) -> ObservationGroup | None:
    """A group for a reflection: it spans the ranges of every earlier group of the key."""
    if resource_id is None:
        return None
    sources = [
        g
        for g in await searchable(deps.store).list_observation_groups(resource_id)
        if g.key == key and (g.metadata.get("kind") != "reflection")
    ]
    if not sources:
        return None
    first, last = sources[0], sources[-1]
    ranges: dict[str, MessageRange] = {}
    for g in sources:
        for r in g.ranges:
            seen = ranges.get(r.thread_id)
            ranges[r.thread_id] = MessageRange(
                thread_id=r.thread_id,
                first_seq=min(r.first_seq, seen.first_seq) if seen else r.first_seq,
                last_seq=max(r.last_seq, seen.last_seq) if seen else r.last_seq,
            )
    return ObservationGroup(
        id=uuid.uuid4().hex[:16],
        key=key,
        resource_id=resource_id,
        thread_id=thread_id if deps.options.scope == "thread" else None,
        cycle_id=cycle_id,
        start_id=first.start_id,
        end_id=last.end_id,
        observations=strip_recall_ranges(observations).strip(),
        ranges=tuple(ranges.values()),
        created_at=deps.now(),
        metadata={"kind": "reflection", "sources": len(sources)},
    )


async def index_groups(deps: Deps, groups: Sequence[ObservationGroup]) -> None:
    """Embed committed groups for search (never raises: search just misses them)."""
    if deps.embedder is None or not groups:
        return
    try:
        vectors = await deps.embedder.embed([g.observations for g in groups])
        await searchable(deps.store).put_embeddings(
            [
                GroupEmbedding(
                    group_id=g.id,
                    key=g.key,
                    resource_id=g.resource_id,
                    thread_id=g.thread_id,
                    observed_at=g.created_at,
                    model=deps.embedder.name,
                    vector=tuple(v),
                )
                for g, v in zip(groups, vectors, strict=True)
            ]
        )
    except ModelError as exc:  # its message is redacted; its cause's traceback would not be
        log.warning("obsmem could not embed %d observation group(s): %s", len(groups), exc)
    except Exception:
        log.exception("obsmem could not embed %d observation group(s)", len(groups))
