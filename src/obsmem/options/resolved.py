"""The resolved configuration: frozen, every default applied, every number absolute.

The engine and the planner read these objects and nothing else. Token values are whole numbers;
``None`` means "off" (for example every background-buffering value when ``async_buffering`` is
``False``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

from obsmem.options.durations import IdleSetting
from obsmem.records import Scope

if TYPE_CHECKING:
    from obsmem.extractors import Extractor
    from obsmem.models import ModelSpec

__all__ = [
    "AttachmentFilter",
    "Background",
    "ContinuationHints",
    "FailurePolicy",
    "ResolvedObservation",
    "ResolvedOptions",
    "ResolvedReflection",
    "ResolvedRetrieval",
    "Scope",
]

FailurePolicy: TypeAlias = Literal["warn", "raise"]
"""What a turn does while its log's memory work is failing: warn and go on, or raise."""

Background: TypeAlias = Literal["process", "queue"]
"""Where background memory work runs: the turn's process, or durable jobs for ``obsmem worker``."""

AttachmentFilter: TypeAlias = bool | Literal["auto"] | tuple[str, ...]
"""``True`` all, ``False`` none, ``"auto"`` by model capability, or lower-case MIME patterns."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ContinuationHints:
    """Which built-in continuation extractors run for a role."""

    current_task: bool = True
    suggested_response: bool = True

    @property
    def any(self) -> bool:
        return self.current_task or self.suggested_response


@dataclass(frozen=True, slots=True, kw_only=True)
class _ResolvedRole:
    """What the Observer's and the Reflector's settings have alike."""

    model: ModelSpec
    model_settings: Mapping[str, Any]
    """pydantic-ai ``ModelSettings`` keys (read-only mapping)."""
    instruction: str | None
    continuation_hints: ContinuationHints
    extract: tuple[Extractor, ...]
    activate_on_provider_change: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class ResolvedObservation(_ResolvedRole):
    """The Observer's settings, with absolute token numbers."""

    message_tokens: int
    """Unobserved-message tokens that make observation due (the threshold)."""
    buffer_tokens: int | None
    """Background buffering interval in tokens; ``None`` when async buffering is off."""
    buffer_activation: float | None
    """The value as given (ratio or tokens to keep); ``None`` when async buffering is off."""
    buffer_activation_kind: Literal["ratio", "absolute"] | None
    """``"ratio"``: share of the threshold removed; ``"absolute"``: tokens to keep."""
    retention_floor: int | None
    """Message tokens activation keeps (6,000 at defaults); ``None`` when async is off."""
    block_after: int | None
    """Past this many message tokens activation removes the maximum; ``None`` when async is off."""
    buffer_on_idle: bool
    previous_observer_tokens: int | None
    """Budget of existing log shown to the Observer; ``0`` none, ``None`` no truncation."""
    max_tokens_per_batch: int
    max_part_tokens: int
    """The most tokens the Observer sees of any single part (text, tool arguments, tool result,
    reasoning): longer ones show their head and tail, and where recall finds the rest."""
    thread_title: bool
    observe_attachments: AttachmentFilter
    manage_working_memory: bool
    activate_after_idle: IdleSetting
    """Milliseconds, ``"auto"`` or ``None`` (inherits the top-level value unless set here)."""

    def retention_floor_for(self, message_tokens: int) -> int | None:
        """The retention floor for another threshold (a per-record override), same rules."""
        if self.buffer_activation is None:
            return None
        if self.buffer_activation_kind == "absolute":
            return round_half_up(self.buffer_activation)
        return round_half_up(message_tokens * (1 - self.buffer_activation))


@dataclass(frozen=True, slots=True, kw_only=True)
class ResolvedReflection(_ResolvedRole):
    """The Reflector's settings, with absolute token numbers."""

    observation_tokens: int
    """Observation-log tokens that make reflection due (the threshold)."""
    buffer_activation: float | None
    """Ratio of the threshold at which a background reflection starts; ``None`` when async off."""
    buffer_start_tokens: int | None
    """``observation_tokens * buffer_activation`` (20,000 at defaults); ``None`` when async off."""
    block_after: int | None
    """Past this many log tokens reflection runs synchronously (48,000 at defaults)."""
    activate_after_idle: IdleSetting
    """Not inherited from the top level: only a value set under ``reflection`` counts."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ResolvedRetrieval:
    """Observation groups and the ``recall`` tool."""

    vector: bool = False
    scope: Scope = "resource"
    instructions: str | None = None
    embedder: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ResolvedOptions:
    """The whole observational-memory configuration, ready for the engine."""

    scope: Scope
    share_token_budget: bool
    async_buffering: bool
    """Background buffering of observations and reflections (off: both run synchronously)."""
    temporal_markers: bool
    retrieval: ResolvedRetrieval | None
    """``None`` when retrieval is off."""
    observation: ResolvedObservation
    reflection: ResolvedReflection
    failure_policy: FailurePolicy = "warn"
    """``"warn"``: a failure is a WARNING on the ``obsmem`` logger (once per cause, and when it
    heals) and the turn goes on; ``"raise"``: a turn whose memory cannot work raises."""
    cycle_retention: int = 1000
    """Cycle ledger rows kept per log; 0 records none."""
    background: Background = "process"
    """``"queue"``: buffering, background reflection and catch-up are durable jobs in
    PostgreSQL that ``obsmem worker`` runs; the turn keeps activation and synchronous work."""
    cycle_detail: int = 20
    """Cycles per log (the newest) whose model calls' input and answer are kept; 0 keeps none."""
    auto_model: bool = False
    """The Observer or Reflector model is ``"auto"``: the engine picks it at the first turn."""

    @property
    def observer_model(self) -> ModelSpec:
        return self.observation.model

    @property
    def reflector_model(self) -> ModelSpec:
        return self.reflection.model

    @property
    def max_message_tokens(self) -> int:
        """The most message tokens may reach before observing (larger with a shared budget)."""
        if self.share_token_budget:
            return self.observation.message_tokens + self.reflection.observation_tokens
        return self.observation.message_tokens

    def snapshot(self) -> dict[str, Any]:
        """A JSON-ready summary (models by name, extractors by name) for records and status."""
        obs, ref = self.observation, self.reflection
        return {
            "scope": self.scope,
            "failure_policy": self.failure_policy,
            "cycle_retention": self.cycle_retention,
            "background": self.background,
            "cycle_detail": self.cycle_detail,
            "share_token_budget": self.share_token_budget,
            "async_buffering": self.async_buffering,
            "temporal_markers": self.temporal_markers,
            "retrieval": None
            if self.retrieval is None
            else {
                "vector": self.retrieval.vector,
                "scope": self.retrieval.scope,
                "instructions": self.retrieval.instructions,
                "embedder": self.retrieval.embedder,
            },
            "observation": {
                "model": model_label(obs.model),
                "message_tokens": obs.message_tokens,
                "model_settings": _jsonable(obs.model_settings),
                "buffer_tokens": obs.buffer_tokens,
                "buffer_activation": obs.buffer_activation,
                "retention_floor": obs.retention_floor,
                "block_after": obs.block_after,
                "buffer_on_idle": obs.buffer_on_idle,
                "previous_observer_tokens": obs.previous_observer_tokens,
                "max_tokens_per_batch": obs.max_tokens_per_batch,
                "max_part_tokens": obs.max_part_tokens,
                "thread_title": obs.thread_title,
                "observe_attachments": list(obs.observe_attachments)
                if isinstance(obs.observe_attachments, tuple)
                else obs.observe_attachments,
                "extract": [_extractor_label(e) for e in obs.extract],
                "manage_working_memory": obs.manage_working_memory,
                "activate_after_idle": obs.activate_after_idle,
                "activate_on_provider_change": obs.activate_on_provider_change,
            },
            "reflection": {
                "model": model_label(ref.model),
                "observation_tokens": ref.observation_tokens,
                "model_settings": _jsonable(ref.model_settings),
                "buffer_activation": ref.buffer_activation,
                "buffer_start_tokens": ref.buffer_start_tokens,
                "block_after": ref.block_after,
                "extract": [_extractor_label(e) for e in ref.extract],
                "activate_after_idle": ref.activate_after_idle,
                "activate_on_provider_change": ref.activate_on_provider_change,
            },
        }


def round_half_up(value: float) -> int:
    """Round .5 up, as JavaScript's ``Math.round`` does (Python's ``round`` rounds to even)."""
    whole = int(value)
    return whole + 1 if value - whole >= 0.5 else whole


def model_label(model: object) -> str:
    """A readable name for a model spec: the string, a pydantic-ai model's name, or its repr."""
    if isinstance(model, str):
        return model
    name = getattr(model, "model_name", None)
    if isinstance(name, str):
        system = getattr(model, "system", None)
        return f"{system}:{name}" if isinstance(system, str) and system else name
    return repr(model)


def _extractor_label(extractor: Extractor) -> str:
    return extractor.slug


def _jsonable(settings: Mapping[str, Any]) -> dict[str, Any]:
    return {
        key: value
        for key, value in settings.items()
        if value is None or isinstance(value, str | int | float | bool | list | dict)
    }
