"""Every command's error paths end in one line on stderr (``obsmem: ...``), exit 2 when it
could not start and 1 when the work failed; never a traceback for a model, server or store
error, and a missing extra is the line that installs it. Doctor's messages as the user sees
them."""

from __future__ import annotations

import argparse
import io
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic_ai.exceptions import ModelAPIError, ModelHTTPError, UnexpectedModelBehavior

import obsmem
from obsmem.cli import main, replaycmd
from obsmem.cli.common import describe_error
from obsmem.errors import MissingExtraError, ModelError, StoreError

from .test_cli import _env, _on, _run
from .test_cli import obsmem as run_obsmem

ROOT = Path(__file__).resolve().parents[1]


def _one_line(stderr: str) -> str:
    assert "Traceback" not in stderr, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    return lines[0]


def test_version() -> None:
    from importlib.metadata import version

    result = run_obsmem("--version", cwd=ROOT)
    assert result.returncode == 0
    assert result.stdout.strip() == f"obsmem {version('obsmem')}"
    assert version("obsmem") == obsmem.__version__


@pytest.mark.parametrize(
    "args",
    [
        ("demo", "--bogus"),
        ("replay",),
        ("chat", "--message-tokens", "0"),
        ("inspect", "--messages", "many"),
        ("bench", "longmemeval"),
        ("doctor", "--timeout", "soon"),
        ("nothing",),
    ],
    ids=lambda a: "-".join(a),
)
def test_bad_arguments_exit_2_with_usage(args: tuple[str, ...], tmp_path: Path) -> None:
    result = run_obsmem(*args, cwd=tmp_path)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith("usage: obsmem")
    assert "error:" in result.stderr.strip().splitlines()[-1]


@pytest.mark.parametrize(
    "args",
    [
        ("demo",),
        ("replay", "chat.jsonl"),
        ("chat",),
        ("doctor",),
        ("bench", "longmemeval", "--data", "questions.json"),
    ],
    ids=lambda a: a[0],
)
def test_no_model_configured_is_one_line(args: tuple[str, ...], tmp_path: Path) -> None:
    (tmp_path / "chat.jsonl").write_text('{"role": "user", "content": "hi"}\n')
    (tmp_path / "questions.json").write_text(
        '[{"question_id": "q1", "question_type": "single-session-user", "question": "?", '
        '"answer": "a", "question_date": "2023/05/20 (Sat) 02:21", "haystack_dates": [], '
        '"haystack_session_ids": [], "haystack_sessions": [], "answer_session_ids": []}]'
    )
    result = run_obsmem(*args, cwd=tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "No model is configured" in _one_line(result.stderr)
    assert not (tmp_path / "obsmem.db").exists()


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("replay", "nope.jsonl", "--model", "test"), "cannot read nope.jsonl"),
        (("bench", "longmemeval", "--data", "nope.json"), "nope.json"),
        (("inspect", "--db", "nope.db"), "No obsmem database at nope.db"),
    ],
    ids=lambda a: a[0] if isinstance(a, tuple) else "",
)
def test_a_missing_file_is_one_line(args: tuple[str, ...], says: str, tmp_path: Path) -> None:
    result = run_obsmem(*args, cwd=tmp_path)
    assert result.returncode == 2
    assert says in _one_line(result.stderr)


BLOCKING = (
    "import runpy, sys\n"
    "for name in filter(None, sys.argv[1].split(',')):\n"
    "    sys.modules[name] = None\n"
    "target = sys.argv[2]\n"
    "sys.argv = sys.argv[2:]\n"
    "if target == 'obsmem':\n"
    "    runpy.run_module('obsmem', run_name='__main__')\n"
    "else:\n"
    "    runpy.run_path(target, run_name='__main__')\n"
)
"""Run the CLI (``obsmem``) or an example (its path) as if ``argv[1]`` (modules, comma
separated) were not installed."""


def _without(
    modules: str, *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", BLOCKING, modules, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=env if env is not None else _env(None),
        timeout=120,
    )


def test_demo_without_matplotlib_names_the_cli_extra(tmp_path: Path) -> None:
    result = _without("matplotlib", "obsmem", "demo", "--model", "test", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert 'pip install "obsmem[cli]"' in _one_line(result.stderr)
    assert not (tmp_path / "obsmem.db").exists()


def _raising(exc: BaseException) -> Any:
    def run(args: argparse.Namespace, out: Any) -> int:
        raise exc

    return run


def _model_http_error() -> ModelHTTPError:
    return ModelHTTPError(503, "local-test", {"message": "the model is loading"})


def _connect_error() -> httpx.ConnectError:
    return httpx.ConnectError(
        "[Errno 111] Connection refused",
        request=httpx.Request("POST", "http://127.0.0.1:9/v1/chat/completions"),
    )


def _wrapped_connection_error() -> ModelAPIError:
    try:
        try:
            raise _connect_error()
        except httpx.ConnectError as inner:
            raise ModelAPIError("local-test", "Connection error.") from inner
    except ModelAPIError as outer:
        return outer


@pytest.mark.parametrize(
    ("error", "code", "says"),
    [
        (_model_http_error(), 1, "answered HTTP 503: the model is loading. The server failed"),
        (_wrapped_connection_error(), 1, "at http://127.0.0.1:9/v1/chat/completions"),
        (UnexpectedModelBehavior("Received empty model response"), 1, "empty model response"),
        (_connect_error(), 1, "Connection refused"),
        (ModelError("the observer call failed"), 1, "the observer call failed"),
        (StoreError("SQLite error on obsmem.db: disk I/O error"), 1, "disk I/O error"),
        (MissingExtraError("drawing the plot", "cli", package="matplotlib"), 2, "obsmem[cli]"),
        (ModuleNotFoundError("No module named 'psycopg'", name="psycopg"), 2, "obsmem[postgres]"),
        (FileNotFoundError(2, "No such file or directory", "out/report.json"), 1, "report.json"),
        (PermissionError(13, "Permission denied", "obsmem.db"), 1, "Permission denied"),
        (ExceptionGroup("cycle", [_model_http_error()]), 1, "answered HTTP 503"),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, BaseException) else None,
)
def test_errors_from_the_work_end_in_one_line(
    error: BaseException,
    code: int,
    says: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(replaycmd, "_run_demo", _raising(error))
    assert main(["demo", "--model", "openai/local-test"], out=io.StringIO()) == code
    line = _one_line(capsys.readouterr().err)
    assert line.startswith("obsmem: ")
    assert says in line
    assert ".." not in line


def test_a_bug_still_shows_its_traceback() -> None:
    assert describe_error(ZeroDivisionError("division by zero")) is None
    assert describe_error(ModuleNotFoundError("No module named 'nope'", name="nope")) is None


# doctor, as the user sees it


def test_doctor_with_a_missing_key_says_so_and_only_so(tmp_path: Path) -> None:
    result = run_obsmem("doctor", "--model", "anthropic/claude-haiku-4-5", cwd=tmp_path)
    assert result.returncode == 1
    assert "needs an API key: set the environment variable ANTHROPIC_API_KEY" in result.stdout
    assert "No model is configured" not in result.stdout + result.stderr


def test_doctor_with_an_unknown_provider_says_so_and_only_so(tmp_path: Path) -> None:
    result = run_obsmem("doctor", "--model", "foo/bar", cwd=tmp_path)
    assert result.returncode == 1
    assert "unknown provider 'foo'" in result.stdout
    assert "No model is configured" not in result.stdout + result.stderr


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_doctor_names_the_url_it_could_not_reach(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{_free_port()}/v1"
    result = _run(["doctor"], tmp_path, _on(url, "openai/x"))
    assert result.returncode == 1
    reachable = next(line for line in result.stdout.splitlines() if "reachable" in line)
    assert f"cannot reach openai/x at {url}" in reachable
    assert "Is the server running, and the URL right?" in reachable
    assert ".." not in result.stdout
    assert "obsmem doctor --model" not in result.stdout
    assert "No model is configured" not in result.stdout
    assert "model 'auto' (what memory uses here): openai/x, OBSMEM_MODEL" in result.stdout


def test_demo_names_the_url_and_points_at_doctor(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{_free_port()}/v1"
    result = _run(["demo"], tmp_path, _on(url, "openai/x"))
    assert result.returncode == 2
    line = _one_line(result.stderr)
    assert f"cannot reach openai/x at {url}" in line
    assert "`obsmem doctor --model openai/x` checks what it accepts." in line
    assert ".." not in line


def test_doctor_reports_a_refusal_without_sending_the_user_to_doctor(tmp_path: Path) -> None:
    from .strict_server import strict_server_thread

    with strict_server_thread(reject_params=frozenset({"messages"})) as server:
        result = _run(["doctor"], tmp_path, _on(server.base_url))
    assert result.returncode == 1
    assert "answered HTTP 400: Unsupported parameter: 'messages'" in result.stdout
    assert f"at {server.base_url}" in result.stdout
    assert "obsmem doctor --model" not in result.stdout
    assert ".." not in result.stdout


def test_doctor_says_a_rambling_model_ran_past_obsmems_cap(tmp_path: Path) -> None:
    from .strict_server import rambling, strict_server_thread

    def answer(request: dict[str, Any]) -> Any:
        return "OK" if "single word OK" in str(request["messages"][0]) else rambling()(request)

    with strict_server_thread(answer=answer) as server:
        result = _run(["doctor", "--timeout", "60"], tmp_path, _on(server.base_url))
    assert result.returncode == 1, result.stdout + result.stderr
    advice = " ".join(line for line in result.stdout.splitlines() if "advice" in line)
    assert "rambled past obsmem's output cap" in advice
    assert "stronger Observer model (--model)" in advice
    assert "chat template" in advice
    assert "max_tokens" not in result.stdout
    assert "verdict: not ready." in result.stdout


async def test_the_start_up_check_names_a_model_that_sends_nothing_in_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A server that takes the request and never answers: the check gives up after its
    timeout (shrunk here; the server never answers, so any timeout ends the same way) and says
    what it waited for, where, and what to look at."""
    import asyncio

    from obsmem.cli.errors import CHECK_OUTPUT_TOKENS, check_model

    from .strict_server import strict_server

    release = asyncio.Event()

    async def never(request: dict[str, Any]) -> str:
        await release.wait()
        return "OK"

    async with strict_server(answer=never) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        problem = await check_model("openai/local-test", timeout=0.2)
        release.set()
    assert problem is not None
    assert problem.startswith(f"openai/local-test at {server.base_url} sent no answer within 0.2 s")
    assert f"capped at {CHECK_OUTPUT_TOKENS} tokens" in problem
    assert "still loading the model?" in problem
    assert "`obsmem doctor --model openai/local-test`" in problem
    [request] = server.requests
    assert request["max_completion_tokens"] == CHECK_OUTPUT_TOKENS


# examples and extras


EXAMPLES = ROOT / "examples"


def test_every_example_names_an_extra_that_exists() -> None:
    extras = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    )
    for example in sorted(EXAMPLES.glob("*.py")):
        named = set(re.findall(r"obsmem\[([a-z-]+)\]", example.read_text()))
        assert named <= extras, (example.name, named - extras)
        if example.name != "first_steps.py":
            assert named, f"{example.name} names no extra"
    langchain = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]["langchain"]
    assert any(dep.startswith("langchain-openai") for dep in langchain)


@pytest.mark.parametrize("name", ["langchain_agent_memory.py", "langgraph_memory.py"])
def test_a_langchain_example_without_its_extra_says_which(name: str, tmp_path: Path) -> None:
    env = {**_env(None), "OBSMEM_MODEL": "openai/gpt-5-mini", "OPENAI_API_KEY": "k"}
    without_langgraph = _without("langgraph", str(EXAMPLES / name), cwd=tmp_path, env=env)
    assert without_langgraph.returncode == 2, without_langgraph.stderr
    assert 'pip install "obsmem[langchain]"' in _one_line(without_langgraph.stderr)
    without_chat_model = _without("langchain_openai", str(EXAMPLES / name), cwd=tmp_path, env=env)
    assert without_chat_model.returncode == 2, without_chat_model.stderr
    line = _one_line(without_chat_model.stderr)
    assert "langchain-openai for 'openai/gpt-5-mini': pip install \"obsmem[langchain]\"" in line
    unknown = _without(
        "", str(EXAMPLES / name), cwd=tmp_path, env={**env, "OBSMEM_MODEL": "xai/grok-4"}
    )
    assert unknown.returncode == 2
    line = _one_line(unknown.stderr)
    assert "no LangChain chat model for 'xai/grok-4'" in line
    assert "No model is configured" not in line
    assert not (tmp_path / "obsmem.db").exists()


@pytest.mark.parametrize("name", ["quickstart.py", "pydantic_ai_memory.py"])
def test_an_example_without_the_providers_sdk_names_its_extra(name: str, tmp_path: Path) -> None:
    env = {**_env(None), "OBSMEM_MODEL": "anthropic/claude-haiku-4-5", "ANTHROPIC_API_KEY": "k"}
    result = _without("anthropic", str(EXAMPLES / name), cwd=tmp_path, env=env)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    # (memory's own warning about the same model may come first: a log line of the library)
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"{name}: ")
    assert 'pip install "obsmem[anthropic]"' in last


@pytest.mark.parametrize("name", ["openai_agents_memory.py", "openai_agents_approval.py"])
def test_an_agents_sdk_example_without_the_sdk_names_its_extra(name: str, tmp_path: Path) -> None:
    env = {**_env(None), "OBSMEM_MODEL": "openai/gpt-5-mini", "OPENAI_API_KEY": "k"}
    result = _without("agents", str(EXAMPLES / name), cwd=tmp_path, env=env)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    line = _one_line(result.stderr)
    assert 'pip install "obsmem[openai-agents]"' in line
    assert not (tmp_path / "obsmem.db").exists()


def test_the_agents_sdk_example_says_which_model_to_choose(tmp_path: Path) -> None:
    env = {**_env(None), "OBSMEM_MODEL": "anthropic/claude-haiku-4-5", "ANTHROPIC_API_KEY": "k"}
    result = _without("", str(EXAMPLES / "openai_agents_memory.py"), cwd=tmp_path, env=env)
    assert result.returncode == 2, result.stderr
    line = _one_line(result.stderr)
    assert "not 'anthropic/claude-haiku-4-5': set OBSMEM_MODEL=openai/<model>" in line
    assert "No model is configured" not in line


async def test_the_retry_message_reads_as_one_sentence() -> None:
    from obsmem.models.retry import call_with_retry

    async def refused() -> None:
        raise ConnectionError("Connection error.")

    with pytest.raises(ModelError) as caught:
        await call_with_retry(refused, max_total=0.0, what="the observer call")
    text = str(caught.value)
    assert "gave up after 1 attempt in" in text
    assert "(a transient error; retries are off)" in text
    assert "max_total=0" not in text
    assert ".." not in text


def test_first_steps_without_obsmem_says_how_to_run_it(tmp_path: Path) -> None:
    result = _without("obsmem", str(EXAMPLES / "first_steps.py"), cwd=tmp_path)
    assert result.returncode == 2
    line = _one_line(result.stderr)
    assert "pip install obsmem" in line
    assert ".venv/bin/python examples/first_steps.py" in line
