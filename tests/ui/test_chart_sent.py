"""The chart shows what the actor was sent, against the thresholds in force: a thread whose
Observer keeps failing (memory behind, raw messages left out) charts each turn as sent (about
``block_after``), not the whole unobserved window, and its thresholds are the ones the writer
used, not the inspector's defaults (30k/40k). In pages (Starlette's TestClient) and in a real
headless Chromium."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
from starlette.testclient import TestClient

from obsmem.cli.common import open_store
from obsmem.engine import ObservationalMemory
from obsmem.options import resolve_options
from obsmem.replay import ReplayReport, load_conversation, replay
from obsmem.sent import sent_of
from obsmem.stores import SQLiteStore
from obsmem.testing import scripted_observer, scripted_reflector
from obsmem.tokens import HeuristicEstimator
from obsmem.ui.app import UIConfig, create_app
from obsmem.ui.pages import chart_page

from .conftest import Served, serve

DEMO = Path(__file__).resolve().parents[2] / "src" / "obsmem" / "data" / "demo_conversation.jsonl"
THREAD = "t-failing"
OBSERVE_AT = 3_000
REFLECT_AT = 4_000


@dataclass
class Failing:
    path: Path
    report: ReplayReport
    unobserved_tokens: int


@pytest.fixture(scope="module")
def failing(tmp_path_factory: pytest.TempPathFactory) -> Failing:
    """60 messages of the demo replayed while every Observer call fails."""
    path = tmp_path_factory.mktemp("chart") / "failing.db"
    options = resolve_options(
        {
            "observation": {
                "model": scripted_observer(fault=lambda n: "error"),
                "messageTokens": OBSERVE_AT,
                "bufferTokens": False,
            },
            "reflection": {"model": scripted_reflector(), "observationTokens": REFLECT_AT},
        }
    )
    assert options is not None
    messages = load_conversation(DEMO)[:60]

    async def run() -> ReplayReport:
        om = ObservationalMemory(SQLiteStore(path), options)
        try:
            return await replay(om, messages, thread_id=THREAD)
        finally:
            await om.aclose()

    report = asyncio.run(run())
    assert any(p.left_out for p in report.points), "the scenario leaves messages out"
    total = HeuristicEstimator().count_messages(messages)
    return Failing(path, report, total)


def _chart(path: Path) -> Any:
    async def read() -> Any:
        store = open_store(str(path), read_only=True)
        try:
            thread = await store.get_thread(THREAD)
            assert thread is not None
            from obsmem.ui.queries import Thresholds

            return await chart_page(store, thread, Thresholds())
        finally:
            await store.aclose()

    return asyncio.run(read())


def test_each_turn_is_charted_as_sent_with_the_thresholds_in_force(failing: Failing) -> None:
    chart = _chart(failing.path)["chart"]
    sent = [p.context_tokens for p in failing.report.points]
    charted = [p.context for p in chart.points]
    assert charted == sent  # every turn, as the replay saw it sent
    assert max(charted) < failing.unobserved_tokens / 2  # not the whole unobserved window
    assert max(p.left_out for p in chart.points) == max(p.left_out for p in failing.report.points)
    assert (chart.message_tokens, chart.observation_tokens) == (OBSERVE_AT, REFLECT_AT)
    assert chart.stored_thresholds


def test_the_chart_page_says_what_it_drew(failing: Failing) -> None:
    config = UIConfig(label="failing.db")  # the defaults, 30k/40k, as after `obsmem demo`
    app = create_app(open_store(str(failing.path), read_only=True), config)
    with TestClient(app, base_url="http://127.0.0.1") as client:
        page = client.get(f"/chart?{urlencode({'id': THREAD})}").text
    assert "marker-left-out" in page
    assert "messages left out at message" in page
    assert "observe at 3,000 raw tokens, reflect at 4,000 log tokens" in page
    assert "in force at the newest measured turn" in page


def test_a_turn_without_a_reply_or_a_stamp_is_estimated(failing: Failing) -> None:
    """Only stored replies carry a turn; the stamp names the message the turn ended at."""

    async def stamps() -> list[Any]:
        store = SQLiteStore(failing.path)
        try:
            return [t for m in await store.list_messages(THREAD) if (t := sent_of(m))]
        finally:
            await store.aclose()

    turns = asyncio.run(stamps())
    assert len(turns) == len(failing.report.points)
    assert all(t.sent == t.memory + t.raw for t in turns)


@pytest.fixture(scope="module")
def served_failing(failing: Failing) -> Iterator[Served]:
    s = serve(failing.path)
    try:
        yield s
    finally:
        s.stop()


def test_the_failing_chart_in_a_browser(browser: Any, served_failing: Served) -> None:
    from selenium.webdriver.common.by import By

    browser.get(f"{served_failing.url}/chart?{urlencode({'id': THREAD})}")
    svg = browser.find_element(By.CSS_SELECTOR, "#chart svg")
    assert svg.find_elements(By.CSS_SELECTOR, "g.marker-left-out")
    assert svg.find_elements(By.CSS_SELECTOR, "g.marker-failure")
    ticks = [
        int(t.text.replace(",", ""))
        for t in svg.find_elements(By.CSS_SELECTOR, "text.label")
        if re.fullmatch(r"[\d,]+", t.text)
    ]
    assert max(ticks) < 10_000  # the scale of what was sent and of 3k/4k, not of 30k/40k
    source = browser.find_element(By.ID, "chart-source").text
    assert "observe at 3,000 raw tokens" in source


async def test_a_thread_is_behind_by_the_thresholds_it_was_written_with(tmp_path: Path) -> None:
    """Past the writer's 3k observation threshold but under the inspector's default 30k, the
    thread is behind; a thread with no measured turn is judged by the flags."""
    from obsmem.messages import Message
    from obsmem.sent import TurnSent, stamped
    from obsmem.ui.queries import Thresholds, thread_state

    store = SQLiteStore(tmp_path / "m.db")
    turn = TurnSent(
        at=1, sent=4_000, memory=0, left_out=0, message_tokens=3_000, observation_tokens=4_000
    )
    for thread_id, measured in (("measured", turn), ("unmeasured", None)):
        await store.create_thread(thread_id, "user-1")
        reply = stamped([Message.assistant("ok")], measured)
        await store.append_messages(thread_id, [Message.user("word " * 4_000), *reply])
    states = {}
    for thread_id in ("measured", "unmeasured"):
        thread = await store.get_thread(thread_id)
        assert thread is not None
        states[thread_id] = (await thread_state(store, thread, None, Thresholds(), {})).kind
    await store.aclose()
    assert states == {"measured": "behind", "unmeasured": "healthy"}
