"""An Observer or Reflector that answers with text a database column cannot hold as is (NUL
bytes, lone surrogates) never breaks the log: on every store the answer is committed (those
characters shown as U+FFFD, as in titles), the log reads back, and the next cycles go on."""

from __future__ import annotations

from typing import Any

import pydantic_ai.messages as pa
from pydantic_ai.models.function import AgentInfo, FunctionModel

from obsmem.stores import Store

from .helpers import Conversation, Recorder, engine

ODD = "Tea \x00 with \ud800 honey"
SHOWN = "Tea \ufffd with \ufffd honey"  # what the log keeps: model output is display text


def odd_observer() -> FunctionModel:
    async def answer(messages: list[pa.ModelMessage], info: AgentInfo) -> pa.ModelResponse:
        text = (
            "Date: Dec 1, 2025\n"
            f"* 🔴 (09:00) User likes {ODD}.\n"
            f"* 🟡 (09:05) User asked about \x00 nothing in particular.\n"
            f"<current-task>Plan \x00 the trip</current-task>\n"
            f"<suggested-response>Ask \ud800 more</suggested-response>"
        )
        return pa.ModelResponse(parts=[pa.TextPart(content=text)])

    return FunctionModel(answer)


def odd_reflector() -> FunctionModel:
    async def answer(messages: list[pa.ModelMessage], info: AgentInfo) -> pa.ModelResponse:
        return pa.ModelResponse(parts=[pa.TextPart(content=f"Date: Dec 1, 2025\n* 🔴 {ODD}")])

    return FunctionModel(answer)


async def test_odd_observer_and_reflector_output_is_stored(store: Store) -> None:
    options: dict[str, Any] = {
        "observation": {"model": odd_observer(), "messageTokens": 500, "bufferTokens": False},
        "reflection": {"model": odd_reflector(), "observationTokens": 100_000},
    }
    om = engine(store, options)
    events = Recorder()
    om.subscribe(events)
    conv = Conversation()
    for _ in range(4):
        await om.prepare("t1", "u1", [conv.user(300)])
        await om.record("t1", "u1", [conv.assistant(100)])
    assert not events.of("data-om-observation-failed"), [
        e.error for e in events.of("data-om-observation-failed")
    ]
    log = await om.observations("t1", "u1")
    assert SHOWN in log
    record = await om.reflect("t1", "u1")
    assert record is not None
    assert SHOWN in record.observations
    prepared = await om.prepare("t1", "u1", [conv.user(100)])
    assert any(SHOWN in m.text for m in prepared.messages if m.role == "system")
    await om.aclose()
