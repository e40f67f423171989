"""How long a slow Observer blocks the conversation, with background buffering on and off.

Engines run the same conversation side by side in one event loop: one with the default
background buffering, one with ``buffer_tokens=False`` (observation happens synchronously at the
threshold). The scripted Observer sleeps ``--observer-latency`` seconds per call; the actor is
simulated by sleeping between ``prepare`` and ``record`` (background work runs meanwhile).
Blocked time per turn is the time spent in ``prepare`` + ``record``. Thresholds are small so that
observation is due every few turns. A buffering cycle observes about ``buffer_tokens`` (20% of
``message_tokens``) per Observer call, so two scenarios run: one where messages arrive slower than
that (as at the defaults) and one where they arrive faster.

    python bench/blocking.py            # 2 s Observer, both scenarios concurrently (~100 s)
    python bench/blocking.py --quick    # tiny sizes (smoke test)
"""

from __future__ import annotations

import argparse
import asyncio
import time
from dataclasses import dataclass, field

from _common import Talk, header, percentile, ratio, table

from obsmem.engine import ObservationalMemory
from obsmem.events import Event
from obsmem.stores import InMemoryStore
from obsmem.testing import ModelCalls, scripted_observer, scripted_reflector

THREAD = "bench-thread"
RESOURCE = "bench-user"


@dataclass(frozen=True)
class Scenario:
    name: str
    message_tokens: int
    user_tokens: int
    assistant_tokens: int
    actor_latency: float
    turns: int


@dataclass
class Run:
    scenario: Scenario
    buffering: bool
    blocked: list[float] = field(default_factory=list[float])
    calls: ModelCalls = field(default_factory=ModelCalls)
    sync_observations: int = 0
    activations: int = 0

    @property
    def name(self) -> str:
        return f"{self.scenario.name}, buffering {'on' if self.buffering else 'off'}"


async def converse(run: Run, observer_latency: float) -> None:
    sc = run.scenario
    observation: dict[str, object] = {
        "model": scripted_observer(delay=observer_latency, calls=run.calls),
        "message_tokens": sc.message_tokens,
    }
    if not run.buffering:
        observation["buffer_tokens"] = False
    om = ObservationalMemory(
        InMemoryStore(),
        {"observation": observation, "reflection": {"model": scripted_reflector()}},
        sync_timeout=600,
    )

    def on_event(event: Event) -> None:
        if event.type == "data-om-observation-end":
            run.sync_observations += 1
        elif event.type == "data-om-activation":
            run.activations += 1

    om.subscribe(on_event)
    talk = Talk(seed=3, user_tokens=sc.user_tokens, assistant_tokens=sc.assistant_tokens)
    for _ in range(sc.turns):
        user, reply = talk.turn()
        started = time.perf_counter()
        await om.prepare(THREAD, RESOURCE, [user])
        blocked = time.perf_counter() - started
        await asyncio.sleep(sc.actor_latency)  # the actor answering
        started = time.perf_counter()
        await om.record(THREAD, RESOURCE, [reply])
        run.blocked.append(blocked + time.perf_counter() - started)
    await om.settle()
    await om.aclose()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--observer-latency", type=float, default=2.0, help="seconds per call")
    parser.add_argument("--quick", action="store_true", help="tiny sizes for the smoke test")
    args = parser.parse_args()
    scale = 1.0
    if args.quick:
        args.observer_latency, scale = 0.2, 0.1
    latency = args.observer_latency
    scenarios = [
        # Messages arrive slower than buffering can observe them (buffer_tokens per call):
        # the proportion at the defaults (6k tokens a call vs a few hundred tokens a turn).
        Scenario("keeps up", 2_000, 30, 50, 1.0 * scale, 90 if not args.quick else 30),
        # Messages arrive faster than buffering's throughput: it falls behind.
        Scenario("overrun", 1_200, 100, 150, 1.0 * scale, 24 if not args.quick else 10),
    ]
    header(
        "turn blocking with a slow Observer: background buffering on vs off",
        observer_latency_s=latency,
    )
    for sc in scenarios:
        buffer_tokens = int(sc.message_tokens * 0.2)
        print(
            f"# scenario {sc.name!r}: message_tokens {sc.message_tokens:,} (buffer_tokens "
            f"{buffer_tokens}, so buffering observes ~{buffer_tokens / latency:.0f} tokens/s), "
            f"turns of ~{sc.user_tokens}+{sc.assistant_tokens} tokens every "
            f"{sc.actor_latency:g} s of actor time, {sc.turns} turns"
        )
    runs = [Run(sc, buffering) for sc in scenarios for buffering in (True, False)]
    started = time.perf_counter()
    await asyncio.gather(*(converse(r, latency) for r in runs))
    print(f"# all conversations ran concurrently in {time.perf_counter() - started:.1f} s")
    print()
    table(
        [
            (
                r.name,
                f"{percentile(r.blocked, 50):.3f}",
                f"{percentile(r.blocked, 99):.3f}",
                f"{sum(r.blocked):.2f}",
                sum(1 for b in r.blocked if b >= latency / 2),
                r.calls.count,
                r.sync_observations,
                r.activations,
            )
            for r in runs
        ],
        [
            "scenario",
            "p50 blocked s",
            "p99 blocked s",
            "total blocked s",
            "turns blocked >= latency/2",
            "observer calls",
            "sync observations",
            "activations",
        ],
    )
    print()
    for r in runs:
        ratio(f"{r.name}: p50 blocked / observer latency", percentile(r.blocked, 50) / latency)
        ratio(f"{r.name}: p99 blocked / observer latency", percentile(r.blocked, 99) / latency)
    for i in range(0, len(runs), 2):
        on, off = runs[i], runs[i + 1]
        total_on = sum(on.blocked)
        ratio(
            f"{on.scenario.name}: total blocked time, buffering off / on",
            sum(off.blocked) / total_on if total_on else float("nan"),
        )


if __name__ == "__main__":
    asyncio.run(main())
