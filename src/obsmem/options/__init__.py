"""Observational-memory options: what users write, how it resolves, and the resolved result.

``resolve_options(True | dict | ObservationalMemoryOptions | None)`` applies every default and
rule and returns a frozen :class:`ResolvedOptions` with absolute token numbers (or ``None`` when
memory is off). Bad values raise :class:`obsmem.errors.ConfigError` naming the dotted option.
"""

from __future__ import annotations

from obsmem.options.durations import IdleSetting, parse_idle
from obsmem.options.inputs import (
    ContinuationHintsOptions,
    ObservationalMemoryOptions,
    ObservationOptions,
    ReflectionOptions,
    RetrievalOptions,
    Scope,
)
from obsmem.options.model_specs import (
    DEFAULT_MODEL,
    OBSERVER_MODEL_SETTINGS,
    REFLECTOR_MODEL_SETTINGS,
    compression_start_level,
    resolve_model_spec,
)
from obsmem.options.resolve import resolve_options
from obsmem.options.resolved import (
    AttachmentFilter,
    ContinuationHints,
    ResolvedObservation,
    ResolvedOptions,
    ResolvedReflection,
    ResolvedRetrieval,
)

__all__ = [
    "DEFAULT_MODEL",
    "OBSERVER_MODEL_SETTINGS",
    "REFLECTOR_MODEL_SETTINGS",
    "AttachmentFilter",
    "ContinuationHints",
    "ContinuationHintsOptions",
    "IdleSetting",
    "ObservationOptions",
    "ObservationalMemoryOptions",
    "ReflectionOptions",
    "ResolvedObservation",
    "ResolvedOptions",
    "ResolvedReflection",
    "ResolvedRetrieval",
    "RetrievalOptions",
    "Scope",
    "compression_start_level",
    "parse_idle",
    "resolve_model_spec",
    "resolve_options",
]
