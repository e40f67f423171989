"""Clean first contact: the Quick start and ``obsmem chat`` print only what is obsmem's (no
pydantic-ai banner, no Python warning), and what the README and examples suggest is not a model
its provider is retiring.

The programs run as a new user runs them, against the loopback OpenAI-compatible server, with
what would show pydantic-ai's banner on a pipe (``AI_AGENT``, and no ``PYTEST_VERSION`` or ``CI``
in the environment).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from obsmem.models import resolve_model

from .loopback_openai import LoopbackServer

ROOT = Path(__file__).resolve().parents[1]
MODEL_ID = re.compile(r"\b((?:openai|anthropic|google)[/:][A-Za-z0-9._-]+)")


def _as_a_new_user(server: LoopbackServer, model: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_VERSION", "CI")}
    env.update(
        PYTHONPATH=str(ROOT / "src"),
        OPENAI_BASE_URL=server.base_url,
        OPENAI_API_KEY="sk-loopback",
        OBSMEM_MODEL=model,
        AI_AGENT="1",  # pydantic-ai would show its banner on this stderr pipe
    )
    env.pop("PYTHONWARNINGS", None)
    return env


def test_the_quick_start_prints_only_its_answer(tmp_path: Path) -> None:
    with LoopbackServer() as server:
        result = subprocess.run(
            [sys.executable, str(ROOT / "examples" / "quickstart.py")],
            capture_output=True,
            text=True,
            env=_as_a_new_user(server, "openai/gpt-6.1-terra"),
            cwd=tmp_path,
            timeout=120,
        )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "Your favorite color is blue.\n"
    assert result.stderr == ""


def test_chat_names_a_retiring_model_once_in_one_line(tmp_path: Path) -> None:
    with LoopbackServer() as server:
        result = subprocess.run(
            [sys.executable, "-m", "obsmem", "chat", "--db", str(tmp_path / "chat.db")],
            input="hello\nmy favorite color is blue\nwhat is my favorite color?\n/quit\n",
            capture_output=True,
            text=True,
            env=_as_a_new_user(server, "openai/gpt-5-mini"),
            cwd=tmp_path,
            timeout=120,
        )
    assert result.returncode == 0, result.stderr
    assert "Your favorite color is blue." in result.stdout
    [line] = result.stderr.splitlines()
    assert line.startswith(
        "obsmem: openai/gpt-5-mini is deprecated by its provider, retiring on 2026-12-11; "
        "it recommends gpt-6.1-terra ("
    ), line


def _suggested_models() -> set[str]:
    """The model ids in the README's code blocks and in the examples: what a reader copies."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    texts = re.findall(r"```[a-z]*\n(.*?)```", readme, re.S)
    texts += [path.read_text(encoding="utf-8") for path in (ROOT / "examples").glob("*.py")]
    return {m for text in texts for m in MODEL_ID.findall(text) if "embedding" not in m}


def test_the_readme_and_examples_suggest_no_retiring_model(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for variable in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GOOGLE_API_KEY"):
        monkeypatch.setenv(variable, "test-key")
    suggested = _suggested_models()
    assert "openai/gpt-6.1-terra" in suggested
    retiring = {
        model: deprecation
        for model in sorted(suggested)
        if (deprecation := resolve_model(model).profile.get("deprecation")) is not None
    }
    assert retiring == {}


def test_settings_for_a_reasoning_model_leave_the_warning_filters_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Changing the warning filters makes Python forget which warnings it has shown: a
    deprecated model's warning would come back after every memory call."""
    import warnings

    from obsmem.models.settings import call_settings

    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    model = resolve_model("openai/gpt-6.1-terra")

    def warn_from_one_place() -> None:
        warnings.warn("shown once", UserWarning, stacklevel=1)

    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("default")
        warn_from_one_place()
        settings = call_settings("observer", model, {"temperature": 0.3})
        warn_from_one_place()
    assert "temperature" not in settings  # dropped while the model reasons, as pydantic-ai does
    assert [str(w.message) for w in shown] == ["shown once"]
