"""The command line through its real entry point (a subprocess), models on a loopback server."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from obsmem.messages import Message, ToolCallPart, ToolResultPart
from obsmem.sent import TurnSent, stamped
from obsmem.stores import SQLiteStore
from obsmem.testing.store_conformance.kit import observe, open_record

from .loopback_openai import LoopbackServer


@pytest.fixture(scope="module")
def server() -> Iterator[LoopbackServer]:
    with LoopbackServer() as s:
        yield s


def _env(server: LoopbackServer | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env.pop("OPENAI_BASE_URL", None)
    env.pop("OBSMEM_MODEL", None)
    if server is not None:
        env.update(OPENAI_BASE_URL=server.base_url, OBSMEM_MODEL="openai/local-test")
    return env


def obsmem(
    *args: str, cwd: Path, server: LoopbackServer | None = None, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "obsmem", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=_env(server),
        input=stdin,
        timeout=300,
    )


def test_demo_replays_the_bundled_conversation_and_draws_the_sawtooth(
    tmp_path: Path, server: LoopbackServer
) -> None:
    result = obsmem("demo", "--report", "demo.json", cwd=tmp_path, server=server)
    assert result.returncode == 0, result.stderr
    assert "--- observation log ---" in result.stdout
    assert "44/44 turns" in result.stderr  # the progress bar reached the end
    png = (tmp_path / "obsmem-demo.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    assert len(png) > 20_000  # axes, four curves and three threshold lines, not an empty canvas
    report = json.loads((tmp_path / "demo.json").read_text())
    assert report["turns"] == 44
    assert report["conversation_tokens"] > 15_000
    assert report["largest_context"] < report["conversation_tokens"] / 3
    assert report["model_calls"] >= 5
    assert any(c["operation"] == "observation" for c in report["cycles"])
    assert (tmp_path / "obsmem.db").exists()
    # The demo's own thresholds (3k/2k) are stored with its turns, for inspect and the ui.
    [thread] = json.loads(obsmem("inspect", "--json", cwd=tmp_path).stdout)["resources"][0][
        "threads"
    ]
    shown = json.loads(obsmem("inspect", "--thread", thread["id"], "--json", cwd=tmp_path).stdout)
    assert shown["last_turn"]["message_tokens"] == report["thresholds"]["message_tokens"] == 3_000
    assert shown["last_turn"]["observation_tokens"] == 2_000


def test_demo_without_a_model_stops_at_once_and_says_how(tmp_path: Path) -> None:
    result = obsmem("demo", cwd=tmp_path)
    assert result.returncode == 2
    assert "OBSMEM_MODEL" in result.stderr
    assert "OPENAI_BASE_URL" in result.stderr
    assert not (tmp_path / "obsmem.db").exists()


def test_demo_with_an_unreachable_server_says_so(tmp_path: Path) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = subprocess.run(
        [sys.executable, "-m", "obsmem", "demo"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={
            **_env(None),
            "OPENAI_BASE_URL": f"http://127.0.0.1:{port}/v1",
            "OBSMEM_MODEL": "openai/x",
        },
        timeout=120,
    )
    assert result.returncode == 2
    assert "cannot reach openai/x" in result.stderr


def test_replay_of_openai_chat_jsonl_with_plot_and_report(
    tmp_path: Path, server: LoopbackServer
) -> None:
    lines = []
    for i in range(30):
        lines.append({"role": "user", "content": f"Message {i}: my favorite color is blue. " * 12})
        lines.append({"role": "assistant", "content": "Noted, thanks. " * 20})
    (tmp_path / "chat.jsonl").write_text("\n".join(json.dumps(x) for x in lines))
    result = obsmem(
        "replay",
        "chat.jsonl",
        "--message-tokens",
        "1500",
        "--observation-tokens",
        "150",
        "--plot",
        "chat.png",
        "--report",
        "chat.json",
        "--quiet",
        cwd=tmp_path,
        server=server,
    )
    assert result.returncode == 0, result.stderr
    assert "30 turns" in result.stdout
    assert (tmp_path / "chat.png").stat().st_size > 20_000
    report = json.loads((tmp_path / "chat.json").read_text())
    assert report["generations"] >= 2, "the log passed 150 tokens and was reflected"
    assert report["cycles"]


def test_replay_of_a_locomo_conversation(tmp_path: Path, server: LoopbackServer) -> None:
    conversation = {
        "speaker_a": "Ana",
        "speaker_b": "Ben",
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [
            {
                "speaker": "Ana" if i % 2 == 0 else "Ben",
                "dia_id": f"D1:{i}",
                "text": f"Turn {i}: my favorite color is blue and I like long walks. " * 6,
            }
            for i in range(20)
        ],
        "session_2_date_time": "9:00 am on 20 May, 2023",
        "session_2": [{"speaker": "Ana", "dia_id": "D2:1", "text": "Remember my color?"}],
    }
    (tmp_path / "locomo.json").write_text(json.dumps(conversation))
    result = obsmem("replay", "locomo.json", "--message-tokens", "800", cwd=tmp_path, server=server)
    assert result.returncode == 0, result.stderr
    assert "11 turns" in result.stdout
    assert "favorite color is blue" in result.stdout  # the log, printed


def test_replay_reports_the_bad_line(tmp_path: Path, server: LoopbackServer) -> None:
    (tmp_path / "bad.jsonl").write_text('{"role": "user", "content": "hi"}\n{not json}\n')
    result = obsmem("replay", "bad.jsonl", cwd=tmp_path, server=server)
    assert result.returncode == 2
    assert "bad.jsonl:2: not valid JSON" in result.stderr
    missing = obsmem("replay", "nope.jsonl", cwd=tmp_path, server=server)
    assert missing.returncode == 2
    assert "cannot read nope.jsonl" in missing.stderr


def test_bad_options_exit_with_usage(tmp_path: Path) -> None:
    result = obsmem("replay", cwd=tmp_path)
    assert result.returncode == 2
    assert "usage:" in result.stderr


def test_chat_repl_with_status_and_commands(tmp_path: Path, server: LoopbackServer) -> None:
    script = "\n".join(
        [
            "Remember that my favorite color is blue.",
            "What is my favorite color?",
            "/observations",
            "/recall 1:2",
            "/threads",
            "/bogus",
            "/quit",
        ]
    )
    result = obsmem(
        "chat", "--message-tokens", "1000", cwd=tmp_path, server=server, stdin=script + "\n"
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "agent> Your favorite color is blue." in out
    assert "[messages " in out
    assert "/1,000 · log " in out
    assert "#1 user: Remember that my favorite color is blue." in out
    assert "* chat  4 messages" in out
    assert "unknown command /bogus" in out


async def _populate(path: Path) -> None:
    store = SQLiteStore(path)
    await store.create_thread("t1", "user-1", title="Colors")
    await store.append_messages(
        "t1",
        [
            Message.user("My favorite color is blue."),
            Message(role="assistant", parts=(ToolCallPart(tool_call_id="c", tool_name="note"),)),
            Message.assistant("Noted: blue."),
        ],
    )
    record = await open_record(store, "t1", "user-1")
    await observe(
        store,
        record,
        observations="Date: Dec 4, 2025\n* 🔴 (14:30) User's favorite color is blue.",
        observation_tokens=14,
        cursor={"t1": 2},
        observed_tokens=25,
    )
    await store.aclose()


async def test_inspect_overview_thread_range_and_json(tmp_path: Path) -> None:
    await _populate(tmp_path / "obsmem.db")
    overview = obsmem("inspect", cwd=tmp_path)
    assert overview.returncode == 0, overview.stderr
    assert 'thread t1  "Colors"  3 messages' in overview.stdout
    assert "generation 0, log 14 tokens, observed through message 2" in overview.stdout
    detail = obsmem("inspect", "--thread", "t1", cwd=tmp_path)
    assert "* 🔴 (14:30) User's favorite color is blue." in detail.stdout
    assert "#2 assistant [tool-call]:" in detail.stdout
    actor = obsmem("inspect", "--thread", "t1", "--as-actor", cwd=tmp_path)
    assert "Date: Dec 4, 2025 (" in actor.stdout  # relative date added for the agent
    ranged = obsmem("inspect", "--thread", "t1", "--range", "2:3", cwd=tmp_path)
    assert "#1 user" not in ranged.stdout
    assert "#3 assistant: Noted: blue." in ranged.stdout
    data = json.loads(obsmem("inspect", "--thread", "t1", "--json", cwd=tmp_path).stdout)
    assert data["generations"][0]["cursor"] == {"t1": 2}
    assert [m["role"] for m in data["messages"]] == ["user", "assistant", "assistant"]
    everything = json.loads(obsmem("inspect", "--json", cwd=tmp_path).stdout)
    assert everything["resources"][0]["threads"][0]["memory"]["log_tokens"] == 14
    assert everything["resources"][0]["threads"][0]["memory"]["tokens_observed"] == 25


async def test_inspect_shows_tool_calls_and_results(tmp_path: Path) -> None:
    """A tool call shows its tool and arguments, a result its content cut to one line (the
    JSON keeps all of it), an error result says so."""
    store = SQLiteStore(tmp_path / "obsmem.db")
    await store.create_thread("t1", "user-1")
    long_result = "Paris forecast:\n" + "sunny " * 200
    await store.append_messages(
        "t1",
        [
            Message.user("Weather in Paris?"),
            Message(
                role="assistant",
                parts=(
                    ToolCallPart(tool_call_id="c1", tool_name="weather", args={"city": "Paris"}),
                ),
            ),
            Message(
                role="tool",
                parts=(
                    ToolResultPart(tool_call_id="c1", tool_name="weather", content=long_result),
                ),
            ),
            Message(
                role="tool",
                parts=(
                    ToolResultPart(
                        tool_call_id="c2", tool_name="lookup", content="timeout", is_error=True
                    ),
                ),
            ),
        ],
    )
    await store.aclose()
    shown = obsmem("inspect", "--thread", "t1", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert '      tool call weather: { "city": "Paris" }' in lines
    result = next(line for line in lines if "tool result weather:" in line)
    assert "Paris forecast: sunny sunny" in result
    assert result.endswith("more characters)")
    assert len(result) < 400
    assert "      tool result lookup (error): timeout" in lines
    data = json.loads(obsmem("inspect", "--thread", "t1", "--json", cwd=tmp_path).stdout)
    assert data["messages"][2]["parts"][0]["content"] == long_result


async def test_inspect_shows_what_the_last_turn_sent(tmp_path: Path) -> None:
    """A reply stamped with its turn (obsmem.sent) shows what that turn sent and the thresholds
    in force, in text and in JSON."""
    store = SQLiteStore(tmp_path / "obsmem.db")
    await store.create_thread("t1", "user-1")
    turn = TurnSent(
        at=1, sent=3_600, memory=400, left_out=12, message_tokens=3_000, observation_tokens=2_000
    )
    reply = stamped([Message.assistant("ok")], turn)
    await store.append_messages("t1", [Message.user("hello"), *reply])
    await store.aclose()
    shown = obsmem("inspect", "--thread", "t1", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert (
        "turn at message 1 sent 3,600 tokens (400 of memory, 3,200 raw, 12 messages left out); "
        "thresholds in force: observe at 3,000, reflect at 2,000"
    ) in shown.stdout
    data = json.loads(obsmem("inspect", "--thread", "t1", "--json", cwd=tmp_path).stdout)
    assert data["last_turn"]["sent"] == 3_600
    assert data["last_turn"]["message_tokens"] == 3_000


def test_inspect_errors_a_person_can_act_on(tmp_path: Path) -> None:
    missing = obsmem("inspect", "--db", "none.db", cwd=tmp_path)
    assert missing.returncode == 2
    assert "No obsmem database at none.db" in missing.stderr
    assert not (tmp_path / "none.db").exists()


async def test_inspect_unknown_thread_lists_known_ones(tmp_path: Path) -> None:
    await _populate(tmp_path / "obsmem.db")
    result = obsmem("inspect", "--thread", "t9", cwd=tmp_path)
    assert result.returncode == 2
    assert "no thread 't9'" in result.stderr
    assert "Known threads: t1" in result.stderr
    bad_range = obsmem("inspect", "--thread", "t1", "--range", "x", cwd=tmp_path)
    assert bad_range.returncode == 2
    assert "is not FIRST:LAST" in bad_range.stderr


async def test_inspect_never_changes_the_database(tmp_path: Path) -> None:
    """inspect opens the file read-only: its bytes stay as they were, an empty file gets no
    tables, and a file that is not an obsmem database is said to be so (exit 2, one line)."""
    import hashlib

    db = tmp_path / "obsmem.db"
    await _populate(db)
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    for args in (("inspect",), ("inspect", "--thread", "t1"), ("inspect", "--json")):
        assert obsmem(*args, cwd=tmp_path).returncode == 0
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before
    empty = tmp_path / "empty.db"
    empty.touch()
    result = obsmem("inspect", "--db", "empty.db", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0
    assert "not an obsmem database" in result.stderr
    assert empty.stat().st_size == 0


def test_replay_user_errors_are_one_line_before_any_work(tmp_path: Path) -> None:
    """A binary conversation file, a bad --buffer-tokens, an unwritable --plot or --report:
    exit 2 with one line saying what to fix, before any model call or database write."""
    (tmp_path / "binary.json").write_bytes(bytes(range(256)) * 4)
    (tmp_path / "chat.jsonl").write_text(
        '{"role": "user", "content": "hi"}\n{"role": "assistant", "content": "hello"}\n'
    )
    binary = obsmem("replay", "binary.json", "--model", "test", cwd=tmp_path)
    assert binary.returncode == 2
    assert "is not UTF-8 text" in binary.stderr
    assert "Traceback" not in binary.stderr
    for option, value, says in (
        ("--buffer-tokens", "abc", "give a ratio of the threshold"),
        ("--message-tokens", "lots", "not a whole number of tokens"),
    ):
        bad = obsmem("replay", "chat.jsonl", "--model", "test", option, value, cwd=tmp_path)
        assert bad.returncode == 2
        assert says in bad.stderr
        assert "Traceback" not in bad.stderr
    for option in ("--plot", "--report"):
        unwritable = obsmem(
            "replay", "chat.jsonl", "--model", "test", option, "missing/dir/out", cwd=tmp_path
        )
        assert unwritable.returncode == 2
        assert "does not exist" in unwritable.stderr
        assert "Traceback" not in unwritable.stderr
    assert not (tmp_path / "obsmem.db").exists()


def _on(url: str, model: str = "openai/local-test") -> dict[str, str]:
    return {**_env(None), "OPENAI_BASE_URL": url, "OBSMEM_MODEL": model}


def _run(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "obsmem", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


def test_doctor_says_a_model_that_follows_the_format_is_ready(
    tmp_path: Path, server: LoopbackServer
) -> None:
    result = obsmem("doctor", cwd=tmp_path, server=server)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "reachable      yes" in result.stdout
    assert "requests       accepted" in result.stdout
    assert "observer call" in result.stdout
    assert re.search(r"observation +\d+ lines", result.stdout)
    assert "verdict: ready for memory work." in result.stdout


def test_doctor_names_a_model_that_runs_away(tmp_path: Path) -> None:
    from .strict_server import endless, strict_server_thread

    def answer(request: dict[str, Any]) -> Any:
        return "OK" if "single word OK" in str(request["messages"][0]) else endless()(request)

    with strict_server_thread(answer=answer) as server:
        result = _run(["doctor", "--timeout", "60"], tmp_path, _on(server.base_url))
    assert result.returncode == 1, result.stdout + result.stderr
    assert "cut off: repeating itself" in result.stdout
    assert "ran away: it repeated itself until obsmem cut it off" in result.stdout
    assert "max_tokens" not in result.stdout
    assert "obsmem doctor --model" not in result.stdout
    assert "verdict: not ready." in result.stdout


ASYNCIO_NOISE = re.compile(
    r"Task was destroyed but it is pending|was never awaited|Task exception was never retrieved"
    r"|Unclosed|unclosed|Event loop is closed"
)
"""What asyncio (and aiohttp/httpx) print when tasks, coroutines or connections are left behind."""


def test_doctor_finds_a_model_that_always_rambles_reachable(tmp_path: Path) -> None:
    """Every answer rambles on, the start-up check's too, and the server ignores max_tokens:
    the check's answer is cut off at its cap (the model answered: it is reachable), and the
    observation step says the model ran past obsmem's cap."""
    from .strict_server import rambling, strict_server_thread

    with strict_server_thread(answer=rambling()) as server:
        result = _run(["doctor", "--timeout", "60"], tmp_path, _on(server.base_url))
        server.wait_hung_up_from(1)
    assert "reachable      yes" in result.stdout, result.stdout
    from obsmem.cli.errors import CHECK_OUTPUT_TOKENS

    check = server.requests[0]
    assert "single word OK" in str(check["messages"])
    assert check["max_completion_tokens"] == CHECK_OUTPUT_TOKENS
    assert "rambled past obsmem's output cap" in result.stdout
    assert result.returncode == 1  # not ready as an Observer, which is another matter
    assert not ASYNCIO_NOISE.search(result.stderr), result.stderr


def test_replay_starts_with_a_model_that_rambles(tmp_path: Path) -> None:
    """The start-up check of ``obsmem replay`` passes for a model that rambles on."""
    from .strict_server import rambling, strict_server_thread

    said = [{"role": "user", "content": "My favorite color is blue."}]
    said.append({"role": "assistant", "content": "Noted."})
    (tmp_path / "chat.jsonl").write_text("\n".join(json.dumps(x) for x in said))
    with strict_server_thread(answer=rambling()) as server:
        result = _run(["replay", "chat.jsonl", "--quiet"], tmp_path, _on(server.base_url))
    assert result.returncode == 0, result.stderr
    assert "1 turns" in result.stdout
    assert not ASYNCIO_NOISE.search(result.stderr), result.stderr


def test_demo_reports_a_server_error_as_a_server_error(tmp_path: Path) -> None:
    """A server that answers every request with an error was reached: the demo says what it
    answered and points at obsmem doctor, not that no model is configured."""
    from .strict_server import strict_server_thread

    with strict_server_thread(reject_params=frozenset({"messages"})) as server:
        result = _run(["demo"], tmp_path, _on(server.base_url))
    assert result.returncode == 2
    assert "answered HTTP 400: Unsupported parameter: 'messages'" in result.stderr
    assert "obsmem doctor --model openai/local-test" in result.stderr
    assert "No model is configured" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_demo_estimates_the_tokens_a_server_does_not_report(tmp_path: Path) -> None:
    """llama.cpp leaves usage out of a stream: the demo's summary counts the tokens itself and
    says so, instead of reporting 0 in / 0 out."""
    from .loopback_openai import answer
    from .strict_server import strict_server_thread

    with strict_server_thread(answer=answer, report_usage=False) as server:
        result = _run(["demo"], tmp_path, _on(server.base_url))
    assert result.returncode == 0, result.stdout + result.stderr
    summary = next(line for line in result.stdout.splitlines() if " model calls, " in line)
    assert "(estimated: the server reported no usage)" in summary
    assert " 0 in / 0 out" not in summary


def test_with_only_openai_base_url_the_served_model_is_used(tmp_path: Path) -> None:
    """No OBSMEM_MODEL, only OPENAI_BASE_URL at a server that serves a named model (as vLLM and
    Ollama do, refusing any other name): the command asks the server and uses that model."""
    with LoopbackServer(model_id="qwen2.5:0.5b") as named:
        env = {**_env(None), "OPENAI_BASE_URL": named.base_url}
        result = subprocess.run(
            [sys.executable, "-m", "obsmem", "demo"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )
        models = {r.get("model") for r in named.stats.requests}
    assert result.returncode == 0, result.stderr
    assert "obsmem: using openai/qwen2.5:0.5b, the model the server at OPENAI_BASE_URL serves" in (
        result.stderr
    )
    assert models == {"qwen2.5:0.5b"}


def test_doctor_says_which_model_memory_uses_on_a_local_server(tmp_path: Path) -> None:
    """``obsmem doctor`` with only OPENAI_BASE_URL: it checks the model the server serves, and
    says that is what ``"auto"`` uses (a Memory in the user's code asks the server too)."""
    with LoopbackServer(model_id="qwen2.5:0.5b") as named:
        env = {**_env(None), "OPENAI_BASE_URL": named.base_url}
        result = subprocess.run(
            [sys.executable, "-m", "obsmem", "doctor", "--timeout", "60"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )
    assert "obsmem doctor: openai/qwen2.5:0.5b" in result.stdout, result.stdout + result.stderr
    assert (
        "model 'auto' (what memory uses here): openai/qwen2.5:0.5b, the model served at "
        "OPENAI_BASE_URL"
    ) in result.stdout
