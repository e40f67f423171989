"""Grading a hypothesis the way LongMemEval does: a yes/no LLM judge with a rule per type.

The rules follow the official evaluation (the wording is obsmem's own): a response is correct
when it contains the gold answer, is equivalent to it, or lays out every step that leads to it (a
part of the required information is not enough); temporal questions forgive off-by-one counts of
days, weeks or months; knowledge-update responses may mention older information as long as the
updated answer is the one given; preference questions are graded against a rubric (correct when
the response recalls and uses the user's personal information correctly, without needing every
point); abstention questions are correct when the response says the question cannot be answered.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from ..errors import ModelError, ObsmemError
from ..models import ModelByInputTokens, ModelSpec, call_with_retry, resolve_model
from .data import Question

if TYPE_CHECKING:
    from ..llm import ModelCaller

__all__ = ["Verdict", "judge", "judge_prompt", "parse_verdict"]

_INTRO = (
    "You are grading an answer from a chat assistant that was asked about its past "
    "conversations with a user. You get the question, the {gold}, and the assistant's "
    "response.\n\n"
)
_CONTAINS = (
    "Reply yes when the response contains the correct answer: it states it, says something "
    "equivalent, or gives more information that includes it. Reply yes as well when the "
    "response works through every step that leads to the correct answer. Reply no when the "
    "response gives only part of the information the correct answer needs, gives a different "
    "answer, or does not answer."
)
_RULES: Mapping[str, str] = {
    "default": _CONTAINS,
    "temporal-reasoning": _CONTAINS
    + " Do not count an off-by-one error in a number of days, weeks, months and so on as wrong: "
    "if the correct answer is 18 days and the response says 19 days, reply yes.",
    "knowledge-update": "Reply yes when the response contains the correct answer. The user's "
    "information changed over time: a response that also mentions the earlier information is "
    "still correct, as long as the answer it gives is the updated one named as correct. Reply "
    "no otherwise.",
    "single-session-preference": "The rubric describes what a good personalised response "
    "does. Reply yes when the response recalls the user's personal information and uses it "
    "correctly; it does not have to cover every point of the rubric. Reply no when it ignores "
    "or gets wrong what the user told about themselves.",
    "abstention": "The question cannot be answered from the conversations; the explanation "
    "says why. Reply yes when the response recognises this: it says the information is not "
    "known, was never mentioned or is incomplete, or that something else was mentioned but not "
    "what is asked. Reply no when the response answers the question as if it were known.",
}
_GOLD = {
    "default": ("correct answer", "Correct answer"),
    "single-session-preference": ("rubric for a good personalised response", "Rubric"),
    "abstention": ("explanation of why it cannot be answered", "Explanation"),
}


def _kind(question: Question) -> str:
    if question.abstention:
        return "abstention"
    return question.question_type if question.question_type in _RULES else "default"


def judge_prompt(question: Question, hypothesis: str) -> str:
    """The judge's prompt for ``hypothesis`` (the rule of the question's type, or abstention)."""
    kind = _kind(question)
    gold_long, gold_label = _GOLD.get(kind, _GOLD["default"])
    return (
        _INTRO.format(gold=gold_long)
        + _RULES[kind]
        + f"\n\nQuestion: {question.question}\n\n"
        + f"{gold_label}: {question.answer}\n\n"
        + f"Response: {hypothesis}\n\n"
        + "Is the response correct? Reply with yes or no only."
    )


_YES = re.compile(r"\byes\b", re.IGNORECASE)
_NO = re.compile(r"\bno\b", re.IGNORECASE)


def parse_verdict(reply: str) -> bool:
    """The judge's yes/no: its first yes or no word decides (no answer at all is no)."""
    yes, no = _YES.search(reply), _NO.search(reply)
    if yes is None:
        return False
    return no is None or yes.start() < no.start()


@dataclass(frozen=True, slots=True, kw_only=True)
class Verdict:
    correct: bool
    reply: str
    input_tokens: int = 0
    output_tokens: int = 0
    duration_ms: float = 0.0
    prompt: str = field(default="", repr=False)


async def judge(
    question: Question,
    hypothesis: str,
    model: ModelSpec,
    *,
    model_settings: Mapping[str, Any] | None = None,
    retry_budget: float = 60.0,
    caller: ModelCaller | None = None,
) -> Verdict:
    """Ask ``model`` whether ``hypothesis`` answers ``question`` (one user message).

    With ``caller``, a string ``model`` is resolved through it (one SDK client for every
    question); the call itself is not reported to the caller's listeners, which count the memory
    models' calls.
    """
    from pydantic_ai import messages as pa
    from pydantic_ai.direct import model_request
    from pydantic_ai.settings import ModelSettings

    prompt = judge_prompt(question, hypothesis)
    spec = model.resolve(len(prompt) // 4) if isinstance(model, ModelByInputTokens) else model
    resolved = resolve_model(spec) if caller is None else caller.resolve(spec)
    messages: list[pa.ModelMessage] = [pa.ModelRequest(parts=[pa.UserPromptPart(content=prompt)])]
    settings = cast(ModelSettings, dict(model_settings)) if model_settings else None
    what = f"the judge call to model {resolved.model_name!r}"

    async def attempt() -> pa.ModelResponse:
        return await model_request(resolved, messages, model_settings=settings)

    started = time.perf_counter()
    try:
        response = await call_with_retry(attempt, max_total=retry_budget, what=what)
    except ObsmemError:
        raise
    except Exception as exc:
        raise ModelError(f"{what} failed: {type(exc).__name__}: {exc}") from exc
    reply = "".join(p.content for p in response.parts if isinstance(p, pa.TextPart))
    return Verdict(
        correct=parse_verdict(reply),
        reply=reply.strip(),
        input_tokens=response.usage.input_tokens,
        output_tokens=response.usage.output_tokens,
        duration_ms=(time.perf_counter() - started) * 1000,
        prompt=prompt,
    )
