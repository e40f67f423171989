"""Telling a model's provider and name from its spec, without resolving it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from obsmem.models.specs import DEFAULT_MODEL, ModelByInputTokens, ModelSpec, split_spec

if TYPE_CHECKING:
    from pydantic_ai.models import Model

__all__ = ["model_id_of", "normalize_provider", "provider_of"]

_PROVIDER_ALIASES = {
    "openai-chat": "openai",
    "openai-responses": "openai",
    "openai.chat": "openai",
    "openai.responses": "openai",
    "google-gla": "google",
    "google-vertex": "google",
    "google-cloud": "google",
    "google.generative-ai": "google",
    "gemini": "google",
    "x-ai": "xai",
    "grok": "xai",
    "together": "togetherai",
    "fireworks": "fireworks-ai",
}


def normalize_provider(name: str) -> str:
    """The base provider behind a provider name (``"openai-responses"`` -> ``"openai"``)."""
    name = name.strip().lower().removeprefix("gateway/")
    return _PROVIDER_ALIASES.get(name, name)


def _string_parts(spec: str) -> tuple[str | None, str]:
    text = spec.strip()
    if text == "default":
        text = DEFAULT_MODEL
    parts = split_spec(text)
    if parts is None:
        return None, text
    _, provider, model_name = parts
    if provider == "gateway" and (inner := split_spec(model_name)) is not None:
        provider, model_name = inner[1], inner[2]
    return normalize_provider(provider), model_name


def provider_of(spec: ModelSpec) -> str | None:
    """The base provider of ``spec`` (``"openai"`` for ``"openai/gpt-5-mini"`` and for
    ``"openai-responses:gpt-5"``), a Model's ``system``, or ``None`` when it cannot be told."""
    if isinstance(spec, ModelByInputTokens):
        providers = {provider_of(model) for _, model in spec.tiers}
        return providers.pop() if len(providers) == 1 else None
    if isinstance(spec, str):
        return _string_parts(spec)[0]
    return normalize_provider(spec.system)


def model_id_of(spec: ModelSpec) -> str:
    """The model name without its provider (``"gpt-5-mini"``), or a Model's ``model_name``."""
    if isinstance(spec, ModelByInputTokens):
        tiers = ",".join(f"<={limit}:{_label(model)}" for limit, model in spec.tiers)
        return f"by-input-tokens({tiers})"
    if isinstance(spec, str):
        return _string_parts(spec)[1]
    return spec.model_name


def _label(model: str | Model) -> str:
    provider = provider_of(model)
    return f"{provider}/{model_id_of(model)}" if provider else model_id_of(model)
