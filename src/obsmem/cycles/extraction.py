"""Extraction inside the cycles: which slots a cycle runs, what they saw before, where values go.

A cycle builds an :class:`ExtractionPlan` before its Observer or Reflector call (the inline
sections to ask for and the previous values to show), runs :func:`extract` on the answer, and
:func:`store_values` writes the results to thread metadata: built-in hints through
:func:`~obsmem.cycles.common.apply_hints` (never blanking stored ones), working memory through
:func:`~obsmem.working_memory.write_working_memory`, user values merged under ``"om:extracted"``
by slug (and at their ``metadata_key_path``).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, cast

from pydantic import ValidationError

from ..extractors import (
    Exchange,
    ExtractionResult,
    Extractor,
    OperationType,
    Slot,
    run_extractors,
)
from ..observations import ParsedOutput
from ..working_memory import SECTION as WM_SECTION
from ..working_memory import WorkingMemory, read_working_memory, write_working_memory
from .common import (
    META_CURRENT_TASK,
    META_EXTRACTED,
    META_SUGGESTED_RESPONSE,
    Deps,
    apply_hints,
)

__all__ = ["ExtractionPlan", "extract", "observation_plan", "reflection_plan", "store_values"]

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


async def _stored(deps: Deps, thread_id: str, slots: Sequence[Slot]) -> dict[str, Any]:
    thread = await deps.store.get_thread(thread_id)
    if thread is None:
        return {}
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
            current = await read_working_memory(
                deps.store, wm, thread_id=thread_id, resource_id=thread.resource_id
            )
            out[slot.slug] = current or wm.blank()
        elif slot.kind == "user":
            out[slot.slug] = user.get(slot.slug)
    return out


def _user_slots(extractors: Sequence[Extractor]) -> list[Slot]:
    return [Slot.of(e) for e in extractors]


async def observation_plan(deps: Deps, thread_id: str) -> ExtractionPlan:
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
    return ExtractionPlan(slots=tuple(slots), previous=await _stored(deps, thread_id, slots))


async def reflection_plan(deps: Deps, thread_id: str) -> ExtractionPlan:
    """Built-in hints and the ``reflection.extract`` extractors."""
    ref = deps.options.reflection
    slots: list[Slot] = []
    if ref.continuation_hints.any:
        slots += [_builtin("current-task"), _builtin("suggested-response")]
    slots += _user_slots(ref.extract)
    return ExtractionPlan(slots=tuple(slots), previous=await _stored(deps, thread_id, slots))


async def extract(
    deps: Deps,
    plan: ExtractionPlan,
    *,
    parsed: ParsedOutput,
    exchange: Exchange | None,
    thread_id: str,
    resource_id: str | None,
    operation_type: OperationType,
    cycle_id: str,
    deadline: float | None = None,
) -> ExtractionResult:
    """Run the plan's slots on one answer; follow-up requests end by ``deadline`` (monotonic)."""
    slots = plan.slots if exchange is not None else tuple(s for s in plan.slots if s.inline)
    if not slots:
        return ExtractionResult()
    timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
    return await run_extractors(
        slots,
        parsed=parsed,
        previous=plan.previous,
        exchange=exchange,
        thread_id=thread_id,
        resource_id=resource_id,
        operation_type=operation_type,
        cycle_id=cycle_id,
        timeout=timeout,
    )


def with_thread_sections(part: ParsedOutput, whole: ParsedOutput) -> ParsedOutput:
    """A thread block's answer with the answer's top-level sections where it has none."""
    return replace(
        part,
        sections={**whole.sections, **part.sections},
        extracted_values={**whole.extracted_values, **part.extracted_values},
    )


async def store_values(
    deps: Deps,
    thread_id: str,
    plan: ExtractionPlan,
    result: ExtractionResult,
    *,
    cycle_id: str,
    hints: bool = True,
    title: bool = True,
) -> None:
    """Write a cycle's values to the thread. ``hints``/``title`` say whether the built-in hints
    and the title are stored now (buffered chunks keep their hints until activation)."""
    values = result.values
    if hints or title:
        await apply_hints(
            deps,
            thread_id,
            current_task=values.get("current-task") if hints else None,
            suggested_response=values.get("suggested-response") if hints else None,
            thread_title=values.get("thread-title") if title else None,
            cycle_id=cycle_id,
        )
    thread = await deps.store.get_thread(thread_id)
    if thread is None:
        return
    wm = deps.working_memory
    if wm is not None and isinstance(values.get(WM_SECTION), str):
        await write_working_memory(
            deps.store, wm, values[WM_SECTION], thread_id=thread_id, resource_id=thread.resource_id
        )
    user = [s for s in plan.slots if s.kind == "user" and s.slug in values]
    if not user:
        return
    meta = thread.metadata
    old = meta.get(META_EXTRACTED)
    merged = dict(cast(Mapping[str, Any], old)) if isinstance(old, Mapping) else {}
    patch: dict[str, Any] = {}
    for slot in user:
        merged[slot.slug] = values[slot.slug]
        if slot.metadata_key_path:
            _set_path(patch, meta, slot.metadata_key_path.split("."), values[slot.slug])
    patch[META_EXTRACTED] = merged
    await deps.store.update_thread(thread_id, metadata=patch)


def _set_path(patch: dict[str, Any], meta: Mapping[str, Any], path: list[str], value: Any) -> None:
    """Put ``value`` at ``path`` in ``patch`` (top-level keys of the thread metadata), keeping
    what already sits beside it in the stored metadata."""
    top = path[0]
    if len(path) == 1:
        patch[top] = value
        return
    base = patch.get(top, meta.get(top))
    node: dict[str, Any] = copy.deepcopy(dict(base)) if isinstance(base, Mapping) else {}
    patch[top] = node
    for key in path[1:-1]:
        child = node.get(key)
        node[key] = dict(cast(Mapping[str, Any], child)) if isinstance(child, Mapping) else {}
        node = node[key]
    node[path[-1]] = value
