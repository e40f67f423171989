"""``obsmem demo`` and ``obsmem replay FILE``."""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from ..errors import MissingExtraError
from .arguments import Run, add_memory_options
from .common import (
    Progress,
    check_model,
    check_output_path,
    db_label,
    memory_options,
    open_store,
    pick_model,
)

if TYPE_CHECKING:
    from ..messages import Message
    from ..replay import ReplayReport
    from ..stores.sqlstore import SQLStore

__all__ = ["add_demo", "add_replay"]


def add_demo(parser: argparse.ArgumentParser) -> Run:
    """Replays a conversation that ships with obsmem (five sessions over two weeks: a trip whose
    facts change, a tool-heavy debugging stretch, a shared image) through observational memory
    on the embedded SQLite default, prints the observation log and writes a PNG of the context
    size per turn."""
    add_memory_options(parser, message_tokens=3_000, observation_tokens=2_000)
    parser.add_argument("--plot", default="obsmem-demo.png", help="PNG to write")
    parser.add_argument("--report", help="also write a JSON report here")
    return _run_demo


def add_replay(parser: argparse.ArgumentParser) -> Run:
    """Feeds a conversation (obsmem JSONL, OpenAI chat messages as JSONL or a JSON array, a
    LoCoMo conversation, or a LongMemEval file) through observational memory turn by turn, with
    the recorded replies standing in for the agent."""
    parser.add_argument("file", help="the conversation to replay")
    add_memory_options(parser)
    parser.add_argument("--question", help="LongMemEval: the question_id whose haystack to use")
    parser.add_argument("--plot", help="write the context-size PNG here")
    parser.add_argument("--report", help="write a JSON report here")
    parser.add_argument("--quiet", action="store_true", help="do not print the observation log")
    return _run_replay


def _run_demo(args: argparse.Namespace, out: TextIO) -> int:
    from ..replay import DEMO_CONVERSATION, load_conversation

    model = pick_model(args)
    if model is None:
        return 2
    store = open_store(args.db)  # checked: a file or database that is not obsmem's is refused
    messages = load_conversation(DEMO_CONVERSATION)
    thread = f"demo-{datetime.now(UTC):%Y%m%d-%H%M%S-%f}"
    print(
        f"obsmem demo: {len(messages)} messages, Observer/Reflector {model}, "
        f"store {db_label(args.db)}",
        file=out,
    )
    return asyncio.run(
        _replay(args, out, model, messages, thread, title="obsmem demo", store=store)
    )


def _run_replay(args: argparse.Namespace, out: TextIO) -> int:
    from ..replay import ReplayError, load_conversation

    try:
        messages = load_conversation(args.file, question=args.question)
    except ReplayError as exc:
        print(f"obsmem: {exc}", file=__import__("sys").stderr)
        return 2
    model = pick_model(args)
    if model is None:
        return 2
    store = open_store(args.db)  # checked: a file or database that is not obsmem's is refused
    thread = f"replay-{Path(args.file).stem}-{datetime.now(UTC):%Y%m%d-%H%M%S-%f}"
    return asyncio.run(
        _replay(args, out, model, messages, thread, title=Path(args.file).name, store=store)
    )


async def _replay(
    args: argparse.Namespace,
    out: TextIO,
    model: str,
    messages: Sequence[Message],
    thread: str,
    *,
    title: str,
    store: SQLStore,
) -> int:
    import sys

    from ..engine import ObservationalMemory
    from ..replay import replay

    problem = check_output_path(args.plot, "the plot") or check_output_path(
        args.report, "the report"
    )
    if problem is None and args.plot:
        from ..plot import can_plot

        try:
            can_plot()
        except MissingExtraError as exc:
            problem = str(exc)
    if problem is None:
        problem = await check_model(model)
    if problem is not None:
        print(f"obsmem: {problem}", file=sys.stderr)
        await store.aclose()
        return 2
    om = ObservationalMemory(store, memory_options(args, model))
    try:
        # Message ids are global in a store: give this run's copies ids of their own.
        own = [replace(m, id=f"{thread}:{m.id}") for m in messages]
        progress = Progress(title)  # redraws while a turn waits, saying on what
        async with progress.ticking():
            report = await replay(
                om,
                own,
                thread_id=thread,
                resource_id="replay",
                progress=progress,
                activity=progress.activity,
            )
    finally:
        await om.aclose()
        await store.aclose()
    _summary(report, out, thread=thread, quiet=getattr(args, "quiet", False))
    if args.plot:
        from ..plot import plot_sawtooth

        path = plot_sawtooth(report, args.plot, title=f"{title}: context size per turn")
        print(f"wrote {path}", file=out)
    if args.report:
        text = json.dumps(report.to_json(), indent=2)
        await asyncio.to_thread(Path(args.report).write_text, text, encoding="utf-8")
        print(f"wrote {args.report}", file=out)
    return 0 if not report.failures else 1


def _summary(report: ReplayReport, out: TextIO, *, thread: str, quiet: bool) -> None:
    if not quiet:
        print("\n--- observation log ---", file=out)
        print(report.final_log or "(empty)", file=out)
        print("--- end of log ---\n", file=out)
    observed = sum(c["tokens_in"] for c in report.cycles if c["operation"] == "observation")
    written = sum(c["tokens_out"] for c in report.cycles if c["operation"] == "observation")
    ratio = f"{observed / written:.1f}x" if written else "n/a"
    cost = f"${report.cost_usd:.4f}" if report.cost_usd is not None else "unknown"
    failed = f", {len(report.failures)} failed" if report.failures else ""
    print(
        f"thread {thread}: {report.turns} turns, {report.conversation_tokens:,} tokens of "
        f"conversation; largest context {report.largest_context:,} tokens; "
        f"{len(report.cycles)} memory cycles done{failed} (observation compression {ratio}); "
        f"{report.generations} generation(s); {report.model_calls} model calls, "
        f"{'~' if report.usage_estimated else ''}{report.model_input_tokens:,} in / "
        f"{report.model_output_tokens:,} out"
        f"{' (estimated: the server reported no usage)' if report.usage_estimated else ''}, "
        f"cost {cost}",
        file=out,
    )
    for failure in report.failures:
        print(f"  failed: {failure}", file=out)
    if not report.healthy:
        print("memory is not working as it should:", file=out)
        for line in report.status:
            print(f"  {line}", file=out)
    elif report.status:
        print(f"  {report.status[0]}", file=out)
