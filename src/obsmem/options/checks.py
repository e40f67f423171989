"""Checks of single option values: token counts, hints, attachment filters, extractors."""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, cast

from obsmem.errors import ConfigError
from obsmem.options.inputs import ContinuationHintsOptions, RetrievalOptions
from obsmem.options.resolved import (
    AttachmentFilter,
    ContinuationHints,
    ResolvedRetrieval,
    round_half_up,
)

if TYPE_CHECKING:
    from obsmem.extractors import Extractor

__all__ = [
    "attachment_filter",
    "continuation_hints",
    "cycle_detail",
    "cycle_retention",
    "extractors",
    "is_number",
    "positive_tokens",
    "previous_observer_tokens",
    "retrieval",
]

_MIME_PATTERN = re.compile(r"^(\*|[a-z0-9][a-z0-9!#$&^_.+-]*/(\*|[a-z0-9][a-z0-9!#$&^_.+-]*))$")


def is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def positive_tokens(option: str, value: object) -> int:
    if (
        not is_number(value)
        or not math.isfinite(cast(float, value))
        or cast(float, value) != int(cast(float, value))
        or cast(float, value) <= 0
    ):
        raise ConfigError(option, value, "must be a positive whole number of tokens")
    return int(cast(float, value))


def cycle_retention(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ConfigError(
            "cycle_retention",
            value,
            "must be a whole number of cycles to keep per log (>= 0; 0 records none)",
        )
    return value


DEFAULT_CYCLE_DETAIL = 20
"""Cycles per log whose detail is kept with ``cycle_detail=True``."""


def cycle_detail(value: object) -> int:
    """``cycle_detail`` as a count of cycles per log (True: the default, False: none)."""
    if isinstance(value, bool):
        return DEFAULT_CYCLE_DETAIL if value else 0
    if not isinstance(value, int) or value < 0:
        raise ConfigError(
            "cycle_detail",
            value,
            "must be True (the newest 20 cycles per log), False (none) or a whole number of "
            "cycles per log (>= 0)",
        )
    return value


def previous_observer_tokens(value: object) -> int | None:
    if value is False:
        return None
    if not is_number(value) or not math.isfinite(cast(float, value)) or cast(float, value) < 0:
        raise ConfigError(
            "observation.previous_observer_tokens",
            value,
            "must be False (show the whole log) or a finite number of tokens >= 0",
        )
    return round_half_up(cast(float, value))


def continuation_hints(value: bool | ContinuationHintsOptions) -> ContinuationHints:
    if isinstance(value, bool):
        return ContinuationHints(current_task=value, suggested_response=value)
    return ContinuationHints(
        current_task=value.current_task, suggested_response=value.suggested_response
    )


def attachment_filter(value: object) -> AttachmentFilter:
    option = "observation.observe_attachments"
    if isinstance(value, bool) or value == "auto":
        return cast(AttachmentFilter, value)
    if isinstance(value, str) or not isinstance(value, list | tuple):
        raise ConfigError(
            option,
            value,
            'must be True (all), False (none), "auto" or a list of MIME patterns such as '
            '["image/*", "application/pdf"]',
        )
    patterns: list[str] = []
    for item in cast("list[object] | tuple[object, ...]", value):
        pattern = item.strip().lower() if isinstance(item, str) else None
        if pattern is None or not _MIME_PATTERN.match(pattern):
            raise ConfigError(
                option,
                item,
                'each entry must be a MIME type ("application/pdf"), a type wildcard '
                '("image/*") or "*"',
            )
        patterns.append(pattern)
    return tuple(patterns)


def extractors(option: str, value: object) -> tuple[Extractor, ...]:
    """A list of :class:`~obsmem.Extractor` with distinct slugs."""
    from obsmem.extractors import check_extractors  # imported here: extractors load llm/models

    return check_extractors(option, value)


def retrieval(value: bool | RetrievalOptions) -> ResolvedRetrieval | None:
    if value is False:
        return None
    if value is True:
        return ResolvedRetrieval()
    if value.embedder is not None and not value.embedder.strip():
        raise ConfigError("retrieval.embedder", value.embedder, "must not be empty")
    return ResolvedRetrieval(
        vector=value.vector,
        scope=value.scope,
        instructions=value.instructions,
        embedder=value.embedder,
    )
