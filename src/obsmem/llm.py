"""The one seam every memory-model call goes through (Observer, Reflector, extractors).

A ``ModelCaller`` resolves the model (routing a ``ModelByInputTokens`` by the request's
input-token estimate), sends one system message and one user message (a plain string when it is
text only, as strict OpenAI-compatible servers require) through pydantic-ai's direct API,
streams the answer and cuts it off when it runs away (past the request's output cap, or
repeating itself), retries transient errors within a budget, bounds the whole call by a timeout,
and reports the answer with its token usage and cost to its listeners. Activity listeners
are told as it happens: when a call starts, when a retry is scheduled (the error and the
delay) and when it ends, so a progress display can say what it waits on. A model that cannot
stream (a ``FunctionModel`` without a stream function) is called once and checked afterwards.
Each call is one OpenTelemetry span named ``obsmem.<role>``; without an OpenTelemetry SDK
configured the span costs nothing.

Importing this module loads neither pydantic-ai nor OpenTelemetry; the first call does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal, TypeAlias, cast

from obsmem.errors import ModelError, ObsmemError
from obsmem.events import Listeners
from obsmem.messages import FilePart, ImagePart, display_text
from obsmem.models.describe import provider_of
from obsmem.models.environment import LOCAL_PLACEHOLDER, served_model_async
from obsmem.models.providers import resolve_model
from obsmem.models.retry import call_with_retry, describe_exception, last_error
from obsmem.models.settings import call_settings
from obsmem.models.specs import ModelByInputTokens, ModelSpec
from obsmem.models.streaming import RunawayGuard, can_stream, check_every, read_checked
from obsmem.redaction import redact, remember_model_keys

if TYPE_CHECKING:
    from opentelemetry.trace import Span
    from pydantic_ai import messages as pa
    from pydantic_ai.models import Model
    from pydantic_ai.settings import ModelSettings
    from pydantic_ai.usage import RequestUsage

__all__ = [
    "ActivityListener",
    "CallActivity",
    "CallListener",
    "Gate",
    "LLMRequest",
    "LLMResult",
    "ModelCaller",
    "Role",
    "cost_usd",
]

Role = Literal["observer", "reflector", "extractor"]

Gate: TypeAlias = Callable[[str], contextlib.AbstractAsyncContextManager[object]]
"""What a model call waits to enter, by model name (a limit on concurrent calls)."""

log = logging.getLogger("obsmem")


@dataclass(frozen=True, slots=True, kw_only=True)
class LLMRequest:
    """One call to a memory model: a system message and the content of one user message."""

    role: Role
    model: ModelSpec
    system: str
    """Instructions, sent as the system message."""
    user: Sequence[str | ImagePart | FilePart]
    """The content of the one user message: text pieces and attachments, in order."""
    model_settings: Mapping[str, Any] = field(default_factory=dict[str, Any])
    """pydantic-ai ``ModelSettings`` keys (``temperature``, ``max_tokens``, ...)."""
    input_tokens: int = 0
    """Local estimate of the input size; picks the ``ModelByInputTokens`` tier."""
    timeout: float | None = None
    """Seconds for the whole call, retries included; ``None`` waits as long as it takes."""
    retry_budget: float = 60.0
    """Most seconds spent retrying transient errors (rate limits, 5xx, connection errors)."""
    operation: str = ""
    """What the call is for (``"observation"``, ``"buffering"``, ``"reflection"``), for traces."""
    cycle_id: str = ""
    max_output_tokens: int | None = None
    """Most tokens the answer may take. Sent as ``max_tokens`` unless the settings name one,
    and enforced while the answer streams (a server may ignore ``max_tokens``): the answer is
    cut off there, and also as soon as it repeats itself (``LLMResult.cut_off``)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LLMResult:
    """The model's answer and what it cost."""

    text: str
    """The text parts of the answer, concatenated."""
    model_name: str
    provider: str | None
    input_tokens: int
    """From the response's usage (0 when the provider did not say)."""
    output_tokens: int
    cost_usd: float | None
    """Priced with ``genai_prices``; ``None`` when the model is not in its price list."""
    duration_ms: float
    cut_off: str | None = None
    """Why the answer was cut off (past the output cap, repeating itself); None when whole."""


CallListener: TypeAlias = Callable[[LLMRequest, LLMResult], None]
"""Told about each successful call: the request and its result."""

_ROLE_NAMES = {"observer": "Observer", "reflector": "Reflector", "extractor": "extractor"}


@dataclass(frozen=True, slots=True, kw_only=True)
class CallActivity:
    """What a memory-model call is doing, as it happens (see ``ModelCaller.add_activity_listener``).

    ``kind`` is ``"start"`` (the model is chosen, the first attempt goes out), ``"retry"`` (a
    transient error; attempt ``attempt`` goes out in ``delay`` seconds) or ``"end"`` (the call
    returned, ``error`` None, or failed or was cancelled, ``error`` set). One call's events share
    ``call_id``.
    """

    kind: Literal["start", "retry", "end"]
    request: LLMRequest
    call_id: int
    model_name: str
    attempt: int = 1
    """The attempt that goes out (``"start"``: 1; ``"retry"``: 2 for the first retry) or, at
    ``"end"``, the last one made."""
    error: BaseException | None = None
    """``"retry"``: the error that is retried; ``"end"``: what ended the call, if it failed."""
    delay: float = 0.0
    """``"retry"``: seconds until the next attempt."""
    elapsed: float = 0.0
    """Seconds since the call started."""

    def describe(self) -> str:
        """What the call waits on, in a few words: ``Observer call to gpt-5-mini``, or
        ``Observer call to gpt-5-mini: retry 2 in 1.0 s after HTTP 500: <the server's
        message>``; at ``"end"``, how it ended."""
        role = _ROLE_NAMES.get(self.request.role, self.request.role)
        background = " (background)" if self.request.operation == "buffering" else ""
        what = f"{role} call{background} to {self.model_name}"
        if self.kind == "retry" and self.error is not None:
            return (
                f"{what}: retry {self.attempt} in {self.delay:.1f} s after "
                f"{describe_exception(self.error)}"
            )
        if self.kind == "end":
            if self.error is None:
                return f"{what}: answered in {self.elapsed:.1f} s"
            if isinstance(self.error, asyncio.CancelledError):
                return f"{what}: cancelled after {self.elapsed:.1f} s"
            return f"{what}: failed after {self.elapsed:.1f} s: {_one_line(str(self.error))}"
        return what


ActivityListener: TypeAlias = Callable[[CallActivity], None]
"""Told about each call's start, retries and end (``CallActivity``)."""


def _one_line(text: str, limit: int = 300) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1].rstrip() + "…"


class ModelCaller:
    """Sends memory-model calls (Observer, Reflector, extractors): resolves each string spec once,
    retries transient errors, bounds each call by its timeout, reports usage and cost, and tells
    its listeners.

    ``sleep`` waits between retries (tests pass one that records the delays and returns at once).
    """

    __slots__ = (
        "_activity",
        "_calls",
        "_listeners",
        "_resolved",
        "_sleep",
        "_text_only",
        "gate",
        "served_in_place_of_placeholder",
    )

    def __init__(self, *, sleep: Callable[[float], Awaitable[object]] = asyncio.sleep) -> None:
        self._sleep = sleep
        self._listeners: Listeners[CallListener] = Listeners()
        self._activity: Listeners[ActivityListener] = Listeners()
        self._calls = 0
        """Calls started, numbering each call's activity (``CallActivity.call_id``)."""
        self._resolved: dict[str, Model] = {}
        """Models resolved from strings, kept so each spec builds its SDK client once."""
        self._text_only: set[tuple[str, str]] = set()
        """Models (name, base URL) whose server refused attachments: sent text only since."""
        self.gate: Gate | None = None
        """Entered around each call with the model's name (a worker's limit on concurrent calls
        per model, held across workers: :class:`obsmem.queue.slots.ModelSlots`)."""
        self.served_in_place_of_placeholder: str | None = None
        """The model the server at ``OPENAI_BASE_URL`` said it serves, called in place of
        ``"auto"``'s placeholder ``openai/local`` (None until a call named it and the server
        said)."""

    async def call(self, request: LLMRequest) -> LLMResult:
        """Send ``request`` to its model and return the answer.

        Raises ``ModelError`` when the model cannot be resolved, the call fails with a
        non-transient error, transient errors outlast ``retry_budget``, or the whole call exceeds
        ``timeout``.
        """
        from opentelemetry import trace

        started = time.perf_counter()
        if request.model == LOCAL_PLACEHOLDER:
            request = replace(request, model=await self._in_place_of_placeholder())
        tracer = trace.get_tracer("obsmem")
        # The span records a failure itself, redacted: OpenTelemetry's own record would carry
        # the provider's error (the cause chain's stack trace) as it was, key and all.
        with tracer.start_as_current_span(
            f"obsmem.{request.role}", record_exception=False, set_status_on_exception=False
        ) as span:
            try:
                return await self._call_in_span(request, span, started)
            except BaseException as exc:
                _record_failure(span, exc)
                raise

    async def _call_in_span(self, request: LLMRequest, span: Span, started: float) -> LLMResult:
        """``call`` within its span: choose the model, tell the listeners, send the request."""
        span.set_attributes(
            {
                "gen_ai.operation.name": "chat",
                "obsmem.operation": request.operation,
                "obsmem.cycle_id": request.cycle_id,
                "obsmem.input_tokens_estimate": request.input_tokens,
            }
        )
        model, tier = self._choose_model(request)
        if tier is not None:
            span.set_attribute("obsmem.model_tier", tier)
        span.set_attribute("gen_ai.request.model", model.model_name)
        provider = provider_of(model)
        if provider is not None:
            span.set_attribute("gen_ai.provider.name", provider)

        self._calls += 1
        call_id, attempts = self._calls, [1]

        def tell(kind: Literal["start", "retry", "end"], **detail: Any) -> None:
            elapsed = time.perf_counter() - started
            self._tell(
                CallActivity(
                    kind=kind,
                    request=request,
                    call_id=call_id,
                    model_name=model.model_name,
                    attempt=attempts[0],
                    elapsed=elapsed,
                    **detail,
                )
            )

        def on_retry(attempt: int, error: BaseException, delay: float) -> None:
            attempts[0] = attempt
            tell("retry", error=error, delay=delay)

        tell("start")
        gate = self.gate(model.model_name) if self.gate is not None else contextlib.nullcontext()
        try:
            async with gate:
                response, cut_off = await self._request(request, model, on_retry)
        except BaseException as exc:
            tell("end", error=exc)
            raise
        tell("end")
        result = _result_of(response, model, provider, cut_off, started=started, span=span)
        for listener in self._listeners:
            listener(request, result)
        return result

    async def _in_place_of_placeholder(self) -> str:
        """The model to call for the placeholder ``openai/local``: the one the server at
        ``OPENAI_BASE_URL`` serves, asked once (again at the next call while it does not say)."""
        if self.served_in_place_of_placeholder is None:
            name = await served_model_async()
            if name is not None:
                self.served_in_place_of_placeholder = served = f"openai/{name}"
                if served != LOCAL_PLACEHOLDER:
                    log.info(
                        "obsmem: memory models use %s, the model the server at OPENAI_BASE_URL "
                        "serves (OBSMEM_MODEL chooses another)",
                        served,
                    )
        return self.served_in_place_of_placeholder or LOCAL_PLACEHOLDER

    def add_listener(self, listener: CallListener) -> Callable[[], None]:
        """Be told about every successful call made through this caller (the CLI's reports use
        it); returns the function that removes the listener."""
        return self._listeners.add(listener)

    def add_activity_listener(self, listener: ActivityListener) -> Callable[[], None]:
        """Be told, as it happens, when each call made through this caller starts, when it
        schedules a retry (with the error and the delay) and when it ends (progress displays
        use it to say what they wait on); returns the function that removes the listener.

        Listeners run on the caller's event loop and must not block; an exception one raises is
        logged and does not affect the call."""
        return self._activity.add(listener)

    def _tell(self, activity: CallActivity) -> None:
        for listener in self._activity:
            try:
                listener(activity)
            except Exception:  # a display's bug must not fail memory's call
                log.exception("obsmem: an activity listener failed on %s", activity.kind)

    def resolve(self, spec: str | Model) -> Model:
        """The pydantic-ai ``Model`` for ``spec``: a ``Model`` as it is, a string resolved on its
        first use and the same instance after (see ``obsmem.models.resolve_model``)."""
        if not isinstance(spec, str):
            return resolve_model(spec)
        model = self._resolved.get(spec)
        if model is None:
            model = self._resolved[spec] = resolve_model(spec)
        return model

    def _choose_model(self, request: LLMRequest) -> tuple[Model, int | None]:
        """The pydantic-ai model for ``request`` and, when routed, the chosen tier's limit.
        Its key is remembered for redaction before it is sent (``obsmem.redaction``)."""
        spec, tier = request.model, None
        if isinstance(spec, ModelByInputTokens):
            tier, spec = spec.select(request.input_tokens)
        model = self.resolve(spec)
        remember_model_keys(model)
        return model, tier

    async def _request(
        self,
        request: LLMRequest,
        model: Model,
        on_retry: Callable[[int, BaseException, float], None] | None = None,
    ) -> tuple[pa.ModelResponse, str | None]:
        what = f"the {request.role} call to model {model.model_name!r}"
        text_only, messages = _prompts(request)
        key = (model.model_name, str(getattr(model, "base_url", "")))
        wanted = call_settings(request.role, model, request.model_settings)
        if request.max_output_tokens is not None:
            wanted.setdefault("max_tokens", request.max_output_tokens)
        settings = cast("ModelSettings", wanted) if wanted else None
        guard = RunawayGuard(request.max_output_tokens)

        async def attempt() -> tuple[pa.ModelResponse, str | None]:
            if messages is text_only or key in self._text_only:
                return await _send(model, text_only, settings, guard)
            try:
                return await _send(model, messages, settings, guard)
            except Exception as exc:
                if not _refuses_attachments(exc):
                    raise
                log.warning(
                    "%s: the server refused a request with attachments (%s); sending their "
                    "text placeholders from now on",
                    what,
                    describe_exception(exc),
                )
                self._text_only.add(key)
                return await _send(model, text_only, settings, guard)

        deadline = asyncio.timeout(request.timeout)
        try:
            async with deadline:
                return await call_with_retry(
                    attempt,
                    max_total=request.retry_budget,
                    sleep=self._sleep,
                    what=what,
                    on_retry=on_retry,
                )
        except ObsmemError:
            raise
        except Exception as exc:
            timed_out = isinstance(exc, TimeoutError) and deadline.expired()
            raise _call_error(exc, what, timeout=request.timeout, timed_out=timed_out) from exc


def _prompts(request: LLMRequest) -> tuple[list[pa.ModelMessage], list[pa.ModelMessage]]:
    """The request's messages as text only, and as sent (the same list when it is text only).

    Text only: one string (strict servers' chat templates refuse a list). Attachments also
    stand in the text as placeholders, which is what is left when a server refuses them."""
    from pydantic_ai import messages as pa

    content = [_content(item) for item in request.user]
    texts = [c for c in content if isinstance(c, str)]

    def ask(user: str | list[pa.UserContent]) -> list[pa.ModelMessage]:
        system = pa.SystemPromptPart(content=request.system)
        return [pa.ModelRequest(parts=[system, pa.UserPromptPart(content=user)])]

    text_only = ask("\n\n".join(texts))
    return text_only, text_only if len(texts) == len(content) else ask(content)


async def _send(
    model: Model, sent: list[pa.ModelMessage], settings: ModelSettings | None, guard: RunawayGuard
) -> tuple[pa.ModelResponse, str | None]:
    """One attempt: the answer (streamed when the model can) and why it was cut off, if it was."""
    from pydantic_ai import messages as pa
    from pydantic_ai.direct import model_request
    from pydantic_ai.exceptions import UnexpectedModelBehavior

    if not can_stream(model):
        response = await model_request(model, sent, model_settings=settings)
        return response, guard.check(_text_of(response))  # after the fact
    try:
        return await _stream(model, sent, settings, guard)
    except UnexpectedModelBehavior as exc:
        if "without content" not in str(exc):
            raise
        # A stream that ended with nothing in it (small local models do this) is an
        # empty answer, which the caller counts as a failed attempt and asks again.
        return pa.ModelResponse(parts=[]), None


def _call_error(exc: Exception, what: str, *, timeout: float | None, timed_out: bool) -> ModelError:
    """The ``ModelError`` a failed call raises: a timeout (with the last error met), or an
    error that is not retried."""
    if timed_out:
        last = last_error(exc)
        met = f"; last error: {describe_exception(last)}" if last is not None else ""
        return ModelError(
            f"{what} timed out after {timeout:g} s (retries included){met}; "
            "raise the timeout, or use a faster model or smaller inputs"
        )
    return ModelError(
        f"{what} failed: {type(exc).__name__}: {redact(str(exc))}. This error is not retried; "
        "check the model name, its settings and the provider account"
    )


def _record_failure(span: Span, exc: BaseException) -> None:
    """What OpenTelemetry records of an exception that leaves a span (its status, an
    ``exception`` event), with the text redacted and without the cause chain: the chain holds
    the provider's own error as it came."""
    import traceback

    from opentelemetry.trace import Status, StatusCode

    message = redact(str(exc))
    span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {message}"))
    span.add_event(
        "exception",
        {
            "exception.type": f"{type(exc).__module__}.{type(exc).__qualname__}",
            "exception.message": message,
            "exception.stacktrace": redact("".join(traceback.format_exception(exc, chain=False))),
            "exception.escaped": "True",
        },
    )


def _result_of(
    response: pa.ModelResponse,
    model: Model,
    provider: str | None,
    cut_off: str | None,
    *,
    started: float,
    span: Span,
) -> LLMResult:
    """The call's result from the model's answer (its usage and cost), recorded on ``span``."""
    model_name = response.model_name or model.model_name
    usage = response.usage
    cost = cost_usd(usage, model_name=model_name, provider=provider)
    span.set_attributes(
        {
            "gen_ai.response.model": model_name,
            "gen_ai.usage.input_tokens": usage.input_tokens,
            "gen_ai.usage.output_tokens": usage.output_tokens,
        }
    )
    if cost is not None:
        span.set_attribute("obsmem.cost_usd", cost)
    result = LLMResult(
        text=display_text(_text_of(response)) or "",
        model_name=model_name,
        provider=provider,
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cost_usd=cost,
        duration_ms=(time.perf_counter() - started) * 1000,
        cut_off=cut_off,
    )
    if cut_off is not None:
        span.set_attribute("obsmem.cut_off", cut_off)
    return result


def _refuses_attachments(exc: BaseException) -> bool:
    """Whether ``exc`` is a server refusing the request's shape (a list of content parts, an
    image) rather than an outage: a 400, 415 or 422, or a 500 that names the content (how
    llama.cpp's template fails), never a rate limit or a 502-504."""
    status = getattr(exc, "status_code", None)
    if status in (400, 415, 422):
        return True
    text = str(exc).lower()
    return status == 500 and any(w in text for w in ("list", "image", "content", "multimodal"))


async def _stream(
    model: Model,
    messages: list[pa.ModelMessage],
    settings: Any,
    guard: RunawayGuard,
) -> tuple[pa.ModelResponse, str | None]:
    """Stream the answer, checking it every ``CHECK_EVERY_CHARS`` characters; leaving the
    stream early closes the connection, so the server stops generating."""
    from pydantic_ai.direct import model_request_stream

    async with model_request_stream(model, messages, model_settings=settings) as stream:
        verdict = await read_checked(stream, guard.check, every=check_every(guard.cap))
        response = stream.get()
    if verdict is None:
        verdict = guard.check(_text_of(response))
    return response, verdict


def _text_of(response: pa.ModelResponse) -> str:
    from pydantic_ai import messages as pa

    return "".join(p.content for p in response.parts if isinstance(p, pa.TextPart))


def _content(item: str | ImagePart | FilePart) -> pa.UserContent:
    from pydantic_ai import messages as pa

    if isinstance(item, str):
        return display_text(item) or ""
    vendor = {"detail": item.detail} if isinstance(item, ImagePart) and item.detail else None
    if item.data is not None:
        return pa.BinaryContent(item.data, media_type=item.media_type, vendor_metadata=vendor)
    url = cast(str, item.url)  # a part always has data or a url
    if isinstance(item, ImagePart):
        return pa.ImageUrl(url, media_type=item.media_type, vendor_metadata=vendor)
    if item.media_type.startswith("audio/"):
        return pa.AudioUrl(url, media_type=item.media_type)
    if item.media_type.startswith("video/"):
        return pa.VideoUrl(url, media_type=item.media_type)
    return pa.DocumentUrl(url, media_type=item.media_type)


def cost_usd(usage: RequestUsage, *, model_name: str, provider: str | None) -> float | None:
    """The price in US dollars of ``usage`` on ``model_name``; ``None`` when it is not known."""
    import genai_prices

    try:
        price = genai_prices.calc_price(usage, model_name, provider_id=provider)
    except Exception:  # unknown model or provider, or a price-list problem: cost is optional
        return None
    return float(price.total_price)
