"""Which model the environment points at (``OBSMEM_MODEL``, a provider key, or a local server)."""

from __future__ import annotations

import os
from collections.abc import Mapping

__all__ = ["HOW_TO_PROVIDE_A_MODEL", "MODEL_ENV", "model_from_environment"]

MODEL_ENV = "OBSMEM_MODEL"
_ENV_DEFAULTS = (
    ("OPENAI_API_KEY", "openai/gpt-5-mini"),
    ("ANTHROPIC_API_KEY", "anthropic/claude-haiku-4-5"),
    ("GOOGLE_API_KEY", "google/gemini-2.5-flash"),
    ("GEMINI_API_KEY", "google/gemini-2.5-flash"),
    ("DEEPSEEK_API_KEY", "deepseek/deepseek-chat"),
    ("XAI_API_KEY", "xai/grok-4-1-fast"),
)

HOW_TO_PROVIDE_A_MODEL = (
    "No model is configured. Either set OBSMEM_MODEL (e.g. OBSMEM_MODEL=openai/gpt-5-mini) with "
    "that provider's key (OPENAI_API_KEY, ANTHROPIC_API_KEY, GOOGLE_API_KEY, ...), set one of "
    "those keys alone, or point OPENAI_BASE_URL at an OpenAI-compatible server such as llama.cpp "
    "or Ollama (OPENAI_BASE_URL=http://localhost:11434/v1 OBSMEM_MODEL=openai/llama3.2)."
)


def model_from_environment(environ: Mapping[str, str] | None = None) -> str | None:
    """The model the environment points at: ``OBSMEM_MODEL``, else a default for the first
    provider key found, else ``openai/<model>`` for an ``OPENAI_BASE_URL`` server (the model
    name from ``OBSMEM_MODEL``, or ``local``). None when nothing is configured."""
    env = os.environ if environ is None else environ
    explicit = env.get(MODEL_ENV, "").strip()
    if explicit:
        return explicit
    for key, model in _ENV_DEFAULTS:
        if env.get(key, "").strip():
            return model
    if env.get("OPENAI_BASE_URL", "").strip():
        return "openai/local"
    return None
