"""What a model accepts as input, how long its provider keeps a prompt cache and how a request
marks a cacheable prefix, by name."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Literal

from obsmem.models.describe import model_id_of, normalize_provider, provider_of
from obsmem.models.specs import InputCapability, ModelByInputTokens, ModelSpec

if TYPE_CHECKING:
    from pydantic_ai.models import Model

__all__ = ["model_input_capabilities", "prompt_cache_mark", "prompt_cache_ttl_ms"]

_IMAGE_PDF: frozenset[InputCapability] = frozenset({"image", "pdf"})
_ALL_MEDIA: frozenset[InputCapability] = frozenset({"image", "pdf", "audio", "video"})
_IMAGE: frozenset[InputCapability] = frozenset({"image"})
_TEXT: frozenset[InputCapability] = frozenset()

_OPENAI_TEXT_ONLY = re.compile(
    r"^(gpt-3\.5|gpt-4(-\d{4})?$|gpt-4-32k|o1-mini|o1-preview|text-|davinci|babbage)"
)
_ANTHROPIC_TEXT_ONLY = re.compile(r"^claude-(2|instant|1)")
_XAI_IMAGE = re.compile(r"^grok-(\d+-vision|[4-9]|\d{2,})|vision")
_GROQ_IMAGE = re.compile(r"llama-4|vision|scout|maverick")


def _tiers_or_self(spec: ModelSpec) -> Iterator[str | Model]:
    if isinstance(spec, ModelByInputTokens):
        yield from (model for _, model in spec.tiers)
    else:
        yield spec


def model_input_capabilities(spec: ModelSpec) -> frozenset[InputCapability]:
    """Best-effort attachment kinds the model accepts as input: ``"image"``, ``"pdf"``,
    ``"audio"``, ``"video"``. Unknown models are assumed to take images and PDFs. For a router,
    only what every tier accepts."""
    result: frozenset[InputCapability] | None = None
    for model in _tiers_or_self(spec):
        caps = _capabilities(provider_of(model), model_id_of(model).lower())
        result = caps if result is None else result & caps
    return result if result is not None else _IMAGE_PDF


def _capabilities(provider: str | None, model_id: str) -> frozenset[InputCapability]:
    if provider in ("openrouter", "vercel") and "/" in model_id:
        vendor, _, rest = model_id.partition("/")
        return _capabilities(normalize_provider(vendor), rest)
    match provider:
        case "openai" | "azure":
            return _TEXT if _OPENAI_TEXT_ONLY.match(model_id) else _IMAGE_PDF
        case "anthropic":
            return _TEXT if _ANTHROPIC_TEXT_ONLY.match(model_id) else _IMAGE_PDF
        case "google":
            return _ALL_MEDIA
        case "deepseek":
            return _TEXT
        case "xai":
            return _IMAGE if _XAI_IMAGE.search(model_id) else _TEXT
        case "groq":
            return _IMAGE if _GROQ_IMAGE.search(model_id) else _TEXT
        case _:
            return _IMAGE_PDF


_MINUTE_MS = 60_000
_HOUR_MS = 60 * _MINUTE_MS
_OPENAI_SHORT_CACHE = re.compile(r"^(gpt-4.*|gpt-5|gpt-5-.*|gpt-5\.[1-4](-.*)?)$")


def prompt_cache_ttl_ms(
    spec: ModelSpec, *, cache_retention: Literal["24h", "in_memory"] | None = None
) -> int:
    """How long the provider keeps a prompt cache warm, in ms (for ``activate_after_idle="auto"``).

    OpenAI: 5 min for gpt-4*, gpt-5, gpt-5-* and gpt-5.1 to 5.4, otherwise 1 h (``cache_retention``
    ``"24h"`` gives 1 h, ``"in_memory"`` 5 min). Google 24 h, DeepSeek 1 h, Groq 2 h; Anthropic,
    xAI, OpenRouter and others 5 min. For a router, the shortest of its tiers.
    """
    return min(
        _ttl(provider_of(model), model_id_of(model).lower(), cache_retention)
        for model in _tiers_or_self(spec)
    )


def _ttl(provider: str | None, model_id: str, retention: str | None) -> int:
    match provider:
        case "openai":
            if retention == "24h":
                return _HOUR_MS
            if retention == "in_memory" or _OPENAI_SHORT_CACHE.match(model_id):
                return 5 * _MINUTE_MS
            return _HOUR_MS
        case "google":
            return 24 * _HOUR_MS
        case "deepseek":
            return _HOUR_MS
        case "groq":
            return 2 * _HOUR_MS
        case _:
            return 5 * _MINUTE_MS


def prompt_cache_mark(spec: ModelSpec | None) -> tuple[str, dict[str, str]] | None:
    """The field and value a content block takes to end a cacheable prefix for ``spec``'s
    provider, or None when the provider caches prefixes without one (Gemini, OpenAI models
    before GPT-5.6, and any model not named): Anthropic's ``cache_control``, and OpenAI's
    ``prompt_cache_breakpoint`` for the models that take explicit breakpoints (GPT-5.6 and
    later, which match a cached prefix only at a breakpoint). A router has no one mark."""
    if spec is None or isinstance(spec, ModelByInputTokens):
        return None
    match provider_of(spec):
        case "anthropic":
            return "cache_control", {"type": "ephemeral"}
        case "openai" if _openai_breakpoints(model_id_of(spec).lower()):
            return "prompt_cache_breakpoint", {"mode": "explicit"}
        case _:
            return None


@functools.lru_cache(maxsize=64)
def _openai_breakpoints(model_id: str) -> bool:
    """Whether an OpenAI model takes explicit prompt-cache breakpoints, as pydantic-ai's
    OpenAI profile knows it (loaded on the first question)."""
    from pydantic_ai.profiles.openai import openai_model_profile

    profile = openai_model_profile(model_id)
    return bool(profile and profile.get("openai_supports_prompt_cache_breakpoints"))
