"""Observational-memory options: what users write, how it resolves, and the resolved result.

``resolve_options(True | dict | ObservationalMemoryOptions | None)`` applies every default and
rule and returns a frozen :class:`ResolvedOptions` with absolute token numbers (or ``None`` when
memory is off). Bad values raise :class:`obsmem.errors.ConfigError` naming the dotted option.

Names load on first use: the planner and the engine read only :mod:`obsmem.options.resolved`,
so deciding from options loads neither pydantic (the input models) nor the model tables (the
resolver).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from obsmem._lazy import lazy_names

if TYPE_CHECKING:
    from obsmem.options.durations import IdleSetting, parse_idle
    from obsmem.options.inputs import (
        ContinuationHintsOptions,
        ObservationalMemoryOptions,
        ObservationOptions,
        ReflectionOptions,
        RetrievalOptions,
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
        FailurePolicy,
        ResolvedObservation,
        ResolvedOptions,
        ResolvedReflection,
        ResolvedRetrieval,
        Scope,
    )

_LAZY = {
    "IdleSetting": "durations",
    "parse_idle": "durations",
    "ContinuationHintsOptions": "inputs",
    "ObservationalMemoryOptions": "inputs",
    "ObservationOptions": "inputs",
    "ReflectionOptions": "inputs",
    "RetrievalOptions": "inputs",
    "DEFAULT_MODEL": "model_specs",
    "OBSERVER_MODEL_SETTINGS": "model_specs",
    "REFLECTOR_MODEL_SETTINGS": "model_specs",
    "compression_start_level": "model_specs",
    "resolve_model_spec": "model_specs",
    "resolve_options": "resolve",
    "AttachmentFilter": "resolved",
    "ContinuationHints": "resolved",
    "FailurePolicy": "resolved",
    "ResolvedObservation": "resolved",
    "ResolvedOptions": "resolved",
    "ResolvedReflection": "resolved",
    "ResolvedRetrieval": "resolved",
    "Scope": "resolved",
}

__getattr__ = lazy_names(__name__, _LAZY)

__all__ = [
    "DEFAULT_MODEL",
    "OBSERVER_MODEL_SETTINGS",
    "REFLECTOR_MODEL_SETTINGS",
    "AttachmentFilter",
    "ContinuationHints",
    "ContinuationHintsOptions",
    "FailurePolicy",
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
