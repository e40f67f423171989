"""The Reflector: condense the observation log, climbing a ladder of compression levels.

Each attempt asks the model for the whole refined log with the guidance of one level (0: none,
4: extreme). The first valid candidate under the target size wins; otherwise the next level is
tried, and when the ladder ends the *smallest* valid candidate is kept. Empty or degenerate
output and failed model calls are failed attempts; when every attempt fails the Reflector raises
``ObserverOutputError`` and the caller keeps the old log: a bad answer never wipes memory.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from obsmem.answers import ParsedOutput, parse_output
from obsmem.errors import ConfigError, ObserverOutputError
from obsmem.llm import LLMRequest, LLMResult, ModelCaller
from obsmem.models import ModelSpec
from obsmem.models.streaming import REPEATING
from obsmem.neutral import neutral_block, neutral_log
from obsmem.observations import dropped_critical_dates
from obsmem.prompts import reflector_system_prompt
from obsmem.tokens import TokenEstimator

__all__ = [
    "COMPRESSION_GUIDANCE",
    "MAX_LEVEL",
    "ReflectionResult",
    "ReflectorInput",
    "reflect",
    "reflector_user_message",
    "strip_group_tags",
]

MAX_LEVEL = 4

COMPRESSION_GUIDANCE: dict[int, str] = {
    0: "",
    1: (
        "## Compression needed\n\n"
        "An earlier rewrite came out no smaller than the log. Condense the older observations: "
        "merge related lines and repeated tool calls into one line each, and keep recent "
        "observations in full. Aim to keep about 8/10 of the detail."
    ),
    2: (
        "## Strong compression needed\n\n"
        "Compress aggressively. Merge each piece of work (a file, a bug, a plan) into one short "
        "arc from start to outcome, drop intermediate steps, and keep exact names, numbers and "
        "open questions. Aim to keep about 6/10 of the detail."
    ),
    3: (
        "## Critical compression needed\n\n"
        "The log is still far too long. Summarise the oldest 50 to 70 percent of it into a few "
        "short paragraph-style lines per day, describe tool work by its outcome only, and drop "
        "anything that a later observation replaced. Keep user facts, preferences and open "
        "goals. Aim to keep about 4/10 of the detail."
    ),
    4: (
        "## Extreme compression needed\n\n"
        "Reduce the log to its essentials. Collapse every sequence of tool calls into its final "
        "outcome, keep at most two or three date groups per day, and give each older topic one "
        "or two lines. Keep only user facts, preferences, decisions, open goals and completed "
        "results. Aim to keep about 2/10 of the detail."
    ),
}
"""Guidance added to the Reflector's request at each compression level."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ReflectorInput:
    """What one Reflector ladder sees, and what it aims for."""

    observations: str
    """The log (or the part of it) to condense."""
    target_tokens: int
    """A candidate under this many tokens ends the climb."""
    start_level: int = 0
    """The first compression level asked for (0: no guidance, up to :data:`MAX_LEVEL`)."""
    max_level: int | None = None
    """The last level tried; ``None`` is ``min(MAX_LEVEL, start_level + 3)``."""
    instruction: str | None = None
    """The user's instruction, added to the system prompt."""
    guidance: str | None = None
    """Guidance for this reflection, added to the user message."""
    continuation_hints: bool = True
    """Ask for ``<current-task>`` and ``<suggested-response>``."""
    extra_sections: Sequence[tuple[str, str]] = ()
    """``(slug, description)`` of inline extractor sections to ask for."""
    prior_values: Mapping[str, Any] = field(default_factory=dict[str, Any])
    """Earlier extractor values by slug, shown as continuity hints."""


AttemptFailed = Callable[[int, str], None]
"""``on_attempt_failed(level, reason)``: called for each attempt that does not end the ladder."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ReflectionResult:
    """The chosen candidate and what it took to get it."""

    parsed: ParsedOutput
    tokens: int
    """Estimated tokens of ``parsed.observations``."""
    level: int
    """The compression level that produced the chosen candidate."""
    attempts: int
    calls: list[LLMResult] = field(default_factory=list[LLMResult])
    """Every answered model call, in order (failed calls excluded)."""


_GROUP_TAG = re.compile(
    r"^[ \t]*</?observation-group\b[^>]*>[ \t]*\n|</?observation-group\b[^>]*>", re.MULTILINE
)


def strip_group_tags(log: str) -> str:
    """``log`` without ``<observation-group …>`` tags (their content is kept)."""
    return _GROUP_TAG.sub("", log)


def reflector_user_message(inp: ReflectorInput, level: int) -> str:
    """The text of the Reflector's user message at compression ``level``."""
    log = neutral_log(strip_group_tags(inp.observations).strip())
    parts = [
        f"## Observations to Reflect On\n\n{log}\n\n---",
        "Write the refined observations inside <observations>. They will become the ENTIRE "
        "memory and replace everything above, so include everything that still matters.",
    ]
    if inp.prior_values:
        shown = [
            f"<{slug}>{neutral_block(_as_text(value))}</{slug}>"
            for slug, value in inp.prior_values.items()
        ]
        parts.append(
            "## Prior Extracted Values\n\n"
            + "\n".join(shown)
            + "\n\nUse these only as continuity hints; update them from the observations."
        )
    if inp.guidance:
        parts.append(f"## Specific guidance\n\n{inp.guidance.strip()}")
    if COMPRESSION_GUIDANCE[level]:
        parts.append(COMPRESSION_GUIDANCE[level])
    if inp.continuation_hints:
        parts.append(
            "After </observations>, also write <current-task> and <suggested-response> for the "
            "latest state of the conversation."
        )
    else:
        parts.append("Output <observations> every time.")
    return "\n\n".join(parts)


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _levels(start_level: int, max_level: int | None) -> range:
    if not 0 <= start_level <= MAX_LEVEL:
        raise ConfigError("start_level", start_level, f"must be between 0 and {MAX_LEVEL}")
    top = min(MAX_LEVEL, start_level + 3) if max_level is None else max_level
    if not start_level <= top <= MAX_LEVEL:
        raise ConfigError(
            "max_level", max_level, f"must be between start_level ({start_level}) and {MAX_LEVEL}"
        )
    return range(start_level, top + 1)


async def reflect(
    inp: ReflectorInput,
    *,
    caller: ModelCaller,
    model: ModelSpec,
    model_settings: Mapping[str, Any] | None = None,
    estimator: TokenEstimator,
    timeout: float | None = None,  # noqa: ASYNC109 (passed on to LLMRequest)
    cycle_id: str = "",
    on_attempt_failed: AttemptFailed | None = None,
) -> ReflectionResult:
    """Condense ``inp.observations`` to fewer than ``inp.target_tokens`` tokens if the model can.

    Levels run from ``inp.start_level`` to ``inp.max_level``, one call through ``caller`` each.
    A valid candidate is shorter than its input and keeps, for every date it still has, at least
    one of the 🔴 lines the input had there; the first one under target is returned, otherwise
    the smallest. Raises ``ObserverOutputError`` when no attempt produced a valid candidate; a
    failed model call (already retried if transient) ends the climb and propagates.
    Cancellation propagates.
    """
    observations, target_tokens = inp.observations, inp.target_tokens
    levels = _levels(inp.start_level, inp.max_level)
    system = _system_prompt(inp)
    extra_slugs = [slug for slug, _ in inp.extra_sections]
    input_tokens = estimator.count_text(observations)
    calls: list[LLMResult] = []
    best: ReflectionResult | None = None
    failures: list[str] = []
    attempts = 0

    def failed(level: int, reason: str) -> None:
        failures.append(f"level {level}: {reason}")
        if on_attempt_failed is not None:
            on_attempt_failed(level, reason)

    for level in levels:
        attempts += 1
        request = LLMRequest(
            role="reflector",
            model=model,
            system=system,
            user=[reflector_user_message(inp, level)],
            model_settings=dict(model_settings or {}),
            input_tokens=input_tokens,
            timeout=timeout,
            operation="reflection",
            cycle_id=cycle_id,
            # An answer not shorter than its input is never taken: no use generating more.
            max_output_tokens=max(1_000, input_tokens),
        )
        try:
            result = await caller.call(request)
        except Exception as exc:  # CancelledError is a BaseException and propagates
            # The call already retried what was transient; another level sends the same log
            # again and fails the same way (a 4xx, a context too long): stop here.
            failed(level, f"model call failed: {exc}")
            raise
        calls.append(result)
        judged = _candidate(result, inp, extra_slugs, estimator, input_tokens)
        if isinstance(judged, str):
            failed(level, judged)
            continue
        parsed, tokens = judged
        candidate = ReflectionResult(
            parsed=parsed, tokens=tokens, level=level, attempts=attempts, calls=calls
        )
        if best is None or tokens < best.tokens:
            best = candidate
        if tokens < target_tokens:
            return _final(candidate, attempts, calls)
        if level < levels[-1]:
            failed(level, f"{tokens} tokens, not under the target of {target_tokens}")
    if best is None:
        raise ObserverOutputError(
            f"The Reflector produced no usable log in {attempts} attempt(s) "
            f"({'; '.join(failures)}); the current observations are kept unchanged. Try another "
            "reflection model or raise its max_tokens."
        )
    return _final(best, attempts, calls)


def _system_prompt(inp: ReflectorInput) -> str:
    return reflector_system_prompt(
        multi_thread="<thread " in inp.observations,
        continuation_hints=inp.continuation_hints,
        extra_sections=inp.extra_sections,
        instruction=inp.instruction,
    )


def _candidate(
    result: LLMResult,
    inp: ReflectorInput,
    extra_slugs: Sequence[str],
    estimator: TokenEstimator,
    input_tokens: int,
) -> tuple[ParsedOutput, int] | str:
    """One answer as a valid candidate (parsed, with its tokens), or why it is not one."""
    if result.cut_off not in (None, REPEATING):
        # The cap is the input's size: an answer that reaches it is no reflection.
        return f"not shorter than its input of {input_tokens} tokens (cut off)"
    if result.cut_off == REPEATING:
        return "degenerate output (repeated text)"
    parsed = parse_output(result.text, extra_slugs=extra_slugs)
    if parsed.is_empty:
        return "empty output (no observations)"
    if lost := dropped_critical_dates(inp.observations, parsed.observations):
        return f"dropped every 🔴 line of {', '.join(lost)}"
    tokens = estimator.count_text(parsed.observations)
    if tokens >= input_tokens:
        return f"{tokens} tokens, not shorter than its input of {input_tokens}"
    return parsed, tokens


def _final(chosen: ReflectionResult, attempts: int, calls: list[LLMResult]) -> ReflectionResult:
    return ReflectionResult(
        parsed=chosen.parsed,
        tokens=chosen.tokens,
        level=chosen.level,
        attempts=attempts,
        calls=list(calls),
    )
