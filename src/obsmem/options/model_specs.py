"""Model specs and model settings for the Observer and Reflector, checked loosely."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, cast

from obsmem.errors import ConfigError
from obsmem.models.specs import DEFAULT_MODEL, is_model
from obsmem.options.checks import is_number

if TYPE_CHECKING:
    from obsmem.models import ModelSpec

__all__ = [
    "DEFAULT_MODEL",
    "OBSERVER_MODEL_SETTINGS",
    "REFLECTOR_MODEL_SETTINGS",
    "compression_start_level",
    "model_or_none",
    "resolve_model_settings",
    "resolve_model_spec",
]

OBSERVER_MODEL_SETTINGS: Mapping[str, Any] = MappingProxyType({"temperature": 0.3})
REFLECTOR_MODEL_SETTINGS: Mapping[str, Any] = MappingProxyType({"temperature": 0.0})

# Mastra / AI-SDK setting names -> pydantic-ai ModelSettings keys.
_SETTING_NAMES = {
    "maxOutputTokens": "max_tokens",
    "maxTokens": "max_tokens",
    "topP": "top_p",
    "presencePenalty": "presence_penalty",
    "frequencyPenalty": "frequency_penalty",
    "stopSequences": "stop_sequences",
    "logitBias": "logit_bias",
    "parallelToolCalls": "parallel_tool_calls",
    "extraHeaders": "extra_headers",
    "extraBody": "extra_body",
}


def resolve_model_spec(option: str, value: object) -> ModelSpec:
    """Check a model spec loosely: a non-empty name, a pydantic-ai ``Model``, or a router.

    ``"default"`` (and ``None``) mean the default model. A "router" is a ``ModelByInputTokens``
    or any object with a ``resolve(input_tokens)`` method.
    """
    resolved = model_or_none(option, value)
    return DEFAULT_MODEL if resolved is None else resolved


def model_or_none(option: str, value: object) -> ModelSpec | None:
    if value is None:
        return None
    if isinstance(value, str):
        name = value.strip()
        if not name:
            raise ConfigError(
                option, value, 'must not be empty: give a model name such as "openai/gpt-6.1-terra"'
            )
        return None if name == "default" else name
    if is_model(value):
        return value
    if callable(getattr(value, "resolve", None)):
        return cast("ModelSpec", value)
    raise ConfigError(
        option,
        value,
        'must be a model name such as "openai/gpt-6.1-terra" or "openai:gpt-6.1-terra", a '
        "pydantic-ai Model instance, or a ModelByInputTokens",
    )


def resolve_model_settings(
    option: str, defaults: Mapping[str, Any], given: Mapping[str, Any] | None
) -> Mapping[str, Any]:
    merged = dict(defaults)
    for key, value in (given or {}).items():
        name = _SETTING_NAMES.get(key, key)
        if value is None:
            merged.pop(name, None)
            continue
        if name in ("temperature", "top_p") and (not is_number(value) or value < 0):
            raise ConfigError(f"{option}.{name}", value, "must be a number >= 0")
        if name == "max_tokens" and (
            not isinstance(value, int) or isinstance(value, bool) or value <= 0
        ):
            raise ConfigError(f"{option}.{name}", value, "must be a positive whole number")
        merged[name] = value
    return MappingProxyType(merged)


def compression_start_level(model: object, *, input_tokens: int | None = None) -> int:
    """The Reflector's first compression level: 2 for gemini-2.5-flash models, else 1.

    A router (``ModelByInputTokens``) is resolved with ``input_tokens`` when given; any failure
    to tell the model falls back to 1.
    """
    try:
        if not isinstance(model, str) and input_tokens is not None:
            resolve = getattr(model, "resolve", None)
            if callable(resolve):
                model = resolve(input_tokens)
        if model is None or model == "default":
            model = DEFAULT_MODEL
        name = model if isinstance(model, str) else getattr(model, "model_name", None)
        return 2 if isinstance(name, str) and "gemini-2.5-flash" in name else 1
    except Exception:
        return 1
