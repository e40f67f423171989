"""The model settings a memory-model call sends: the role's defaults for the model at hand, the
user's settings over them, and nothing the model rejects.

- Thinking: the Observer and Reflector do bounded work, so a thinking model is asked to think
  little: Gemini 2.5 gets a thinking budget (215 tokens for the Observer, 1,024 for the
  Reflector and extractors), Gemini 3 and later a thinking level (``minimal`` for the Observer,
  ``low`` for the Reflector and extractors, snapped by pydantic-ai to the levels the model
  takes), an OpenAI reasoning model a ``low`` effort for the Observer. Every call also has an
  output cap (``LLMRequest.max_output_tokens``), which a Gemini model's thinking counts against.
- Sampling parameters (``temperature``, ``top_p``...) are left out for a model that rejects
  them (OpenAI's reasoning models while they reason, Anthropic models whose profile forbids
  them), as pydantic-ai would, but without its warning on every call: obsmem chose them.

Whatever the user's ``model_settings`` name wins over these defaults.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from pydantic_ai.models import Model

__all__ = ["THINKING_BUDGETS", "THINKING_LEVELS", "call_settings"]

THINKING_BUDGETS: Mapping[str, int] = {"observer": 215, "reflector": 1_024, "extractor": 1_024}
"""Gemini 2.5 thinking budget per role, in tokens."""

THINKING_LEVELS: Mapping[str, str] = {"observer": "minimal", "reflector": "low", "extractor": "low"}
"""Gemini 3 and later: pydantic-ai's unified thinking level per role (it sends the nearest level
the model takes)."""

_THINKING_KEYS = ("thinking", "thinking_summary", "google_thinking_config")
"""Settings of the user's that already say how a Gemini model thinks."""

_OPENAI_EFFORT: Mapping[str, str] = {"observer": "low"}
"""Reasoning effort for an OpenAI reasoning model, per role (others keep the model's default)."""

_SAMPLING = ("temperature", "top_p", "top_k", "presence_penalty", "frequency_penalty")


def call_settings(
    role: Literal["observer", "reflector", "extractor"],
    model: Model,
    settings: Mapping[str, Any],
) -> dict[str, Any]:
    """What to send: the role's defaults for ``model`` under ``settings``, minus what ``model``
    rejects."""
    defaults = _defaults(role, model)
    if any(key in settings for key in _THINKING_KEYS):  # the user's say wins, whichever form
        defaults = {k: v for k, v in defaults.items() if k not in _THINKING_KEYS}
    out = {**defaults, **settings}
    return _without_rejected(model, out)


def _unwrapped(model: Model) -> Model:
    from pydantic_ai.models.wrapper import WrapperModel

    while isinstance(model, WrapperModel):
        model = model.wrapped
    return model


def _defaults(role: str, model: Model) -> dict[str, Any]:
    inner = _unwrapped(model)
    name = inner.model_name.lower()
    system = inner.system
    if system in ("google-gla", "google-vertex", "google") and name.startswith("gemini-"):
        if name.startswith("gemini-2.5"):
            return {"google_thinking_config": {"thinking_budget": THINKING_BUDGETS[role]}}
        if inner.profile.get("google_supports_thinking_level", False):  # Gemini 3 and later
            return {"thinking": THINKING_LEVELS[role], "thinking_summary": False}
    effort = _OPENAI_EFFORT.get(role)
    if system == "openai" and effort is not None and inner.profile.get("openai_supports_reasoning"):
        return {"openai_reasoning_effort": effort}
    return {}


def _without_rejected(model: Model, settings: dict[str, Any]) -> dict[str, Any]:
    profile: Mapping[str, Any] = _unwrapped(model).profile  # type: ignore[assignment]
    if not any(key in settings for key in _SAMPLING):
        return settings
    if profile.get("anthropic_disallows_sampling_settings"):
        return {k: v for k, v in settings.items() if k not in _SAMPLING}
    if profile.get("openai_supports_reasoning"):
        # The rule pydantic-ai applies (sampling goes while reasoning is on), asked without its
        # warning. Not by muting warnings around it: changing the filters resets every warning's
        # "already shown", so a deprecated model's warning would print again after each call.
        try:
            from pydantic_ai.models import ModelRequestParameters
            from pydantic_ai.models.openai._reasoning import (  # pyright: ignore[reportPrivateUsage]
                reasoning_active,
                supports_reasoning_effort_none,
            )
        except ImportError:
            return settings
        asked: Any = (profile, settings, ModelRequestParameters())  # typed dicts, read as such
        if supports_reasoning_effort_none(asked[0]) and not reasoning_active(*asked):
            return settings
        return {k: v for k, v in settings.items() if k not in _SAMPLING}
    return settings
