"""Per-question results (one JSON line each) and the report that sums them up."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, cast

from .data import ABSTENTION, QUESTION_TYPES, DataError

__all__ = [
    "BenchReport",
    "QuestionResult",
    "TypeScore",
    "append_result",
    "format_report",
    "percentile",
    "read_results",
    "summarize",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class QuestionResult:
    """What happened to one question: the answer, the verdict and what it took."""

    question_id: str
    question_type: str
    abstention: bool
    question: str
    answer: str
    hypothesis: str
    correct: bool
    judge_reply: str
    reader_input_tokens: int
    reader_output_tokens: int
    answer_latency_ms: float
    """The answer step: memory assembling the context plus the reader's call."""
    memory_calls: int
    memory_input_tokens: int
    memory_output_tokens: int
    memory_cost_usd: float | None
    """Observer and Reflector calls on this question; ``None`` when no price was known."""
    judge_input_tokens: int = 0
    judge_output_tokens: int = 0
    haystack_turns: int = 0
    replay_seconds: float = 0.0
    observation_tokens: int = 0
    """The size of the observation log when the question was asked."""
    generations: int = 0
    memory_failures: list[str] = field(default_factory=list[str])

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> QuestionResult:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


def read_results(path: str | Path) -> list[QuestionResult]:
    """The results already in a JSONL file (none when it does not exist)."""
    file = Path(path)
    if not file.exists():
        return []
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"cannot read the results file {file}: {exc}") from exc
    out: list[QuestionResult] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            if not isinstance(row, dict):
                raise TypeError("expected a JSON object")
            out.append(QuestionResult.from_json(cast(dict[str, Any], row)))
        except (json.JSONDecodeError, TypeError) as exc:
            raise DataError(
                f"{file}:{number}: not a result line ({exc}); fix or delete that line, or use "
                "another --out file"
            ) from exc
    return out


def append_result(path: str | Path, result: QuestionResult) -> None:
    """Add one line to the results file (one write, so a crash leaves whole lines)."""
    with Path(path).open("a", encoding="utf-8") as f:
        f.write(json.dumps(result.to_json(), ensure_ascii=False) + "\n")
        f.flush()


# -- the report ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class TypeScore:
    question_type: str
    total: int
    correct: int

    @property
    def accuracy(self) -> float:
        return self.correct / self.total if self.total else 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class BenchReport:
    """Accuracy overall and per type, tokens per question, answer latency and memory cost."""

    questions: int
    correct: int
    by_type: tuple[TypeScore, ...]
    """Each question type present, in LongMemEval's order, then ``abstention`` (the ``_abs``
    questions, which also count in their own type)."""
    reader_input_tokens: float
    """Mean per question."""
    memory_input_tokens: float
    memory_output_tokens: float
    memory_calls: float
    judge_input_tokens: float
    latency_p50_ms: float
    latency_p95_ms: float
    memory_cost_usd: float | None
    """Total over the questions whose calls were priced; ``None`` when none were."""
    priced_questions: int
    failed_questions: tuple[str, ...] = ()
    """Questions that could not be run (their errors), left out of the numbers."""

    @property
    def accuracy(self) -> float:
        return self.correct / self.questions if self.questions else 0.0

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["accuracy"] = round(self.accuracy, 4)
        out["by_type"] = {
            s.question_type: {
                "total": s.total,
                "correct": s.correct,
                "accuracy": round(s.accuracy, 4),
            }
            for s in self.by_type
        }
        return out


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100), interpolating between the closest ranks."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def _mean(values: Iterable[float]) -> float:
    items = list(values)
    return sum(items) / len(items) if items else 0.0


def summarize(results: Sequence[QuestionResult], *, failed: Sequence[str] = ()) -> BenchReport:
    """The report over ``results``."""
    order = [*QUESTION_TYPES, *sorted({r.question_type for r in results} - set(QUESTION_TYPES))]
    scores: list[TypeScore] = []
    for qtype in order:
        mine = [r for r in results if r.question_type == qtype]
        if mine:
            scores.append(
                TypeScore(
                    question_type=qtype, total=len(mine), correct=sum(r.correct for r in mine)
                )
            )
    unanswerable = [r for r in results if r.abstention]
    if unanswerable:
        scores.append(
            TypeScore(
                question_type=ABSTENTION,
                total=len(unanswerable),
                correct=sum(r.correct for r in unanswerable),
            )
        )
    costs = [r.memory_cost_usd for r in results if r.memory_cost_usd is not None]
    latencies = [r.answer_latency_ms for r in results]
    return BenchReport(
        questions=len(results),
        correct=sum(r.correct for r in results),
        by_type=tuple(scores),
        reader_input_tokens=_mean(r.reader_input_tokens for r in results),
        memory_input_tokens=_mean(r.memory_input_tokens for r in results),
        memory_output_tokens=_mean(r.memory_output_tokens for r in results),
        memory_calls=_mean(r.memory_calls for r in results),
        judge_input_tokens=_mean(r.judge_input_tokens for r in results),
        latency_p50_ms=percentile(latencies, 50),
        latency_p95_ms=percentile(latencies, 95),
        memory_cost_usd=round(sum(costs), 6) if costs else None,
        priced_questions=len(costs),
        failed_questions=tuple(failed),
    )


def format_report(report: BenchReport) -> str:
    """The report as a few lines of text."""
    lines = [
        f"accuracy {100 * report.accuracy:5.1f}%  ({report.correct}/{report.questions} questions)"
    ]
    for s in report.by_type:
        lines.append(f"  {s.question_type:<27} {100 * s.accuracy:5.1f}%  ({s.correct}/{s.total})")
    lines.append(
        f"tokens per question (mean): reader input {report.reader_input_tokens:,.0f}; "
        f"memory {report.memory_input_tokens:,.0f} in / {report.memory_output_tokens:,.0f} out "
        f"in {report.memory_calls:.1f} calls; judge input {report.judge_input_tokens:,.0f}"
    )
    lines.append(
        f"answer latency: p50 {report.latency_p50_ms:,.0f} ms, p95 {report.latency_p95_ms:,.0f} ms"
    )
    if report.memory_cost_usd is None:
        lines.append("memory cost: unknown (the memory model is not in the price list)")
    else:
        per = report.memory_cost_usd / max(1, report.priced_questions)
        lines.append(
            f"memory cost: ${report.memory_cost_usd:.4f} over {report.priced_questions} "
            f"question(s), ${per:.4f} per question"
        )
    for problem in report.failed_questions:
        lines.append(f"  not run: {problem}")
    return "\n".join(lines)
