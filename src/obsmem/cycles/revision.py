"""Revision: the observation log corrected by hand (``Memory.revise``), as a new generation.

A revision is a manual cycle that calls no model. It rewrites lines of the head's log (replaces
some, removes some, or gives the whole text), is recorded in the cycle ledger (kind
``revision``, with who asked and when), and commits a new generation against the version it
read; after a lost race it decides again from the current head, so the lines are looked for in
the log as it is then (invariant 4).

Nothing left pending may bring a removed line back: the buffered reflection, made from the old
log, is dropped with the old generation (``StartGeneration``), and the pending chunks get the
same edit, since an Observer may have copied a line of the log it was shown. A buffering cycle
still in flight in this process is called off by the engine before the revision reads the log.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import cast

from ..errors import ConfigError
from ..records import BufferedChunk, OMRecord
from ..snapshot import Snapshot
from ..stores import StartGeneration
from .common import Deps, new_cycle_id
from .writes import Write, commit

__all__ = ["Revision", "revise"]

_HOW = "give exactly one of replace={old_line: new_line}, remove=[line, ...] or text=new_log"


@dataclass(frozen=True, slots=True, kw_only=True)
class Revision:
    """What to correct: lines to replace, lines to remove, or the whole new log. A line is
    named by its whole text as the log shows it (``memory.om.observations``); surrounding
    whitespace does not count."""

    replace: tuple[tuple[str, str], ...] = ()
    remove: tuple[str, ...] = ()
    text: str | None = None

    @classmethod
    def of(
        cls,
        *,
        replace: Mapping[str, str] | None = None,
        remove: Sequence[str] | None = None,
        text: str | None = None,
    ) -> Revision:
        """The revision asked for, checked: exactly one way, and each line named once."""
        asked = {"replace": replace, "remove": remove, "text": text}
        given = [name for name, value in asked.items() if value is not None]
        if len(given) != 1:
            raise ConfigError("revise", ", ".join(given) or None, _HOW)
        if given != ["text"] and not asked[given[0]]:
            raise ConfigError(f"revise.{given[0]}", asked[given[0]], "name at least one line")
        if text is not None:
            if not isinstance(cast(object, text), str):
                raise ConfigError("revise.text", text, "give the whole new log as a string")
            return cls(text=text)
        if isinstance(remove, str):
            raise ConfigError("revise.remove", remove, "give a list of lines: remove=[line]")
        pairs = tuple((replace or {}).items())
        for old, new in pairs:
            if not _line(new):
                raise ConfigError(
                    "revise.replace",
                    {old: new},
                    "give the new line as text (to drop the line, use remove=[line])",
                )
        named = [old for old, _ in pairs] + list(remove or ())
        seen: set[str] = set()
        for line in named:
            if not _line(line):
                raise ConfigError(
                    f"revise.{given[0]}", line, "name a line of the log by its whole text"
                )
            if line.strip() in seen:
                raise ConfigError(f"revise.{given[0]}", line, "this line is named twice")
            seen.add(line.strip())
        return cls(replace=pairs, remove=tuple(remove or ()))

    def changes(self, log: str, key: str) -> dict[str, tuple[str, ...]]:
        """Each line of ``log`` the revision changes (its stripped text) and the lines that
        take its place (none: removed). A named line that is missing from the log, or that
        the log holds more than once, is a ConfigError naming it."""
        lines = log.split("\n")
        if self.text is not None:
            kept = {line.strip() for line in self.text.split("\n")}
            return {s: () for line in lines if (s := line.strip()) and s not in kept}
        named = [("revise.replace", old) for old, _ in self.replace]
        for option, line in [*named, *(("revise.remove", line) for line in self.remove)]:
            _check_once(lines, line, option=option, key=key)
        found = {old.strip(): tuple(new.split("\n")) for old, new in self.replace}
        return found | {line.strip(): () for line in self.remove}

    def apply(
        self, head: OMRecord, count: Callable[[str], int]
    ) -> tuple[str, tuple[BufferedChunk, ...]]:
        """The revised log and the pending chunks with the same edit (``count`` gives the
        tokens of an edited chunk)."""
        changes = self.changes(head.observations, head.key)
        log = self.text if self.text is not None else _edited(head.observations, changes)
        chunks: list[BufferedChunk] = []
        for chunk in head.chunks:
            text = _edited(chunk.observations, changes)
            if text != chunk.observations:
                chunk = replace(chunk, observations=text, token_count=count(text))
            chunks.append(chunk)
        return log, tuple(chunks)


def _line(value: object) -> bool:
    """Whether ``value`` is a line of text with something on it (callers may pass anything)."""
    return isinstance(value, str) and bool(value.strip())


def _check_once(lines: Sequence[str], line: str, *, option: str, key: str) -> None:
    wanted = line.strip()
    count = sum(1 for x in lines if x.strip() == wanted)
    if count == 0:
        raise ConfigError(
            option,
            line,
            f"no line of the log of {key} reads so; name a whole line as the log shows it now "
            "(memory.om.observations(thread, resource), or obsmem inspect)",
        )
    if count > 1:
        raise ConfigError(
            option,
            line,
            f"the log of {key} holds this line {count} times, so it is ambiguous; rewrite the "
            "whole log with text=new_log instead",
        )


def _edited(text: str, changes: Mapping[str, tuple[str, ...]]) -> str:
    """``text`` with each changed line replaced (keeping its indentation when the new line
    brings none) or removed."""
    out: list[str] = []
    for line in text.split("\n"):
        new = changes.get(line.strip())
        if new is None:
            out.append(line)
            continue
        indent = line[: len(line) - len(line.lstrip())]
        out.extend(n if n[:1].isspace() else indent + n for n in new)
    return "\n".join(out)


async def revise(
    deps: Deps, snapshot: Snapshot, revision: Revision, *, by: str | None = None
) -> OMRecord | None:
    """Commit ``revision`` of the log in ``snapshot`` as a new generation, recorded in the
    ledger as a manual cycle; the new head (None when the memory was cleared meanwhile)."""
    subject = snapshot.subject
    cycle_id = new_cycle_id("revise")

    def decide(head: OMRecord) -> Write:
        log, chunks = revision.apply(head, deps.estimator.count_text)
        if log == head.observations and chunks == head.chunks:
            raise ConfigError(
                "revise", None, f"it leaves the log of {head.key} as it is; nothing to change"
            )
        return Write(
            change=StartGeneration(
                observations=log,
                observation_tokens=deps.estimator.count_text(log),
                origin="revision",
                chunks=chunks,
            )
        )

    decide(snapshot.record)  # a bad revision fails before anything is recorded
    deps.ledger.start(
        cycle_id,
        subject=subject,
        kind="revision",
        operation="revision",
        now=deps.now(),
        thread_ids=subject.threads,
        by=by,
    )
    try:
        result = await commit(
            deps, subject, snapshot.record, decide, seen=snapshot, cycle_id=cycle_id
        )
    finally:
        deps.ledger.close(cycle_id)
    return None if result is None else result.record
