"""The actor's model as memory names it, from what an Agents SDK agent says its model is."""

from __future__ import annotations

from typing import Any

__all__ = ["actor_model_of"]

_LITELLM = "litellm/"


def _named(name: str) -> str:
    """A model name as the SDK takes it (``"gpt-4.1"``, ``"litellm/anthropic/claude-..."``,
    ``"openai/gpt-4.1"``) as a ``"provider/model"`` spec."""
    name = name.removeprefix(_LITELLM)
    return name if "/" in name else f"openai/{name}"


def actor_model_of(model: Any) -> str | None:
    """The ``"provider/model"`` spec of an agent's ``model`` (a name, an SDK ``Model`` with a
    ``model`` name such as the OpenAI and LiteLLM models), or None when it does not say (the
    Runner's default model)."""
    if isinstance(model, str) and model:
        return _named(model)
    name = getattr(model, "model", None)
    if isinstance(name, str) and name:
        litellm = type(model).__name__.lower().startswith("litellm")
        return name if litellm and "/" in name else _named(name)
    return None
