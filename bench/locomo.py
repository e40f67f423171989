"""Replays of the LoCoMo conversations through obsmem with scripted models.

Reads the conversations in ``../shared/data/locomo10`` (next to the repository; skipped with a
message when absent) and replays each one turn by turn (``obsmem.replay.replay``) with scripted
Observer and Reflector models, twice: with the default options, and with every threshold scaled
down 10x (``message_tokens`` 3,000, ``observation_tokens`` 4,000), because a LoCoMo conversation
(~14-28k tokens) is smaller than the default 30k observation threshold. Reports compression
(conversation tokens / the largest context the actor would be sent) and the cycles per
conversation.

    python bench/locomo.py              # all conversations
    python bench/locomo.py --quick      # the first two conversations, scaled config only
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

from _common import LOCOMO_DIR, header, locomo_files, ratio, table

from obsmem.engine import ObservationalMemory
from obsmem.replay import ReplayReport, load_conversation, replay
from obsmem.stores import InMemoryStore
from obsmem.testing import scripted_observer, scripted_reflector

CONFIGS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "scaled 1/10": {
        "observation": {"message_tokens": 3_000},
        "reflection": {"observation_tokens": 4_000},
    },
}


async def run(path: Any, overrides: dict[str, Any]) -> ReplayReport:
    options = {
        "observation": {"model": scripted_observer(), **overrides.get("observation", {})},
        "reflection": {"model": scripted_reflector(), **overrides.get("reflection", {})},
    }
    om = ObservationalMemory(InMemoryStore(), options)
    try:
        return await replay(om, load_conversation(path))
    finally:
        await om.aclose()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=int, default=None, help="only the first N conversations")
    parser.add_argument("--quick", action="store_true", help="tiny sizes for the smoke test")
    args = parser.parse_args()
    configs = CONFIGS
    if args.quick:
        args.limit = 2
        configs = {"scaled 1/10": CONFIGS["scaled 1/10"]}
    header("LoCoMo replays with scripted models", data=LOCOMO_DIR, configs=", ".join(configs))
    files = locomo_files()[: args.limit]
    if not files:
        print(f"SKIPPED: no LoCoMo conversations at {LOCOMO_DIR}")
        ratio("LoCoMo compression", None, "no data here")
        return

    for name, overrides in configs.items():
        rows = []
        compressions: list[float] = []
        started = time.perf_counter()
        for path in files:
            report = await run(path, overrides)
            kinds = [(c["type"], c["operation"]) for c in report.cycles]
            compression = report.conversation_tokens / report.largest_context
            compressions.append(compression)
            largest_log = max(p.log_tokens for p in report.points)
            rows.append(
                (
                    path.name,
                    report.turns,
                    f"{report.conversation_tokens:,}",
                    f"{report.largest_context:,}",
                    f"{compression:.2f}",
                    kinds.count(("buffering", "observation")),
                    kinds.count(("observation", "observation")),
                    max(0, report.generations - 1),
                    report.model_calls,
                    f"{largest_log:,}",
                    len(report.failures),
                )
            )
        took = time.perf_counter() - started
        th = report.thresholds
        print()
        print(
            f"## {name}: message_tokens {th['message_tokens']:,} (block_after "
            f"{th['block_after']:,}), observation_tokens {th['observation_tokens']:,} "
            f"(block_after {th['reflection_block_after']:,}); {len(files)} conversations "
            f"in {took:.1f} s"
        )
        table(
            rows,
            [
                "conversation",
                "turns",
                "tokens",
                "largest context",
                "compression",
                "obs buffering",
                "sync obs",
                "reflections",
                "model calls",
                "largest log",
                "failures",
            ],
        )
        ratio(
            f"{name}: mean compression (conversation tokens / largest context)",
            statistics.fmean(compressions),
            f"min {min(compressions):.2f}, max {max(compressions):.2f}",
        )


if __name__ == "__main__":
    asyncio.run(main())
