"""``obsmem bench longmemeval``: accuracy on LongMemEval with observational memory."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from ..longmemeval.data import QUESTION_TYPES, DataError, Question, load_questions, select_questions
from ..longmemeval.report import (
    QuestionResult,
    append_result,
    format_report,
    read_results,
    summarize,
)
from .arguments import Run, add_model, add_thresholds, at_least_one
from .common import Progress, check_model, pick_model

if TYPE_CHECKING:
    from ..longmemeval.runner import RunConfig, RunProgress

__all__ = ["add"]


def add(parser: argparse.ArgumentParser) -> Run:
    """Benchmarks of observational memory."""
    benches = parser.add_subparsers(dest="bench", required=True)
    lme = benches.add_parser(
        "longmemeval",
        help="answer LongMemEval questions from memory and grade them with an LLM judge",
        description="For each question of a LongMemEval data file (S, M, oracle or cleaned): "
        "replays its haystack sessions through observational memory on a fresh store, with the "
        "haystack dates as message times; asks the question through an obsmem Agent with the "
        "reader model and the question date as the current date; grades the answer with the "
        "judge model using LongMemEval's per-type rules. Prints accuracy overall and per type, "
        "tokens per question, answer latency and memory cost. Results are appended to --out, "
        "one JSON line per question; running again skips the questions already there.",
    )
    lme.add_argument("--data", required=True, help="LongMemEval JSON file")
    add_model(lme, "model that answers", flag="--reader")
    lme.add_argument("--judge", help="model that grades, e.g. openai/gpt-4o (default: as --reader)")
    lme.add_argument("--observer", help="Observer and Reflector model (default: the reader)")
    lme.add_argument(
        "--out", help="results file, JSONL (default: <data file stem>-results.jsonl here)"
    )
    lme.add_argument("--limit", type=at_least_one, help="run only the first N selected questions")
    lme.add_argument(
        "--types",
        help=f"comma-separated question types to run ({', '.join(QUESTION_TYPES)}, abstention)",
    )
    lme.add_argument(
        "--concurrency", type=at_least_one, default=1, help="questions at once (default 1)"
    )
    add_thresholds(lme, 30_000, 40_000)
    return _run_longmemeval  # the one bench there is (a second would set its own run)


def _run_longmemeval(args: argparse.Namespace, out: TextIO) -> int:
    data = Path(args.data)
    results_file = Path(args.out) if args.out else Path(f"{data.stem}-results.jsonl")
    types = [t.strip() for t in (args.types or "").split(",") if t.strip()]
    try:
        questions = select_questions(load_questions(data), types=types, limit=args.limit)
        earlier = read_results(results_file)
    except DataError as exc:
        print(f"obsmem: {exc}", file=sys.stderr)
        return 2
    if not questions:
        print(f"obsmem: no question of type {', '.join(types)} in {data}", file=sys.stderr)
        return 2
    wanted = {q.question_id for q in questions}
    done = {r.question_id: r for r in earlier if r.question_id in wanted}
    todo = [q for q in questions if q.question_id not in done]

    reader: str | None = pick_model(args, "reader") if todo else args.reader
    if reader is None and todo:
        return 2
    print(
        f"LongMemEval {data.name}: {len(questions)} question(s) selected, {len(done)} already in "
        f"{results_file}, {len(todo)} to run",
        file=out,
    )
    failed: list[str] = []
    if todo and reader is not None:
        from ..longmemeval.runner import RunConfig

        judge: str = args.judge or reader
        observer: str = args.observer or reader
        print(f"reader {reader}, judge {judge}, observer {observer}", file=out)
        config = RunConfig(
            reader=reader,
            judge=judge,
            observer=observer,
            message_tokens=args.message_tokens,
            observation_tokens=args.observation_tokens,
            concurrency=args.concurrency,
        )
        code, failed, new = asyncio.run(_run(config, todo, results_file))
        if code:
            return code
        done.update((r.question_id, r) for r in new)
    ordered = [done[q.question_id] for q in questions if q.question_id in done]
    print(format_report(summarize(ordered, failed=failed)), file=out)
    if todo:
        print(f"results in {results_file}", file=out)
    return 1 if failed else 0


async def _run(
    config: RunConfig, todo: list[Question], results_file: Path
) -> tuple[int, list[str], list[QuestionResult]]:
    models = dict.fromkeys(str(m) for m in (config.reader, config.judge, config.observer))
    for model in models:
        problem = await check_model(model)
        if problem is not None:
            print(f"obsmem: {problem}", file=sys.stderr)
            return 2, [], []
    from ..longmemeval.runner import run_benchmark

    bar = Progress("longmemeval")

    def progress(p: RunProgress) -> None:
        bar.label = f"longmemeval {p.questions_done}/{p.questions_total} questions"
        bar(p.turns_done, p.turns_total)

    outcome = await run_benchmark(
        todo,
        config,
        on_result=lambda r: append_result(results_file, r),
        progress=progress,
    )
    return 0, outcome.failed, outcome.results
