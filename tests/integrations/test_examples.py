"""The integration examples: without a model they say how to provide one and exit 2; the
pydantic-ai and Agents SDK ones also run against a loopback OpenAI-compatible server."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ..loopback_openai import LoopbackServer, run_on_a_local_server

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
NAMES = [
    "pydantic_ai_memory.py",
    "openai_agents_memory.py",
    "langgraph_memory.py",
    "langchain_agent_memory.py",
]


def offline_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env.pop("OPENAI_BASE_URL", None)
    env.pop("OBSMEM_MODEL", None)
    return env


@pytest.mark.parametrize("name", NAMES)
def test_without_a_model_it_says_how_to_provide_one(name: str, tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / name)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=offline_env(),
    )
    assert result.returncode == 2, result.stderr
    assert "OBSMEM_MODEL" in result.stderr
    assert not (tmp_path / "obsmem.db").exists()


@pytest.mark.parametrize("name", NAMES[:2])
def test_against_an_openai_compatible_server(name: str, tmp_path: Path) -> None:
    with LoopbackServer() as server:
        env = offline_env()
        env.update(OPENAI_BASE_URL=server.base_url, OBSMEM_MODEL="openai/local-test")
        result = subprocess.run(
            [sys.executable, str(EXAMPLES / name)],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
    assert result.returncode == 0, result.stderr
    assert "Your favorite color is blue." in result.stdout
    assert len(server.stats.requests) >= 2


def test_the_agents_sdk_approval_example_pauses_and_resumes_offline(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / "openai_agents_approval.py")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=offline_env(),
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        'Paused: delete_file({"path":"old-report.txt"}) waits for approval.',
        "Saved the run to pending-run.json.",
        "Approved. Agent: I deleted old-report.txt.",
        "Memory stored the result of: delete_file",
    ]
    assert not (tmp_path / "pending-run.json").exists()


@pytest.mark.parametrize("name", NAMES)
def test_with_only_openai_base_url_at_a_server_of_one_named_model(
    name: str, tmp_path: Path
) -> None:
    """A new user's local server (vLLM, Ollama: one named model, any other name refused) and
    only ``OPENAI_BASE_URL`` set, no key: each example asks the server for its model and runs,
    the LangChain chat model included (it needs some key, which a local server ignores)."""
    result, models, refusals = run_on_a_local_server([str(EXAMPLES / name)], tmp_path)
    assert result.returncode == 0, result.stderr
    assert "Your favorite color is blue." in result.stdout
    assert refusals == []
    assert models == {"qwen2.5:0.5b"}
