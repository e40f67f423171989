"""The Reflector: condense the observation log, climbing a ladder of compression levels.

Each attempt asks the model for the whole refined log with the guidance of one level (0: none,
4: extreme). The first valid candidate under the target size wins; otherwise the next level is
tried, and when the ladder ends the *smallest* valid candidate is kept. Empty or degenerate
output and failed model calls are failed attempts; when every attempt fails the Reflector raises
``ObserverOutputError`` and the caller keeps the old log (SPEC §4, invariant 5).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from obsmem.errors import ConfigError, ObserverOutputError
from obsmem.llm import REPEATING, LLMRequest, LLMResult, ModelCaller
from obsmem.models import ModelSpec
from obsmem.observations import (
    ParsedOutput,
    dropped_critical_dates,
    parse_output,
)
from obsmem.prompts import reflector_system_prompt
from obsmem.tokens import TokenEstimator

__all__ = [
    "COMPRESSION_GUIDANCE",
    "MAX_LEVEL",
    "ReflectionResult",
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


def reflector_user_message(
    observations: str,
    *,
    level: int,
    guidance: str | None,
    continuation_hints: bool,
    prior_values: Mapping[str, Any] | None = None,
) -> str:
    """The text of the Reflector's user message for one compression level."""
    parts = [
        f"## Observations to Reflect On\n\n{strip_group_tags(observations).strip()}\n\n---",
        "Write the refined observations inside <observations>. They will become the ENTIRE "
        "memory and replace everything above, so include everything that still matters.",
    ]
    if prior_values:
        shown = [
            f"<{slug}>{v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)}</{slug}>"
            for slug, v in prior_values.items()
        ]
        parts.append(
            "## Prior Extracted Values\n\n"
            + "\n".join(shown)
            + "\n\nUse these only as continuity hints; update them from the observations."
        )
    if guidance:
        parts.append(f"## Specific guidance\n\n{guidance.strip()}")
    if COMPRESSION_GUIDANCE[level]:
        parts.append(COMPRESSION_GUIDANCE[level])
    if continuation_hints:
        parts.append(
            "After </observations>, also write <current-task> and <suggested-response> for the "
            "latest state of the conversation."
        )
    else:
        parts.append("Output <observations> every time.")
    return "\n\n".join(parts)


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
    observations: str,
    *,
    caller: ModelCaller,
    model: ModelSpec,
    model_settings: Mapping[str, Any] | None = None,
    estimator: TokenEstimator,
    target_tokens: int,
    start_level: int,
    max_level: int | None = None,
    instruction: str | None = None,
    guidance: str | None = None,
    continuation_hints: bool = True,
    extra_sections: Sequence[tuple[str, str]] = (),
    prior_values: Mapping[str, Any] | None = None,
    timeout: float | None = None,  # noqa: ASYNC109 (passed on to LLMRequest)
    cycle_id: str = "",
    on_attempt_failed: AttemptFailed | None = None,
) -> ReflectionResult:
    """Condense ``observations`` to fewer than ``target_tokens`` tokens if the model can.

    Levels run from ``start_level`` to ``max_level`` (default ``min(4, start_level + 3)``), one
    call through ``caller`` each. A valid candidate is shorter than its input and keeps, for
    every date it still has, at least one of the 🔴 lines the input had there; the first one
    under target is returned, otherwise the smallest. Raises ``ObserverOutputError`` when no
    attempt produced a valid candidate; a failed model call (already retried if transient) ends
    the climb and propagates. Cancellation propagates.
    ``extra_sections`` (``(slug, description)``) are inline extractor sections to ask for, and
    ``prior_values`` their earlier values, shown as hints.
    """
    levels = _levels(start_level, max_level)
    system = reflector_system_prompt(
        multi_thread="<thread " in observations,
        continuation_hints=continuation_hints,
        extra_sections=extra_sections,
        instruction=instruction,
    )
    extra_slugs = [slug for slug, _ in extra_sections]
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
            user=[
                reflector_user_message(
                    observations,
                    level=level,
                    guidance=guidance,
                    continuation_hints=continuation_hints,
                    prior_values=prior_values,
                )
            ],
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
        if result.cut_off not in (None, REPEATING):
            # The cap is the input's size: an answer that reaches it is no reflection.
            failed(level, f"not shorter than its input of {input_tokens} tokens (cut off)")
            continue
        if result.cut_off == REPEATING:
            failed(level, "degenerate output (repeated text)")
            continue
        parsed = parse_output(result.text, extra_slugs=extra_slugs)
        if parsed.is_empty:
            failed(level, "empty output (no observations)")
            continue
        if lost := dropped_critical_dates(observations, parsed.observations):
            failed(level, f"dropped every 🔴 line of {', '.join(lost)}")
            continue
        tokens = estimator.count_text(parsed.observations)
        if tokens >= input_tokens:
            failed(level, f"{tokens} tokens, not shorter than its input of {input_tokens}")
            continue
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


def _final(chosen: ReflectionResult, attempts: int, calls: list[LLMResult]) -> ReflectionResult:
    return ReflectionResult(
        parsed=chosen.parsed,
        tokens=chosen.tokens,
        level=chosen.level,
        attempts=attempts,
        calls=list(calls),
    )
