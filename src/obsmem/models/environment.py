"""Which model the environment points at, and the ``"auto"`` model memory resolves to.

``"auto"`` (the default of ``model``) resolves the same way in the library and on the command
line, without a network call:

1. ``OBSMEM_MODEL``;
2. a fast model of the actor's own provider (``FAST_MODELS``), when that provider's key is set;
   with ``OPENAI_BASE_URL`` pointing at a local server, the actor's own model on that server;
3. the fast model of the first provider whose key is set;
4. ``google/gemini-3.5-flash-lite`` (Google's current fast model).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from obsmem.models.describe import model_id_of, provider_of
from obsmem.models.specs import AUTO, DEFAULT_MODEL

if TYPE_CHECKING:
    from obsmem.models.specs import ModelSpec

__all__ = [
    "AUTO",
    "FAST_MODELS",
    "HOW_TO_PROVIDE_A_MODEL",
    "KEY_VARIABLES",
    "LOCAL_PLACEHOLDER",
    "MODEL_ENV",
    "AutoModel",
    "environment_choice",
    "model_from_environment",
    "resolve_auto",
    "served_choice",
    "served_model",
    "served_model_async",
]

MODEL_ENV = "OBSMEM_MODEL"

FAST_MODELS: Mapping[str, str] = {
    "openai": "openai/gpt-6.1-terra",
    "anthropic": "anthropic/claude-haiku-4-5",
    "google": "google/gemini-3.5-flash-lite",
    "deepseek": "deepseek/deepseek-chat",
    "xai": "xai/grok-4-1-fast",
    "groq": "groq/llama-3.3-70b-versatile",
    "mistral": "mistral/mistral-small-latest",
}
"""A fast, cheap model per provider: what ``"auto"`` picks for the Observer and Reflector. None
of them is deprecated by its provider (pydantic-ai warns on each request to one that is):
``gpt-6.1-terra`` and ``gemini-3.5-flash-lite`` are what OpenAI and Google name in place of
``gpt-5-mini`` (retiring on 2026-12-11) and ``gemini-2.5-flash`` (retired on 2026-12-01,
answered by ``gemini-3.5-flash-lite`` since)."""

_KEYS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("openai", ("OPENAI_API_KEY",)),
    ("anthropic", ("ANTHROPIC_API_KEY",)),
    ("google", ("GOOGLE_API_KEY", "GEMINI_API_KEY", "GOOGLE_GENERATIVE_AI_API_KEY")),
    ("deepseek", ("DEEPSEEK_API_KEY",)),
    ("xai", ("XAI_API_KEY",)),
    ("groq", ("GROQ_API_KEY",)),
    ("mistral", ("MISTRAL_API_KEY",)),
)
"""Providers in the order step 3 tries them, with the variables that hold their keys."""

KEY_VARIABLES: tuple[str, ...] = tuple(name for _, names in _KEYS for name in names)
"""Every variable a provider key is read from."""

HOW_TO_PROVIDE_A_MODEL = (
    "No model is configured. Either set OBSMEM_MODEL (e.g. OBSMEM_MODEL=openai/gpt-6.1-terra) with "
    "that provider's key (OPENAI_API_KEY, ANTHROPIC_API_KEY, GOOGLE_API_KEY, ...), set one of "
    "those keys alone, or point OPENAI_BASE_URL at an OpenAI-compatible server such as llama.cpp "
    "or Ollama (OPENAI_BASE_URL=http://localhost:11434/v1 OBSMEM_MODEL=openai/llama3.2)."
)


@dataclass(frozen=True, slots=True)
class AutoModel:
    """What ``"auto"`` resolved to, and why (shown by ``status``, ``inspect`` and ``doctor``)."""

    model: str
    why: str
    configured: bool = True
    """False when nothing in the environment chose it (step 4, the built-in default)."""


def _set(env: Mapping[str, str], name: str) -> bool:
    return bool(env.get(name, "").strip())


def _has_key(env: Mapping[str, str], provider: str) -> bool:
    return any(_set(env, name) for p, names in _KEYS if p == provider for name in names)


def _local_server(env: Mapping[str, str]) -> str | None:
    url = env.get("OPENAI_BASE_URL", "").strip()
    return url if url and "api.openai.com" not in url else None


def resolve_auto(
    actor: ModelSpec | None = None, environ: Mapping[str, str] | None = None
) -> AutoModel:
    """The model ``"auto"`` stands for, given the actor's model (when known) and the
    environment (``os.environ`` by default). Makes no network call."""
    env = os.environ if environ is None else environ
    explicit = env.get(MODEL_ENV, "").strip()
    if explicit:
        return AutoModel(explicit, f"{MODEL_ENV}")
    provider = provider_of(actor) if actor is not None else None
    local = _local_server(env)
    if provider == "openai" and local is not None and actor is not None:
        name = model_id_of(actor)
        return AutoModel(f"openai/{name}", f"the actor's model on OPENAI_BASE_URL ({local})")
    if provider is not None and provider in FAST_MODELS and _has_key(env, provider):
        why = f"a fast model of the actor's provider ({provider})"
        return AutoModel(FAST_MODELS[provider], why)
    for name, _ in _KEYS:
        if _has_key(env, name):
            return AutoModel(FAST_MODELS[name], f"the first provider key set ({name})")
    if local is not None:
        return AutoModel(LOCAL_PLACEHOLDER, f"the server at OPENAI_BASE_URL, {local}")
    return AutoModel(
        DEFAULT_MODEL, "the built-in default, as nothing is configured", configured=False
    )


LOCAL_PLACEHOLDER = "openai/local"
"""What ``"auto"`` names with only ``OPENAI_BASE_URL`` and no actor, without a network call. The
command line asks the server which model it serves before it starts (:func:`served_model`), and
the ``ModelCaller`` asks before the first memory model call that names it
(:func:`served_model_async`): llama.cpp's server answers whatever the name, vLLM and Ollama
refuse a name they do not serve."""


def served_choice(served: str, environ: Mapping[str, str] | None = None) -> AutoModel:
    """What ``"auto"`` is once the server at ``OPENAI_BASE_URL`` said it serves ``served``
    (``openai/<name>``), in place of the placeholder."""
    url = _local_server(os.environ if environ is None else environ) or ""
    return AutoModel(served, f"the model served at OPENAI_BASE_URL ({url})")


def _models_request(env: Mapping[str, str]) -> tuple[str, dict[str, str]] | None:
    """The URL and headers of ``GET /models`` on the server at ``OPENAI_BASE_URL`` (with the
    ``OPENAI_API_KEY`` when one is set), or None when there is no such server."""
    base = _local_server(env)
    if base is None:
        return None
    key = env.get("OPENAI_API_KEY", "").strip()
    return f"{base.rstrip('/')}/models", ({"Authorization": f"Bearer {key}"} if key else {})


def _served_name(status: int, body: Any) -> str | None:
    """The model a ``GET /models`` answer names: the placeholder's name when the server lists it
    (then the placeholder is a model it serves), otherwise the first it lists; None when it
    does not say."""
    data = body.get("data") if status == 200 and isinstance(body, dict) else None
    if not isinstance(data, list):
        return None
    names = [
        name
        for item in cast(list[Any], data)
        if isinstance(item, dict)
        and isinstance(name := cast(dict[str, Any], item).get("id"), str)
        and name.strip()
    ]
    placeholder = LOCAL_PLACEHOLDER.removeprefix("openai/")
    return placeholder if placeholder in names else next(iter(names), None)


def served_model(environ: Mapping[str, str] | None = None, *, timeout: float = 3.0) -> str | None:
    """The model the server at ``OPENAI_BASE_URL`` serves (``GET /models``), or None when there
    is no such server or it does not say. One network call: for the command line, before it
    starts (a memory model call uses :func:`served_model_async`)."""
    import httpx

    request = _models_request(os.environ if environ is None else environ)
    if request is None:
        return None
    try:
        reply = httpx.get(request[0], headers=request[1], timeout=timeout)
        return _served_name(reply.status_code, reply.json())
    except (httpx.HTTPError, ValueError):
        return None


async def served_model_async(environ: Mapping[str, str] | None = None) -> str | None:
    """:func:`served_model` for a memory model call that is about to name the placeholder (the
    call makes a network request anyway; a turn never does), waiting at most 3 s."""
    import httpx

    request = _models_request(os.environ if environ is None else environ)
    if request is None:
        return None
    try:
        async with httpx.AsyncClient(timeout=3.0) as client:
            reply = await client.get(request[0], headers=request[1])
        return _served_name(reply.status_code, reply.json())
    except (httpx.HTTPError, ValueError):
        return None


def environment_choice(
    environ: Mapping[str, str] | None = None, *, ask_server: bool = False
) -> AutoModel:
    """What ``"auto"`` is without an actor. ``ask_server=True``: with only ``OPENAI_BASE_URL``,
    the model that server serves (:func:`served_model`, one request) in place of the
    placeholder ``openai/local``, for code that names a model before it starts."""
    choice = resolve_auto(None, environ)
    if ask_server and choice.model == LOCAL_PLACEHOLDER and (served := served_model(environ)):
        return served_choice(f"openai/{served}", environ)
    return choice


def model_from_environment(
    environ: Mapping[str, str] | None = None, *, ask_server: bool = False
) -> str | None:
    """The model the environment points at (``"auto"`` without an actor, asking a local server
    as :func:`environment_choice` does), or None when nothing is configured (``"auto"`` would
    fall back to its built-in default)."""
    choice = environment_choice(environ, ask_server=ask_server)
    return choice.model if choice.configured else None
