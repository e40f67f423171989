"""What a model spec is: a string, a pydantic-ai ``Model``, or a ``ModelByInputTokens`` router.

Nothing here imports pydantic-ai: ``is_model`` tells a ``Model`` instance apart by looking for the
already-loaded ``pydantic_ai.models`` module (no instance can exist before it is loaded).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Literal, TypeAlias, TypeGuard

from obsmem.errors import ConfigError, ModelError

if TYPE_CHECKING:
    from pydantic_ai.models import Model

__all__ = [
    "AUTO",
    "DEFAULT_MODEL",
    "InputCapability",
    "ModelByInputTokens",
    "ModelSpec",
    "describe_model",
    "is_model",
    "split_spec",
]

DEFAULT_MODEL = "google/gemini-3.5-flash-lite"
"""The last step of ``"auto"``: Google's current fast model (the seed's ``gemini-2.5-flash``
was retired on 2026-12-01)."""
AUTO = "auto"
"""The model ``model`` defaults to: picked from the actor and the environment
(:func:`obsmem.models.environment.resolve_auto`)."""

InputCapability: TypeAlias = Literal["image", "pdf", "audio", "video"]


def is_model(value: object) -> TypeGuard[Model]:
    """Whether ``value`` is a pydantic-ai ``Model``; never imports pydantic-ai to find out."""
    module = sys.modules.get("pydantic_ai.models")
    if module is None:
        return False
    model_class: object = getattr(module, "Model", None)
    return isinstance(model_class, type) and isinstance(value, model_class)


def describe_model(model: str | Model) -> str:
    """``'provider/model'`` for a string (quoted), ``<ClassName model_name>`` for a Model."""
    if isinstance(model, str):
        return repr(model)
    return f"<{type(model).__name__} {model.model_name}>"


def split_spec(spec: str) -> tuple[Literal["mastra", "pydantic-ai"], str, str] | None:
    """``(form, provider, model)`` of a string spec; the earlier of ``/`` and ``:`` separates."""
    slash, colon = spec.find("/"), spec.find(":")
    if slash <= 0 and colon <= 0:
        return None
    if colon <= 0 or 0 < slash < colon:
        provider, _, model = spec.partition("/")
        return "mastra", provider.strip().lower(), model.strip()
    provider, _, model = spec.partition(":")
    return "pydantic-ai", provider.strip().lower(), model.strip()


class ModelByInputTokens:
    """Pick a model by the size of the call's input: the first tier whose limit is >= the count.

    ``ModelByInputTokens(up_to={10_000: "openai/gpt-6.1-terra",
    40_000: "google/gemini-3.8-flash"})`` sends calls of up to 10,000 input tokens (inclusive)
    to the first model, up to 40,000 to the second, and refuses larger ones with a
    ``ModelError``.
    """

    __slots__ = ("_tiers",)

    def __init__(self, up_to: Mapping[int, str | Model]) -> None:
        if not up_to:
            raise ConfigError("ModelByInputTokens.up_to", dict(up_to), "give at least one tier")
        for key, model in up_to.items():
            if isinstance(key, bool) or not isinstance(key, int) or key <= 0:  # pyright: ignore[reportUnnecessaryIsInstance]
                raise ConfigError(
                    f"ModelByInputTokens.up_to[{key!r}]",
                    key,
                    "tier limits must be positive integers (input token counts)",
                )
            if not isinstance(model, str) and not is_model(model):
                raise ConfigError(
                    f"ModelByInputTokens.up_to[{key!r}]",
                    model,
                    "each tier's model must be a 'provider/model' string or a pydantic-ai Model "
                    "(tiers cannot nest another ModelByInputTokens)",
                )
        self._tiers: tuple[tuple[int, str | Model], ...] = tuple(sorted(up_to.items()))

    @property
    def tiers(self) -> tuple[tuple[int, str | Model], ...]:
        """``(limit, model)`` pairs in ascending order of limit."""
        return self._tiers

    @property
    def thresholds(self) -> tuple[int, ...]:
        """The tier limits in ascending order (recorded in traces as the routing thresholds)."""
        return tuple(limit for limit, _ in self._tiers)

    def select(self, input_tokens: int) -> tuple[int, str | Model]:
        """The ``(limit, model)`` tier chosen for ``input_tokens``."""
        for limit, model in self._tiers:
            if input_tokens <= limit:
                return limit, model
        largest = self._tiers[-1][0]
        raise ModelError(
            f"the call has {input_tokens:,} input tokens, more than the largest tier of "
            f"ModelByInputTokens ({largest:,}); add a tier with a larger limit, e.g. "
            f"up_to={{..., {max(input_tokens, largest * 2)}: <model>}}"
        )

    def resolve(self, input_tokens: int) -> str | Model:
        """The model of the first tier whose limit is >= ``input_tokens``."""
        return self.select(input_tokens)[1]

    def __repr__(self) -> str:
        tiers = ", ".join(f"{limit}: {describe_model(model)}" for limit, model in self._tiers)
        return f"ModelByInputTokens(up_to={{{tiers}}})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ModelByInputTokens) and self._tiers == other._tiers

    def __hash__(self) -> int:
        return hash(tuple((limit, m if isinstance(m, str) else id(m)) for limit, m in self._tiers))


ModelSpec: TypeAlias = "str | Model | ModelByInputTokens"
"""A model as options and calls accept it. For annotations only: ``Model`` is pydantic-ai's,
which this module does not import."""
