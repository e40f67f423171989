"""The option objects users write: pydantic models that accept snake_case and Mastra camelCase.

These objects only check *types* and *names*. The value rules (ranges, combinations, defaults that
depend on other options) live in :mod:`obsmem.options.resolve`, which turns them into a frozen
:class:`~obsmem.options.resolved.ResolvedOptions`. A pydantic ``ValidationError`` never leaves this
package: it becomes a :class:`~obsmem.errors.ConfigError` naming the dotted snake_case option.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel
from pydantic_core import ErrorDetails

from obsmem.errors import ConfigError
from obsmem.options.resolved import Background, FailurePolicy, Scope

__all__ = [
    "ContinuationHintsOptions",
    "ObservationOptions",
    "ObservationalMemoryOptions",
    "ReflectionOptions",
    "RetrievalOptions",
    "Scope",
    "config_error_from_validation",
]

if TYPE_CHECKING:
    from obsmem.models import ModelSpec

    ModelField: TypeAlias = ModelSpec | None
    Duration: TypeAlias = float | str | Literal[False] | None
else:
    # Model specs and durations are checked by the resolver, with messages of our own.
    ModelField = Any
    Duration = Any

_MODEL_CONFIG = ConfigDict(
    extra="forbid",
    strict=True,
    alias_generator=to_camel,
    validate_by_name=True,
    validate_by_alias=True,
)


class _Options(BaseModel):
    model_config = _MODEL_CONFIG
    _option_prefix: ClassVar[str] = ""

    def __init__(self, /, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise config_error_from_validation(
                exc, type(self), prefix=self._option_prefix
            ) from None

    # Tell pydantic this __init__ only wraps its own (as RootModel's does), so nested dicts are
    # validated directly and their errors keep their full location.
    __init__.__pydantic_base_init__ = True  # pyright: ignore[reportFunctionMemberAccess]


class ContinuationHintsOptions(_Options):
    """Which built-in continuation extractors run (``current_task``, ``suggested_response``)."""

    _option_prefix: ClassVar[str] = "continuation_hints"

    current_task: bool = True
    suggested_response: bool = True


class RetrievalOptions(_Options):
    """Observation groups with message ranges, and the ``recall`` tool."""

    _option_prefix: ClassVar[str] = "retrieval"

    vector: bool = False
    """Enable ``mode="search"``: semantic search over observation groups (needs an embedder)."""
    scope: Scope = "resource"
    """Which messages ``recall`` may reach: the resource's threads, or only the current thread."""
    instructions: str | None = None
    """Appended after the built-in recall guidance (never replaces it)."""
    embedder: str | None = None
    """Embedding model for ``vector=True``, e.g. ``"openai/text-embedding-3-small"``."""


class _RoleOptions(_Options):
    """What the Observer's and the Reflector's options have alike."""

    model: ModelField = None
    model_settings: dict[str, Any] | None = None
    block_after: float | None = None
    instruction: str | None = None
    continuation_hints: bool | ContinuationHintsOptions = True
    extract: Sequence[Any] = ()
    activate_after_idle: Duration = None


class ObservationOptions(_RoleOptions):
    """Options of the Observer (``observation=``). Unset values take the documented defaults."""

    _option_prefix: ClassVar[str] = "observation"

    message_tokens: int | float = 30_000
    # left_to_right: try the number first, or ``Literal[False]`` would also take a 0.
    buffer_tokens: float | Literal[False] = Field(default=0.2, union_mode="left_to_right")
    buffer_activation: float = 0.8
    buffer_on_idle: bool = False
    previous_observer_tokens: float | Literal[False] = Field(
        default=2_000, union_mode="left_to_right"
    )
    max_tokens_per_batch: int | float = 10_000
    max_part_tokens: int | float = 5_000
    thread_title: bool = False
    observe_attachments: bool | Literal["auto"] | Sequence[str] = ("image/*", "application/pdf")
    manage_working_memory: bool = False
    activate_on_provider_change: bool | None = None


class ReflectionOptions(_RoleOptions):
    """Options of the Reflector (``reflection=``). Unset values take the documented defaults."""

    _option_prefix: ClassVar[str] = "reflection"

    observation_tokens: int | float = 40_000
    buffer_activation: float = 0.5
    activate_on_provider_change: bool = False


class ObservationalMemoryOptions(_Options):
    """Everything ``Memory(observational_memory=...)`` accepts, as a typed object."""

    enabled: bool = True
    model: ModelField = None
    failure_policy: FailurePolicy = "warn"
    cycle_retention: int = 1000
    """Cycle ledger rows kept per log (``Memory.cycles``); 0 records none."""
    cycle_detail: bool | int = True
    """Keep what each cycle's model calls were shown and answered (the inspector's cycle page):
    True for the newest 20 cycles per log, a number for that many, False (or 0) for none. The
    detail holds conversation text as sent; it is erased with the thread, and older detail is
    dropped, so a long thread does not store more detail than messages."""
    scope: Scope = "thread"
    background: Background = "process"
    """Where background memory work runs: ``"process"`` (asyncio tasks of the process that
    took the turn) or ``"queue"`` (durable jobs in PostgreSQL, run by ``obsmem worker``)."""
    share_token_budget: bool = False
    activate_after_idle: Duration = None
    activate_on_provider_change: bool = False
    temporal_markers: bool = False
    retrieval: bool | RetrievalOptions = False
    observation: ObservationOptions = Field(default_factory=ObservationOptions)
    reflection: ReflectionOptions = Field(default_factory=ReflectionOptions)


# --- pydantic errors -> ConfigError -------------------------------------------------------------

_NO_HOOKS = "obsmem has no hooks option; subscribe to events with memory.subscribe(callback)"
_MASTRA_ONLY: dict[str, str] = {
    "providerOptions": "put provider settings in model_settings (pydantic-ai ModelSettings keys, "
    "e.g. google_thinking_config)",
    "provider_options": "put provider settings in model_settings (pydantic-ai ModelSettings keys, "
    "e.g. google_thinking_config)",
    "hooks": _NO_HOOKS,
    "hookExecution": _NO_HOOKS,
    "obscureThreadIds": "obsmem does not support this Mastra engine option; remove it",
    "onIndexObservations": "obsmem indexes observation groups itself when retrieval.vector is on",
    "experimental_subconscious": "obsmem does not support this experimental Mastra option; "
    "remove it",
}

_TOKENS = "must be a positive whole number of tokens"
_EXPECTED: dict[str, str] = {
    "enabled": "must be True or False",
    "model": 'must be a model name such as "openai/gpt-6.1-terra", a pydantic-ai Model or a '
    "ModelByInputTokens",
    "scope": 'must be "thread" or "resource"',
    "background": 'must be "process" (background work in the process that took the turn) or '
    '"queue" (durable jobs in PostgreSQL, run by `obsmem worker`)',
    "failure_policy": 'must be "warn" (log a WARNING and go on) or "raise" (the turn raises)',
    "cycle_retention": "must be a whole number of cycles to keep per log (>= 0; 0 records none)",
    "cycle_detail": "must be True (the newest 20 cycles per log), False (none) or a whole number "
    "of cycles per log (>= 0)",
    "message_tokens": _TOKENS,
    "observation_tokens": _TOKENS,
    "max_tokens_per_batch": _TOKENS,
    "max_part_tokens": _TOKENS,
    "model_settings": "must be a dict of model settings such as {'temperature': 0.3}",
    "observation.buffer_tokens": "must be a ratio of message_tokens in (0, 1), an absolute "
    "number of tokens (>= 1), or False to turn background buffering off",
    "observation.buffer_activation": "must be a ratio in (0, 1] or a number of tokens to keep "
    "(>= 1000)",
    "reflection.buffer_activation": "must be a ratio in (0, 1]",
    "block_after": "must be a multiplier of the threshold in [1, 100) or an absolute number of "
    "tokens (>= 100)",
    "previous_observer_tokens": "must be a number of tokens >= 0, or False for no truncation",
    "instruction": "must be a string",
    "instructions": "must be a string",
    "embedder": "must be an embedding model name such as 'openai/text-embedding-3-small'",
    "continuation_hints": "must be True, False or {'current_task': bool, 'suggested_response': "
    "bool}",
    "observe_attachments": 'must be True (all), False (none), "auto" or a list of MIME patterns '
    'such as ["image/*", "application/pdf"]',
    "extract": "must be a list of Extractor objects",
    "retrieval": "must be True, False or {'vector': bool, 'scope': 'thread' | 'resource', "
    "'instructions': str}",
    "observation": "must be a dict of observation options or an ObservationOptions",
    "reflection": "must be a dict of reflection options or a ReflectionOptions",
}
_BOOL = "must be True or False"


def config_error_from_validation(
    exc: ValidationError, model: type[BaseModel], *, prefix: str = ""
) -> ConfigError:
    """The :class:`ConfigError` for the first option a pydantic ``ValidationError`` complains of."""
    errors = exc.errors()
    located = [(_locate(error, model, prefix), error) for error in errors]
    first_option = located[0][0][0]
    group = [
        (where, error)
        for where, error in located
        if where[0] == first_option or where[0].startswith(first_option + ".")
    ]
    for (option, unknown_key, owner), error in group:
        if unknown_key is not None:
            return ConfigError(option, error.get("input"), _unknown_key_rule(unknown_key, owner))
    # In a union (``bool | RetrievalOptions``) a dict fails every member; the error from inside
    # the model member is the one that says what is wrong.
    (option, _, _), error = max(group, key=lambda item: item[0][0].count("."))
    leaf = option.rsplit(".", 1)[-1]
    rule = _EXPECTED.get(option) or _EXPECTED.get(leaf)
    if rule is None:
        only_bool = all(error["type"] == "bool_type" for _, error in group)
        rule = _BOOL if only_bool else error["msg"]
    return ConfigError(option, error.get("input"), rule)


def _locate(
    error: ErrorDetails, model: type[BaseModel], prefix: str
) -> tuple[str, str | None, type[BaseModel]]:
    """(dotted snake_case option, unknown key or None, the model class that owns the option)."""
    names: list[str] = [prefix] if prefix else []
    current: type[BaseModel] | None = model
    owner = model
    unknown: str | None = None
    for part in error["loc"]:
        if current is None or not isinstance(part, str):
            continue
        field = _field_named(current, part)
        if field is not None:
            names.append(field)
            owner = current
            current = _nested_model(current, field)
        elif part in _MODEL_NAMES:
            current = _MODEL_NAMES[part]
        elif error["type"] == "extra_forbidden":
            names.append(part)
            owner = current
            unknown = part
            break
    return ".".join(names) or "observational_memory", unknown, owner


def _field_named(model: type[BaseModel], key: str) -> str | None:
    for name, info in model.model_fields.items():
        if key in (name, info.alias):
            return name
    return None


def _nested_model(model: type[BaseModel], field: str) -> type[BaseModel] | None:
    return _NESTED.get((model.__name__, field))


def _unknown_key_rule(key: str, owner: type[BaseModel]) -> str:
    if key in _MASTRA_ONLY:
        return f"not an obsmem option: {_MASTRA_ONLY[key]}"
    names = {name: name for name in owner.model_fields}
    names.update({info.alias: name for name, info in owner.model_fields.items() if info.alias})
    match = difflib.get_close_matches(key, list(names), n=1, cutoff=0.6)
    if match:
        return f"unknown option; did you mean {names[match[0]]!r}?"
    valid = ", ".join(sorted(owner.model_fields))
    return f"unknown option; valid options here are: {valid}"


_MODEL_NAMES: dict[str, type[BaseModel]] = {
    cls.__name__: cls
    for cls in (
        ContinuationHintsOptions,
        RetrievalOptions,
        ObservationOptions,
        ReflectionOptions,
        ObservationalMemoryOptions,
    )
}
_NESTED: dict[tuple[str, str], type[BaseModel]] = {
    ("ObservationalMemoryOptions", "observation"): ObservationOptions,
    ("ObservationalMemoryOptions", "reflection"): ReflectionOptions,
    ("ObservationalMemoryOptions", "retrieval"): RetrievalOptions,
    ("ObservationOptions", "continuation_hints"): ContinuationHintsOptions,
    ("ReflectionOptions", "continuation_hints"): ContinuationHintsOptions,
}
