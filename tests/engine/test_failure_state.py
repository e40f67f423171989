"""Memory is never silently off: a failing role is a WARNING (once per cause, and once when it
heals), its failure state is stored with the log and shown by ``Memory.status``, it clears
itself once the role answers again, and ``failure_policy="raise"`` makes the turn raise."""

from __future__ import annotations

import asyncio
import io
import logging
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from obsmem import Memory, MemoryUnavailableError
from obsmem.cli import main
from obsmem.errors import StoreError
from obsmem.failures import failures_in
from obsmem.stores import SQLiteStore, Store
from obsmem.testing import scripted_observer, scripted_reflector

from .helpers import T0, Conversation, Recorder

KEYS = (
    "OBSMEM_MODEL",
    "OPENAI_BASE_URL",
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "GOOGLE_API_KEY",
    "GEMINI_API_KEY",
    "GOOGLE_GENERATIVE_AI_API_KEY",
    "DEEPSEEK_API_KEY",
    "XAI_API_KEY",
    "GROQ_API_KEY",
    "MISTRAL_API_KEY",
)


class Clock:
    def __init__(self) -> None:
        self.now: datetime = T0

    def __call__(self) -> datetime:
        return self.now


def _failing_memory(store: Store, on: dict[str, bool], clock: Clock, **options: Any) -> Memory:
    def fault(n: int) -> str | None:
        return "error" if on["fail"] else None

    return Memory(
        store,
        observational_memory={
            "observation": {
                "model": scripted_observer(fault=fault),
                "messageTokens": 600,
                "bufferTokens": False,
            },
            "reflection": {"model": scripted_reflector(), "observationTokens": 100_000},
            **options,
        },
        clock=clock,
    )


async def _inspect(*args: str) -> str:
    """``obsmem inspect`` as a user runs it (its own event loop, on another thread)."""
    out = io.StringIO()
    code = await asyncio.to_thread(main, ["inspect", *args], out=out)
    assert code == 0
    return out.getvalue()


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "obsmem" and r.levelno == logging.WARNING
    ]


async def test_a_failing_observer_is_loud_once_stored_shown_and_heals(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="obsmem")
    on = {"fail": True}
    clock = Clock()
    store = SQLiteStore(tmp_path / "m.db")
    memory = _failing_memory(store, on, clock)
    ref = {"resource": "u1", "thread": "t1"}
    conv = Conversation()
    for _ in range(8):
        clock.now += timedelta(minutes=20)  # past every back-off: each turn tries again
        await memory.context(ref, [conv.user(200)], actor_model=None)
        await memory.save(ref, [conv.assistant(200)], actor_model=None)
        assert memory.om is not None
        await memory.om.settle()
    failing = [w for w in _warnings(caplog) if "failed" in w]
    assert len(failing) == 1, failing  # one cause, said once however often it repeats
    assert "scripted model failure" in failing[0]
    assert "Fix:" in failing[0]

    thread = await store.get_thread("t1")
    assert thread is not None
    stored = failures_in(thread.metadata)["observer"]
    assert stored.count >= 3
    assert "scripted model failure" in stored.error
    assert stored.next_retry_at is not None
    assert stored.next_retry_at > stored.last_at
    status = await memory.status(ref)
    assert status.state == "failing"
    assert status.failures[0].count == stored.count
    assert status.left_out > 0, "past block_after the oldest messages are left out"
    # The live count only (the stored one is as of the last failure, and may be old).
    [left_out] = [line for line in status.lines() if "left out" in line]
    assert left_out.startswith(f"{status.left_out} of the oldest messages are left out")

    # Another process reads the same state from the file.
    other = SQLiteStore(tmp_path / "m.db")
    seen = await other.get_thread("t1")
    assert seen is not None
    assert failures_in(seen.metadata)
    await other.aclose()

    # `obsmem inspect` (another process's view of the file) shows it too.
    shown = await _inspect("--db", str(tmp_path / "m.db"))
    assert "FAILING: Observer" in shown
    assert "scripted model failure" in shown
    assert "FAILING: Observer" in await _inspect("--db", str(tmp_path / "m.db"), "--thread", "t1")

    on["fail"] = False
    clock.now += timedelta(minutes=20)
    await memory.context(ref, [conv.user(200)], actor_model=None)
    await memory.om.settle()  # the backlog is caught up in the background
    assert "FAILING" not in await _inspect("--db", str(tmp_path / "m.db"))
    thread = await store.get_thread("t1")
    assert thread is not None
    assert not failures_in(thread.metadata), "the state clears once the Observer answers"
    assert any("works again" in w for w in _warnings(caplog))
    status = await memory.status(ref)
    assert status.state == "healthy", status.lines()
    await memory.aclose()


async def test_failure_policy_raise_makes_the_turn_raise_and_heals(tmp_path: Path) -> None:
    on = {"fail": True}
    clock = Clock()
    memory = _failing_memory(SQLiteStore(tmp_path / "m.db"), on, clock, failure_policy="raise")
    ref = {"resource": "u1", "thread": "t1"}
    conv = Conversation()

    async def turns() -> None:
        for _ in range(6):
            clock.now += timedelta(minutes=20)
            await memory.context(ref, [conv.user(300)], actor_model=None)
            await memory.save(ref, [conv.assistant(300)], actor_model=None)

    with pytest.raises(MemoryUnavailableError) as caught:
        await turns()
    assert "scripted model failure" in str(caught.value)
    assert "Fix:" in str(caught.value)
    on["fail"] = False
    clock.now += timedelta(minutes=20)
    await memory.context(ref, [conv.user(300)], actor_model=None)  # observes, and goes on
    assert memory.om is not None
    await memory.om.settle()
    assert (await memory.status(ref)).state == "healthy"
    await memory.aclose()


async def test_no_credentials_warns_within_the_first_turn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The Quick start's memory with nothing configured: the first turn names the key."""
    for key in KEYS:
        monkeypatch.delenv(key, raising=False)
    caplog.set_level(logging.WARNING, logger="obsmem")
    memory = Memory(SQLiteStore(tmp_path / "m.db"), observational_memory=True)
    ref = {"resource": "u1", "thread": "t1"}
    await memory.context(ref, [Conversation().user(20)], actor_model="openai/gpt-5-mini")
    [warning] = [w for w in _warnings(caplog) if "cannot work" in w]
    assert "GOOGLE_API_KEY" in warning  # "auto" fell back to google/gemini-3.5-flash-lite
    assert "OBSMEM_MODEL" in warning
    status = await memory.status(ref)
    assert status.state == "failing"
    assert status.observer_model == "google/gemini-3.5-flash-lite"
    assert status.model_choice is not None
    assert "default" in status.model_choice
    # Once the key is there, it heals without a restart.
    monkeypatch.setenv("GOOGLE_API_KEY", "k")
    await memory.context(ref, [Conversation().user(20)], actor_model="openai/gpt-5-mini")
    assert (await memory.status(ref)).credentials is None
    await memory.aclose()


async def test_no_credentials_with_raise_fails_the_turn_before_writing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key in KEYS:
        monkeypatch.delenv(key, raising=False)
    store = SQLiteStore(tmp_path / "m.db")
    memory = Memory(store, observational_memory={"failure_policy": "raise"})
    with pytest.raises(MemoryUnavailableError, match="GOOGLE_API_KEY"):
        await memory.context(
            {"resource": "u1", "thread": "t1"}, [Conversation().user(20)], actor_model=None
        )
    assert await store.get_thread("t1") is None
    await memory.aclose()


@pytest.mark.parametrize(
    ("env", "actor", "expected"),
    [
        ({"OBSMEM_MODEL": "xai/grok-4-1-fast", "OPENAI_API_KEY": "k"}, None, "xai/grok-4-1-fast"),
        (
            {"ANTHROPIC_API_KEY": "k", "OPENAI_API_KEY": "k"},
            "anthropic/claude-sonnet-4-5",
            "anthropic/claude-haiku-4-5",
        ),
        ({"ANTHROPIC_API_KEY": "k", "OPENAI_API_KEY": "k"}, None, "openai/gpt-6.1-terra"),
        (
            {"OPENAI_BASE_URL": "http://127.0.0.1:8080/v1"},
            "openai/qwen2.5-7b",
            "openai/qwen2.5-7b",
        ),
        ({"GEMINI_API_KEY": "k"}, "anthropic/claude-sonnet-4-5", "google/gemini-3.5-flash-lite"),
        ({}, None, "google/gemini-3.5-flash-lite"),
    ],
)
async def test_auto_resolves_in_the_documented_order(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    env: dict[str, str],
    actor: str | None,
    expected: str,
) -> None:
    for key in KEYS:
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    memory = Memory(SQLiteStore(tmp_path / "m.db"), observational_memory=True)
    ref = {"resource": "u1", "thread": "t1"}
    await memory.context(ref, [Conversation().user(20)], actor_model=actor)
    status = await memory.status(ref)
    assert status.observer_model == status.reflector_model == expected
    await memory.aclose()


async def test_a_failing_background_buffer_is_stored_and_seen_by_events_too(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    """Buffering fails in the background: the failed event, the WARNING and the stored state
    all say the same thing."""
    caplog.set_level(logging.WARNING, logger="obsmem")
    memory = Memory(
        store,
        observational_memory={
            "observation": {
                "model": scripted_observer(fault=lambda n: "error"),
                "messageTokens": 2_000,
            },
            "reflection": {"model": scripted_reflector()},
        },
    )
    events = Recorder()
    memory.subscribe(events)
    ref = {"resource": "u1", "thread": "t1"}
    conv = Conversation()
    for _ in range(4):
        await memory.context(ref, [conv.user(200)], actor_model=None)
        await memory.save(ref, [conv.assistant(200)], actor_model=None)
        assert memory.om is not None
        await memory.om.settle()
    assert events.of("data-om-buffering-failed")
    status = await memory.status(ref)
    assert status.state == "failing"
    assert "scripted model failure" in status.failures[0].error
    assert any("scripted model failure" in w for w in _warnings(caplog))
    await memory.aclose()


async def test_each_failing_log_is_said_once_in_the_log(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The same cause on two threads (two logs): one WARNING each, however often it repeats."""
    caplog.set_level(logging.WARNING, logger="obsmem")
    on = {"fail": True}
    clock = Clock()
    memory = _failing_memory(SQLiteStore(tmp_path / "m.db"), on, clock)
    refs = [{"resource": "u1", "thread": t} for t in ("t1", "t2")]
    conv = Conversation()
    for _ in range(6):
        clock.now += timedelta(minutes=20)
        for ref in refs:
            await memory.context(ref, [conv.user(200)], actor_model=None)
            await memory.save(ref, [conv.assistant(200)], actor_model=None)
        assert memory.om is not None
        await memory.om.settle()
    failing = [w for w in _warnings(caplog) if "failed" in w]
    assert len(failing) == 2, failing
    assert sum("thread:t1" in w for w in failing) == 1
    assert sum("thread:t2" in w for w in failing) == 1
    await memory.aclose()


async def test_a_failing_reflector_is_stored_shown_and_heals(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The Reflector fails while the Observer works: its failure state is stored with the log,
    shown by ``status`` and ``inspect``, said once, and cleared once it answers again."""
    caplog.set_level(logging.WARNING, logger="obsmem")
    on = {"fail": True}
    clock = Clock()
    store = SQLiteStore(tmp_path / "m.db")
    memory = Memory(
        store,
        observational_memory={
            "observation": {
                "model": scripted_observer(words=40),
                "messageTokens": 400,
                "bufferTokens": False,
            },
            "reflection": {
                "model": scripted_reflector(fault=lambda n: "error" if on["fail"] else None),
                "observationTokens": 500,
            },
        },
        clock=clock,
    )
    ref = {"resource": "u1", "thread": "t1"}
    conv = Conversation()
    for _ in range(12):
        clock.now += timedelta(minutes=20)
        await memory.context(ref, [conv.user(200)], actor_model=None)
        await memory.save(ref, [conv.assistant(200)], actor_model=None)
        assert memory.om is not None
        await memory.om.settle()
    thread = await store.get_thread("t1")
    assert thread is not None
    stored = failures_in(thread.metadata)
    assert "reflector" in stored, thread.metadata
    assert "scripted model failure" in stored["reflector"].error
    status = await memory.status(ref)
    assert status.state == "failing"
    assert "FAILING: Reflector" in await _inspect("--db", str(tmp_path / "m.db"))
    failing = [w for w in _warnings(caplog) if "Reflector" in w and "failed" in w]
    assert len(failing) == 1, failing

    on["fail"] = False
    for _ in range(3):
        clock.now += timedelta(minutes=20)
        await memory.context(ref, [conv.user(200)], actor_model=None)
        await memory.save(ref, [conv.assistant(200)], actor_model=None)
        await memory.om.settle()
    thread = await store.get_thread("t1")
    assert thread is not None
    assert "reflector" not in failures_in(thread.metadata)
    assert any("works again" in w for w in _warnings(caplog))
    assert (await memory.status(ref)).generation >= 1
    await memory.aclose()


async def test_an_unknown_provider_is_told_its_own_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """``OBSMEM_MODEL=foo/bar``: the warning says how to name a model, not to set a key."""
    monkeypatch.setenv("OBSMEM_MODEL", "foo/bar")
    caplog.set_level(logging.WARNING, logger="obsmem")
    memory = Memory(SQLiteStore(tmp_path / "m.db"), observational_memory=True)
    ref = {"resource": "u1", "thread": "t1"}
    await memory.context(ref, [Conversation().user(20)], actor_model=None)
    [warning] = [w for w in _warnings(caplog) if "cannot work" in w]
    assert "unknown provider 'foo'" in warning
    assert "Fix: give the model as 'provider/model'" in warning
    assert "set that key" not in warning
    await memory.aclose()


class _CommitsFail:
    """A store whose commits fail while ``failing`` is set, as PostgreSQL does while it
    restarts (everything else passes through)."""

    ERROR = (
        "PostgreSQL error on PostgresStore('127.0.0.1:5432/obsmem'): server closed the "
        "connection unexpectedly"
    )

    def __init__(self, store: Store) -> None:
        self._store = store
        self.failing = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def commit(self, change: Any) -> Any:
        if self.failing:
            raise StoreError(self.ERROR)
        return await self._store.commit(change)


async def test_a_store_error_in_background_work_is_the_store_failing_not_the_observer(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    """The Observer answers, then the commit of its chunk fails in the store. The WARNING
    blames the store and gives the store's advice; the Observer is neither blamed nor put into
    back-off, so once the store answers the next turn buffers at once."""
    caplog.set_level(logging.WARNING, logger="obsmem")
    flaky = _CommitsFail(store)
    memory = Memory(
        flaky,  # type: ignore[arg-type]
        observational_memory={
            "observation": {"model": scripted_observer(), "messageTokens": 2_000},
            "reflection": {"model": scripted_reflector()},
        },
    )
    assert memory.om is not None
    events = Recorder()
    memory.subscribe(events)
    ref = {"resource": "u1", "thread": "t1"}
    conv = Conversation()
    flaky.failing = True
    while not events.of("data-om-buffering-failed"):
        await memory.context(ref, [conv.user(200)], actor_model=None)
        await memory.save(ref, [conv.assistant(200)], actor_model=None)
        await memory.om.settle()
    failed = events.of("data-om-buffering-failed")
    assert all("server closed the connection" in f.error for f in failed)
    [warning] = _warnings(caplog)  # once per cause, however many cycles met it
    assert "the store failed during observer work" in warning
    assert "server closed the connection unexpectedly" in warning
    assert "check the store" in warning
    assert "Observer (" not in warning  # not the role's failure ...
    assert "check that the server for" not in warning  # ... nor the model server's advice
    thread = await store.get_thread("t1")
    assert thread is not None
    assert failures_in(thread.metadata) == {}
    assert memory.om._logs.get("thread:t1") is None  # pyright: ignore[reportPrivateUsage]

    flaky.failing = False
    await memory.context(ref, [conv.user(200)], actor_model=None)
    await memory.save(ref, [conv.assistant(200)], actor_model=None)
    await memory.om.settle()
    assert events.of("data-om-buffering-end"), "the Observer was held back after a store error"
    assert any("works again: the store answered" in w for w in _warnings(caplog))
    assert (await memory.status(ref)).state == "healthy"
    await memory.aclose()


async def test_background_work_the_store_stops_is_a_warning_not_a_bug_report(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A store error outside a cycle (a catch-up reloading its snapshot) ends that background
    task with a WARNING naming the store's error, without the traceback a bug gets."""
    caplog.set_level(logging.WARNING, logger="obsmem")
    memory = Memory(
        _CommitsFail(SQLiteStore(":memory:")),  # type: ignore[arg-type]
        observational_memory={"model": scripted_observer()},
    )
    assert memory.om is not None
    background = memory.om._background  # pyright: ignore[reportPrivateUsage]

    async def reload_fails() -> None:
        raise StoreError(_CommitsFail.ERROR)

    background.spawn("catch-up:thread:t1", reload_fails())
    await memory.om.settle()
    [record] = [r for r in caplog.records if r.name == "obsmem"]
    assert record.levelno == logging.WARNING
    assert record.exc_info is None
    message = record.getMessage()
    assert "background memory work catch-up:thread:t1 stopped: the store failed" in message
    assert "server closed the connection unexpectedly" in message
    await memory.aclose()
