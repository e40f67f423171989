"""The seed's case: one user turn of a long tool loop (a browsing agent), at default options.

One user turn of ``--steps`` (50) tool steps; each tool result is a 4,000-8,000-token page
snapshot shaped like a browser's accessibility tree. Two agents run the same turn side by side in
one event loop, with the same scripted actor (it sleeps ``--actor-latency`` per step, then calls
the tool, and answers after the last step):

* memory: ``obsmem.Agent`` on an SQLite file with default options; a scripted Observer that
  sleeps ``--observer-latency`` per call (a real model's time) and a scripted Reflector.
* none: a plain pydantic-ai ``Agent``, which sends the whole history at every step.

Reported, for each model request: its size (heuristic tokens of what the actor was sent) and the
wait before it (from the tool call's answer being ready to the next request: the tool itself is
instant, so this is the framework's and memory's time). The memory-caused wait of a step is its
wait with memory minus the median wait without.

    python bench/tool_loop.py            # 50 steps, 1 s actor, 2 s Observer (~1-2 min)
    python bench/tool_loop.py --quick    # 6 steps, no latency (smoke test)
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _common import header, percentile, ratio, table
from pydantic_ai import Agent as PydanticAgent
from pydantic_ai import messages as pa
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import UsageLimits

from obsmem import Agent, Memory
from obsmem.convert import from_pydantic_ai
from obsmem.events import Event
from obsmem.stores import SQLiteStore
from obsmem.testing import ModelCalls, scripted_observer, scripted_reflector
from obsmem.tokens import HeuristicEstimator

ESTIMATOR = HeuristicEstimator()
ROLES = ["link", "button", "heading", "textbox", "listitem", "img", "cell", "checkbox"]
NAMES = "kettle lamp chair desk shelf rug mirror vase clock sofa table stool bench".split()  # noqa: SIM905


def snapshot(step: int, tokens: int, rng: random.Random) -> str:
    """A page snapshot of about ``tokens`` tokens, as a browser tool would return it."""
    lines = [f'- document "Catalogue page {step}" [ref=p{step}]']
    ref = 0
    while ESTIMATOR.count_text("\n".join(lines)) < tokens:
        for _ in range(40):
            ref += 1
            role = rng.choice(ROLES)
            name = (
                f"{rng.choice(NAMES).title()} {rng.randint(100, 999)} - {rng.randint(5, 500)} EUR"
            )
            depth = "  " * rng.randint(1, 4)
            lines.append(f'{depth}- {role} "{name}" [ref=e{step}-{ref}]')
    return "\n".join(lines)


@dataclass
class Run:
    name: str
    sizes: list[int] = field(default_factory=list[int])
    waits: list[float] = field(default_factory=list[float])
    ready_at: float | None = None
    actor_time: float = 0.0
    events: list[Event] = field(default_factory=list[Event])


class Actor:
    """The scripted actor: ``steps`` calls of ``snapshot``, then an answer."""

    def __init__(self, run: Run, steps: int, latency: float) -> None:
        self.run = run
        self.steps = steps
        self.latency = latency
        self.step = 0

    def model(self) -> FunctionModel:
        async def answer(messages: list[pa.ModelMessage], info: AgentInfo) -> pa.ModelResponse:
            arrived = time.perf_counter()
            if self.run.ready_at is not None:
                self.run.waits.append(arrived - self.run.ready_at)
            self.run.sizes.append(ESTIMATOR.count_messages(from_pydantic_ai(messages)))
            started = time.perf_counter()
            await asyncio.sleep(self.latency)
            self.run.actor_time += time.perf_counter() - started
            if self.step < self.steps:
                self.step += 1
                call = pa.ToolCallPart("browse", {"page": self.step}, tool_call_id=f"c{self.step}")
                response = pa.ModelResponse(parts=[call])
            else:
                response = pa.ModelResponse(parts=[pa.TextPart("Every page is read.")])
            return response

        return FunctionModel(answer)


def browse_tool(run: Run, pages: dict[int, str]) -> Any:
    def browse(page: int) -> str:
        """Open a catalogue page and return its snapshot."""
        run.ready_at = time.perf_counter()
        return pages[page]

    return browse


async def with_memory(
    run: Run, pages: dict[int, str], steps: int, actor: float, observer: float, db: Path
) -> None:
    memory = Memory(
        SQLiteStore(db),
        observational_memory={
            "observation": {"model": scripted_observer(delay=observer, calls=ModelCalls())},
            "reflection": {"model": scripted_reflector()},
        },
    )
    memory.subscribe(run.events.append)
    agent = Agent(
        "browser",
        "Read every catalogue page.",
        Actor(run, steps, actor).model(),
        memory=memory,
        tools=[browse_tool(run, pages)],
    )
    await agent.generate("Read the catalogue.", memory={"resource": "u", "thread": "t"})
    await memory.aclose()


async def without_memory(run: Run, pages: dict[int, str], steps: int, actor: float) -> None:
    agent = PydanticAgent(Actor(run, steps, actor).model(), instructions="Read every page.")
    agent.tool_plain(browse_tool(run, pages))
    await agent.run("Read the catalogue.", usage_limits=UsageLimits(request_limit=None))


async def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--actor-latency", type=float, default=1.0)
    parser.add_argument("--observer-latency", type=float, default=2.0)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="6 steps, no latency")
    args = parser.parse_args()
    if args.quick:
        args.steps, args.actor_latency, args.observer_latency = 6, 0.0, 0.0
    header(
        "One user turn of a long tool loop: largest request and memory wait, with vs without",
        steps=args.steps,
        result_tokens="4000-8000",
        actor_latency=f"{args.actor_latency}s",
        observer_latency=f"{args.observer_latency}s",
        options="defaults (message_tokens 30000, block_after 1.2x)",
    )
    rng = random.Random(args.seed)
    pages = {i: snapshot(i, rng.randint(4_000, 8_000), rng) for i in range(1, args.steps + 1)}
    memory_run, plain_run = Run("memory"), Run("none")
    with tempfile.TemporaryDirectory() as tmp:
        await asyncio.gather(
            with_memory(
                memory_run,
                pages,
                args.steps,
                args.actor_latency,
                args.observer_latency,
                Path(tmp) / "loop.db",
            ),
            without_memory(plain_run, pages, args.steps, args.actor_latency),
        )
    baseline = statistics.median(plain_run.waits)
    memory_wait = [max(0.0, w - baseline) for w in memory_run.waits]
    kinds = [e.type for e in memory_run.events]
    rows = [
        [
            run.name,
            len(run.sizes),
            max(run.sizes),
            sum(run.sizes),
            f"{statistics.median(run.waits) * 1000:.1f}",
            f"{max(run.waits) * 1000:.1f}",
        ]
        for run in (memory_run, plain_run)
    ]
    table(rows, ["agent", "requests", "largest", "total input", "wait p50 ms", "wait max ms"])
    print(
        f"memory-caused wait per step: p50 {percentile(memory_wait, 50) * 1000:.1f} ms, "
        f"p95 {percentile(memory_wait, 95) * 1000:.1f} ms, max {max(memory_wait) * 1000:.1f} ms, "
        f"total {sum(memory_wait):.2f} s over {len(memory_wait)} steps; "
        f"steps that waited > 100 ms: {sum(w > 0.1 for w in memory_wait)}"
    )
    print(
        "memory work inside the turn: "
        + ", ".join(
            f"{k} {kinds.count(k)}"
            for k in (
                "data-om-buffering-end",
                "data-om-activation",
                "data-om-observation-end",
                "data-om-observation-failed",
            )
        )
    )
    ratio("largest request with / without memory", max(memory_run.sizes) / max(plain_run.sizes))
    ratio("total input tokens with / without memory", sum(memory_run.sizes) / sum(plain_run.sizes))
    actor_total = memory_run.actor_time or None
    ratio(
        "memory-caused wait / actor time",
        sum(memory_wait) / actor_total if actor_total else None,
        "time the loop waited on memory, against the time the model itself took",
    )


if __name__ == "__main__":
    asyncio.run(main())
