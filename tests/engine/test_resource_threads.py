"""Resource scope when the Observer gets thread ids wrong: its blocks are matched tolerantly,
a thread it left out is not advanced (and a failed event names it), and nothing is dropped."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pydantic_ai.messages as pa
import pytest
from pydantic_ai.models.function import AgentInfo, FunctionModel

from obsmem.answers import ParsedOutput, match_thread_blocks
from obsmem.failures import failures_in
from obsmem.stores import Store
from obsmem.testing import scripted_observer, scripted_reflector

from .helpers import Conversation, Recorder, assert_no_gap_no_double, engine

THREADS = ["thread-alpha", "thread-beta", "thread-gamma"]
ALL = {"thread-alpha": "a", "thread-beta": "b", "thread-gamma": "c"}


def _p(text: str) -> ParsedOutput:
    return ParsedOutput(observations=text)


@pytest.mark.parametrize(
    ("blocks", "expected"),
    [
        ({"thread-alpha": "a", "thread-beta": "b"}, {"thread-alpha": "a", "thread-beta": "b"}),
        ({" Thread-Alpha ": "a"}, {"thread-alpha": "a"}),  # case and space
        ({"thread-al": "a", "thread-gamma-1": "c"}, {"thread-alpha": "a", "thread-gamma": "c"}),
        # One block left and one thread left: by order.
        (
            {"thread-alpha": "a", "t2": "b", "thread-gamma": "c"},
            ALL,
        ),
        (
            {"x": "a", "y": "b", "z": "c"},
            ALL,
        ),  # all wrong, same count
        ({"x": "a", "y": "b"}, {}),  # two blocks for three threads: no guessing
        ({"thread": "a"}, {}),  # a prefix of every thread: ambiguous
    ],
)
def test_thread_blocks_are_matched_tolerantly(
    blocks: dict[str, str], expected: dict[str, str]
) -> None:
    found = match_thread_blocks(THREADS, {k: _p(v) for k, v in blocks.items()})
    assert {t: p.observations for t, p in found.items()} == expected


def _rewriting(change: Callable[[str], str]) -> tuple[FunctionModel, dict[str, bool]]:
    """The scripted Observer with its answer rewritten by ``change`` while ``on["wrong"]``."""
    inner = scripted_observer(words=40)
    on = {"wrong": True}

    async def answer(messages: list[pa.ModelMessage], info: AgentInfo) -> pa.ModelResponse:
        assert inner.function is not None
        response = await inner.function(messages, info)  # type: ignore[misc]
        if not on["wrong"]:
            return response
        [part] = response.parts
        assert isinstance(part, pa.TextPart)
        return pa.ModelResponse(parts=[pa.TextPart(content=change(part.content))])

    return FunctionModel(answer), on


async def _three_threads(store: Store, model: FunctionModel) -> tuple[Any, Recorder, list[str]]:
    om = engine(
        store,
        {
            "scope": "resource",
            "observation": {"model": model, "messageTokens": 1_200, "bufferTokens": False},
            "reflection": {"model": scripted_reflector(), "observationTokens": 100_000},
        },
    )
    events = Recorder()
    om.subscribe(events)
    conv = Conversation()
    facts: list[str] = []
    for i in range(4):
        for t in THREADS:
            fact = f"fact{t[-4:]}{i}"
            facts.append(fact)
            message = conv.user(20)
            message = message.with_parts([pa_text(f"{fact} {message.text}")])
            await om.prepare(t, "u1", [message])
            await om.record(t, "u1", [conv.assistant(150)])
    return om, events, facts


async def _heals(
    om: Any, on: dict[str, bool], facts: list[str], store: Store, *, keep_open: bool = False
) -> None:
    """Once the Observer labels its blocks right, every fact of every thread is observed."""
    on["wrong"] = False
    assert await om.observe("thread-alpha", "u1")
    log = await om.observations("thread-alpha", "u1")
    for fact in facts:
        assert fact in log, fact
    await assert_no_gap_no_double(store, "resource:u1", THREADS)
    if not keep_open:
        await om.aclose()


def pa_text(text: str) -> Any:
    from obsmem.messages import TextPart

    return TextPart(text=text)


async def test_a_mislabelled_thread_is_matched_by_order(store: Store) -> None:
    model, _ = _rewriting(lambda text: text.replace('id="thread-beta"', 'id="beta thread"'))
    om, events, facts = await _three_threads(store, model)
    await om.observe("thread-alpha", "u1")
    log = await om.observations("thread-alpha", "u1")
    assert not events.of("data-om-observation-failed")
    for fact in facts:
        assert fact in log, fact
    await assert_no_gap_no_double(store, "resource:u1", THREADS)
    await om.aclose()


async def test_an_observer_without_thread_tags_observes_every_thread(store: Store) -> None:
    """No thread tags at all in a three-thread answer: nothing in it can be attributed, so
    each thread is asked again alone in the same cycle (a one-thread call needs no tags), and
    every fact of every thread is observed."""
    model, _ = _rewriting(lambda text: re.sub(r"</?thread[^>]*>\n?", "", text))
    om, _events, facts = await _three_threads(store, model)
    assert await om.observe("thread-alpha", "u1")
    log = await om.observations("thread-alpha", "u1")
    for fact in facts:
        assert fact in log, fact
    await assert_no_gap_no_double(store, "resource:u1", THREADS)
    await om.aclose()


async def test_a_thread_left_out_backs_off_alone_and_heals(store: Store) -> None:
    """Every answer leaves one thread out, even when it is asked alone: the other two advance,
    a failed event names the third, its failure state is stored on that thread alone (the log
    has none), and once the Observer answers for it, it is observed and the state is gone."""

    def drop_gamma(text: str) -> str:
        text = re.sub(r'<thread id="thread-gamma">.*?</thread>\n?', "", text, flags=re.DOTALL)
        return text if "factamma" not in text else "<observations></observations>"

    model, on = _rewriting(drop_gamma)
    om, events, facts = await _three_threads(store, model)
    assert not await om.observe("thread-alpha", "u1")
    failed = [e for e in events.of("data-om-observation-failed") if e.thread_id == "thread-gamma"]
    assert failed
    assert "thread-gamma" in failed[-1].error
    record = await store.get_record("resource:u1")
    assert record is not None
    assert record.cursor.get("thread-alpha", 0) > 0
    assert record.cursor.get("thread-beta", 0) > 0
    assert record.cursor.get("thread-gamma", 0) == 0
    gamma = await store.get_thread("thread-gamma")
    assert gamma is not None
    [state] = failures_in(gamma.metadata).values()
    assert state.thread_id == "thread-gamma"
    assert not failures_in(await store.get_resource("u1")), "the log itself is fine"
    await _heals(om, on, facts, store, keep_open=True)
    gamma = await store.get_thread("thread-gamma")
    assert gamma is not None
    assert not failures_in(gamma.metadata)
    await om.aclose()


async def test_while_one_thread_backs_off_the_others_keep_being_observed(store: Store) -> None:
    """The thread the Observer answers nothing for, even alone, is its own problem: in the
    cycles after it, asked alone again (an empty answer, twice), it backs off alone again; the
    log stores no failure and the other threads are observed by the turns as they go."""

    def drop_gamma(text: str) -> str:
        text = re.sub(r'<thread id="thread-gamma">.*?</thread>\n?', "", text, flags=re.DOTALL)
        return text if "factamma" not in text else "<observations></observations>"

    model, _ = _rewriting(drop_gamma)
    om, _, _ = await _three_threads(store, model)
    conv = Conversation()

    async def turns(rounds: int, words: int, tag: str) -> None:
        for i in range(rounds):
            for t in THREADS:
                message = conv.user(words)
                message = message.with_parts([pa_text(f"{tag}{t[-4:]}{i} {message.text}")])
                await om.prepare(t, "u1", [message])
                await om.record(t, "u1", [conv.assistant(150)])
            await om.settle()

    await om.observe("thread-alpha", "u1")
    await turns(4, 20, "late")
    await om.observe("thread-alpha", "u1")  # gamma's messages alone again: nothing for them
    first = await store.get_record("resource:u1")
    assert first is not None
    assert not failures_in(await store.get_resource("u1")), "gamma's failure is gamma's"
    await turns(10, 40, "more")  # turns only: what is due is observed by them, synchronously
    record = await store.get_record("resource:u1")
    assert record is not None
    for t in THREADS[:2]:
        assert record.cursor.get(t, 0) > first.cursor.get(t, 0) + 10, (t, record.cursor)
    assert record.cursor.get("thread-gamma", 0) == 0
    assert not failures_in(await store.get_resource("u1")), "the log itself is fine"
    gamma = await store.get_thread("thread-gamma")
    assert gamma is not None
    assert failures_in(gamma.metadata)
    await om.aclose()


async def test_turns_go_on_for_every_thread_with_an_observer_that_never_tags(
    store: Store,
) -> None:
    """45 turns over three threads of one resource with an Observer that never writes thread
    tags: every thread is observed as it goes, nothing is left out of any context, and no
    failure is stored."""
    model, _ = _rewriting(lambda text: re.sub(r"</?thread[^>]*>\n?", "", text))
    om = engine(
        store,
        {
            "scope": "resource",
            "observation": {"model": model, "messageTokens": 1_000, "bufferTokens": False},
            "reflection": {"model": scripted_reflector(), "observationTokens": 100_000},
        },
    )
    events = Recorder()
    om.subscribe(events)
    conv = Conversation()
    for turn in range(45):
        thread = THREADS[turn % 3]
        prepared = await om.prepare(thread, "u1", [conv.user(60)])
        notes = [(m.metadata.get("obsmem") or {}).get("synthetic") for m in prepared.messages]
        assert "left_out" not in notes, turn
        await om.record(thread, "u1", [conv.assistant(120)])
    record = await store.get_record("resource:u1")
    assert record is not None
    assert all(record.cursor.get(t, 0) > 0 for t in THREADS), record.cursor
    assert not events.of("data-om-observation-failed")
    assert not failures_in(await store.get_resource("u1"))
    await assert_no_gap_no_double(store, "resource:u1", THREADS)
    await om.aclose()
