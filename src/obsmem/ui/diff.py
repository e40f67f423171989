"""Each reflection as a line diff of the log before and after it (:mod:`difflib`).

A line the Reflector left as it was is *kept*; lines it removed with nothing in their place are
*dropped*; lines it rewrote into others (a replaced block) are *merged* (the old lines) into
the new ones (*merged-into*); new lines with no old ones are *added*. Recall-range bookkeeping
lines are left out of both sides, so the diff shows what the actor reads.
"""

from __future__ import annotations

import difflib
import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from ..observations import strip_recall_ranges
from ..records import ObservationGroup, OMRecord

__all__ = ["DiffLine", "GenerationDiff", "diff_logs", "generation_diffs"]

LineKind = Literal["kept", "dropped", "merged", "merged-into", "added"]


@dataclass(frozen=True, slots=True)
class DiffLine:
    """One line of a diff and what happened to it."""

    kind: LineKind
    text: str


@dataclass(frozen=True, slots=True)
class GenerationDiff:
    """One reflection (or revision by hand): the generation it retired, the one it started,
    and the diff."""

    before: int
    after: int
    at: datetime
    lines: tuple[DiffLine, ...]
    tokens_before: int
    tokens_after: int
    origin: str = "reflection"
    """``reflection`` or ``revision`` (``Memory.revise``)."""

    def count(self, kind: str) -> int:
        """How many lines are of ``kind``."""
        return sum(1 for line in self.lines if line.kind == kind)


def _lines(log: str) -> list[str]:
    return [line for line in strip_recall_ranges(log).splitlines() if line.strip()]


def diff_logs(before: str, after: str) -> list[DiffLine]:
    """The lines of ``before`` and ``after`` marked kept, dropped, merged, merged-into or
    added."""
    old, new = _lines(before), _lines(after)
    out: list[DiffLine] = []
    matcher = difflib.SequenceMatcher(a=old, b=new, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            out.extend(DiffLine("kept", line) for line in old[i1:i2])
        elif tag == "delete":
            out.extend(DiffLine("dropped", line) for line in old[i1:i2])
        elif tag == "insert":
            out.extend(DiffLine("added", line) for line in new[j1:j2])
        else:
            out.extend(DiffLine("merged", line) for line in old[i1:i2])
            out.extend(DiffLine("merged-into", line) for line in new[j1:j2])
    return out


def generation_diffs(
    history: Sequence[OMRecord], reflections: Sequence[ObservationGroup] = ()
) -> list[GenerationDiff]:
    """One diff per reflection or revision in ``history`` (newest first, as the store returns
    it): the retired generation's log against what the reflection wrote (its reflection group,
    by order; the new generation's log when no group is kept, or for a revision by hand)."""
    ordered = sorted(history, key=lambda r: r.generation)
    groups = sorted(reflections, key=lambda g: g.created_at)
    out: list[GenerationDiff] = []
    n = 0
    for prev, rec in itertools.pairwise(ordered):
        if rec.origin == "revision":  # written by hand: no reflection group
            written = rec.observations
        elif rec.origin == "reflection":
            written = groups[n].observations if n < len(groups) else rec.observations
            n += 1
        else:
            continue
        out.append(
            GenerationDiff(
                before=prev.generation,
                after=rec.generation,
                at=rec.created_at,
                lines=tuple(diff_logs(prev.observations, written)),
                tokens_before=prev.observation_tokens,
                tokens_after=rec.observation_tokens,
                origin=rec.origin,
            )
        )
    out.reverse()
    return out
