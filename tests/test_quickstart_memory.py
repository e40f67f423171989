"""The README's Quick start, pasted as a new user would, gets memory from the environment: with
only ``OBSMEM_MODEL`` and ``OPENAI_BASE_URL`` set, its ``Memory(observational_memory=True)``
observes through that server (the default model is ``"auto"``), and nothing warns."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from .loopback_openai import LoopbackServer, is_memory_call, run_on_a_local_server

README = Path(__file__).resolve().parents[1] / "README.md"


def _quick_start() -> str:
    text = README.read_text(encoding="utf-8")
    section = text.split("## Quick start: an agent that remembers", 1)[1]
    [code] = re.findall(r"```py\n(.*?)```", section, re.S)[:1]
    assert "Memory(observational_memory=True)" in code
    return code


def test_the_quick_start_observes_with_the_environments_model(tmp_path: Path) -> None:
    body = textwrap.indent(_quick_start(), "    ")
    script = (
        "import asyncio, logging\n"
        "logging.basicConfig(level=logging.INFO)\n"
        "async def main():\n"
        f"{body}\n"
        "    assert memory.om is not None\n"
        "    await memory.om.observe('conversation-123', 'user-123')\n"
        "    log = await memory.om.observations('conversation-123', 'user-123')\n"
        "    status = await memory.status(opts)\n"
        "    print('LOG:', log)\n"
        "    print('STATE:', status.state, status.observer_model)\n"
        "    await memory.aclose()\n"
        "asyncio.run(main())\n"
    )
    with LoopbackServer() as server:
        env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
        env.update(OPENAI_BASE_URL=server.base_url, OBSMEM_MODEL="openai/local-test")
        result = subprocess.run(
            [sys.executable, "-c", script],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
    assert result.returncode == 0, result.stderr
    assert "favorite color is blue" in result.stdout
    assert "STATE: healthy openai/local-test" in result.stdout
    assert "WARNING" not in result.stderr, result.stderr
    memory_calls = [
        r
        for r in server.stats.requests
        if is_memory_call(str((r.get("messages") or [{}])[0].get("content")))
    ]
    assert memory_calls, "the Observer was called on the environment's server"
    assert all(r["model"] == "local-test" for r in memory_calls)


def test_the_quick_start_with_nothing_configured_says_so_in_the_log(tmp_path: Path) -> None:
    """No key, no server: the first turn's log names the key to set (the actor here is a
    pydantic-ai TestModel, so the turn itself works)."""
    script = (
        "import asyncio, logging\n"
        "logging.basicConfig(level=logging.INFO)\n"
        "from obsmem import Agent, Memory\n"
        "async def main():\n"
        "    memory = Memory(observational_memory=True)\n"
        "    agent = Agent(id='a', instructions='Be brief.', model='test', memory=memory)\n"
        "    await agent.generate('hi', memory={'resource': 'u', 'thread': 't'})\n"
        "    await memory.aclose()\n"
        "asyncio.run(main())\n"
    )
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.endswith("_API_KEY") and k not in ("OBSMEM_MODEL", "OPENAI_BASE_URL")
    }
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if line.startswith("WARNING:obsmem")]
    assert len(warnings) == 1, result.stderr
    assert "GOOGLE_API_KEY" in warnings[0]
    assert "OBSMEM_MODEL" in warnings[0]


def test_with_only_openai_base_url_memory_asks_the_server_for_its_model(tmp_path: Path) -> None:
    """Only OPENAI_BASE_URL, at a server that serves one named model and refuses any other (as
    vLLM and Ollama do), and an actor that names no provider: ``"auto"`` names the placeholder
    ``openai/local`` in the turn (no network call there), and the first memory model call asks
    the server which model it serves and calls that one; status shows it."""
    script = (
        "import asyncio, logging\n"
        "logging.basicConfig(level=logging.INFO)\n"
        "from obsmem import Agent, Memory\n"
        "async def main():\n"
        "    memory = Memory(observational_memory=True)\n"
        "    agent = Agent(id='a', instructions='Be brief.', model='test', memory=memory)\n"
        "    opts = {'resource': 'u', 'thread': 't'}\n"
        "    await agent.generate('Remember that my favorite color is blue.', memory=opts)\n"
        "    assert memory.om is not None\n"
        "    print('BEFORE:', (await memory.status(opts)).observer_model)\n"
        "    await memory.om.observe('t', 'u')\n"
        "    print('LOG:', await memory.om.observations('t', 'u'))\n"
        "    status = await memory.status(opts)\n"
        "    print('STATE:', status.state, status.observer_model)\n"
        "    await memory.aclose()\n"
        "asyncio.run(main())\n"
    )
    result, models, refusals = run_on_a_local_server(["-c", script], tmp_path, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "BEFORE: openai/local" in result.stdout
    assert "favorite color is blue" in result.stdout
    assert "STATE: healthy openai/qwen2.5:0.5b" in result.stdout
    assert "memory models use openai/qwen2.5:0.5b, the model the server" in result.stderr
    assert "WARNING" not in result.stderr, result.stderr
    assert models == {"qwen2.5:0.5b"}, models
    assert refusals == []


async def test_a_failing_served_model_is_named_as_served(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The server's model writes a date header and nothing else (what a tiny model does): the
    answer is empty, the WARNING, the stored failure and the cycle ledger name the model the
    server serves, never the placeholder, and the fix names it too."""
    import logging

    from obsmem import Agent, Memory
    from obsmem.stores import SQLiteStore

    from .strict_server import strict_server

    def header_only(body: dict[str, object]) -> str:
        return "<observations>\nDate: Dec 4, 2026\n</observations>"

    async with strict_server(
        answer=header_only, model_id="qwen2.5:0.5b", named_model_only=True
    ) as server:
        monkeypatch.delenv("OBSMEM_MODEL", raising=False)
        for key in [k for k in os.environ if k.endswith("_API_KEY")]:
            monkeypatch.delenv(key)
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        caplog.set_level(logging.WARNING, logger="obsmem")
        memory = Memory(
            SQLiteStore(tmp_path / "obsmem.db"),
            observational_memory={"observation": {"messageTokens": 20, "bufferTokens": False}},
        )
        agent = Agent(id="a", instructions="Be brief.", model="test", memory=memory)
        opts = {"resource": "u", "thread": "t"}
        await agent.generate("My favorite color is blue and I live in Lisbon.", memory=opts)
        await agent.generate("I have a dog named Rex who is three years old.", memory=opts)
        await memory.settle()
        status = await memory.status(opts)
        cycles = await memory.cycles(opts)
        await memory.aclose()
    assert server.refusals == []
    assert status.state == "failing"
    [failure] = status.failures
    assert failure.model == "openai/qwen2.5:0.5b"
    assert "empty (not one observation in it)" in failure.error
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("Observer (openai/qwen2.5:0.5b)" in w for w in warnings), warnings
    assert any("doctor --model openai/qwen2.5:0.5b" in w for w in warnings), warnings
    assert not any("openai/local" in w for w in warnings), warnings
    # The ledger keeps the name the server answered with.
    assert {c.model for c in cycles if c.outcome == "failed"} == {"qwen2.5:0.5b"}
