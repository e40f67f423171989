"""Running LongMemEval questions through observational memory.

For each question: a fresh store; the haystack sessions replayed turn by turn through the engine
with the haystack dates as the messages' times (and as the engine's clock); the question asked
through :class:`obsmem.Agent` with the question date as "now"; the answer graded by the judge.
Each question has its own :class:`~obsmem.Memory`, whose memory-model calls are counted through
``memory.add_call_listener``, so questions running side by side keep separate accounts.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from ..events import Event
from ..llm import LLMRequest, LLMResult, ModelCaller
from ..memory import Memory, ThreadRef
from ..messages import Message, TextPart
from ..models import ModelSpec
from ..replay import turns_of
from ..stores import InMemoryStore, Store
from ..tokens import HeuristicEstimator
from .data import Question
from .judge import judge
from .report import QuestionResult

if TYPE_CHECKING:
    from ..agent import GenerateResult
    from ..engine import ObservationalMemory

__all__ = [
    "READER_INSTRUCTIONS",
    "RunConfig",
    "RunOutcome",
    "RunProgress",
    "haystack_messages",
    "run_benchmark",
    "run_question",
]

READER_INSTRUCTIONS = (
    "You are a personal assistant answering the user's question about your past conversations "
    "with them. Answer from your memory only: the observations about earlier conversations and "
    "the recent messages you are shown. The message with the question gives the current date; "
    "use it for anything about time (how long ago, how many days between, what came first). "
    "When facts changed over time, answer with the latest. Answer concisely, in a sentence or "
    "two, without explaining how you found it. If your memory does not hold what is asked, say "
    "that you don't know because it was never mentioned."
)
THREAD = "longmemeval"
RESOURCE = "longmemeval-user"
_TURN_GAP = timedelta(seconds=30)


@dataclass(frozen=True, slots=True, kw_only=True)
class RunConfig:
    """Models and memory settings for a run."""

    reader: ModelSpec
    """Answers the question through :class:`obsmem.Agent`."""
    judge: ModelSpec
    observer: ModelSpec | None = None
    """Observer model (default: the reader)."""
    reflector: ModelSpec | None = None
    """Reflector model (default: the observer)."""
    message_tokens: int = 30_000
    observation_tokens: int = 40_000
    concurrency: int = 1
    instructions: str = READER_INSTRUCTIONS
    judge_settings: Mapping[str, Any] | None = None
    """pydantic-ai model settings for the judge (e.g. ``{"temperature": 0}``)."""
    store: Callable[[], Store] = InMemoryStore
    """Makes the fresh store of each question."""

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ConfigError("concurrency", self.concurrency, "run at least 1 question at once")

    def memory_options(self) -> dict[str, Any]:
        observer = self.observer if self.observer is not None else self.reader
        reflector = self.reflector if self.reflector is not None else observer
        return {
            "observation": {"model": observer, "messageTokens": self.message_tokens},
            "reflection": {"model": reflector, "observationTokens": self.observation_tokens},
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class RunProgress:
    questions_done: int
    questions_total: int
    turns_done: int
    """Haystack turns replayed, plus one per question answered."""
    turns_total: int


@dataclass(frozen=True, slots=True, kw_only=True)
class RunOutcome:
    results: list[QuestionResult]
    """In the order they finished."""
    failed: list[str] = field(default_factory=list[str])
    """``question_id: error`` of each question that could not be run."""


# -- accounting ----------------------------------------------------------------------------------


@dataclass(slots=True)
class _Tally:
    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    priced: bool = True

    def add(self, result: LLMResult) -> None:
        self.calls += 1
        self.input_tokens += result.input_tokens
        self.output_tokens += result.output_tokens
        if result.cost_usd is None:
            self.priced = False
        else:
            self.cost_usd += result.cost_usd


# -- one question --------------------------------------------------------------------------------


def haystack_messages(question: Question) -> list[Message]:
    """The haystack as messages: each session starts at its date, turns 30 seconds apart."""
    out: list[Message] = []
    for session, start in zip(question.haystack_sessions, question.session_times, strict=True):
        for i, turn in enumerate(session):
            out.append(
                Message(
                    role=turn.role,
                    parts=(TextPart(text=turn.content),),
                    created_at=start + i * _TURN_GAP,
                )
            )
    return out


async def run_question(
    question: Question,
    config: RunConfig,
    *,
    on_turn: Callable[[], None] | None = None,
    judge_caller: ModelCaller | None = None,
) -> QuestionResult:
    """Replay the haystack, ask, grade; ``on_turn`` is called after every replayed turn and
    once more when the question is answered. The engine tells time by the replayed
    conversation's dates."""
    tally = _Tally()

    def count(request: LLMRequest, result: LLMResult) -> None:
        tally.add(result)

    messages = haystack_messages(question)
    now = [messages[0].created_at if messages else question.asked_at]
    memory = Memory(
        config.store(), observational_memory=config.memory_options(), clock=lambda: now[0]
    )
    om = memory.om
    assert om is not None
    memory.add_call_listener(count)
    failures: list[str] = []

    def on_event(event: Event) -> None:
        if event.type.endswith("-failed"):
            failures.append(f"{event.type}: {getattr(event, 'error', '')}")

    unsubscribe = memory.subscribe(on_event)
    try:
        started = time.perf_counter()
        turns = await _replay(om, messages, now, on_turn)
        replay_seconds = time.perf_counter() - started

        now[0] = question.asked_at
        answer, latency_ms = await _ask(question, config, memory)
        log = await om.observations(THREAD, RESOURCE)
        generations = len(await om.history(THREAD, RESOURCE))
    finally:
        unsubscribe()
        await memory.aclose(cancel=True)  # background work started by the answer is not needed
    verdict = await judge(
        question,
        answer.text,
        config.judge,
        model_settings=config.judge_settings,
        caller=judge_caller,
    )
    if on_turn is not None:
        on_turn()
    return QuestionResult(
        question_id=question.question_id,
        question_type=question.question_type,
        abstention=question.abstention,
        question=question.question,
        answer=question.answer,
        hypothesis=answer.text,
        correct=verdict.correct,
        judge_reply=verdict.reply,
        reader_input_tokens=answer.input_tokens,
        reader_output_tokens=answer.output_tokens,
        answer_latency_ms=round(latency_ms, 1),
        memory_calls=tally.calls,
        memory_input_tokens=tally.input_tokens,
        memory_output_tokens=tally.output_tokens,
        memory_cost_usd=round(tally.cost_usd, 6) if tally.priced and tally.calls else None,
        judge_input_tokens=verdict.input_tokens,
        judge_output_tokens=verdict.output_tokens,
        haystack_turns=turns,
        replay_seconds=round(replay_seconds, 3),
        observation_tokens=HeuristicEstimator().count_text(log),
        generations=generations,
        memory_failures=failures,
    )


async def _replay(
    om: ObservationalMemory,
    messages: Sequence[Message],
    now: list[datetime],
    on_turn: Callable[[], None] | None,
) -> int:
    """Replay the haystack turn by turn, the clock (``now[0]``) at each message's date; the
    number of turns."""
    turns = 0
    for inputs, replies in turns_of(messages):
        now[0] = (inputs or replies)[0].created_at
        await om.prepare(THREAD, RESOURCE, inputs)
        if replies:
            now[0] = replies[-1].created_at
            await om.record(THREAD, RESOURCE, replies)
        await om.settle()
        turns += 1
        if on_turn is not None:
            on_turn()
    return turns


async def _ask(
    question: Question, config: RunConfig, memory: Memory
) -> tuple[GenerateResult, float]:
    """Ask the question through the reader agent; its answer and how long it took (ms)."""
    ask = Message.user(
        f"Current date: {question.question_date}\nQuestion: {question.question}",
        created_at=question.asked_at,
    )
    from ..agent import Agent  # the reader runs through pydantic-ai: load it only now

    agent = Agent("longmemeval-reader", config.instructions, config.reader, memory=memory)
    started = time.perf_counter()
    answer = await agent.generate(ask, memory=ThreadRef(thread=THREAD, resource=RESOURCE))
    return answer, (time.perf_counter() - started) * 1000


# -- a run ---------------------------------------------------------------------------------------


async def run_benchmark(
    questions: Sequence[Question],
    config: RunConfig,
    *,
    skip: Collection[str] = (),
    on_result: Callable[[QuestionResult], None] | None = None,
    progress: Callable[[RunProgress], None] | None = None,
) -> RunOutcome:
    """Run every question not in ``skip``, ``config.concurrency`` at a time.

    ``on_result`` gets each result as it is ready (the CLI appends it to the results file). A
    question that fails (a model or storage error) is reported in ``RunOutcome.failed`` and
    left out of the results, so a later run tries it again.
    """
    todo = [q for q in questions if q.question_id not in skip]
    turns_total = sum(_turn_count(q) + 1 for q in todo)
    state = {"turns": 0, "questions": 0}
    outcome = RunOutcome(results=[])
    gate = asyncio.Semaphore(config.concurrency)
    judge_caller = ModelCaller()  # the judge model is built once for the whole run

    def tell() -> None:
        if progress is not None:
            progress(
                RunProgress(
                    questions_done=state["questions"],
                    questions_total=len(todo),
                    turns_done=state["turns"],
                    turns_total=turns_total,
                )
            )

    async def one(question: Question) -> None:
        async with gate:
            counted = 0

            def on_turn() -> None:
                nonlocal counted
                counted += 1
                state["turns"] += 1
                tell()

            try:
                result = await run_question(
                    question, config, on_turn=on_turn, judge_caller=judge_caller
                )
            except Exception as exc:  # one bad question must not end a long run
                outcome.failed.append(f"{question.question_id}: {type(exc).__name__}: {exc}")
                state["turns"] += _turn_count(question) + 1 - counted
            else:
                outcome.results.append(result)
                if on_result is not None:
                    on_result(result)
            state["questions"] += 1
            tell()

    await asyncio.gather(*(one(q) for q in todo))
    return outcome


def _turn_count(question: Question) -> int:
    return sum(1 for _ in turns_of(haystack_messages(question)))
