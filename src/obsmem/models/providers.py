"""Resolving a string spec to a pydantic-ai ``Model``: the provider tables, API keys, SDK checks.

``resolve_model`` makes no network call, but each resolution builds a new SDK client: resolve
once and keep the result. pydantic-ai and the provider SDKs are imported only while resolving.
"""

from __future__ import annotations

import importlib.util
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from obsmem.errors import MissingExtraError, ModelError
from obsmem.models.environment import resolve_auto
from obsmem.models.specs import AUTO, DEFAULT_MODEL, ModelByInputTokens, is_model, split_spec

if TYPE_CHECKING:
    from pydantic_ai.models import Model

    from obsmem.models.specs import ModelSpec

__all__ = ["check_credentials", "credentials_problem", "resolve_model"]


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


def resolve_model(spec: str | Model) -> Model:
    """A pydantic-ai ``Model`` for ``spec``; ``Model`` instances are returned as they are.

    Raises ``ModelError`` for an unknown provider or a missing API key (naming the variable to
    set) and ``MissingExtraError`` when the provider's SDK is not installed. Makes no network call.
    """
    if isinstance(spec, ModelByInputTokens):  # pyright: ignore[reportUnnecessaryIsInstance]
        raise ModelError(
            "a ModelByInputTokens router has no single model; call .resolve(input_tokens) first"
        )
    if not isinstance(spec, str):
        if is_model(spec):
            return spec
        raise ModelError(
            f"model {spec!r} is not understood; give it as 'provider/model' "
            f"(e.g. {DEFAULT_MODEL!r}), as pydantic-ai's 'provider:model', or as a Model instance"
        )
    text = spec.strip()
    if text == "default":
        text = DEFAULT_MODEL
    if text == AUTO:
        text = resolve_auto().model
    if text == "test":
        from pydantic_ai.models.test import TestModel

        return TestModel()
    parts = split_spec(text)
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
            f"the model {spec!r} needs the {info.module} package: run {hint}{alternative}"
        ) from exc


def _api_key(spec: str, info: _Provider, env: Mapping[str, str] | None = None) -> str | None:
    environ = os.environ if env is None else env
    for name in info.key_env:
        if value := environ.get(name):
            return value
    if info.key_optional:
        return None
    if info is _OPENAI and environ.get("OPENAI_BASE_URL"):
        return None
    names = " or ".join(info.key_env)
    extra = " (or OPENAI_BASE_URL for an OpenAI-compatible server)" if info is _OPENAI else ""
    raise ModelError(
        f"the model {spec!r} needs an API key: set the environment variable {names}{extra}"
    )


def check_credentials(
    spec: str, env: Mapping[str, str], *, installed: Callable[[str], bool]
) -> None:
    """Raise what :func:`resolve_model` would raise for a missing key, an unknown provider or a
    missing SDK (``installed(module)`` tells), without importing anything or resolving."""
    text = spec.strip()
    if text == AUTO:
        text = resolve_auto(None, env).model
    parts = split_spec(DEFAULT_MODEL if text == "default" else text)
    if parts is None or text == "test":
        return
    form, provider, _ = parts
    if form == "mastra":
        if provider == "gateway":
            return
        info = _PROVIDERS.get(provider)
        if info is None:
            raise ModelError(
                f"unknown provider {provider!r} in model {spec!r}; known providers: "
                f"{_known_providers()} (or use pydantic-ai's 'provider:model' form)"
            )
    else:
        info = _PYDANTIC_AI_CHECKS.get(_PYDANTIC_AI_ALIASES.get(provider, provider))
        if info is None:
            return
    if not installed(info.module):
        if info.extra:
            raise MissingExtraError(
                f"the model {spec!r}", info.extra, package=info.module.split(".")[0]
            )
        raise ModelError(f"the model {spec!r} needs the {info.module} package")
    _api_key(spec, info, env)


def credentials_problem(spec: ModelSpec, environ: Mapping[str, str] | None = None) -> str | None:
    """What stops ``spec`` from being called, found without a network call: a missing API key
    (naming the variable), an unknown provider, or a provider SDK that is not installed (naming
    the extra). None when nothing is known to be missing (model instances are not checked)."""
    if not isinstance(spec, str):
        return None
    env = os.environ if environ is None else environ
    if split_spec(spec.strip()) is None and spec.strip() not in ("test", "default"):
        return f"model {spec!r} is not understood; give it as 'provider/model'"
    try:
        check_credentials(spec, env, installed=_installed)
    except (ModelError, MissingExtraError) as exc:
        return str(exc)
    return None


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


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
    # Strict servers' chat templates (llama.cpp, vLLM) take one leading system message.
    from pydantic_ai.profiles.openai import OpenAIModelProfile

    strict = OpenAIModelProfile(openai_chat_supports_multiple_system_messages=False)
    return OpenAIChatModel(model_name, provider=provider, profile=strict)


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
    from pydantic_ai.exceptions import UserError
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
