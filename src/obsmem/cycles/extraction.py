"""Extraction inside the cycles: which slots a cycle runs, what they saw before, where values go.

A cycle builds an :class:`ExtractionPlan` from its snapshot before its Observer or Reflector call
(the inline sections to ask for and the previous values to show), runs :func:`extract` on the
answer, and turns the results into metadata patches (:func:`value_patches`) that its commit
merges inside the store's transaction: built-in hints (never blanking stored ones), the
suggested title, working memory, and user values under ``"om:extracted"`` by slug (and at their
``metadata_key_path``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict, Unpack, cast

from pydantic import ValidationError

from ..answers import ParsedOutput
from ..extractors import (
    Exchange,
    ExtractionResult,
    Extractor,
    OperationType,
    Slot,
    run_extractors,
)
from ..meta_keys import (
    META_CURRENT_TASK,
    META_EXTRACTED,
    META_SUGGESTED_RESPONSE,
    META_TITLE_GENERATION,
)
from ..snapshot import Snapshot
from ..stores import ResourcePatch, ThreadPatch
from ..stores.changes import MetadataPath
from ..working_memory import SECTION as WM_SECTION
from ..working_memory import (
    WorkingMemory,
    stored_working_memory,
    working_memory_patch,
)
from .common import Deps

__all__ = [
    "ExtractionPlan",
    "extract",
    "observation_plan",
    "reflection_plan",
    "value_patches",
]

_HINT_TEXT = {
    "current-task": "what the assistant is working on right now",
    "suggested-response": "how the assistant should continue its next reply",
    "thread-title": "a short title for this conversation",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class ExtractionPlan:
    """The slots one cycle runs for one thread and the values stored before it."""

    slots: tuple[Slot, ...] = ()
    previous: Mapping[str, Any] = field(default_factory=dict[str, Any])

    @property
    def inline_sections(self) -> list[tuple[str, str]]:
        """``(slug, description)`` of the sections to ask the main call for (built-ins are
        asked for by the prompts themselves)."""
        return [(s.slug, s.instructions) for s in self.slots if s.inline and s.kind != "builtin"]

    @property
    def prompt_values(self) -> dict[str, Any]:
        """Previous values shown in the main call: inline slots that want them."""
        return {
            s.slug: self.previous[s.slug]
            for s in self.slots
            if s.inline
            and s.kind != "builtin"
            and s.include_previous
            and self.previous.get(s.slug) is not None
        }

    def builtins_only(self) -> ExtractionPlan:
        return ExtractionPlan(
            slots=tuple(s for s in self.slots if s.kind == "builtin"), previous=self.previous
        )


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError("should be text")
    return value.strip()


def _builtin(slug: str) -> Slot:
    return Slot(slug=slug, instructions=_HINT_TEXT[slug], kind="builtin", check=_text)


def _working_memory_slot(wm: WorkingMemory) -> Slot:
    def check(value: Any) -> str:
        text = _text(value)
        if wm.schema is not None:
            try:
                return wm.schema.model_validate_json(text).model_dump_json(indent=2)
            except ValidationError as exc:
                raise ValueError(f"working memory does not match its schema: {exc}") from exc
        return text

    description = (
        "the user's working memory, rewritten in full as "
        + wm.describe()
        + "\nWrite it only when the new messages change it; leave it out otherwise."
    )
    return Slot(slug=WM_SECTION, instructions=description, kind="internal", check=check)


def _stored(
    deps: Deps, snapshot: Snapshot, thread_id: str, slots: Sequence[Slot]
) -> dict[str, Any]:
    state = snapshot.thread(thread_id)
    if state is None:
        return {}
    thread = state.thread
    meta = thread.metadata
    extracted = meta.get(META_EXTRACTED)
    user = cast(Mapping[str, Any], extracted) if isinstance(extracted, Mapping) else {}
    out: dict[str, Any] = {}
    for slot in slots:
        if slot.slug == "current-task":
            out[slot.slug] = meta.get(META_CURRENT_TASK)
        elif slot.slug == "suggested-response":
            out[slot.slug] = meta.get(META_SUGGESTED_RESPONSE)
        elif slot.slug == "thread-title":
            out[slot.slug] = thread.title
        elif slot.slug == WM_SECTION and deps.working_memory is not None:
            wm = deps.working_memory
            current = stored_working_memory(
                wm, thread_metadata=meta, resource_metadata=snapshot.resource_metadata
            )
            out[slot.slug] = current or wm.blank()
        elif slot.kind == "user":
            out[slot.slug] = user.get(slot.slug)
    return out


def _user_slots(extractors: Sequence[Extractor]) -> list[Slot]:
    return [Slot.of(e) for e in extractors]


def observation_plan(deps: Deps, snapshot: Snapshot, thread_id: str) -> ExtractionPlan:
    """Built-in hints, the thread title, working memory (when the Observer keeps it) and the
    ``observation.extract`` extractors, in that order."""
    obs = deps.options.observation
    slots: list[Slot] = []
    if obs.continuation_hints.any:
        slots += [_builtin("current-task"), _builtin("suggested-response")]
    if obs.thread_title:
        slots.append(_builtin("thread-title"))
    if deps.working_memory is not None:
        slots.append(_working_memory_slot(deps.working_memory))
    slots += _user_slots(obs.extract)
    return ExtractionPlan(slots=tuple(slots), previous=_stored(deps, snapshot, thread_id, slots))


def reflection_plan(deps: Deps, snapshot: Snapshot, thread_id: str) -> ExtractionPlan:
    """Built-in hints and the ``reflection.extract`` extractors."""
    ref = deps.options.reflection
    slots: list[Slot] = []
    if ref.continuation_hints.any:
        slots += [_builtin("current-task"), _builtin("suggested-response")]
    slots += _user_slots(ref.extract)
    return ExtractionPlan(slots=tuple(slots), previous=_stored(deps, snapshot, thread_id, slots))


class AnswerSeen(TypedDict):
    """The answer a cycle extracts from and whose it is: :func:`run_extractors`'s arguments
    that :func:`extract` passes on as they are."""

    parsed: ParsedOutput
    exchange: Exchange | None
    thread_id: str
    resource_id: str | None
    operation_type: OperationType
    cycle_id: str


async def extract(
    deps: Deps, plan: ExtractionPlan, *, deadline: float | None = None, **answer: Unpack[AnswerSeen]
) -> ExtractionResult:
    """Run the plan's slots on one answer; follow-up requests end by ``deadline`` (monotonic).
    Without the exchange that produced the answer only the inline slots can run."""
    inline_only = answer["exchange"] is None
    slots = tuple(s for s in plan.slots if s.inline) if inline_only else plan.slots
    if not slots:
        return ExtractionResult()
    timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
    return await run_extractors(
        slots, caller=deps.caller, previous=plan.previous, timeout=timeout, **answer
    )


def value_patches(
    deps: Deps,
    snapshot: Snapshot,
    thread_id: str,
    plan: ExtractionPlan,
    result: ExtractionResult,
    *,
    hints: bool = True,
    title: bool = True,
) -> tuple[ThreadPatch, ResourcePatch | None]:
    """The metadata a cycle's values write to ``thread_id``. ``hints``/``title`` say whether the
    built-in hints and the suggested title are stored now (buffered chunks keep their hints
    until activation). Missing hints never blank stored ones (invariant 9)."""
    values = result.values
    paths: list[tuple[MetadataPath, Any]] = []
    resource: ResourcePatch | None = None
    if hints:
        for slug, key in (
            ("current-task", META_CURRENT_TASK),
            ("suggested-response", META_SUGGESTED_RESPONSE),
        ):
            if values.get(slug):
                paths.append(((key,), values[slug]))
    suggested = (
        values.get("thread-title") if title and deps.options.observation.thread_title else None
    )
    wm = deps.working_memory
    if wm is not None and isinstance(values.get(WM_SECTION), str):
        patch = working_memory_patch(
            wm,
            values[WM_SECTION],
            thread_id=thread_id,
            resource_id=snapshot.subject.resource_id,
        )
        if isinstance(patch, ResourcePatch):
            resource = patch
        else:
            paths += patch.set
    for slot in plan.slots:
        if slot.kind == "user" and slot.slug in values:
            paths.append(((META_EXTRACTED, slot.slug), values[slot.slug]))
            if slot.metadata_key_path:
                paths.append((tuple(slot.metadata_key_path.split(".")), values[slot.slug]))
    if isinstance(suggested, str) and suggested.strip():
        paths.append(((META_TITLE_GENERATION,), snapshot.record.generation))
    thread = ThreadPatch(
        thread_id=thread_id,
        set=tuple(paths),
        suggested_title=suggested if isinstance(suggested, str) else None,
    )
    return thread, resource
