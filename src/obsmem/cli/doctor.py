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
import time
from datetime import UTC, datetime, timedelta
from typing import Any, TextIO

from .common import check_model, describe_failure, pick_model

__all__ = ["add"]

SAMPLE = [
    ("user", "Hi! I'm Ana. I'm planning a trip to Lisbon from May 3 to May 10."),
    ("assistant", "Lovely! Do you have a budget in mind for the hotel?"),
    ("user", "About 120 euros a night. And I'm allergic to shellfish, so careful with food tips."),
    ("assistant", "Noted. I suggest the Alfama area; Casa Azul is 110 euros a night."),
    ("user", "Book-worthy! Actually, make it May 4 to May 10, my flight moved."),
]
"""A small conversation with facts to keep, a change of plan, and the assistant's own advice."""


def add(sub: Any) -> None:
    parser = sub.add_parser(
        "doctor",
        help="check that a model can serve as Observer and Reflector",
        description="Calls the model three ways (a ping, the request shapes memory sends, and a "
        "small built-in conversation to observe), reports latency and tokens, and says what to "
        "change.",
    )
    parser.add_argument(
        "--model",
        help="the model to check, e.g. openai/gpt-5-mini (default: from OBSMEM_MODEL or a "
        "provider key in the environment)",
    )
    parser.add_argument(
        "--timeout", type=float, default=120.0, help="seconds for the observation (default 120)"
    )
    parser.set_defaults(run=_run)


def _run(args: argparse.Namespace, out: TextIO) -> int:
    model = pick_model(args)
    if model is None:
        return 2
    return asyncio.run(_doctor(model, args.timeout, out))


async def _doctor(model: str, timeout: float, out: TextIO) -> int:  # noqa: ASYNC109
    from ..errors import ModelError, ObserverOutputError
    from ..llm import LLMRequest, LLMResult, ModelCaller
    from ..messages import Message
    from ..observer import ObserverInput, observe
    from ..tokens import HeuristicEstimator

    print(f"obsmem doctor: {model}", file=out)
    started = time.monotonic()
    problem = await check_model(model)
    if problem is not None:
        print(f"  reachable      no: {problem}", file=out)
        print("verdict: not ready. Fix the above and run obsmem doctor again.", file=out)
        return 1
    print(f"  reachable      yes ({time.monotonic() - started:.1f} s)", file=out)

    caller = ModelCaller()
    calls: list[tuple[LLMRequest, LLMResult]] = []
    caller.add_listener(lambda request, result: calls.append((request, result)))
    t0 = datetime(2026, 4, 20, 9, 0, tzinfo=UTC)
    messages = [
        Message(role=role, parts=Message.user(text).parts, created_at=t0 + timedelta(minutes=i))  # type: ignore[arg-type]
        for i, (role, text) in enumerate(SAMPLE)
    ]
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
        ran_away = any(result.cut_off for _, result in calls)
        advice.append(_output_advice(str(exc), ran_away=ran_away))
    except ModelError as exc:
        print(f"  requests       refused: {describe_failure(model, exc)}", file=out)
        print("verdict: not ready.", file=out)
        return 1
    took = time.monotonic() - started
    print(
        "  requests       accepted (one system message, string content, streamed, capped)",
        file=out,
    )
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
    ready = parsed is not None
    if parsed is not None:
        lines = [line for line in parsed.observations.splitlines() if line.lstrip().startswith("*")]
        print(f"  observation    {len(lines)} lines in {took:.1f} s", file=out)
        ready = bool(lines)
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
    for line in advice:
        print(f"  advice         {line}", file=out)
    print("verdict: ready for memory work." if ready else "verdict: not ready.", file=out)
    return 0 if ready else 1


def _output_advice(error: str, *, ran_away: bool) -> str:
    if ran_away or "degenerate" in error:
        return (
            "The model's answers ran away (it rambles or repeats itself; they were cut off). "
            "Use a larger Observer model, or a lower temperature in observation.model_settings."
        )
    return (
        "The model answered, but not in the observation format (no <observations>, no list "
        "lines), twice. It is too small or not instruction-tuned for this: use a stronger "
        "Observer model."
    )
