"""``obsmem doctor``: check a model end to end before memory depends on it.

Three steps, each reported with what it took: the model is reachable (one tiny call); it
accepts the requests memory sends (one system message, string content, a streamed answer with
an output cap); and it answers a small built-in conversation in the observation format. Then it
says what to change, if anything. Exit 0 when the model is ready, 1 when it is not, 2 when no
model is configured.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, TextIO

from .arguments import Run, add_model
from .common import check_model, describe_failure, pick_model

if TYPE_CHECKING:
    from ..answers import ParsedOutput
    from ..llm import LLMRequest, LLMResult
    from ..messages import Message

__all__ = ["add"]

SAMPLE = [
    ("user", "Hi! I'm Ana. I'm planning a trip to Lisbon from May 3 to May 10."),
    ("assistant", "Lovely! Do you have a budget in mind for the hotel?"),
    ("user", "About 120 euros a night. And I'm allergic to shellfish, so careful with food tips."),
    ("assistant", "Noted. I suggest the Alfama area; Casa Azul is 110 euros a night."),
    ("user", "Book-worthy! Actually, make it May 4 to May 10, my flight moved."),
]
"""A small conversation with facts to keep, a change of plan, and the assistant's own advice."""


def add(parser: argparse.ArgumentParser) -> Run:
    """Calls the model three ways (a ping, the request shapes memory sends, and a small built-in
    conversation to observe), reports latency and tokens, and says what to change."""
    add_model(parser, "the model to check")
    parser.add_argument(
        "--timeout", type=float, default=120.0, help="seconds for the observation (default 120)"
    )
    return _run


def _run(args: argparse.Namespace, out: TextIO) -> int:
    model = pick_model(args)
    if model is None:
        return 2
    if not args.model:
        from ..models.environment import LOCAL_PLACEHOLDER, resolve_auto, served_choice

        choice = resolve_auto()
        if choice.model == LOCAL_PLACEHOLDER and model != LOCAL_PLACEHOLDER:
            # A Memory in the user's code asks the server the same way at its first call.
            choice = served_choice(model)
        print(f"model 'auto' (what memory uses here): {choice.model}, {choice.why}", file=out)
    return asyncio.run(_doctor(model, args.timeout, out))


async def _doctor(model: str, timeout: float, out: TextIO) -> int:  # noqa: ASYNC109
    from ..errors import ModelError, ObserverOutputError
    from ..llm import ModelCaller
    from ..observer import ObserverInput, observe
    from ..tokens import HeuristicEstimator

    print(f"obsmem doctor: {model}", file=out)
    started = time.monotonic()
    problem = await check_model(model, in_doctor=True)
    if problem is not None:
        print(f"  reachable      no: {problem}", file=out)
        print("verdict: not ready. Fix the above and run obsmem doctor again.", file=out)
        return 1
    print(f"  reachable      yes ({time.monotonic() - started:.1f} s)", file=out)
    context_advice = await _context_step(model, out)

    caller = ModelCaller()
    calls: list[tuple[LLMRequest, LLMResult]] = []
    caller.add_listener(lambda request, result: calls.append((request, result)))
    messages = _sample_messages()
    started = time.monotonic()
    advice: list[str] = []
    try:
        parsed, _ = await observe(
            ObserverInput(messages=messages),
            caller=caller,
            model=model,
            estimator=HeuristicEstimator(),
            timeout=timeout,
        )
    except ObserverOutputError as exc:
        parsed = None
        advice.append(_unusable_advice(calls, exc))
    except ModelError as exc:
        print(f"  requests       refused: {describe_failure(model, exc, in_doctor=True)}", file=out)
        print("verdict: not ready.", file=out)
        return 1
    took = time.monotonic() - started
    print(
        "  requests       accepted (one system message, string content, streamed, capped)",
        file=out,
    )
    _print_calls(calls, out)
    ready = parsed is not None
    if parsed is not None:
        ready = _observation_step(parsed, took, advice, out)
    for line in [*context_advice, *advice]:
        print(f"  advice         {line}", file=out)
    print("verdict: ready for memory work." if ready else "verdict: not ready.", file=out)
    return 0 if ready else 1


def _sample_messages() -> list[Message]:
    """:data:`SAMPLE` as messages, a minute apart from a fixed morning."""
    from ..messages import Message

    t0 = datetime(2026, 4, 20, 9, 0, tzinfo=UTC)
    return [
        Message(role=role, parts=Message.user(text).parts, created_at=t0 + timedelta(minutes=i))  # type: ignore[arg-type]
        for i, (role, text) in enumerate(SAMPLE)
    ]


def _unusable_advice(calls: list[tuple[LLMRequest, LLMResult]], exc: Exception) -> str:
    """The advice when the Observer's answers could not be used, from how its calls ended."""
    from ..models.streaming import REPEATING

    cut = [(request.max_output_tokens, result.cut_off) for request, result in calls]
    repeating = any(why == REPEATING for _, why in cut) or "degenerate" in str(exc)
    caps = [cap for cap, why in cut if why is not None and why != REPEATING]
    return _output_advice(repeating=repeating, cap=caps[0] if caps else None)


def _print_calls(calls: list[tuple[LLMRequest, LLMResult]], out: TextIO) -> None:
    """One line per Observer call: how long it took, its tokens (or their estimate) and cap."""
    from ..tokens import HeuristicEstimator

    count = HeuristicEstimator().count_text
    for request, result in calls:
        cut = f", cut off: {result.cut_off}" if result.cut_off else ""
        if result.output_tokens:
            tokens = f"{result.input_tokens} tokens in, {result.output_tokens} out"
        else:  # the server reported no usage: the local estimate
            tokens = f"~{request.input_tokens} tokens in, ~{count(result.text)} out (estimated)"
        print(
            f"  observer call  {result.duration_ms / 1000:.1f} s, {tokens} "
            f"(cap {request.max_output_tokens}){cut}",
            file=out,
        )


def _observation_step(parsed: ParsedOutput, took: float, advice: list[str], out: TextIO) -> bool:
    """Report the sample's observation (adding to ``advice`` what to change); whether it has
    observation lines."""
    lines = [line for line in parsed.observations.splitlines() if line.lstrip().startswith("*")]
    print(f"  observation    {len(lines)} lines in {took:.1f} s", file=out)
    if not lines:
        advice.append(
            "The answer has no observation lines: the model does not follow the format. "
            "Use a stronger Observer model."
        )
    if parsed.current_task is None:
        advice.append(
            "No <current-task> in the answer: continuation hints will be missing. Memory "
            "works without them; a stronger model writes them."
        )
    if took > 60:
        advice.append(
            f"Observing five short messages took {took:.0f} s: a 30,000-token batch will "
            "take far longer. Use a faster model, or lower observation.message_tokens."
        )
    return bool(lines)


async def _context_step(model: str, out: TextIO) -> list[str]:
    """Print the model's context window when its local server tells it, and return the advice
    when memory's default thresholds cannot fit it."""
    from ..options import resolve_options

    options = resolve_options(True)
    assert options is not None
    found = await context_fit(
        model,
        message_tokens=options.observation.message_tokens,
        observation_tokens=options.reflection.observation_tokens,
    )
    if found is None:
        return []
    window, source, advice = found
    print(f"  context        {window:,} tokens ({source})", file=out)
    if advice is None:
        return []
    return [f"As an actor this model overflows at the default thresholds: {advice}. {_COMPACTS}"]


_COMPACTS = (
    "(Memory compacts the thread and retries when a request is refused as too long, but lower "
    "thresholds avoid it.)"
)


async def context_fit(
    model: str, *, message_tokens: int, observation_tokens: int
) -> tuple[int, str, str | None] | None:
    """The context window a local server reports for ``model``, where it was read, and what to
    change when thresholds of ``message_tokens``/``observation_tokens`` cannot fit it (None
    when they fit); None when no local server tells the window."""
    from ..models.overflow import fit_advice

    found = await context_window(model)
    if found is None:
        return None
    window, source = found
    advice = fit_advice(
        window, message_tokens=message_tokens, observation_tokens=observation_tokens
    )
    return window, source, advice


async def fit_warning(model: str, *, message_tokens: int, observation_tokens: int) -> str | None:
    """A one-line warning when ``model``'s local server reports a context window the
    thresholds cannot fit, else None (also when the server does not tell)."""
    found = await context_fit(
        model, message_tokens=message_tokens, observation_tokens=observation_tokens
    )
    if found is None or found[2] is None:
        return None
    window, source, advice = found
    return (
        f"the thresholds do not fit {model}'s context window of {window:,} tokens ({source}): "
        f"{advice}. {_COMPACTS}"
    )


async def context_window(model: str, *, timeout: float = 5.0) -> tuple[int, str] | None:  # noqa: ASYNC109
    """The context window a local server reports for ``model`` and where it was read, or None.

    Only servers named by the environment are asked (``OPENAI_BASE_URL`` for ``openai/``
    models, ``OLLAMA_BASE_URL`` or Ollama's default for ``ollama/``), never a cloud API:
    llama.cpp's ``GET /props`` (``default_generation_settings.n_ctx``, the window it runs
    with), vLLM's ``GET /v1/models`` (``max_model_len``), llama.cpp's ``/v1/models``
    (``meta.n_ctx_train``, the window it was trained with), Ollama's ``POST /api/show``
    (``num_ctx`` in its parameters, else ``<arch>.context_length``)."""
    import httpx

    provider, _, name = model.replace(":", "/", 1).partition("/")
    if provider == "openai":
        base = os.environ.get("OPENAI_BASE_URL", "").strip()
    elif provider == "ollama":
        base = os.environ.get("OLLAMA_BASE_URL", "").strip() or "http://localhost:11434/v1"
    else:
        return None
    if not base:
        return None
    base = base.rstrip("/")
    root = base.removesuffix("/v1")
    async with httpx.AsyncClient(timeout=timeout) as client:

        async def get(url: str, payload: dict[str, Any] | None = None) -> Any:
            try:
                if payload is None:
                    response = await client.get(url)
                else:
                    response = await client.post(url, json=payload)
                return response.json() if response.status_code == 200 else None
            except (httpx.HTTPError, ValueError):
                return None

        if provider == "ollama":
            return _ollama_window(await get(f"{root}/api/show", {"model": name}))
        props = await get(f"{root}/props")
        n_ctx = _number(props, "default_generation_settings", "n_ctx")
        if n_ctx:
            return n_ctx, "llama.cpp /props"
        models = await get(f"{base}/models")
        data = models.get("data") if isinstance(models, dict) else None
        cards = [c for c in data if isinstance(c, dict)] if isinstance(data, list) else []
        card = next((c for c in cards if c.get("id") == name), cards[0] if cards else None)
        if card is None:
            return None
        if length := _number(card, "max_model_len"):
            return length, "/v1/models max_model_len"
        if trained := _number(card, "meta", "n_ctx_train"):
            return (
                trained,
                "/v1/models meta.n_ctx_train (the trained window; --ctx-size may be less)",
            )
    return None


def _ollama_window(show: Any) -> tuple[int, str] | None:
    if not isinstance(show, dict):
        return None
    parameters = show.get("parameters")
    if isinstance(parameters, str):
        for line in parameters.splitlines():
            key, _, value = line.partition(" ")
            if key == "num_ctx" and value.strip().isdigit():
                return int(value.strip()), "Ollama num_ctx"
    info = show.get("model_info")
    if isinstance(info, dict):
        for key, value in info.items():
            if str(key).endswith(".context_length") and isinstance(value, int):
                return value, (
                    "Ollama model_info; it runs with its num_ctx setting and cuts longer "
                    "prompts silently"
                )
    return None


def _number(value: Any, *path: str) -> int | None:
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _output_advice(*, repeating: bool, cap: int | None) -> str:
    """What to do when the Observer's answers could not be used: they looped, ran past obsmem's
    output cap (obsmem cut them off, so no max_tokens setting of the model's is at fault), or
    were not in the format."""
    fix = (
        "Use a stronger Observer model (--model), or check the server's chat template for this "
        "model (a wrong template makes a model ramble)."
    )
    if repeating:
        return (
            "The model's answers ran away: it repeated itself until obsmem cut it off (obsmem "
            f"stops an answer stuck in a loop), twice. {fix}"
        )
    if cap is not None:
        return (
            f"The model's answers ran away: it rambled past obsmem's output cap for this "
            f"observation ({cap} tokens) and obsmem cut it off, twice; the cap is obsmem's, "
            f"and a small observation fits well within it. {fix}"
        )
    return (
        "The model answered, but not in the observation format (no <observations>, no list "
        "lines), twice. It is too small or not instruction-tuned for this: use a stronger "
        "Observer model (--model)."
    )
