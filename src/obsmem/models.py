"""Model specifications: routing by input size, resolution to pydantic-ai models, retries.

A model is given as ``"provider/model"`` (Mastra's form, e.g. ``"openai/gpt-5-mini"``), as
``"provider:model"`` (pydantic-ai's form), as a pydantic-ai ``Model`` instance (``FunctionModel``
and ``TestModel`` included) or as a ``ModelByInputTokens`` router. ``resolve_model`` turns a string
into a pydantic-ai ``Model`` without any network call; resolve once and keep the result, each
resolution builds a new SDK client.
"""

from __future__ import annotations

import asyncio
import importlib
import os
import random
import re
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Literal, TypeAlias, TypeVar

from pydantic_ai.exceptions import (
    ModelAPIError,
    ModelConnectionError,
    ModelHTTPError,
    ModelQuotaExceededError,
    ModelRateLimitError,
    ModelRequestRejectedError,
    ModelRequestTimeout,
    ModelServerError,
    ModelUnavailableError,
    UserError,
)
from pydantic_ai.models import Model

from obsmem.errors import ConfigError, MissingExtraError, ModelError

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
    "prompt_cache_ttl_ms",
    "provider_of",
    "resolve_model",
]

DEFAULT_MODEL = "google/gemini-2.5-flash"

T = TypeVar("T")
InputCapability: TypeAlias = Literal["image", "pdf", "audio", "video"]


# --------------------------------------------------------------------------------------------
# Routing by input size
# --------------------------------------------------------------------------------------------


class ModelByInputTokens:
    """Pick a model by the size of the call's input: the first tier whose limit is >= the count.

    ``ModelByInputTokens(up_to={10_000: "openai/gpt-5-mini", 40_000: "google/gemini-2.5-flash"})``
    sends calls of up to 10,000 input tokens (inclusive) to the first model, up to 40,000 to the
    second, and refuses larger ones with a ``ModelError``.
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
            if not isinstance(model, str | Model):  # pyright: ignore[reportUnnecessaryIsInstance]
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
        tiers = ", ".join(f"{limit}: {_describe(model)}" for limit, model in self._tiers)
        return f"ModelByInputTokens(up_to={{{tiers}}})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ModelByInputTokens) and self._tiers == other._tiers

    def __hash__(self) -> int:
        return hash(
            tuple((limit, id(m) if isinstance(m, Model) else m) for limit, m in self._tiers)
        )


ModelSpec: TypeAlias = str | Model | ModelByInputTokens


def _describe(model: str | Model) -> str:
    return repr(model) if isinstance(model, str) else f"<{type(model).__name__} {model.model_name}>"


# --------------------------------------------------------------------------------------------
# Providers
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class _Provider:
    """How a Mastra provider name maps onto pydantic-ai."""

    target: str
    """pydantic-ai provider name, or the name given to an OpenAI-compatible provider."""
    key_env: tuple[str, ...]
    """Environment variables holding the API key, in order of preference (any one suffices)."""
    extra: str
    """The obsmem extra that installs the SDK."""
    module: str
    """The SDK module that must be importable."""
    compatible_base_url: str | None = None
    """Set for providers reached through the OpenAI-compatible chat API with the openai SDK."""
    key_optional: bool = False


def _via_openai_sdk(target: str, key_env: str, base_url: str | None = None) -> _Provider:
    return _Provider(
        target=target,
        key_env=(key_env,),
        extra="openai",
        module="openai",
        compatible_base_url=base_url,
        key_optional=target == "ollama",
    )


_OPENAI = _via_openai_sdk("openai", "OPENAI_API_KEY")
_GOOGLE_KEYS = ("GOOGLE_API_KEY", "GEMINI_API_KEY", "GOOGLE_GENERATIVE_AI_API_KEY")

_PROVIDERS: dict[str, _Provider] = {
    "openai": _OPENAI,
    "anthropic": _Provider(
        target="anthropic", key_env=("ANTHROPIC_API_KEY",), extra="anthropic", module="anthropic"
    ),
    "google": _Provider(
        target="google", key_env=_GOOGLE_KEYS, extra="google", module="google.genai"
    ),
    "deepseek": _via_openai_sdk("deepseek", "DEEPSEEK_API_KEY"),
    "openrouter": _via_openai_sdk("openrouter", "OPENROUTER_API_KEY"),
    "xai": _via_openai_sdk("xai", "XAI_API_KEY", "https://api.x.ai/v1"),
    "groq": _via_openai_sdk("groq", "GROQ_API_KEY", "https://api.groq.com/openai/v1"),
    "mistral": _via_openai_sdk("mistral", "MISTRAL_API_KEY", "https://api.mistral.ai/v1"),
    "cerebras": _via_openai_sdk("cerebras", "CEREBRAS_API_KEY"),
    "togetherai": _via_openai_sdk("together", "TOGETHER_API_KEY"),
    "fireworks-ai": _via_openai_sdk("fireworks", "FIREWORKS_API_KEY"),
    "moonshotai": _via_openai_sdk("moonshotai", "MOONSHOTAI_API_KEY"),
    "ollama": _via_openai_sdk("ollama", "OLLAMA_API_KEY"),
}
"""Providers accepted in the ``"provider/model"`` form. xAI, Groq and Mistral go through their
OpenAI-compatible APIs so that the ``openai`` extra is all they need; use pydantic-ai's form
(``"xai:grok-4"``) for pydantic-ai's native clients."""

# pydantic-ai names whose keys and SDKs we check before pydantic-ai does, for clearer errors.
_PYDANTIC_AI_CHECKS: dict[str, _Provider] = {
    "openai": _OPENAI,
    "openai-chat": _OPENAI,
    "openai-responses": _OPENAI,
    **{p.target: p for p in _PROVIDERS.values() if p.compatible_base_url is None},
    "xai": _Provider(target="xai", key_env=("XAI_API_KEY",), extra="", module="xai_sdk"),
    "groq": _Provider(target="groq", key_env=("GROQ_API_KEY",), extra="", module="groq"),
    "mistral": _Provider(
        target="mistral", key_env=("MISTRAL_API_KEY",), extra="", module="mistralai"
    ),
}
_PYDANTIC_AI_ALIASES = {"google-gla": "google", "google-vertex": "google-cloud"}
_OBSMEM_EXTRAS = frozenset({"openai", "anthropic", "google"})
_OLLAMA_DEFAULT_URL = "http://localhost:11434/v1"
_PLACEHOLDER_KEY = "api-key-not-set"


def _env(name: str) -> str | None:
    return os.environ.get(name) or None


def _split(spec: str) -> tuple[Literal["mastra", "pydantic-ai"], str, str] | None:
    """``(form, provider, model)`` of a string spec; the earlier of ``/`` and ``:`` separates."""
    slash, colon = spec.find("/"), spec.find(":")
    if slash <= 0 and colon <= 0:
        return None
    if colon <= 0 or 0 < slash < colon:
        provider, _, model = spec.partition("/")
        return "mastra", provider.strip().lower(), model.strip()
    provider, _, model = spec.partition(":")
    return "pydantic-ai", provider.strip().lower(), model.strip()


def resolve_model(spec: str | Model) -> Model:
    """A pydantic-ai ``Model`` for ``spec``; ``Model`` instances are returned as they are.

    Raises ``ModelError`` for an unknown provider or a missing API key (naming the variable to
    set) and ``MissingExtraError`` when the provider's SDK is not installed. Makes no network call.
    """
    if isinstance(spec, Model):
        return spec
    if isinstance(spec, ModelByInputTokens):  # pyright: ignore[reportUnnecessaryIsInstance]
        raise ModelError(
            "a ModelByInputTokens router has no single model; call .resolve(input_tokens) first"
        )
    text = spec.strip()
    if text == "default":
        text = DEFAULT_MODEL
    if text == "test":
        from pydantic_ai.models.test import TestModel

        return TestModel()
    parts = _split(text)
    if parts is None or not parts[2]:
        guess = _guess_provider(text)
        example = f"{guess}/{text}" if guess and parts is None else DEFAULT_MODEL
        raise ModelError(
            f"model {spec!r} is not understood; give it as 'provider/model' "
            f"(e.g. {example!r}), as pydantic-ai's 'provider:model', or as a Model instance"
        )
    form, provider, model_name = parts
    if form == "mastra":
        return _resolve_mastra(spec, provider, model_name)
    return _resolve_pydantic_ai(spec, provider, model_name)


_NAME_PREFIXES = (
    ("gpt-", "openai"),
    ("chatgpt-", "openai"),
    ("claude-", "anthropic"),
    ("gemini-", "google"),
    ("deepseek-", "deepseek"),
    ("grok-", "xai"),
)


def _guess_provider(model_name: str) -> str | None:
    lowered = model_name.lower()
    if re.match(r"^o\d", lowered):
        return "openai"
    return next((p for prefix, p in _NAME_PREFIXES if lowered.startswith(prefix)), None)


def _known_providers() -> str:
    return ", ".join(sorted(_PROVIDERS))


def _check_installed(spec: str, info: _Provider) -> None:
    try:
        importlib.import_module(info.module)
    except ImportError as exc:
        if info.extra:
            raise MissingExtraError(
                f"the model {spec!r}", info.extra, package=info.module.split(".")[0]
            ) from exc
        hint = f'pip install "pydantic-ai-slim[{info.target}]"'
        alternative = ""
        if (mastra := _PROVIDERS.get(info.target)) and mastra.compatible_base_url:
            alternative = f", or write it as '{info.target}/<model>' (OpenAI-compatible API)"
        raise ModelError(
            f"the model {spec!r} needs the {info.module} package: run  {hint}{alternative}"
        ) from exc


def _api_key(spec: str, info: _Provider) -> str | None:
    for name in info.key_env:
        if value := _env(name):
            return value
    if info.key_optional:
        return None
    if info is _OPENAI and _env("OPENAI_BASE_URL"):
        return None
    names = " or ".join(info.key_env)
    extra = " (or OPENAI_BASE_URL for an OpenAI-compatible server)" if info is _OPENAI else ""
    raise ModelError(
        f"the model {spec!r} needs an API key: set the environment variable {names}{extra}"
    )


def _openai_base_url() -> str | None:
    """``OPENAI_BASE_URL`` when it points somewhere other than OpenAI's own API."""
    url = _env("OPENAI_BASE_URL")
    if url is None or "api.openai.com" in url:
        return None
    return url


def _custom_openai(model_name: str, base_url: str, key: str | None) -> Model:
    """An OpenAI-compatible server (llama.cpp, Ollama, vLLM...): the chat completions API."""
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    provider = OpenAIProvider(base_url=base_url, api_key=key or _PLACEHOLDER_KEY)
    return OpenAIChatModel(model_name, provider=provider)


def _resolve_mastra(spec: str, provider: str, model_name: str) -> Model:
    if provider == "gateway":
        return _wrap_pydantic_ai(spec, f"gateway/{model_name}")
    info = _PROVIDERS.get(provider)
    if info is None:
        raise ModelError(
            f"unknown provider {provider!r} in model {spec!r}; known providers: "
            f"{_known_providers()} (or use pydantic-ai's 'provider:model' form)"
        )
    _check_installed(spec, info)
    key = _api_key(spec, info)
    if info is _OPENAI and (base_url := _openai_base_url()) is not None:
        return _custom_openai(model_name, base_url, key)
    if info.compatible_base_url is not None:
        from pydantic_ai.models.openai import OpenAIChatModel
        from pydantic_ai.providers.openai_compatible import OpenAICompatibleProvider

        compatible = OpenAICompatibleProvider(
            info.target, base_url=info.compatible_base_url, api_key=key
        )
        return OpenAIChatModel(model_name, provider=compatible)
    if info.target == "google":
        from pydantic_ai.models.google import GoogleModel
        from pydantic_ai.providers.google import GoogleProvider

        return GoogleModel(model_name, provider=GoogleProvider(api_key=key))
    if info.target == "ollama":
        from pydantic_ai.models.ollama import OllamaModel
        from pydantic_ai.providers.ollama import OllamaProvider

        base_url = _env("OLLAMA_BASE_URL") or _OLLAMA_DEFAULT_URL
        return OllamaModel(model_name, provider=OllamaProvider(base_url=base_url, api_key=key))
    return _wrap_pydantic_ai(spec, f"{info.target}:{model_name}")


def _resolve_pydantic_ai(spec: str, provider: str, model_name: str) -> Model:
    from pydantic_ai.providers import infer_provider_class

    provider = _PYDANTIC_AI_ALIASES.get(provider, provider)
    if not provider.startswith("gateway/"):
        try:
            infer_provider_class(provider)
        except ValueError:
            raise ModelError(
                f"unknown provider {provider!r} in model {spec!r}; use one of pydantic-ai's "
                f"providers, or the 'provider/model' form with one of: {_known_providers()}"
            ) from None
        except ImportError:
            pass  # reported below, with the install hint
    info = _PYDANTIC_AI_CHECKS.get(provider)
    if info is not None:
        _check_installed(spec, info)
        key = _api_key(spec, info)
        if info is _OPENAI and (base_url := _openai_base_url()) is not None:
            if provider == "openai-responses":
                from pydantic_ai.models.openai import OpenAIResponsesModel
                from pydantic_ai.providers.openai import OpenAIProvider

                openai_provider = OpenAIProvider(base_url=base_url, api_key=key or _PLACEHOLDER_KEY)
                return OpenAIResponsesModel(model_name, provider=openai_provider)
            return _custom_openai(model_name, base_url, key)
    return _wrap_pydantic_ai(spec, f"{provider}:{model_name}")


_INSTALL_HINT = re.compile(r'pip install "pydantic-ai-slim\[([\w-]+)\]"')


def _wrap_pydantic_ai(spec: str, pydantic_ai_id: str) -> Model:
    """pydantic-ai's own inference, its errors turned into obsmem's."""
    from pydantic_ai.models import infer_model

    try:
        return infer_model(pydantic_ai_id)
    except ImportError as exc:
        match = _INSTALL_HINT.search(str(exc))
        group = match.group(1) if match else None
        if group in _OBSMEM_EXTRAS:
            raise MissingExtraError(f"the model {spec!r}", group, package=group) from exc
        raise ModelError(f"the model {spec!r} needs an optional package: {exc}") from exc
    except UserError as exc:
        raise ModelError(f"the model {spec!r} cannot be used: {exc}") from exc


# --------------------------------------------------------------------------------------------
# Describing a model without resolving it
# --------------------------------------------------------------------------------------------

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


def _normalize_provider(name: str) -> str:
    name = name.strip().lower().removeprefix("gateway/")
    return _PROVIDER_ALIASES.get(name, name)


def _string_parts(spec: str) -> tuple[str | None, str]:
    text = spec.strip()
    if text == "default":
        text = DEFAULT_MODEL
    parts = _split(text)
    if parts is None:
        return None, text
    _, provider, model_name = parts
    if provider == "gateway" and (inner := _split(model_name)) is not None:
        provider, model_name = inner[1], inner[2]
    return _normalize_provider(provider), model_name


def provider_of(spec: ModelSpec) -> str | None:
    """The base provider of ``spec`` (``"openai"`` for ``"openai/gpt-5-mini"`` and for
    ``"openai-responses:gpt-5"``), a Model's ``system``, or ``None`` when it cannot be told."""
    if isinstance(spec, ModelByInputTokens):
        providers = {provider_of(model) for _, model in spec.tiers}
        return providers.pop() if len(providers) == 1 else None
    if isinstance(spec, Model):
        return _normalize_provider(spec.system)
    return _string_parts(spec)[0]


def model_id_of(spec: ModelSpec) -> str:
    """The model name without its provider (``"gpt-5-mini"``), or a Model's ``model_name``."""
    if isinstance(spec, ModelByInputTokens):
        tiers = ",".join(f"<={limit}:{_label(model)}" for limit, model in spec.tiers)
        return f"by-input-tokens({tiers})"
    if isinstance(spec, Model):
        return spec.model_name
    return _string_parts(spec)[1]


def _label(model: str | Model) -> str:
    provider = provider_of(model)
    return f"{provider}/{model_id_of(model)}" if provider else model_id_of(model)


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
        return _capabilities(_normalize_provider(vendor), rest)
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


# --------------------------------------------------------------------------------------------
# Transient-error retries
# --------------------------------------------------------------------------------------------

_TRANSIENT_STATUS = frozenset({408, 425, 429})
_TRANSIENT_NAMES = frozenset({"APIConnectionError", "APITimeoutError", "ServiceUnavailableError"})


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _status_code(exc: BaseException) -> int | None:
    status = getattr(exc, "status_code", None)
    if isinstance(status, int) and not isinstance(status, bool):
        return status
    response = getattr(exc, "response", None)
    status = getattr(response, "status_code", None)
    if isinstance(status, int) and not isinstance(status, bool):
        return status
    return None


def _classify(exc: BaseException) -> bool | None:
    """True transient, False definitely not, None: look further down the cause chain."""
    if isinstance(exc, asyncio.CancelledError | KeyboardInterrupt | SystemExit):
        return False
    if isinstance(exc, ModelQuotaExceededError | ModelRequestRejectedError):
        return False
    if isinstance(
        exc,
        ModelRateLimitError
        | ModelUnavailableError
        | ModelServerError
        | ModelConnectionError
        | ModelRequestTimeout,
    ):
        return True
    status = _status_code(exc)
    if status is not None and (isinstance(exc, ModelHTTPError) or 400 <= status < 600):
        return status in _TRANSIENT_STATUS or 500 <= status < 600
    if isinstance(exc, ConnectionError | TimeoutError):
        return True
    if _is_httpx_transport_error(exc) or type(exc).__name__ in _TRANSIENT_NAMES:
        return True
    if isinstance(exc, ModelAPIError):
        return False
    return None


def _is_httpx_transport_error(exc: BaseException) -> bool:
    for module in ("httpx", "httpx2"):
        try:
            transport_error: object = importlib.import_module(module).TransportError
        except (ImportError, AttributeError):
            continue
        if isinstance(transport_error, type) and isinstance(exc, transport_error):
            return True
    return False


def is_transient(exc: BaseException) -> bool:
    """Whether retrying the call that raised ``exc`` may succeed.

    Network and timeout errors, and HTTP 408/425/429/5xx, anywhere in the ``__cause__`` /
    ``__context__`` chain (the first error in the chain that says either way decides).
    Cancellation is never transient.
    """
    for link in _chain(exc):
        verdict = _classify(link)
        if verdict is not None:
            return verdict
    return False


async def call_with_retry(
    fn: Callable[[], Awaitable[T]],
    *,
    max_total: float = 60.0,
    base_delay: float = 1.0,
    max_delay: float = 20.0,
    jitter: float = 0.2,
    sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    clock: Callable[[], float] = time.monotonic,
    rand: Callable[[], float] = random.random,
    what: str = "the model call",
) -> T:
    """Await ``fn()``, retrying transient errors with exponential backoff until ``max_total`` s.

    Delays are ``base_delay * 2**n`` capped at ``max_delay``, times ``1 ± jitter``, at least the
    provider's ``retry_after``, and never past the deadline. Non-transient errors propagate
    unchanged; when time runs out the last error is raised wrapped in ``ModelError``.
    """
    if max_total < 0 or base_delay < 0 or max_delay < 0 or not 0 <= jitter < 1:
        raise ValueError(
            "call_with_retry needs max_total, base_delay and max_delay >= 0 and 0 <= jitter < 1"
        )
    start = clock()
    deadline = start + max_total
    attempts = 0
    while True:
        attempts += 1
        try:
            return await fn()
        except Exception as exc:
            if not is_transient(exc):
                raise
            remaining = deadline - clock()
            if remaining <= 0:
                elapsed = clock() - start
                tries = f"{attempts} attempt{'s' if attempts != 1 else ''}"
                raise ModelError(
                    f"{what} gave up after {tries} in {elapsed:.1f} s "
                    f"(transient errors; max_total={max_total:g} s); last error: "
                    f"{type(exc).__name__}: {exc}. Check the provider's status and retry later."
                ) from exc
            delay = min(max_delay, base_delay * 2 ** (attempts - 1))
            delay *= 1 + jitter * (2 * rand() - 1)
            retry_after = getattr(exc, "retry_after", None)
            if isinstance(retry_after, int | float) and retry_after > delay:
                delay = float(retry_after)
            await sleep(min(delay, remaining))


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
