"""Actor input tokens over a 1M-token conversation: obsmem vs sending the full history.

A synthetic conversation of ``--tokens`` tokens is replayed turn by turn through obsmem with
default options and scripted Observer/Reflector models (``obsmem.replay.replay``). At every turn
the actor would be sent either obsmem's context (observation log + raw window + the new input)
or the full history so far (every message, every turn). Both are counted with obsmem's
heuristic estimator; the totals are summed over all turns.

    python bench/tokens_1m.py           # 1.05M tokens (~2,000 turns)
    python bench/tokens_1m.py --quick   # tiny sizes (smoke test)
"""

from __future__ import annotations

import argparse
import asyncio
import time

from _common import Talk, header, ratio, table

from obsmem.engine import ObservationalMemory
from obsmem.replay import replay, turns_of
from obsmem.stores import InMemoryStore
from obsmem.testing import scripted_observer, scripted_reflector
from obsmem.tokens import TOKENS_PER_CONVERSATION, HeuristicEstimator


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=1_050_000, help="conversation size")
    parser.add_argument("--message-tokens", type=int, default=None, help="override the default")
    parser.add_argument("--quick", action="store_true", help="tiny sizes for the smoke test")
    args = parser.parse_args()
    options: dict[str, object] = {
        "observation": {"model": scripted_observer()},
        "reflection": {"model": scripted_reflector()},
    }
    if args.quick:
        args.tokens = 30_000
        options = {
            "observation": {"model": scripted_observer(), "message_tokens": 3_000},
            "reflection": {"model": scripted_reflector(), "observation_tokens": 2_000},
        }
    elif args.message_tokens:
        options["observation"] = {
            "model": scripted_observer(),
            "message_tokens": args.message_tokens,
        }
    om = ObservationalMemory(InMemoryStore(), options)
    estimator = HeuristicEstimator()
    talk = Talk(seed=4, user_tokens=150, assistant_tokens=350)
    messages = []
    size = 0
    while size < args.tokens:
        for m in talk.turn():
            messages.append(m)
            size += estimator.count_message(m)
    header(
        "actor input tokens: obsmem vs full history",
        conversation_tokens=size,
        messages=len(messages),
        options="defaults" if not args.quick else "scaled down (quick)",
        observer="scripted (12 words a line)",
        reflector="scripted (keeps half)",
    )

    started = time.perf_counter()
    report = await replay(om, messages)
    took = time.perf_counter() - started
    await om.aclose()

    full_total = 0
    prefix = 0
    largest_full = 0
    for inputs, replies in turns_of(messages):
        prefix += sum(estimator.count_message(m) for m in inputs)
        full = TOKENS_PER_CONVERSATION + prefix
        full_total += full
        largest_full = max(largest_full, full)
        prefix += sum(estimator.count_message(m) for m in replies)
    om_total = sum(p.context_tokens for p in report.points)
    largest_raw = max(p.raw_tokens for p in report.points)
    largest_log = max(p.log_tokens for p in report.points)
    th = report.thresholds
    obs_cycles = sum(1 for c in report.cycles if c["type"] == "observation")
    buf_cycles = sum(
        1 for c in report.cycles if c["type"] == "buffering" and c["operation"] == "observation"
    )

    print(f"# replayed {report.turns:,} turns in {took:.1f} s")
    print(
        f"# memory work: {buf_cycles} observation buffering cycles, {obs_cycles} synchronous "
        f"observations, {max(0, report.generations - 1)} reflections, "
        f"{report.model_calls} memory-model calls"
    )
    print()
    table(
        [
            ("full history", f"{full_total:,}", f"{largest_full:,}", "-", "-"),
            (
                "obsmem",
                f"{om_total:,}",
                f"{report.largest_context:,}",
                f"{largest_raw:,}",
                f"{largest_log:,}",
            ),
        ],
        [
            "actor input",
            "total tokens (all turns)",
            "largest context",
            "largest raw window",
            "largest log",
        ],
    )
    print()
    print(
        f"bounds: raw window block_after = {th['block_after']:,} "
        f"(message_tokens {th['message_tokens']:,}); log reflection block_after = "
        f"{th['reflection_block_after']:,} (observation_tokens {th['observation_tokens']:,})"
    )
    print()
    ratio("actor input tokens, full history / obsmem", full_total / om_total)
    ratio("largest raw window / observation block_after", largest_raw / (th["block_after"] or 1))
    ratio(
        "largest observation log / reflection block_after",
        largest_log / (th["reflection_block_after"] or 1),
    )
    ratio(
        "conversation tokens / largest obsmem context",
        report.conversation_tokens / report.largest_context,
    )


if __name__ == "__main__":
    asyncio.run(main())
