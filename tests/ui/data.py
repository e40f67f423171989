"""The inspector tests' database: a scripted replay with observations, a reflection, a failed
cycle, a tool call, a huge part and a message holding ``<script>``; and a thread whose Observer
keeps failing."""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from obsmem.engine import ObservationalMemory
from obsmem.messages import Message, TextPart, ToolCallPart, ToolResultPart, utcnow
from obsmem.options import resolve_options
from obsmem.replay import replay
from obsmem.stores import Store
from obsmem.testing import Fault, scripted_observer, scripted_reflector

from ..engine.helpers import text_of

MAIN = "t-main"
OTHER = "t-other"
RESOURCE = "user-1"
MESSAGE_TOKENS = 600
OBSERVATION_TOKENS = 500
SCRIPT = "<script>alert('owned')</script> please keep this text"
HUGE = "HUGE-START " + "lorem ipsum dolor " * 300 + " HUGE-END"


def engine(
    store: Store,
    fault: Callable[[int], Fault | None] | None = None,
    *,
    buffering: bool = False,
) -> ObservationalMemory:
    """Observation past ``MESSAGE_TOKENS`` raw tokens (synchronous, or buffered in the
    background with ``buffering``), reflection past ``OBSERVATION_TOKENS`` log tokens."""
    options = resolve_options(
        {
            "observation": {
                "model": scripted_observer(fault=fault),
                "messageTokens": MESSAGE_TOKENS,
                "bufferTokens": 0.2 if buffering else False,
            },
            "reflection": {"model": scripted_reflector(), "observationTokens": OBSERVATION_TOKENS},
            "retrieval": True,
        }
    )
    assert options is not None
    return ObservationalMemory(store, options)


def conversation(turns: int, *, seed: int = 7, start: int = 0) -> list[Message]:
    """``turns`` user/assistant pairs (times one minute apart from now), with a tool call,
    a huge tool result and a ``<script>`` message early on."""
    rng = random.Random(seed + start)
    t0 = utcnow() - timedelta(hours=2)
    out: list[Message] = []
    for n in range(start, start + turns):
        at = t0 + timedelta(minutes=2 * n)
        text = SCRIPT if n == 1 else f"Question {n}: " + text_of(60, rng)
        out.append(Message.user(text, created_at=at))
        if n == 2:
            call = ToolCallPart(
                tool_call_id=f"c{n}", tool_name="lookup_weather", args={"city": "Oslo", "days": 3}
            )
            out.append(Message(role="assistant", parts=(call,), created_at=at))
            result = ToolResultPart(tool_call_id=f"c{n}", tool_name="lookup_weather", content=HUGE)
            out.append(Message(role="tool", parts=(result,), created_at=at))
        out.append(
            Message(
                role="assistant",
                parts=(TextPart(text=f"Answer {n}: " + text_of(50, rng)),),
                created_at=at + timedelta(seconds=30),
            )
        )
    return out


async def build(make_store: Callable[[], Store]) -> dict[str, Any]:
    """Fill a store: the main thread (observed and reflected, then its Observer fails, so it
    ends failing with a failed cycle) and a second, healthy thread whose Observer buffers in
    the background (a chunk waits to activate). Each engine closes the
    store it is given, so ``make_store`` opens a new one each time."""
    om = engine(make_store())
    report = await replay(om, conversation(30), thread_id=MAIN, resource_id=RESOURCE)
    await om.aclose()
    om = engine(make_store(), fault=lambda n: "error")
    failed = await replay(om, conversation(8, start=30), thread_id=MAIN, resource_id=RESOURCE)
    await om.aclose()
    om = engine(make_store(), buffering=True)
    await replay(om, conversation(6, seed=3), thread_id=OTHER, resource_id=RESOURCE)
    await om.aclose()
    return {"generations": report.generations, "failures": failed.failures}
