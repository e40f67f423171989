"""From what the user wrote to :class:`ResolvedOptions`: defaults, absolute numbers, every rule.

Each rule raises :class:`~obsmem.errors.ConfigError` with the dotted snake_case option, the value
given and the rule in words, including what to do instead.
"""

from __future__ import annotations

import math
import typing
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, cast

from pydantic import BaseModel, ValidationError

from obsmem.errors import ConfigError
from obsmem.models.specs import AUTO
from obsmem.options.checks import (
    attachment_filter,
    continuation_hints,
    cycle_detail,
    cycle_retention,
    extractors,
    is_number,
    positive_tokens,
    previous_observer_tokens,
    retrieval,
)
from obsmem.options.durations import IdleSetting, parse_idle
from obsmem.options.inputs import (
    ObservationalMemoryOptions,
    ObservationOptions,
    ReflectionOptions,
    config_error_from_validation,
)
from obsmem.options.model_specs import (
    OBSERVER_MODEL_SETTINGS,
    REFLECTOR_MODEL_SETTINGS,
    model_or_none,
    resolve_model_settings,
)
from obsmem.options.resolved import (
    ResolvedObservation,
    ResolvedOptions,
    ResolvedReflection,
    round_half_up,
)

if TYPE_CHECKING:
    from obsmem.models import ModelSpec

__all__ = ["resolve_options"]

DEFAULT_BLOCK_AFTER = 1.2
_MIN_ABSOLUTE_KEEP = 1_000
_MIN_ABSOLUTE_BLOCK = 100


def resolve_options(
    value: bool | Mapping[str, Any] | ObservationalMemoryOptions | ResolvedOptions | None,
) -> ResolvedOptions | None:
    """Resolve ``observational_memory=`` to a frozen config, or ``None`` when memory is off.

    ``True`` means every default; ``False``/``None`` and ``{"enabled": False}`` mean off. A dict
    may use snake_case or Mastra's camelCase names. Raises :class:`ConfigError` on any bad value.
    """
    return _resolve(value)


def _resolve(value: object) -> ResolvedOptions | None:
    if value is None or value is False:
        return None
    if isinstance(value, ResolvedOptions):
        return value
    if value is True:
        options = ObservationalMemoryOptions()
    elif isinstance(value, ObservationalMemoryOptions):
        if not value.enabled:
            return None
        options = _validate(_as_input(value))
    elif isinstance(value, Mapping):
        raw = cast("Mapping[str, Any]", value)
        enabled = raw.get("enabled", True)
        if not isinstance(enabled, bool):
            raise ConfigError("enabled", enabled, "must be True or False")
        if not enabled:
            return None
        options = _validate(raw)
    else:
        raise ConfigError(
            "observational_memory",
            value,
            "must be True, False, a dict of options or an ObservationalMemoryOptions",
        )
    return _Resolver(options).resolve()


def _validate(raw: Mapping[str, Any]) -> ObservationalMemoryOptions:
    _no_option_twice(raw, ObservationalMemoryOptions, "")
    try:
        return ObservationalMemoryOptions.model_validate(dict(raw))
    except ValidationError as exc:
        raise config_error_from_validation(exc, ObservationalMemoryOptions) from None


def _as_input(options: BaseModel) -> dict[str, Any]:
    """The fields a typed object was given, as a dict to re-validate (objects left as they are)."""
    given: dict[str, Any] = {}
    for name in type(options).model_fields:
        value = getattr(options, name)
        if isinstance(value, BaseModel):
            given[name] = _as_input(value)  # nested objects may have been changed in place
        elif name in options.model_fields_set:
            given[name] = value
    return given


class _Resolver:
    """One resolution pass; the order of the checks is the order a user would fix them in."""

    def __init__(self, options: ObservationalMemoryOptions) -> None:
        self.top = options
        self.obs: ObservationOptions = options.observation
        self.ref: ReflectionOptions = options.reflection

    def resolve(self) -> ResolvedOptions:
        observer_model, reflector_model = self._models()
        message_tokens = positive_tokens("observation.message_tokens", self.obs.message_tokens)
        observation_tokens = positive_tokens(
            "reflection.observation_tokens", self.ref.observation_tokens
        )
        async_on = self._async_buffering()
        if self.top.share_token_budget and async_on:
            raise ConfigError(
                "share_token_budget",
                True,
                "a shared token budget needs background buffering off: also set "
                "observation.buffer_tokens=False (or drop share_token_budget)",
            )
        buffer_tokens = self._buffer_tokens(message_tokens) if async_on else None
        activation, kind, floor = (
            self._observation_activation(message_tokens) if async_on else (None, None, None)
        )
        return ResolvedOptions(
            scope=self.top.scope,
            share_token_budget=self.top.share_token_budget,
            async_buffering=async_on,
            temporal_markers=self.top.temporal_markers,
            retrieval=retrieval(self.top.retrieval),
            observation=ResolvedObservation(
                **self._role("observation", self.obs, observer_model, OBSERVER_MODEL_SETTINGS),
                message_tokens=message_tokens,
                buffer_tokens=buffer_tokens,
                buffer_activation=activation,
                buffer_activation_kind=kind,
                retention_floor=floor,
                block_after=self._block_after(
                    "observation", self.obs, message_tokens, "message_tokens", async_on
                ),
                buffer_on_idle=self.obs.buffer_on_idle,
                previous_observer_tokens=previous_observer_tokens(
                    self.obs.previous_observer_tokens
                ),
                max_tokens_per_batch=positive_tokens(
                    "observation.max_tokens_per_batch", self.obs.max_tokens_per_batch
                ),
                max_part_tokens=positive_tokens(
                    "observation.max_part_tokens", self.obs.max_part_tokens
                ),
                thread_title=self.obs.thread_title,
                observe_attachments=attachment_filter(self.obs.observe_attachments),
                manage_working_memory=self.obs.manage_working_memory,
                activate_after_idle=self._observation_idle(),
            ),
            reflection=self._reflection(reflector_model, observation_tokens, async_on),
            failure_policy=self.top.failure_policy,
            cycle_retention=cycle_retention(self.top.cycle_retention),
            background=self.top.background,
            cycle_detail=cycle_detail(self.top.cycle_detail),
            auto_model=AUTO in (observer_model, reflector_model),
        )

    def _role(
        self,
        role: Literal["observation", "reflection"],
        options: ObservationOptions | ReflectionOptions,
        model: ModelSpec,
        default_settings: Mapping[str, Any],
    ) -> dict[str, Any]:
        """The settings the Observer and the Reflector resolve alike (``_ResolvedRole``'s)."""
        on_provider_change = options.activate_on_provider_change
        return {
            "model": model,
            "model_settings": resolve_model_settings(
                f"{role}.model_settings", default_settings, options.model_settings
            ),
            "instruction": options.instruction,
            "continuation_hints": continuation_hints(options.continuation_hints),
            "extract": extractors(f"{role}.extract", options.extract),
            # The Reflector's is its own; the Observer's inherits the top level's unless set.
            "activate_on_provider_change": self.top.activate_on_provider_change
            if on_provider_change is None
            else on_provider_change,
        }

    # -- models ------------------------------------------------------------------------------

    def _models(self) -> tuple[ModelSpec, ModelSpec]:
        top = model_or_none("model", self.top.model)
        obs = model_or_none("observation.model", self.obs.model)
        ref = model_or_none("reflection.model", self.ref.model)
        for role, value in (("observation", obs), ("reflection", ref)):
            if top is not None and value is not None:
                raise ConfigError(
                    f"{role}.model",
                    value,
                    f"model is also set at the top level; set one model for both roles "
                    f"(model=...) or one per role ({role}.model=...), not both",
                )
        observer = top if top is not None else obs if obs is not None else ref
        reflector = top if top is not None else ref if ref is not None else obs
        default = AUTO
        return (
            observer if observer is not None else default,
            reflector if reflector is not None else default,
        )

    # -- background buffering ----------------------------------------------------------------

    def _async_buffering(self) -> bool:
        if self.obs.buffer_tokens is False:
            return False
        if self.top.scope != "resource":
            return True
        explicit = [
            (option, value)
            for option, value, chosen in (
                (
                    "observation.buffer_tokens",
                    self.obs.buffer_tokens,
                    "buffer_tokens" in self.obs.model_fields_set,
                ),
                (
                    "observation.buffer_activation",
                    self.obs.buffer_activation,
                    "buffer_activation" in self.obs.model_fields_set,
                ),
                (
                    "reflection.buffer_activation",
                    self.ref.buffer_activation,
                    "buffer_activation" in self.ref.model_fields_set,
                ),
            )
            if chosen
        ]
        if explicit:
            option, value = explicit[0]
            raise ConfigError(
                option,
                value,
                'background buffering is not supported with scope="resource"; remove this '
                'option (resource scope observes synchronously) or use scope="thread"',
            )
        return False

    def _buffer_tokens(self, message_tokens: int) -> int:
        option, value = "observation.buffer_tokens", self.obs.buffer_tokens
        if not is_number(value) or not math.isfinite(value) or value <= 0:
            raise ConfigError(
                option,
                value,
                "must be > 0: a ratio of message_tokens in (0, 1) or an absolute number of "
                "tokens; use False to turn background buffering off",
            )
        tokens = round_half_up(message_tokens * value) if value < 1 else round_half_up(value)
        if tokens <= 0:
            raise ConfigError(option, value, "resolves to 0 tokens; use a larger value")
        if tokens >= message_tokens:
            raise ConfigError(
                option,
                value,
                f"must resolve to less than observation.message_tokens ({message_tokens}), "
                f"got {tokens}; use a ratio such as 0.2 or a smaller number of tokens",
            )
        return tokens

    def _observation_activation(
        self, message_tokens: int
    ) -> tuple[float, Literal["ratio", "absolute"], int]:
        option, value = "observation.buffer_activation", self.obs.buffer_activation
        if not is_number(value) or not math.isfinite(value) or value <= 0:
            raise ConfigError(
                option, value, "must be a ratio in (0, 1] or a number of tokens to keep (>= 1000)"
            )
        if value <= 1:
            return value, "ratio", round_half_up(message_tokens * (1 - value))
        if value < _MIN_ABSOLUTE_KEEP:
            raise ConfigError(
                option,
                value,
                "values between 1 and 1000 are not allowed: give a ratio in (0, 1] (share of "
                "message_tokens removed) or an absolute number of tokens to keep (>= 1000)",
            )
        if value >= message_tokens:
            raise ConfigError(
                option,
                value,
                f"tokens to keep must be less than observation.message_tokens ({message_tokens})",
            )
        return value, "absolute", round_half_up(value)

    def _block_after(
        self,
        role: str,
        options: ObservationOptions | ReflectionOptions,
        threshold: int,
        threshold_name: str,
        async_on: bool,
    ) -> int | None:
        option, value = f"{role}.block_after", options.block_after
        if not async_on:
            if value is not None:
                raise ConfigError(
                    option,
                    value,
                    f"needs background buffering, which is off ({self._why_async_off()}); "
                    f"remove {role}.block_after or turn buffering on",
                )
            return None
        if value is None:
            value = DEFAULT_BLOCK_AFTER
        if not is_number(value) or not math.isfinite(value) or value < 1:
            raise ConfigError(
                option,
                value,
                f"must be a multiplier of {role}.{threshold_name} in [1, 100) or an absolute "
                f"number of tokens >= {role}.{threshold_name} ({threshold})",
            )
        if value < _MIN_ABSOLUTE_BLOCK:
            return round_half_up(threshold * value)
        if value < threshold:
            raise ConfigError(
                option,
                value,
                f"must be >= {role}.{threshold_name} ({threshold}); use a multiplier such as "
                f"1.2 or a larger number of tokens",
            )
        return round_half_up(value)

    def _why_async_off(self) -> str:
        if self.obs.buffer_tokens is False:
            return "observation.buffer_tokens=False"
        return 'scope="resource"'

    # -- reflection --------------------------------------------------------------------------

    def _reflection(
        self, model: ModelSpec, observation_tokens: int, async_on: bool
    ) -> ResolvedReflection:
        activation: float | None = None
        start: int | None = None
        if async_on:
            value = self.ref.buffer_activation
            if not is_number(value) or not math.isfinite(value) or not 0 < value <= 1:
                raise ConfigError(
                    "reflection.buffer_activation",
                    value,
                    "must be a ratio in (0, 1]: the share of reflection.observation_tokens at "
                    "which a background reflection starts (e.g. 0.5)",
                )
            activation, start = value, round_half_up(observation_tokens * value)
        return ResolvedReflection(
            **self._role("reflection", self.ref, model, REFLECTOR_MODEL_SETTINGS),
            observation_tokens=observation_tokens,
            buffer_activation=activation,
            buffer_start_tokens=start,
            block_after=self._block_after(
                "reflection", self.ref, observation_tokens, "observation_tokens", async_on
            ),
            activate_after_idle=parse_idle(
                "reflection.activate_after_idle", self.ref.activate_after_idle
            ),
        )

    def _observation_idle(self) -> IdleSetting:
        if "activate_after_idle" in self.obs.model_fields_set:
            return parse_idle("observation.activate_after_idle", self.obs.activate_after_idle)
        return parse_idle("activate_after_idle", self.top.activate_after_idle)


def _no_option_twice(raw: Mapping[str, Any], model: type[BaseModel], prefix: str) -> None:
    """Refuse an option given under both its names (``messageTokens`` and ``message_tokens``),
    at any depth: which one would win is not obvious."""
    for name, info in model.model_fields.items():
        alias = info.alias
        if alias and alias != name and name in raw and alias in raw:
            raise ConfigError(
                f"{prefix}{name}",
                {alias: raw[alias], name: raw[name]},
                f"given twice, as {alias!r} and {name!r}: keep one",
            )
        value = raw.get(name, raw.get(alias) if alias else None)
        nested = next(
            (
                t
                for t in typing.get_args(info.annotation) or (info.annotation,)
                if isinstance(t, type) and issubclass(t, BaseModel)
            ),
            None,
        )
        if nested is not None and isinstance(value, Mapping):
            _no_option_twice(cast("Mapping[str, Any]", value), nested, f"{prefix}{name}.")
