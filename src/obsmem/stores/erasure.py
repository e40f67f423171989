"""An owner's delete: the rules every store applies when a thread or a resource is erased.

Erasing is not memory work. Messages are append-only for memory (nothing it does rewrites
them), but the people they belong to may take them back: a delete removes every trace of a
thread or a resource in one transaction. In resource scope the log is shared by the resource's
threads, so erasing one thread rewrites every generation of that log without the thread's
``<thread id="…">`` blocks (and without its cursor); buffered chunks that touched the thread and
a buffered reflection are dropped (they are recomputed from what remains), and so are the
``[recall range …]`` lines of the observation groups erased with it and the message boundaries
left with nothing after them. Lines that reflection
merged out of their thread blocks cannot be traced to a thread: :attr:`Erasure.remaining` names
them, so the owner can revise them.

Erasing a thread leaves one thing behind, its **tombstone**: a hash of the thread id
(:func:`tombstone_key`, so not even the id, which an application may have made of a name or an
address, stays readable) and when it was erased, in the resource's metadata (``META_ERASED``),
written in the same transaction. Nothing of the erased content is in it. A door whose client still
holds the conversation and resends it (``obsmem proxy``) tells "erased" from "new" by it, and
stores none of the resent history. The newest ``MAX_ERASED_THREADS`` tombstones of a resource are
kept (the resource's metadata is read with its memory, so it stays small); erasing the resource
takes them with it.

Pure functions only, like :mod:`obsmem.stores.transitions`.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, cast

from ..meta_keys import META_ERASED
from ..neutral import neutral_line
from ..records import ObservationGroup, OMRecord
from ..tokens import estimate_text_tokens

__all__ = [
    "MAX_ERASED_THREADS",
    "Erasure",
    "erase_thread_from",
    "erased_labels",
    "strip_thread",
    "tombstone_key",
    "traced_to",
    "untraced",
    "with_tombstone",
]

MAX_ERASED_THREADS = 128
"""The tombstones a resource keeps (the newest; about 100 bytes each): the resource's metadata
is read with its memory, so a resource whose threads are erased one by one must not grow it
without end. An id erased longer ago than that many erasures in its resource is no longer told
from a new thread."""

_ANY_BLOCK = re.compile(r'<thread id="[^"\n]*">.*?</thread>\n?', re.DOTALL)
_BOUNDARY = "--- message boundary"
_RANGE_LINE = re.compile(r"^\[recall range ([^\]\n]*)\]\n?", re.MULTILINE)


@dataclass(frozen=True, slots=True, kw_only=True)
class Erasure:
    """What a delete removed, and what it could not trace."""

    thread_ids: tuple[str, ...]
    """The threads erased."""
    messages: int
    """How many messages were erased."""
    remaining: str = ""
    """Resource scope, erasing one thread: the lines of the shared log that belong to no
    thread's block (reflection merged them), which may still tell of the erased thread; revise
    them with ``Memory.revise``. Empty when there are none."""


def strip_thread(text: str, thread_id: str) -> str:
    """``text`` without the ``<thread id="…">`` blocks of ``thread_id``."""
    shown = re.escape(neutral_line(thread_id))  # as the Observer's blocks name it
    return re.sub(rf'<thread id="{shown}">.*?</thread>\n?', "", text, flags=re.DOTALL)


def traced_to(group: ObservationGroup, thread_id: str) -> bool:
    """Whether the group tells of the thread: its own, covering some of its messages (a
    reflection's group spans its sources), or holding one of its blocks."""
    return (
        group.thread_id == thread_id
        or any(r.thread_id == thread_id for r in group.ranges)
        or strip_thread(group.observations, thread_id) != group.observations
    )


def erased_labels(
    erased: Sequence[ObservationGroup], groups: Sequence[ObservationGroup]
) -> frozenset[str]:
    """What the ``[recall range …]`` lines of the ``erased`` groups name (their first and last
    message), less what a group that stays still names."""
    gone = {g.id for g in erased}
    staying = {f"{g.start_id}:{g.end_id}" for g in groups if g.id not in gone}
    return frozenset(f"{g.start_id}:{g.end_id}" for g in erased) - staying


def _without_ranges(text: str, labels: frozenset[str]) -> str:
    """``text`` without the recall-range lines naming one of ``labels``."""
    if not labels:
        return text
    return _RANGE_LINE.sub(lambda m: "" if m[1] in labels else m[0], text)


def _without_empty_boundaries(text: str) -> str:
    """``text`` without the message boundaries that have nothing but blank lines (or another
    boundary) after them."""
    kept: list[str] = []
    boundary: int | None = None  # where in ``kept`` the boundary waiting for content sits
    for line in text.split("\n"):
        if line.startswith(_BOUNDARY):
            if boundary is not None:
                del kept[boundary:]
            boundary = len(kept)
        elif line.strip():
            boundary = None
        kept.append(line)
    if boundary is not None:
        del kept[boundary:]
    return "\n".join(kept).lstrip("\n")


def untraced(text: str) -> str:
    """The lines of a resource log outside every thread block (boundaries and blanks aside)."""
    lines = _ANY_BLOCK.sub("", text).splitlines()
    return "\n".join(ln for ln in lines if ln.strip() and not ln.startswith(_BOUNDARY))


def erase_thread_from(
    record: OMRecord, thread_id: str, *, labels: frozenset[str] = frozenset(), now: datetime
) -> OMRecord:
    """``record`` (one generation of a resource log) without ``thread_id``: its blocks, the
    recall ranges of its erased groups (``labels``, :func:`erased_labels`), its cursor, and the
    buffered work that touched it; the record itself when nothing changes. A head that changes
    gets the next version, so a cycle that read it before loses its race."""
    observations = _without_ranges(strip_thread(record.observations, thread_id), labels)
    if observations != record.observations:
        observations = _without_empty_boundaries(observations)
    touched = any(r.thread_id == thread_id for c in record.chunks for r in c.ranges)
    changed = (
        observations != record.observations
        or thread_id in record.cursor
        or touched
        or (record.buffered_reflection is not None and observations != record.observations)
    )
    if not changed:
        return record
    logged = observations != record.observations
    return replace(
        record,
        observations=observations,
        observation_tokens=(
            estimate_text_tokens(observations) if logged else record.observation_tokens
        ),
        cursor={t: seq for t, seq in record.cursor.items() if t != thread_id},
        chunks=() if touched else record.chunks,
        buffered_reflection=None if logged else record.buffered_reflection,
        version=record.version + 1,
        updated_at=now,
    )


def tombstone_key(thread_id: str) -> str:
    """What a tombstone names a thread by: the first 32 hex digits of the SHA-256 of its id."""
    return hashlib.sha256(thread_id.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def with_tombstone(
    metadata: Mapping[str, Any], thread_id: str, *, erased_at: str
) -> dict[str, Any]:
    """The resource's ``metadata`` with the tombstone of ``thread_id`` (erased at the ISO time
    ``erased_at``) among the newest ``MAX_ERASED_THREADS``."""
    key = tombstone_key(thread_id)
    stored = metadata.get(META_ERASED)
    known = cast(dict[str, Any], stored) if isinstance(stored, dict) else {}
    tombs = {t: at for t, at in known.items() if t != key and isinstance(at, str)}
    tombs[key] = erased_at
    newest = sorted(tombs.items(), key=lambda item: item[1])[-MAX_ERASED_THREADS:]
    return {**metadata, META_ERASED: dict(newest)}
