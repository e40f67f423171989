"""Model specifications: routing by input size, resolution to pydantic-ai models, retries.

A model is given as ``"provider/model"`` (Mastra's form, e.g. ``"openai/gpt-6.1-terra"``), as
``"provider:model"`` (pydantic-ai's form), as a pydantic-ai ``Model`` instance (``FunctionModel``
and ``TestModel`` included) or as a ``ModelByInputTokens`` router. ``resolve_model`` turns a string
into a pydantic-ai ``Model`` without any network call; resolve once and keep the result, each
resolution builds a new SDK client.

Importing this package loads neither pydantic-ai nor any provider SDK; they are imported when a
model is resolved.
"""

from __future__ import annotations

from obsmem.models.capabilities import (
    model_input_capabilities,
    prompt_cache_mark,
    prompt_cache_ttl_ms,
)
from obsmem.models.describe import model_id_of, provider_of
from obsmem.models.environment import HOW_TO_PROVIDE_A_MODEL, MODEL_ENV, model_from_environment
from obsmem.models.providers import resolve_model
from obsmem.models.retry import call_with_retry, is_transient
from obsmem.models.specs import DEFAULT_MODEL, InputCapability, ModelByInputTokens, ModelSpec

__all__ = [
    "DEFAULT_MODEL",
    "HOW_TO_PROVIDE_A_MODEL",
    "MODEL_ENV",
    "InputCapability",
    "ModelByInputTokens",
    "ModelSpec",
    "call_with_retry",
    "is_transient",
    "model_from_environment",
    "model_id_of",
    "model_input_capabilities",
    "prompt_cache_mark",
    "prompt_cache_ttl_ms",
    "provider_of",
    "resolve_model",
]
