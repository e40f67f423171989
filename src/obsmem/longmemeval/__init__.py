"""The LongMemEval harness: load the official data, replay each haystack through observational
memory, ask the question through :class:`obsmem.Agent`, grade with an LLM judge, report.

``obsmem bench longmemeval`` is the command-line face of this package::

    questions = select_questions(load_questions("longmemeval_s.json"), limit=20)
    outcome = await run_benchmark(questions, RunConfig(reader="openai/gpt-6.1-terra",
                                                       judge="openai/gpt-4o"))
    print(format_report(summarize(outcome.results)))
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_names
from .data import (
    ABSTENTION,
    QUESTION_TYPES,
    DataError,
    Question,
    QuestionType,
    Turn,
    load_questions,
    parse_date,
    select_questions,
)
from .judge import Verdict, judge, judge_prompt, parse_verdict
from .report import (
    BenchReport,
    QuestionResult,
    TypeScore,
    append_result,
    format_report,
    percentile,
    read_results,
    summarize,
)

if TYPE_CHECKING:
    from .runner import (
        READER_INSTRUCTIONS,
        RunConfig,
        RunOutcome,
        RunProgress,
        haystack_messages,
        run_benchmark,
        run_question,
    )

_LAZY = {  # the runner loads the engine and the agent: only when used
    **dict.fromkeys(
        (
            "READER_INSTRUCTIONS",
            "RunConfig",
            "RunOutcome",
            "RunProgress",
            "haystack_messages",
            "run_benchmark",
            "run_question",
        ),
        "runner",
    ),
}


__getattr__ = lazy_names(__name__, _LAZY)


__all__ = [
    "ABSTENTION",
    "QUESTION_TYPES",
    "READER_INSTRUCTIONS",
    "BenchReport",
    "DataError",
    "Question",
    "QuestionResult",
    "QuestionType",
    "RunConfig",
    "RunOutcome",
    "RunProgress",
    "Turn",
    "TypeScore",
    "Verdict",
    "append_result",
    "format_report",
    "haystack_messages",
    "judge",
    "judge_prompt",
    "load_questions",
    "parse_date",
    "parse_verdict",
    "percentile",
    "read_results",
    "run_benchmark",
    "run_question",
    "select_questions",
    "summarize",
]
