"""The README's first command runs examples/first_steps.py; it must keep working."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "first_steps.py"


def test_first_steps_runs_offline_and_is_repeatable(tmp_path: Path) -> None:
    first = subprocess.run(
        [sys.executable, str(EXAMPLE)], cwd=tmp_path, capture_output=True, text=True
    )
    assert first.returncode == 0, first.stderr
    assert "stored 7 messages" in first.stdout
    assert "activate at 30000, keep ~6000 raw, block after 36000; reflect at 40000" in first.stdout
    assert "observation.buffer_tokens" in first.stdout
    assert (tmp_path / "obsmem.db").exists()
    again = subprocess.run(
        [sys.executable, str(EXAMPLE)], cwd=tmp_path, capture_output=True, text=True
    )
    assert again.returncode == 0, again.stderr
    assert "already holds 7 messages" in again.stdout
    inspect = subprocess.run(
        [sys.executable, "-m", "obsmem.cli", "inspect", "--thread", "first-steps"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert inspect.returncode == 0, inspect.stderr
    assert "#7 assistant: Hall A, Loft B and Garden C are free on Dec 11." in inspect.stdout


QUICKSTART = EXAMPLE.with_name("quickstart.py")


def test_quickstart_without_a_model_says_how_to_provide_one(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env.pop("OPENAI_BASE_URL", None)
    env.pop("OBSMEM_MODEL", None)
    result = subprocess.run(
        [sys.executable, str(QUICKSTART)], cwd=tmp_path, capture_output=True, text=True, env=env
    )
    assert result.returncode == 2
    assert "OBSMEM_MODEL" in result.stderr
    assert "OPENAI_BASE_URL" in result.stderr
    assert not (tmp_path / "obsmem.db").exists()


def test_model_from_environment() -> None:
    from obsmem.models import model_from_environment

    assert model_from_environment({}) is None
    assert model_from_environment({"OBSMEM_MODEL": "xai/grok-4-1-fast"}) == "xai/grok-4-1-fast"
    assert model_from_environment({"ANTHROPIC_API_KEY": "k"}) == "anthropic/claude-haiku-4-5"
    assert model_from_environment({"OPENAI_BASE_URL": "http://127.0.0.1:8080/v1"}) == (
        "openai/local"
    )


def test_quickstart_against_an_openai_compatible_server(tmp_path: Path) -> None:
    from .loopback_openai import LoopbackServer

    with LoopbackServer() as server:
        env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
        env.update(OPENAI_BASE_URL=server.base_url, OBSMEM_MODEL="openai/local-test")
        result = subprocess.run(
            [sys.executable, str(QUICKSTART)],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
    assert result.returncode == 0, result.stderr
    assert "Your favorite color is blue." in result.stdout
    assert len(server.stats.requests) >= 2
    assert all(r["model"] == "local-test" for r in server.stats.requests)
    assert (tmp_path / "obsmem.db").exists()


def test_quickstart_with_only_openai_base_url_at_a_server_of_one_named_model(
    tmp_path: Path,
) -> None:
    """Only ``OPENAI_BASE_URL``, at a server that serves one named model and refuses others:
    the quick start asks it which, for its agent and for memory."""
    from .loopback_openai import run_on_a_local_server

    result, models, _ = run_on_a_local_server([str(QUICKSTART)], tmp_path, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "Your favorite color is blue." in result.stdout
    assert models == {"qwen2.5:0.5b"}
