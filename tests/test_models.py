"""Model specs: routing by input size, resolution to pydantic-ai models, transient retries."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import httpx
import pytest
from pydantic_ai.exceptions import (
    ModelConnectionError,
    ModelHTTPError,
    ModelQuotaExceededError,
    ModelRateLimitError,
    ModelRequestRejectedError,
)
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models import Model
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel

from obsmem.errors import ConfigError, MissingExtraError, ModelError
from obsmem.models import (
    DEFAULT_MODEL,
    ModelByInputTokens,
    ModelSpec,
    call_with_retry,
    is_transient,
    model_id_of,
    model_input_capabilities,
    prompt_cache_ttl_ms,
    provider_of,
    resolve_model,
)
from obsmem.models.specs import is_model

KEY_VARS = [
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "GOOGLE_API_KEY",
    "GEMINI_API_KEY",
    "GOOGLE_GENERATIVE_AI_API_KEY",
    "DEEPSEEK_API_KEY",
    "XAI_API_KEY",
    "GROQ_API_KEY",
    "OPENROUTER_API_KEY",
    "MISTRAL_API_KEY",
    "CEREBRAS_API_KEY",
    "TOGETHER_API_KEY",
    "FIREWORKS_API_KEY",
    "MOONSHOTAI_API_KEY",
    "OLLAMA_API_KEY",
]
BASE_URL_VARS = ["OPENAI_BASE_URL", "OLLAMA_BASE_URL", "GROQ_BASE_URL", "MOONSHOTAI_BASE_URL"]


@pytest.fixture
def no_keys(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in KEY_VARS + BASE_URL_VARS:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


@pytest.fixture
def fake_keys(no_keys: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in KEY_VARS:
        if name not in ("GEMINI_API_KEY", "GOOGLE_GENERATIVE_AI_API_KEY"):
            no_keys.setenv(name, f"fake-{name.lower()}")
    return no_keys


def base_url_of(model: Model) -> str:
    return str(model.base_url or "")


# --------------------------------------------------------------------------------------------
# resolve_model
# --------------------------------------------------------------------------------------------

ROUTES = [
    # spec, model class, system, model name, base URL fragment
    ("default", "GoogleModel", "google", "gemini-3.5-flash-lite", "generativelanguage.googleapis"),
    ("google/gemini-2.5-flash", "GoogleModel", "google", "gemini-2.5-flash", "googleapis.com"),
    ("openai/gpt-5-mini", "OpenAIResponsesModel", "openai", "gpt-5-mini", "api.openai.com"),
    ("anthropic/claude-haiku-4-5", "AnthropicModel", "anthropic", "claude-haiku-4-5", "anthropic"),
    ("deepseek/deepseek-reasoner", "OpenAIChatModel", "deepseek", "deepseek-reasoner", "deepseek"),
    ("xai/grok-4-1-fast", "OpenAIChatModel", "xai", "grok-4-1-fast", "api.x.ai/v1"),
    ("groq/llama-3.3-70b-versatile", "OpenAIChatModel", "groq", "llama-3.3-70b-versatile",
     "api.groq.com/openai/v1"),
    ("mistral/mistral-small-latest", "OpenAIChatModel", "mistral", "mistral-small-latest",
     "api.mistral.ai"),
    ("openrouter/anthropic/claude-sonnet-4.5", "OpenRouterModel", "openrouter",
     "anthropic/claude-sonnet-4.5", "openrouter.ai"),
    ("openrouter/meta-llama/llama-3.3:free", "OpenRouterModel", "openrouter",
     "meta-llama/llama-3.3:free", "openrouter.ai"),
    ("togetherai/meta-llama/Llama-3-8b", "OpenAIChatModel", "together", "meta-llama/Llama-3-8b",
     "together"),
    ("ollama/qwen3", "OllamaModel", "ollama", "qwen3", "localhost:11434"),
    ("  OpenAI/gpt-5-mini ", "OpenAIResponsesModel", "openai", "gpt-5-mini", "api.openai.com"),
    # pydantic-ai's form
    ("openai:gpt-5", "OpenAIResponsesModel", "openai", "gpt-5", "api.openai.com"),
    ("openai-chat:gpt-4o", "OpenAIChatModel", "openai", "gpt-4o", "api.openai.com"),
    ("google:gemini-2.5-pro", "GoogleModel", "google", "gemini-2.5-pro", "googleapis.com"),
    ("google-gla:gemini-2.5-flash", "GoogleModel", "google", "gemini-2.5-flash", "googleapis.com"),
    ("anthropic:claude-sonnet-4-5", "AnthropicModel", "anthropic", "claude-sonnet-4-5",
     "anthropic"),
    ("deepseek:deepseek-chat", "OpenAIChatModel", "deepseek", "deepseek-chat", "deepseek"),
    ("openrouter:openai/gpt-5", "OpenRouterModel", "openrouter", "openai/gpt-5", "openrouter.ai"),
]  # fmt: skip


@pytest.mark.parametrize(("spec", "cls", "system", "name", "url"), ROUTES)
def test_strings_resolve_to_the_right_model(
    fake_keys: pytest.MonkeyPatch, spec: str, cls: str, system: str, name: str, url: str
) -> None:
    model = resolve_model(spec)
    assert type(model).__name__ == cls
    assert model.system == system
    assert model.model_name == name
    assert url in base_url_of(model)


def test_default_constant() -> None:
    assert DEFAULT_MODEL == "google/gemini-3.5-flash-lite"


def test_model_instances_pass_through(no_keys: pytest.MonkeyPatch) -> None:
    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart("ok")])

    function_model = FunctionModel(answer)
    test_model = TestModel()
    assert resolve_model(function_model) is function_model
    assert resolve_model(test_model) is test_model
    assert isinstance(resolve_model("test"), TestModel)


def test_is_model_tells_model_instances_apart() -> None:
    assert is_model(TestModel())
    assert is_model(FunctionModel(lambda messages, info: ModelResponse(parts=[])))
    assert not is_model("openai/gpt-5-mini")
    assert not is_model(ModelByInputTokens(up_to={10: "openai/gpt-5-mini"}))
    assert not is_model(object())


def test_an_object_that_is_no_model_is_refused() -> None:
    with pytest.raises(ModelError, match="is not understood"):
        resolve_model(object())  # pyright: ignore[reportArgumentType]


@pytest.mark.parametrize(
    ("spec", "variables"),
    [
        ("openai/gpt-5-mini", ["OPENAI_API_KEY", "OPENAI_BASE_URL"]),
        ("openai:gpt-5-mini", ["OPENAI_API_KEY"]),
        ("anthropic/claude-haiku-4-5", ["ANTHROPIC_API_KEY"]),
        ("google/gemini-2.5-flash", ["GOOGLE_API_KEY", "GEMINI_API_KEY"]),
        ("default", ["GOOGLE_API_KEY"]),
        ("deepseek/deepseek-reasoner", ["DEEPSEEK_API_KEY"]),
        ("xai/grok-4-1-fast", ["XAI_API_KEY"]),
        ("groq/llama-3.3-70b-versatile", ["GROQ_API_KEY"]),
        ("openrouter/openai/gpt-5", ["OPENROUTER_API_KEY"]),
        ("deepseek:deepseek-chat", ["DEEPSEEK_API_KEY"]),
    ],
)
def test_missing_key_names_the_variable(
    no_keys: pytest.MonkeyPatch, spec: str, variables: list[str]
) -> None:
    with pytest.raises(ModelError) as caught:
        resolve_model(spec)
    for variable in variables:
        assert variable in str(caught.value)


def test_empty_key_counts_as_missing(no_keys: pytest.MonkeyPatch) -> None:
    no_keys.setenv("ANTHROPIC_API_KEY", "")
    with pytest.raises(ModelError, match="ANTHROPIC_API_KEY"):
        resolve_model("anthropic/claude-haiku-4-5")


@pytest.mark.parametrize(
    "variable", ["GOOGLE_API_KEY", "GEMINI_API_KEY", "GOOGLE_GENERATIVE_AI_API_KEY"]
)
def test_any_google_key_variable_works(no_keys: pytest.MonkeyPatch, variable: str) -> None:
    no_keys.setenv(variable, "fake")
    assert type(resolve_model("google/gemini-2.5-flash")).__name__ == "GoogleModel"


@pytest.mark.parametrize("spec", ["openai/smollm2", "openai:smollm2"])
def test_openai_base_url_needs_no_key_and_uses_chat_completions(
    no_keys: pytest.MonkeyPatch, spec: str
) -> None:
    no_keys.setenv("OPENAI_BASE_URL", "http://127.0.0.1:8080/v1")
    model = resolve_model(spec)
    assert type(model).__name__ == "OpenAIChatModel"
    assert model.model_name == "smollm2"
    assert base_url_of(model).startswith("http://127.0.0.1:8080/v1")


def test_openai_base_url_keeps_a_given_key(no_keys: pytest.MonkeyPatch) -> None:
    no_keys.setenv("OPENAI_BASE_URL", "http://127.0.0.1:11434/v1")
    no_keys.setenv("OPENAI_API_KEY", "local-secret")
    model = resolve_model("openai/llama3")
    client: Any = getattr(model, "client")  # noqa: B009
    assert client.api_key == "local-secret"


@pytest.mark.parametrize("spec", ["acme/model-1", "acme:model-1"])
def test_unknown_provider_lists_known_ones(fake_keys: pytest.MonkeyPatch, spec: str) -> None:
    with pytest.raises(ModelError) as caught:
        resolve_model(spec)
    message = str(caught.value)
    assert "'acme'" in message
    for known in ("openai", "anthropic", "google", "deepseek", "xai"):
        assert known in message


@pytest.mark.parametrize(
    ("spec", "suggestion"),
    [("gpt-4o", "openai/gpt-4o"), ("claude-haiku-4-5", "anthropic/claude-haiku-4-5"),
     ("whatever", DEFAULT_MODEL), ("openai/", DEFAULT_MODEL)],
)  # fmt: skip
def test_unparseable_strings(fake_keys: pytest.MonkeyPatch, spec: str, suggestion: str) -> None:
    with pytest.raises(ModelError, match="provider/model") as caught:
        resolve_model(spec)
    assert suggestion in str(caught.value)


def test_router_is_not_a_single_model() -> None:
    with pytest.raises(ModelError, match="resolve"):
        resolve_model(ModelByInputTokens({10: "openai/gpt-5-mini"}))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("spec", "module", "extra"),
    [
        ("anthropic/claude-haiku-4-5", "anthropic", "anthropic"),
        ("anthropic:claude-haiku-4-5", "anthropic", "anthropic"),
        ("google/gemini-2.5-flash", "google.genai", "google"),
        ("openai/gpt-5-mini", "openai", "openai"),
        ("deepseek/deepseek-reasoner", "openai", "openai"),
        ("xai/grok-4-1-fast", "openai", "openai"),
    ],
)
def test_missing_package_names_the_extra(
    fake_keys: pytest.MonkeyPatch, spec: str, module: str, extra: str
) -> None:
    fake_keys.setitem(sys.modules, module, None)
    with pytest.raises(MissingExtraError) as caught:
        resolve_model(spec)
    assert caught.value.extra == extra
    assert f'pip install "obsmem[{extra}]"' in str(caught.value)


def test_native_xai_without_its_sdk_points_to_both_fixes(fake_keys: pytest.MonkeyPatch) -> None:
    fake_keys.setitem(sys.modules, "xai_sdk", None)
    with pytest.raises(ModelError) as caught:
        resolve_model("xai:grok-4")
    assert "pydantic-ai-slim[xai]" in str(caught.value)
    assert "xai/<model>" in str(caught.value)


def test_missing_package_is_reported_before_missing_key(no_keys: pytest.MonkeyPatch) -> None:
    no_keys.setitem(sys.modules, "anthropic", None)
    with pytest.raises(MissingExtraError):
        resolve_model("anthropic/claude-haiku-4-5")


# --------------------------------------------------------------------------------------------
# provider_of / model_id_of
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "provider", "model_id"),
    [
        ("openai/gpt-5-mini", "openai", "gpt-5-mini"),
        ("openai:gpt-5-mini", "openai", "gpt-5-mini"),
        ("openai-responses:gpt-5", "openai", "gpt-5"),
        ("google-gla:gemini-2.5-flash", "google", "gemini-2.5-flash"),
        ("default", "google", "gemini-3.5-flash-lite"),
        ("openrouter/anthropic/claude-3.5", "openrouter", "anthropic/claude-3.5"),
        ("gateway/openai:gpt-5", "openai", "gpt-5"),
        ("gpt-4o", None, "gpt-4o"),
    ],
)
def test_provider_and_model_id_of_strings(spec: str, provider: str | None, model_id: str) -> None:
    assert provider_of(spec) == provider
    assert model_id_of(spec) == model_id


def test_provider_and_model_id_of_instances(fake_keys: pytest.MonkeyPatch) -> None:
    assert provider_of(TestModel()) == "test"
    assert model_id_of(TestModel()) == "test"
    xai = resolve_model("xai/grok-4-1-fast")
    assert (provider_of(xai), model_id_of(xai)) == ("xai", "grok-4-1-fast")


def test_provider_and_model_id_of_router() -> None:
    same = ModelByInputTokens({10: "openai/gpt-5-mini", 20: "openai/gpt-5"})
    mixed = ModelByInputTokens({10: "openai/gpt-5-mini", 20: "google/gemini-2.5-flash"})
    assert provider_of(same) == "openai"
    assert provider_of(mixed) is None
    assert model_id_of(mixed) == (
        "by-input-tokens(<=10:openai/gpt-5-mini,<=20:google/gemini-2.5-flash)"
    )


# --------------------------------------------------------------------------------------------
# ModelByInputTokens
# --------------------------------------------------------------------------------------------

ROUTER = ModelByInputTokens(
    up_to={40_000: "google/gemini-2.5-flash", 10_000: "openai/gpt-5-mini", 100: "test"}
)


@pytest.mark.parametrize(
    ("tokens", "expected"),
    [
        (0, "test"),
        (100, "test"),
        (101, "openai/gpt-5-mini"),
        (10_000, "openai/gpt-5-mini"),
        (10_001, "google/gemini-2.5-flash"),
        (40_000, "google/gemini-2.5-flash"),
    ],
)
def test_router_picks_the_first_tier_that_fits(tokens: int, expected: str) -> None:
    assert ROUTER.resolve(tokens) == expected


def test_router_thresholds_are_sorted() -> None:
    assert ROUTER.thresholds == (100, 10_000, 40_000)
    assert ROUTER.select(5_000) == (10_000, "openai/gpt-5-mini")


def test_router_refuses_input_over_the_last_tier() -> None:
    with pytest.raises(ModelError) as caught:
        ROUTER.resolve(40_001)
    message = str(caught.value)
    assert "40,001" in message
    assert "40,000" in message
    assert "add a tier" in message


def test_router_accepts_model_instances() -> None:
    model = TestModel()
    assert ModelByInputTokens({5: model}).resolve(5) is model


@pytest.mark.parametrize("key", [0, -1, 1.5, "1000", True])
def test_router_rejects_bad_keys(key: Any) -> None:
    with pytest.raises(ConfigError) as caught:
        ModelByInputTokens({key: "openai/gpt-5-mini", 10: "openai/gpt-5"})
    assert repr(key) in str(caught.value)


def test_router_rejects_nesting_and_empty() -> None:
    inner = ModelByInputTokens({10: "openai/gpt-5-mini"})
    with pytest.raises(ConfigError, match="nest"):
        ModelByInputTokens({100: inner})  # type: ignore[dict-item]
    with pytest.raises(ConfigError, match="at least one tier"):
        ModelByInputTokens({})


def test_router_equality() -> None:
    assert ModelByInputTokens({1: "a/b", 2: "c/d"}) == ModelByInputTokens({2: "c/d", 1: "a/b"})
    assert ModelByInputTokens({1: "a/b"}) != ModelByInputTokens({2: "a/b"})
    assert repr(ModelByInputTokens({1: "a/b"})) == "ModelByInputTokens(up_to={1: 'a/b'})"


# --------------------------------------------------------------------------------------------
# Capabilities and prompt-cache TTLs
# --------------------------------------------------------------------------------------------

IMAGE_PDF = {"image", "pdf"}


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("openai/gpt-4o", IMAGE_PDF),
        ("openai/gpt-4.1-mini", IMAGE_PDF),
        ("openai/gpt-5-mini", IMAGE_PDF),
        ("openai:o3", IMAGE_PDF),
        ("openai/gpt-3.5-turbo", set()),
        ("anthropic/claude-haiku-4-5", IMAGE_PDF),
        ("anthropic/claude-3-5-sonnet-latest", IMAGE_PDF),
        ("anthropic/claude-2.1", set()),
        ("google/gemini-2.5-flash", {"image", "pdf", "audio", "video"}),
        ("deepseek/deepseek-reasoner", set()),
        ("xai/grok-4-1-fast", {"image"}),
        ("xai/grok-3", set()),
        ("groq/llama-3.3-70b-versatile", set()),
        ("openrouter/google/gemini-2.5-flash", {"image", "pdf", "audio", "video"}),
        ("openrouter/deepseek/deepseek-chat", set()),
        ("acme/unknown", IMAGE_PDF),
        ("mystery", IMAGE_PDF),
    ],
)
def test_input_capabilities(spec: str, expected: set[str]) -> None:
    assert model_input_capabilities(spec) == frozenset(expected)


def test_capabilities_of_instances_and_routers() -> None:
    assert model_input_capabilities(TestModel()) == frozenset(IMAGE_PDF)
    router = ModelByInputTokens({10: "google/gemini-2.5-flash", 20: "openai/gpt-5-mini"})
    assert model_input_capabilities(router) == frozenset(IMAGE_PDF)


MIN = 60_000
HOUR = 60 * MIN


@pytest.mark.parametrize(
    ("spec", "ttl"),
    [
        ("openai/gpt-4o", 5 * MIN),
        ("openai/gpt-4.1-mini", 5 * MIN),
        ("openai/gpt-5", 5 * MIN),
        ("openai/gpt-5-mini", 5 * MIN),
        ("openai/gpt-5.1", 5 * MIN),
        ("openai/gpt-5.4-codex", 5 * MIN),
        ("openai/gpt-5.5", HOUR),
        ("openai:o3", HOUR),
        ("openai-responses:gpt-5", 5 * MIN),
        ("google/gemini-2.5-flash", 24 * HOUR),
        ("deepseek/deepseek-reasoner", HOUR),
        ("groq/llama-3.3-70b-versatile", 2 * HOUR),
        ("anthropic/claude-haiku-4-5", 5 * MIN),
        ("xai/grok-4-1-fast", 5 * MIN),
        ("openrouter/google/gemini-2.5-flash", 5 * MIN),
        ("acme/x", 5 * MIN),
    ],
)
def test_prompt_cache_ttl(spec: ModelSpec, ttl: int) -> None:
    assert prompt_cache_ttl_ms(spec) == ttl


def test_prompt_cache_ttl_retention_and_routers() -> None:
    assert prompt_cache_ttl_ms("openai/gpt-5", cache_retention="24h") == HOUR
    assert prompt_cache_ttl_ms("openai/o3", cache_retention="in_memory") == 5 * MIN
    router = ModelByInputTokens({10: "google/gemini-2.5-flash", 20: "deepseek/deepseek-chat"})
    assert prompt_cache_ttl_ms(router) == HOUR
    assert prompt_cache_ttl_ms(TestModel()) == 5 * MIN


# --------------------------------------------------------------------------------------------
# Retries
# --------------------------------------------------------------------------------------------


def http_error(status: int) -> ModelHTTPError:
    return ModelHTTPError(status, "m")


def server_error(message: str) -> ModelHTTPError:
    return ModelHTTPError(500, "m", {"error": {"message": message}})


def chained(outer: BaseException, cause: BaseException, *, context: bool = False) -> BaseException:
    if context:
        outer.__context__ = cause
    else:
        outer.__cause__ = cause
    return outer


REQUEST = httpx.Request("POST", "http://127.0.0.1/v1/chat")


@pytest.mark.parametrize(
    ("exc", "transient"),
    [
        (http_error(429), True),
        (http_error(503), True),
        (http_error(500), True),
        # llama.cpp answers a chat template error with a 500: sending it again cannot help.
        (server_error('can only concatenate str (not "list") to str'), False),
        (server_error("Conversation roles must alternate user/assistant/..."), False),
        (server_error("Error rendering jinja template"), False),
        (server_error("Internal error: out of memory"), True),
        (http_error(408), True),
        (http_error(425), True),
        (http_error(400), False),
        (http_error(401), False),
        (http_error(404), False),
        (ModelHTTPError.for_category(ModelRateLimitError, status_code=429, model_name="m"), True),
        (ModelHTTPError.for_category(ModelQuotaExceededError, status_code=429, model_name="m"),
         False),
        (ModelHTTPError.for_category(ModelRequestRejectedError, status_code=400, model_name="m"),
         False),
        (ModelConnectionError("m", "reset"), True),
        (ConnectionResetError(), True),
        (ConnectionError(), True),
        (TimeoutError(), True),
        (httpx.ConnectError("refused", request=REQUEST), True),
        (httpx.ReadTimeout("slow", request=REQUEST), True),
        (ValueError("bad"), False),
        (RuntimeError("bug"), False),
        (asyncio.CancelledError(), False),
        (chained(RuntimeError("wrapped"), httpx.ConnectError("x", request=REQUEST)), True),
        (chained(RuntimeError("ctx"), http_error(502), context=True), True),
        (chained(RuntimeError("wrapped"), ValueError("bad")), False),
        (chained(http_error(400), TimeoutError()), False),
        (chained(RuntimeError("wrapped"), asyncio.CancelledError()), False),
    ],
)  # fmt: skip
def test_is_transient(exc: BaseException, transient: bool) -> None:
    assert is_transient(exc) is transient


def test_is_transient_survives_a_cyclic_chain() -> None:
    a, b = RuntimeError("a"), RuntimeError("b")
    a.__cause__, b.__cause__ = b, a
    assert is_transient(a) is False


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def failing(
    errors: list[BaseException], result: str = "ok"
) -> tuple[Callable[[], Awaitable[str]], list[int]]:
    """A call that raises ``errors`` one per attempt, then returns ``result``."""
    calls = [0]
    remaining: Iterator[BaseException] = iter(errors)

    async def call() -> str:
        calls[0] += 1
        error = next(remaining, None)
        if error is not None:
            raise error
        return result

    return call, calls


async def test_transient_errors_are_retried_with_backoff() -> None:
    clock = FakeClock()
    call, calls = failing([http_error(503), ConnectionResetError(), http_error(429)])
    result = await call_with_retry(call, jitter=0.0, sleep=clock.sleep, clock=clock)
    assert result == "ok"
    assert calls[0] == 4
    assert clock.sleeps == [1.0, 2.0, 4.0]


async def test_backoff_is_capped_by_max_delay() -> None:
    clock = FakeClock()
    call, _ = failing([TimeoutError()] * 6)
    await call_with_retry(
        call, max_total=1000, max_delay=5.0, jitter=0.0, sleep=clock.sleep, clock=clock
    )
    assert clock.sleeps == [1.0, 2.0, 4.0, 5.0, 5.0, 5.0]


@pytest.mark.parametrize(("rand", "expected"), [(0.0, 1.6), (0.5, 2.0), (1.0, 2.4)])
async def test_jitter_bounds(rand: float, expected: float) -> None:
    clock = FakeClock()
    call, _ = failing([TimeoutError()])
    await call_with_retry(
        call, base_delay=2.0, jitter=0.2, sleep=clock.sleep, clock=clock, rand=lambda: rand
    )
    assert clock.sleeps == [pytest.approx(expected)]


async def test_provider_retry_after_is_honoured() -> None:
    clock = FakeClock()
    error = ModelHTTPError(429, "m", headers={"retry-after": "7"})
    call, _ = failing([error])
    await call_with_retry(call, jitter=0.0, sleep=clock.sleep, clock=clock)
    assert clock.sleeps == [7.0]


async def test_non_transient_errors_propagate_unchanged() -> None:
    clock = FakeClock()
    error = http_error(400)
    call, calls = failing([error])
    with pytest.raises(ModelHTTPError) as caught:
        await call_with_retry(call, sleep=clock.sleep, clock=clock)
    assert caught.value is error
    assert calls[0] == 1
    assert clock.sleeps == []


async def test_cancellation_is_never_retried() -> None:
    clock = FakeClock()
    call, calls = failing([asyncio.CancelledError()])
    with pytest.raises(asyncio.CancelledError):
        await call_with_retry(call, sleep=clock.sleep, clock=clock)
    assert calls[0] == 1
    assert clock.sleeps == []


async def test_deadline_is_respected() -> None:
    clock = FakeClock()
    errors: list[BaseException] = [http_error(503) for _ in range(100)]
    call, calls = failing(errors)
    with pytest.raises(ModelError) as caught:
        await call_with_retry(call, max_total=10.0, jitter=0.0, sleep=clock.sleep, clock=clock)
    # 1 + 2 + 4 = 7 s, then only 3 s are left: the last sleep stops at the deadline.
    assert clock.sleeps == [1.0, 2.0, 4.0, 3.0]
    assert clock.now == pytest.approx(10.0)
    assert calls[0] == 5
    assert "gave up after 5 attempts in 10.0 s" in str(caught.value)
    assert caught.value.__cause__ is errors[4]


async def test_deadline_counts_time_spent_in_calls() -> None:
    clock = FakeClock()

    async def slow_failure() -> str:
        clock.now += 4.0
        raise TimeoutError

    with pytest.raises(ModelError, match="gave up after 3 attempts"):
        await call_with_retry(
            slow_failure, max_total=10.0, jitter=0.0, sleep=clock.sleep, clock=clock
        )
    # a 4 s call, a 1 s pause, another 4 s call: 1 s is left for the last pause
    assert clock.sleeps == [1.0, 1.0]
    assert sum(clock.sleeps) <= 10.0


async def test_zero_budget_means_a_single_attempt() -> None:
    clock = FakeClock()
    call, calls = failing([ConnectionError()])
    with pytest.raises(ModelError, match="gave up after 1 attempt in"):
        await call_with_retry(call, max_total=0.0, sleep=clock.sleep, clock=clock)
    assert calls[0] == 1


async def test_bad_retry_settings_are_refused() -> None:
    call, _ = failing([])
    with pytest.raises(ValueError, match="jitter"):
        await call_with_retry(call, jitter=1.5)


@pytest.mark.parametrize(
    ("status", "body", "named"),
    [
        (200, {"data": [{"id": "qwen2.5:0.5b"}, {"id": "llama3.2"}]}, "qwen2.5:0.5b"),
        (200, {"data": [{"id": "qwen2.5:0.5b"}, {"id": "local"}]}, "local"),
        (200, {"data": [{"object": "model"}, {"id": " "}, {"id": "b"}]}, "b"),
        (200, {"data": []}, None),
        (200, {"models": "?"}, None),
        (200, ["not", "a", "listing"], None),
        (401, {"data": [{"id": "a"}]}, None),
    ],
)
def test_the_model_a_local_server_serves_is_read_from_its_listing(
    status: int, body: Any, named: str | None
) -> None:
    """``GET /models``: the first model listed, the placeholder's own name when listed (then it
    is a model the server serves), nothing from an answer that does not say."""
    from obsmem.models.environment import _served_name  # pyright: ignore[reportPrivateUsage]

    assert _served_name(status, body) == named


def test_the_served_model_is_asked_again_while_the_server_does_not_say() -> None:
    """A server that is down at the first memory call: the call names the placeholder, and the
    next one asks again (nothing is remembered from a failed ask)."""
    from obsmem.llm import ModelCaller

    from .strict_server import strict_server_thread

    async def ask(caller: ModelCaller) -> str:
        return await caller._in_place_of_placeholder()  # pyright: ignore[reportPrivateUsage]

    caller = ModelCaller()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
        assert asyncio.run(ask(caller)) == "openai/local"
        assert caller.served_in_place_of_placeholder is None
        with strict_server_thread(model_id="qwen2.5:0.5b") as server:
            patch.setenv("OPENAI_BASE_URL", server.base_url)
            assert asyncio.run(ask(caller)) == "openai/qwen2.5:0.5b"
    assert caller.served_in_place_of_placeholder == "openai/qwen2.5:0.5b"
