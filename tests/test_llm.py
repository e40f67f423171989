from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from pydantic_ai import messages as pa
from pydantic_ai.exceptions import ModelHTTPError
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage

from obsmem import llm
from obsmem.errors import ModelError
from obsmem.llm import LLMRequest, LLMResult, ModelCaller, cost_usd
from obsmem.messages import FilePart, ImagePart
from obsmem.models import ModelByInputTokens

PNG = b"\x89PNG\r\n\x1a\nfake"


@pytest.fixture(scope="module")
def _exporter() -> InMemorySpanExporter:
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return exporter


@pytest.fixture
def spans(_exporter: InMemorySpanExporter) -> Iterator[InMemorySpanExporter]:
    _exporter.clear()
    yield _exporter
    _exporter.clear()


@pytest.fixture
def sleeps() -> list[float]:
    """Retry delays asked for by ``caller``, none slept."""
    return []


@pytest.fixture
def caller(sleeps: list[float]) -> ModelCaller:
    async def fake_sleep(seconds: float) -> None:
        sleeps.append(seconds)

    return ModelCaller(sleep=fake_sleep)


def answering(text: str, seen: list[list[pa.ModelMessage]] | None = None) -> FunctionModel:
    def fn(messages: list[pa.ModelMessage], info: AgentInfo) -> pa.ModelResponse:
        if seen is not None:
            seen.append(messages)
        return pa.ModelResponse(
            parts=[pa.TextPart(text), pa.TextPart("!")],
            usage=RequestUsage(input_tokens=120, output_tokens=7),
        )

    return FunctionModel(fn, model_name=f"fn-{text}")


def request(model: Any, **kw: Any) -> LLMRequest:
    return LLMRequest(role="observer", model=model, system="You observe.", user=["hi"], **kw)


async def test_sends_one_system_and_one_user_message_and_returns_text_and_usage(
    caller: ModelCaller,
) -> None:
    seen: list[list[pa.ModelMessage]] = []
    image = ImagePart(media_type="image/png", data=PNG)
    result = await caller.call(
        LLMRequest(
            role="observer",
            model=answering("ok", seen),
            system="Watch closely.",
            user=["transcript", image, "tail"],
            model_settings={"temperature": 0.3},
        )
    )
    [[sent]] = seen
    assert isinstance(sent, pa.ModelRequest)
    system, user = sent.parts
    assert isinstance(system, pa.SystemPromptPart)
    assert system.content == "Watch closely."
    assert isinstance(user, pa.UserPromptPart)
    assert user.content == [
        "transcript",
        pa.BinaryContent(PNG, media_type="image/png"),
        "tail",
    ]
    assert (result.text, result.model_name, result.provider) == ("ok!", "fn-ok", "function")
    assert (result.input_tokens, result.output_tokens, result.cost_usd) == (120, 7, None)
    assert result.duration_ms >= 0


async def test_model_settings_reach_the_model(caller: ModelCaller) -> None:
    got: list[Any] = []

    def fn(messages: list[pa.ModelMessage], info: AgentInfo) -> pa.ModelResponse:
        got.append(info.model_settings)
        return pa.ModelResponse(parts=[pa.TextPart("x")])

    await caller.call(request(FunctionModel(fn), model_settings={"temperature": 0.25}))
    assert got[0] is not None
    assert got[0]["temperature"] == 0.25


@pytest.mark.parametrize(
    ("item", "expected"),
    [
        (ImagePart(url="https://x/a.png"), pa.ImageUrl("https://x/a.png", media_type="image/png")),
        (
            ImagePart(data=PNG, detail="low"),
            pa.BinaryContent(PNG, media_type="image/png", vendor_metadata={"detail": "low"}),
        ),
        (
            FilePart(media_type="application/pdf", url="https://x/a.pdf"),
            pa.DocumentUrl("https://x/a.pdf", media_type="application/pdf"),
        ),
        (
            FilePart(media_type="audio/wav", url="https://x/a.wav"),
            pa.AudioUrl("https://x/a.wav", media_type="audio/wav"),
        ),
        (
            FilePart(media_type="video/mp4", url="https://x/a.mp4"),
            pa.VideoUrl("https://x/a.mp4", media_type="video/mp4"),
        ),
        (
            FilePart(media_type="text/plain", data=b"notes"),
            pa.BinaryContent(b"notes", media_type="text/plain"),
        ),
    ],
)
def test_attachments_become_pydantic_ai_content(item: ImagePart | FilePart, expected: Any) -> None:
    assert llm._content(item) == expected  # pyright: ignore[reportPrivateUsage]


@pytest.mark.parametrize(
    ("tokens", "chosen", "tier"), [(0, "small", 100), (100, "small", 100), (101, "large", 1000)]
)
async def test_model_by_input_tokens_routes_on_the_estimate(
    caller: ModelCaller, spans: InMemorySpanExporter, tokens: int, chosen: str, tier: int
) -> None:
    router = ModelByInputTokens(up_to={100: answering("small"), 1000: answering("large")})
    result = await caller.call(request(router, input_tokens=tokens))
    assert result.text == f"{chosen}!"
    [span] = spans.get_finished_spans()
    assert span.attributes is not None
    assert span.attributes["obsmem.model_tier"] == tier


async def test_input_larger_than_every_tier_is_a_model_error(caller: ModelCaller) -> None:
    router = ModelByInputTokens(up_to={100: answering("small")})
    with pytest.raises(ModelError, match="more than the largest tier"):
        await caller.call(request(router, input_tokens=101))


async def test_string_specs_are_resolved_once(caller: ModelCaller) -> None:
    first = await caller.call(request("test"))
    model = caller.resolve("test")
    await caller.call(request("test"))
    assert caller.resolve("test") is model
    assert caller.resolve(" test") is not model  # cached by the spec as written
    assert first.model_name == "test"
    assert first.cost_usd is None


async def test_callers_keep_their_own_listeners_and_resolved_models() -> None:
    first, second = ModelCaller(), ModelCaller()
    heard: dict[str, list[str]] = {"first": [], "second": []}

    def listener(name: str) -> llm.CallListener:
        def hear(request: LLMRequest, result: LLMResult) -> None:
            heard[name].append(result.text)

        return hear

    remove_first = first.add_listener(listener("first"))
    second.add_listener(listener("second"))
    await first.call(request(answering("one")))
    await second.call(request(answering("two")))
    assert heard == {"first": ["one!"], "second": ["two!"]}

    remove_first()
    remove_first()  # removing twice is harmless
    await first.call(request(answering("three")))
    assert heard == {"first": ["one!"], "second": ["two!"]}

    model = first.resolve("test")
    assert first.resolve("test") is model
    assert second.resolve("test") is not model


def test_resolve_returns_a_model_instance_as_it_is() -> None:
    model = answering("x")
    assert ModelCaller().resolve(model) is model


def failing(errors: list[Exception], calls: list[int]) -> FunctionModel:
    def fn(messages: list[pa.ModelMessage], info: AgentInfo) -> pa.ModelResponse:
        calls.append(1)
        if errors:
            raise errors.pop(0)
        return pa.ModelResponse(parts=[pa.TextPart("recovered")])

    return FunctionModel(fn, model_name="flaky")


async def test_transient_error_is_retried(caller: ModelCaller, sleeps: list[float]) -> None:
    calls: list[int] = []
    model = failing([ModelHTTPError(503, "flaky", "overloaded")], calls)
    result = await caller.call(request(model, retry_budget=5.0))
    assert result.text == "recovered"
    assert len(calls) == 2
    assert len(sleeps) == 1


async def test_transient_errors_past_the_budget_become_model_error(
    caller: ModelCaller, sleeps: list[float]
) -> None:
    calls: list[int] = []
    model = failing([ModelHTTPError(503, "flaky", "overloaded")] * 3, calls)
    with pytest.raises(ModelError, match="the observer call to model 'flaky' gave up") as info:
        await caller.call(request(model, retry_budget=0.0))
    assert isinstance(info.value.__cause__, ModelHTTPError)
    assert len(calls) == 1
    assert sleeps == []


async def test_non_transient_error_is_wrapped_without_retry(
    caller: ModelCaller, sleeps: list[float], spans: InMemorySpanExporter
) -> None:
    calls: list[int] = []
    model = failing([ModelHTTPError(400, "flaky", "bad request")], calls)
    with pytest.raises(ModelError, match="observer call to model 'flaky' failed") as info:
        await caller.call(request(model, retry_budget=5.0))
    assert isinstance(info.value.__cause__, ModelHTTPError)
    assert len(calls) == 1
    assert sleeps == []
    [span] = spans.get_finished_spans()
    assert span.status.status_code is StatusCode.ERROR
    assert [e.name for e in span.events] == ["exception"]
    assert span.events[0].attributes is not None
    assert str(span.events[0].attributes["exception.type"]).endswith("ModelError")


ECHOED = "sk-proj-Q7vX2mNcR4tY8uWz1aBd5eFg9hJk3LpS"


@pytest.mark.parametrize(("status", "retried"), [(401, False), (503, True)])
async def test_a_key_the_provider_echoes_leaves_in_no_error_activity_or_span(
    caller: ModelCaller, spans: InMemorySpanExporter, status: int, retried: bool
) -> None:
    """A refusal that echoes the key (not retried, or retried until the budget ends): the
    error raised, what activity listeners are told and the span all say it without the key."""
    body = {"error": {"message": f"Incorrect API key provided: Bearer {ECHOED}"}}
    errors: list[Exception] = [ModelHTTPError(status, "flaky", body) for _ in range(2)]
    seen: list[llm.CallActivity] = []
    caller.add_activity_listener(seen.append)
    with pytest.raises(ModelError) as info:
        await caller.call(request(failing(errors, []), retry_budget=0.0 if retried else 5.0))
    told = [activity.describe() for activity in seen]
    [span] = spans.get_finished_spans()
    recorded = [str(v) for e in span.events for v in (e.attributes or {}).values()]
    for text in [str(info.value), *told, span.status.description or "", *recorded]:
        assert ECHOED not in text
    assert "[redacted]" in str(info.value)
    assert [e.name for e in span.events] == ["exception"]


async def test_timeout_becomes_model_error(caller: ModelCaller) -> None:
    never = asyncio.Event()

    async def fn(messages: list[pa.ModelMessage], info: AgentInfo) -> pa.ModelResponse:
        await never.wait()
        raise AssertionError("unreachable")

    with pytest.raises(ModelError, match=r"timed out after 0\.05 s"):
        async with asyncio.timeout(60):  # a hang fails the test, not the suite
            await caller.call(request(FunctionModel(fn, model_name="slow"), timeout=0.05))


def attributes(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


async def test_one_span_per_call_with_gen_ai_attributes(
    caller: ModelCaller, spans: InMemorySpanExporter
) -> None:
    await caller.call(
        LLMRequest(
            role="reflector",
            model=answering("ok"),
            system="s",
            user=["u"],
            input_tokens=42,
            operation="reflection",
            cycle_id="c-1",
        )
    )
    [span] = spans.get_finished_spans()
    assert span.name == "obsmem.reflector"
    assert span.status.status_code is not StatusCode.ERROR
    assert attributes(span) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "fn-ok",
        "gen_ai.response.model": "fn-ok",
        "gen_ai.provider.name": "function",
        "gen_ai.usage.input_tokens": 120,
        "gen_ai.usage.output_tokens": 7,
        "obsmem.operation": "reflection",
        "obsmem.cycle_id": "c-1",
        "obsmem.input_tokens_estimate": 42,
    }


@pytest.mark.parametrize(
    ("model_name", "provider", "known"),
    [
        ("gpt-4o-mini", "openai", True),
        ("gpt-4o-mini", None, True),
        ("fn-ok", "function", False),
        ("no-such-model-xyz", "openai", False),
    ],
)
def test_cost(model_name: str, provider: str | None, known: bool) -> None:
    usage = RequestUsage(input_tokens=1_000_000, output_tokens=1_000_000)
    cost = cost_usd(usage, model_name=model_name, provider=provider)
    if known:
        assert isinstance(cost, float)
        assert cost > 0
        assert cost_usd(RequestUsage(), model_name=model_name, provider=provider) == 0
    else:
        assert cost is None


def test_importing_the_model_seam_loads_no_model_library() -> None:
    """pydantic-ai, OpenTelemetry, the price list and provider SDKs load on first use only."""
    heavy = ("pydantic_ai", "opentelemetry", "genai_prices", "openai", "anthropic", "google")
    heavy += ("numpy", "matplotlib")
    code = (
        "import importlib, sys\n"
        "importlib.import_module('obsmem.models')\n"
        "importlib.import_module('obsmem.llm')\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {heavy!r}))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


# -- activity: what a call is doing, as it happens ----------------------------------------------


async def test_activity_listeners_see_start_retries_and_end(
    caller: ModelCaller, sleeps: list[float]
) -> None:
    from obsmem.llm import CallActivity

    seen: list[CallActivity] = []
    remove = caller.add_activity_listener(seen.append)
    error = ModelHTTPError(500, "flaky", {"message": "upstream exploded", "code": 500})
    result = await caller.call(request(failing([error], []), retry_budget=5.0))
    assert result.text == "recovered"
    assert [a.kind for a in seen] == ["start", "retry", "end"]
    start, retry, end = seen
    assert start.call_id == retry.call_id == end.call_id
    assert start.model_name == "flaky"
    assert start.describe() == "Observer call to flaky"
    assert retry.error is error
    assert retry.attempt == 2
    assert retry.delay == sleeps[0]
    assert "retry 2 in " in retry.describe()
    assert retry.describe().endswith("after HTTP 500: upstream exploded")
    assert end.error is None
    assert end.attempt == 2

    remove()
    await caller.call(request(answering("again")))
    assert len(seen) == 3


async def test_activity_tells_the_error_that_ended_a_call(caller: ModelCaller) -> None:
    from obsmem.llm import CallActivity

    seen: list[CallActivity] = []
    caller.add_activity_listener(seen.append)
    with pytest.raises(ModelError):
        await caller.call(request(failing([ModelHTTPError(400, "flaky", "bad")], [])))
    assert [a.kind for a in seen] == ["start", "end"]
    assert isinstance(seen[-1].error, ModelError)
    assert "failed after" in seen[-1].describe()


async def test_a_failing_activity_listener_does_not_fail_the_call(
    caller: ModelCaller, caplog: pytest.LogCaptureFixture
) -> None:
    from obsmem.llm import CallActivity

    def broken(activity: CallActivity) -> None:
        raise RuntimeError("display bug")

    caller.add_activity_listener(broken)
    result = await caller.call(request(answering("fine")))
    assert result.text == "fine!"
    assert "activity listener failed" in caplog.text


async def test_a_timeout_names_the_last_error_it_met() -> None:
    """A call that runs out of time while retrying says what it was retrying, not only that
    it timed out."""
    error = ModelHTTPError(500, "flaky", {"message": "upstream exploded"})
    never = asyncio.Event()

    async def slow_sleep(seconds: float) -> None:
        await never.wait()

    caller = ModelCaller(sleep=slow_sleep)
    with pytest.raises(ModelError) as info:
        # The first attempt fails at once; the deadline then falls in the endless pause.
        await caller.call(request(failing([error], []), timeout=0.5, retry_budget=30.0))
    message = str(info.value)
    assert "timed out after 0.5 s (retries included); last error: HTTP 500: upstream" in message


async def _timed_out_while_retrying(hang_in: str) -> TimeoutError:
    """The TimeoutError of an ``asyncio.timeout`` around ``call_with_retry`` that hangs in its
    pause (``"sleep"``) or in its second attempt (``"attempt"``) after a 503."""
    from obsmem.models.retry import call_with_retry

    never = asyncio.Event()
    attempts: list[int] = []

    async def attempt() -> str:
        attempts.append(1)
        if len(attempts) > 1:
            await never.wait()  # the second attempt hangs
        raise ModelHTTPError(503, "m", {"message": "loading model"})

    async def sleep(seconds: float) -> None:
        if hang_in == "sleep":
            await never.wait()

    with pytest.raises(TimeoutError) as info:
        async with asyncio.timeout(0.05):
            await call_with_retry(attempt, sleep=sleep)
    return info.value


@pytest.mark.parametrize("hang_in", ["sleep", "attempt"])
async def test_a_deadline_outside_the_call_keeps_the_last_error_for_the_report(
    hang_in: str,
) -> None:
    """A cycle's own deadline (``asyncio.timeout`` around the call) cancels it between attempts
    or during one: the TimeoutError it raises still leads to the last error."""
    from obsmem.cycles.common import describe_error

    error = await _timed_out_while_retrying(hang_in)
    assert describe_error(error) == "timed out; last error: HTTP 503: loading model"


async def test_a_deadline_before_any_error_is_only_a_timeout() -> None:
    from obsmem.cycles.common import describe_error

    with pytest.raises(TimeoutError) as bare:
        async with asyncio.timeout(0.01):
            await asyncio.Event().wait()
    assert describe_error(bare.value) == "timed out"


async def test_retry_listener_and_give_up_message_name_the_server_answer() -> None:
    from obsmem.models.retry import call_with_retry

    told: list[tuple[int, BaseException, float]] = []
    error = ModelHTTPError(502, "m", {"error": {"message": "bad gateway upstream"}})

    async def attempt() -> str:
        raise error

    async def no_sleep(seconds: float) -> None:
        return None

    times = iter([0.0, 0.0, 0.5, 2.0, 2.0])
    with pytest.raises(ModelError) as info:
        await call_with_retry(
            attempt,
            max_total=1.0,
            jitter=0.0,
            sleep=no_sleep,
            clock=lambda: next(times),
            on_retry=lambda n, e, d: told.append((n, e, d)),
        )
    assert told == [(2, error, 1.0), (3, error, 0.5)]
    assert "last error: HTTP 502: bad gateway upstream. Check" in str(info.value)


def _level(level: str) -> dict[str, object]:
    """Gemini 3's thinking setting on the wire: a level, no thought summaries."""
    return {"include_thoughts": False, "thinking_level": level}


@pytest.mark.parametrize(
    ("model_name", "role", "thinking"),
    [
        ("gemini-2.5-flash", "observer", {"thinking_budget": 215}),
        ("gemini-2.5-flash", "reflector", {"thinking_budget": 1_024}),
        # Gemini 3 and later take a level, not a budget: bounded, not the provider's default.
        ("gemini-3.5-flash-lite", "observer", _level("MINIMAL")),
        ("gemini-3.5-flash-lite", "reflector", _level("LOW")),
        ("gemini-3.5-flash-lite", "extractor", _level("LOW")),
        # A model without the minimal level gets its lowest.
        ("gemini-3.1-pro-preview", "observer", _level("LOW")),
    ],
)
async def test_gemini_memory_models_think_within_bounds_and_have_an_output_cap(
    model_name: str, role: str, thinking: dict[str, object]
) -> None:
    from .captured_requests import CapturedApi

    api = CapturedApi("gemini", script=["<observations>\n* 🔴 (10:00) noted\n</observations>"])
    api.model_name = model_name
    sent = LLMRequest(
        role=role,  # type: ignore[arg-type]
        model=api.model(),
        system="s",
        user=["u"],
        max_output_tokens=2_000,
    )
    await ModelCaller().call(sent)
    [body] = api.requests
    config = body["generationConfig"]
    assert config["maxOutputTokens"] == 2_000
    assert config["thinkingConfig"] == thinking


async def test_a_gemini_thinking_setting_of_the_users_own_wins() -> None:
    from .captured_requests import CapturedApi

    api = CapturedApi("gemini", model_name="gemini-3.5-flash-lite")
    sent = LLMRequest(
        role="observer",
        model=api.model(),
        system="s",
        user=["u"],
        model_settings={"google_thinking_config": {"thinking_level": "HIGH"}},
    )
    await ModelCaller().call(sent)
    assert api.requests[0]["generationConfig"]["thinkingConfig"] == {"thinking_level": "HIGH"}
