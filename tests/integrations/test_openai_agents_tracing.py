"""Memory in the Agents SDK's own channels: its cycles are spans of the run's trace (seen by a
tracing processor), ``session.subscribe`` hands a thread's events to a listener, and
``session.stream_events`` puts them among a streamed run's events."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, RunConfig, Runner
from agents.stream_events import RawResponsesStreamEvent
from agents.testing import ScriptedModel
from agents.tracing import CustomSpanData, Span, Trace, TracingProcessor, setup
from agents.tracing.provider import DefaultTraceProvider

from obsmem.events import Event
from obsmem.integrations.openai_agents import MemoryStreamEvent, ObservationalSession
from obsmem.testing import scripted_reflector

from .helpers import RESOURCE, user_turn
from .test_openai_agents import answer, sqlite_memory

THREAD = "sdk-traced"


class Collector(TracingProcessor):
    """Keeps every trace and every finished span."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.traces: list[Trace] = []
        self.spans: list[Span[Any]] = []

    def on_trace_start(self, trace: Trace) -> None:
        with self.lock:
            self.traces.append(trace)

    def on_trace_end(self, trace: Trace) -> None:
        pass

    def on_span_start(self, span: Span[Any]) -> None:
        pass

    def on_span_end(self, span: Span[Any]) -> None:
        with self.lock:
            self.spans.append(span)

    def shutdown(self) -> None:
        pass

    def force_flush(self) -> None:
        pass

    def memory_spans(self, name: str) -> list[Span[Any]]:
        return [
            s
            for s in self.spans
            if isinstance(s.span_data, CustomSpanData) and s.span_data.name == name
        ]


@pytest.fixture
def collector(monkeypatch: pytest.MonkeyPatch) -> Iterator[Collector]:
    """A trace provider of its own whose only processor is the collector (nothing exported)."""
    monkeypatch.delenv("OPENAI_AGENTS_DISABLE_TRACING", raising=False)
    provider = DefaultTraceProvider()
    collector = Collector()
    provider.set_processors([collector])
    monkeypatch.setattr(setup, "GLOBAL_TRACE_PROVIDER", provider)
    yield collector
    provider.shutdown()


async def _chat(session: ObservationalSession, turns: int, **config: Any) -> ScriptedModel:
    model = ScriptedModel()
    agent = Agent(name="helper", model=model)
    run_config = RunConfig(call_model_input_filter=session.call_model_input_filter, **config)
    for i in range(turns):
        model.enqueue([answer(f"Answer {i}: noted.", i)])
        await Runner.run(agent, user_turn(i), session=session, run_config=run_config)
    return model


def _assert_in_runs(collector: Collector, spans: list[Span[Any]]) -> None:
    """Each span belongs to a run's trace and hangs under one of that run's spans."""
    runs = {t.trace_id for t in collector.traces}
    ids = {s.span_id: s.trace_id for s in collector.spans}
    for span in spans:
        assert span.trace_id in runs
        assert span.parent_id is not None
        assert ids.get(span.parent_id) == span.trace_id, "not under a span of its run"


async def test_observation_and_reflection_are_spans_of_the_run(
    tmp_path: Path, collector: Collector
) -> None:
    memory = sqlite_memory(
        tmp_path, reflection={"model": scripted_reflector(), "observationTokens": 150}
    )
    session = ObservationalSession(memory, session_id=THREAD, resource=RESOURCE)
    await _chat(session, 14, workflow_name="chat")
    await memory.aclose()

    observations = collector.memory_spans("obsmem.observation")
    reflections = collector.memory_spans("obsmem.reflection")
    assert observations
    assert reflections
    _assert_in_runs(collector, observations + reflections)
    data = observations[0].span_data.data
    assert data["thread_id"] == THREAD
    assert data["tokens_to_observe"] > 0
    assert data["tokens_observed"] > 0
    assert data["observation_tokens"] > 0
    assert data["model_input_tokens"] > 0
    assert data["model_output_tokens"] > 0
    assert data["model"] == "scripted-observer"
    assert "observations" not in data, "what memory wrote stays out of traces"
    assert all(s.error is None for s in observations + reflections)


async def test_buffering_and_activation_are_spans_of_the_run(
    tmp_path: Path, collector: Collector
) -> None:
    memory = sqlite_memory(tmp_path, observation={"bufferTokens": 0.2})
    session = ObservationalSession(memory, session_id=THREAD, resource=RESOURCE)
    await _chat(session, 8)
    await memory.aclose()

    buffered = collector.memory_spans("obsmem.buffering.observation")
    activated = collector.memory_spans("obsmem.activation.observation")
    assert buffered
    assert activated
    _assert_in_runs(collector, buffered + activated)
    assert all(s.span_data.data["tokens_buffered"] > 0 for s in buffered)
    assert all(s.span_data.data["tokens_activated"] > 0 for s in activated)


async def test_no_memory_spans_when_tracing_is_off(tmp_path: Path, collector: Collector) -> None:
    memory = sqlite_memory(tmp_path)
    session = ObservationalSession(memory, session_id=THREAD, resource=RESOURCE)
    events: list[Event] = []
    session.subscribe(events.append)
    await _chat(session, 8, tracing_disabled=True)
    await memory.aclose()
    assert any(e.type == "data-om-observation-end" for e in events), "memory did work"
    assert collector.spans == []


async def test_subscribe_hands_over_the_events_of_its_thread_only(tmp_path: Path) -> None:
    memory = sqlite_memory(tmp_path)
    mine = ObservationalSession(memory, session_id=THREAD, resource=RESOURCE)
    other = ObservationalSession(memory, session_id="someone-else", resource=RESOURCE)
    seen: list[Event] = []
    stop = mine.subscribe(seen.append)
    await _chat(other, 6, tracing_disabled=True)
    assert seen == []
    await _chat(mine, 6, tracing_disabled=True)
    assert {e.type for e in seen} >= {"data-om-observation-start", "data-om-observation-end"}
    assert {e.thread_id for e in seen} == {THREAD}
    stop()
    count = len(seen)
    await _chat(mine, 1, tracing_disabled=True)
    assert len(seen) == count
    await memory.aclose()


async def test_stream_events_put_memory_events_among_the_run_events(tmp_path: Path) -> None:
    memory = sqlite_memory(tmp_path)
    session = ObservationalSession(memory, session_id=THREAD, resource=RESOURCE)
    await _chat(session, 5, tracing_disabled=True)
    model = ScriptedModel([[answer("Answer 5: noted.", 5)]])
    agent = Agent(name="helper", model=model)
    config = RunConfig(
        tracing_disabled=True, call_model_input_filter=session.call_model_input_filter
    )
    result = Runner.run_streamed(agent, user_turn(5), session=session, run_config=config)
    kinds: list[str] = []
    async for event in session.stream_events(result):
        if isinstance(event, MemoryStreamEvent):
            kinds.append(event.event.type)
        elif isinstance(event, RawResponsesStreamEvent):
            kinds.append("raw")
    assert result.final_output == "Answer 5: noted."
    assert "data-om-observation-end" in kinds, "the observation this run started"
    assert kinds.index("data-om-observation-end") < kinds.index("raw"), "in the order they came"
    await memory.aclose()
