"""The actor's model as memory names it, from what an Agents SDK agent says its model is, and
the prompt-cache breakpoint memory's prefix gets for it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from obsmem.models import ModelSpec, prompt_cache_mark

__all__ = ["actor_model_of", "cache_breakpoint", "through_litellm", "with_cache_breakpoint"]

_LITELLM = "litellm/"
_MARKABLE = ("input_text", "input_image", "input_file")
"""The content parts OpenAI takes a breakpoint on."""
_FIELD = "prompt_cache_breakpoint"


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


def _system(item: Any) -> bool:
    return (
        isinstance(item, dict)
        and item.get("role") in ("system", "developer")
        and item.get("type", "message") == "message"
    )


def _parts(item: dict[str, Any]) -> list[Any]:
    content = item.get("content")
    if isinstance(content, str):
        return [{"type": "input_text", "text": content}]
    return list(content) if isinstance(content, list) else []


def through_litellm(model: Any) -> bool:
    """Whether an agent's ``model`` is LiteLLM's (``"litellm/..."`` or a ``LitellmModel``, also
    inside a wrapper such as :class:`.compacting.CompactingModel`)."""
    while model is not None and not isinstance(model, str):
        if type(model).__name__.lower().startswith("litellm"):
            return True
        model = getattr(model, "inner", None)
    return isinstance(model, str) and model.startswith(_LITELLM)


def cache_breakpoint(actor: ModelSpec | None, *, litellm: bool) -> dict[str, str] | None:
    """The ``prompt_cache_breakpoint`` for memory's prefix when ``actor`` answers, or None.
    OpenAI's GPT-5.6 and later take it (and match a cached prefix only at one). Anthropic's
    ``cache_control`` the SDK's item converter drops (openai/openai-agents-python#1257), but it
    carries ``prompt_cache_breakpoint``, which LiteLLM writes as ``cache_control`` for
    Anthropic: so an Anthropic actor gets it through LiteLLM only."""
    mark = prompt_cache_mark(actor)
    if mark is None:
        return None
    field, value = mark
    if field == _FIELD:
        return value
    return {"mode": "explicit"} if litellm else None


def with_cache_breakpoint(items: Sequence[Any], mark: dict[str, str] | None) -> list[Any]:
    """A copy of ``items`` with ``mark`` (a :func:`cache_breakpoint`) on the last part of their
    leading system messages (the end of memory's prefix), unless they have a breakpoint."""
    out = list(items)
    if mark is None:
        return out
    leading = next((i for i, item in enumerate(out) if not _system(item)), len(out))
    if leading == 0 or any(
        _FIELD in p for i in out[:leading] for p in _parts(i) if isinstance(p, dict)
    ):
        return out
    parts = _parts(out[leading - 1])
    if not parts or not isinstance(parts[-1], dict) or parts[-1].get("type") not in _MARKABLE:
        return out
    parts[-1] = {**parts[-1], _FIELD: dict(mark)}
    out[leading - 1] = {**out[leading - 1], "content": parts}
    return out
