"""The actor's model as memory names it, from a LangChain chat model, and the prompt-cache
breakpoint its provider needs. The provider is read from the model's tracing parameters
(``ls_provider``), else its ``_llm_type``; the name from ``ls_model_name``, else its
``model_name``/``model``/``model_id``. A model whose provider cannot be told names no actor.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeAlias, cast

from langchain_core.messages import SystemMessage

from obsmem.models import ModelByInputTokens, ModelSpec, prompt_cache_mark

__all__ = ["ActorModel", "actor_model_of", "with_cache_breakpoint"]

ActorModel: TypeAlias = Any
"""The actor's model as a front door may give it: a LangChain chat model, or a model spec
(``"anthropic/claude-sonnet-4-5"``, a pydantic-ai ``Model``, ``ModelByInputTokens``)."""

_SAME_NAME = ("openai", "anthropic", "groq", "xai", "deepseek", "fireworks", "together", "ollama")
"""Providers LangChain and obsmem name alike (also as an ``_llm_type`` fragment)."""

_PROVIDERS: Mapping[str, str] = {
    **{name: name for name in (*_SAME_NAME, "azure", "google", "bedrock", "mistral", "cohere")},
    **{name: name for name in ("openrouter", "perplexity", "huggingface")},
    "google_genai": "google",
    "google_vertexai": "google-vertex",
    "vertexai": "google-vertex",
    "amazon_bedrock": "bedrock",
    "mistralai": "mistral",
}
"""LangChain's ``ls_provider`` names -> obsmem's provider names."""

_LLM_TYPES: tuple[tuple[str, str], ...] = (
    ("azure-openai", "azure"),
    ("chat-google-generative-ai", "google"),
    ("vertexai", "google-vertex"),
    ("amazon_bedrock", "bedrock"),
    ("mistralai", "mistral"),
    *((name, name) for name in (*_SAME_NAME, "cohere")),
)
"""``_llm_type`` fragments -> providers, for a model whose tracing parameters do not say; the
first found wins, so a fragment that contains another (``vertexai``, ``xai``) comes first."""

_NAME_ATTRIBUTES = ("model_name", "model", "model_id")

_MARKS = ("cache_control", "prompt_cache_breakpoint")
"""The fields that end a cacheable prefix (Anthropic's, OpenAI's)."""


def _attribute(model: Any, name: str) -> Any:
    """``model.name``, or None: a model's attributes are its own code (a configurable model
    builds one on access), and naming the actor must never fail a turn."""
    try:
        return getattr(model, name, None)
    except Exception:
        return None


def _ls_params(model: Any) -> Mapping[str, Any]:
    read = _attribute(model, "_get_ls_params")
    if not callable(read):
        return {}
    try:
        params: Any = read()
    except Exception:  # tracing parameters are a courtesy of the model
        return {}
    return cast(Mapping[str, Any], params) if isinstance(params, Mapping) else {}


def _provider(model: Any, params: Mapping[str, Any]) -> str | None:
    named = params.get("ls_provider")
    if isinstance(named, str) and named.lower() in _PROVIDERS:
        return _PROVIDERS[named.lower()]
    kind = _attribute(model, "_llm_type")
    if isinstance(kind, str):
        return next((p for fragment, p in _LLM_TYPES if fragment in kind.lower()), None)
    return None


def _name(model: Any, params: Mapping[str, Any]) -> str | None:
    for value in (params.get("ls_model_name"), *(_attribute(model, a) for a in _NAME_ATTRIBUTES)):
        if isinstance(value, str) and value:
            return value.removeprefix("models/")
    return None


def _unbound(model: Any) -> Any:
    """The chat model under a ``bind_tools``/``bind`` wrapper."""
    while (bound := _attribute(model, "bound")) is not None and bound is not model:
        model = bound
    return model


def actor_model_of(model: ActorModel | None) -> ModelSpec | None:
    """The ``"provider/model"`` spec of a LangChain chat model (a model spec, ``"openai/gpt-5"``
    or a pydantic-ai ``Model``, is taken as it is), or None when the provider cannot be told."""
    from pydantic_ai.models import Model

    if model is None or isinstance(model, str):
        return model or None
    if isinstance(model, Model | ModelByInputTokens):
        return model
    model = _unbound(model)
    params = _ls_params(model)
    provider, name = _provider(model, params), _name(model, params)
    if provider is None or name is None:
        return None
    return f"{provider}/{name}"


def _marked(content: Any) -> bool:
    blocks = cast(list[Any], content) if isinstance(content, list) else []
    return any(isinstance(b, dict) and any(k in b for k in _MARKS) for b in blocks)


def with_cache_breakpoint(
    system: SystemMessage | None, actor: ModelSpec | None
) -> SystemMessage | None:
    """``system`` with a prompt-cache breakpoint on its last block when the actor's provider
    takes one (:func:`obsmem.models.prompt_cache_mark`), so the agent's instructions and
    memory's observations, which change only with a memory cycle, are read from the cache
    (a system message that has a breakpoint already is left alone)."""
    mark = prompt_cache_mark(actor)
    if system is None or mark is None or _marked(system.content):
        return system
    content = system.content
    blocks: list[Any] = (
        [{"type": "text", "text": content}] if isinstance(content, str) else list(content)
    )
    if not blocks:
        return system
    last = blocks[-1]
    last = {"type": "text", "text": last} if isinstance(last, str) else dict(last)
    field, value = mark
    blocks[-1] = {**last, field: dict(value)}
    return system.model_copy(update={"content": blocks})
