"""``obsmem chat`` driven through a pseudo-terminal, and what the demo's progress line says while
memory waits on a failing server; models on a loopback server."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import io
import os
import re
import select
import signal
import subprocess
import sys
import termios
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from obsmem.cli.common import Progress
from obsmem.cli.replaycmd import _summary  # pyright: ignore[reportPrivateUsage]
from obsmem.engine import ObservationalMemory
from obsmem.llm import ModelCaller
from obsmem.messages import Message
from obsmem.records import OMRecord, record_key
from obsmem.replay import replay
from obsmem.stores import SQLiteStore

from .loopback_openai import answer, is_memory_call
from .strict_server import StrictServer, rambling, strict_server_thread
from .test_cli import ASYNCIO_NOISE

INSTRUCTIONS = "You are a helpful assistant."
SERVER_MESSAGE = "upstream exploded: the GPU fell over"


@dataclass
class FlakyServer(StrictServer):
    """The loopback model, answering HTTP 500 with ``SERVER_MESSAGE`` to the agent's calls while
    ``failing_agent`` is set and to every Observer/Reflector call while ``failing_memory`` is;
    a user message containing ``please hang`` gets an answer only at shutdown, one containing
    ``please begin`` the first piece of its answer (``began`` is set once it is sent), the rest
    only at shutdown, and so does every Observer/Reflector call while ``holding_memory`` is set
    (``memory_held`` is set at the first)."""

    failing_agent: bool = False
    failing_memory: bool = False
    memory_status: int = 500
    """The status Observer/Reflector calls fail with (a 400 is not retried)."""
    holding_memory: bool = False
    memory_held: threading.Event = field(default_factory=threading.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)
    began: threading.Event = field(default_factory=threading.Event)
    failed: int = 0

    def check(self, body: dict[str, Any]) -> tuple[int, str] | None:
        messages = body.get("messages") or []
        system = "\n".join(str(m.get("content")) for m in messages if m.get("role") == "system")
        memory = is_memory_call(system)
        if self.failing_memory and memory:
            self.failed += 1
            return self.memory_status, SERVER_MESSAGE
        if self.failing_agent and not memory and INSTRUCTIONS in system:
            self.failed += 1
            return 500, SERVER_MESSAGE
        return super().check(body)


def _answer(body: dict[str, Any]) -> Any:
    messages = body.get("messages") or []
    users = [m for m in messages if m.get("role") == "user"]
    if users and "please hang" in str(users[-1].get("content")):
        return _hang(body)
    if users and "please begin" in str(users[-1].get("content")):
        return _begin_and_hang()
    system = "\n".join(str(m.get("content")) for m in messages if m.get("role") == "system")
    if _SERVER[0].holding_memory and is_memory_call(system):
        _SERVER[0].memory_held.set()
        return _hang(body)
    return answer(body)


async def _begin_and_hang() -> AsyncIterator[str]:
    yield "Once upon a time, "
    _SERVER[0].began.set()  # the first piece is sent: the server asks for the next
    await _SERVER[0].release.wait()
    yield "the end."


async def _hang(body: dict[str, Any]) -> str:
    await _SERVER[0].release.wait()
    return answer(body)


_SERVER: list[FlakyServer] = []


@contextlib.contextmanager
def flaky_server(context_size: int | None = None) -> Generator[FlakyServer]:
    """A ``FlakyServer`` on its own event loop in a thread."""
    loop = asyncio.new_event_loop()
    ready = threading.Event()

    def run() -> None:
        asyncio.set_event_loop(loop)

        async def begin() -> None:
            server = FlakyServer(answer=_answer, context_size=context_size)
            await server.start()
            _SERVER[:] = [server]
            ready.set()

        loop.run_until_complete(begin())
        loop.run_forever()

    thread = threading.Thread(target=run, name="flaky-server", daemon=True)
    thread.start()
    assert ready.wait(10)
    server = _SERVER[0]
    try:
        yield server
    finally:
        loop.call_soon_threadsafe(server.release.set)
        asyncio.run_coroutine_threadsafe(server.aclose(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
        _SERVER.clear()


# -- obsmem chat in a terminal -------------------------------------------------------------------

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b[=>]")
WAIT = 60.0
"""Seconds any one expected output may take (a safety net: reads return as output comes)."""


def _controlling_terminal() -> None:
    """In the child: a session of its own with the pty (its stdin) as controlling terminal, so
    ^C typed there is a SIGINT to it, as in a shell."""
    os.setsid()
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


class Terminal:
    """``python -m obsmem chat`` on a pseudo-terminal: type into it, wait for what it shows."""

    def __init__(self, cwd: Path, server: StrictServer, *options: str) -> None:
        env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
        env.update(
            OPENAI_BASE_URL=server.base_url,
            OBSMEM_MODEL="openai/local-test",
            HOME=str(cwd),  # the prompt's history goes here
            TERM="xterm",
            COLUMNS="200",
        )
        master, slave = os.openpty()
        self.master = master
        self.process = subprocess.Popen(
            [sys.executable, "-m", "obsmem", "chat", "--instructions", INSTRUCTIONS, *options],
            cwd=cwd,
            env=env,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            preexec_fn=_controlling_terminal,
        )
        os.close(slave)
        self.seen = ""
        """Everything shown so far, escape sequences removed."""
        self._read_to = 0

    def type(self, text: str) -> None:
        os.write(self.master, text.encode())

    def expect(self, text: str) -> str:
        """Wait until ``text`` shows (after what the last ``expect`` matched); returns what was
        shown up to and including it."""
        deadline = time.monotonic() + WAIT
        while (found := self.seen.find(text, self._read_to)) < 0:
            left = deadline - time.monotonic()
            assert left > 0, f"{text!r} never showed; the terminal shows:\n{self.seen}"
            if not self._read(left):
                raise AssertionError(f"obsmem exited before {text!r} showed:\n{self.seen}")
        start, self._read_to = self._read_to, found + len(text)
        return self.seen[start : self._read_to]

    def exit_code(self) -> int:
        """Wait for the process to end (reading what it shows meanwhile)."""
        deadline = time.monotonic() + WAIT
        while self._read(max(0.0, deadline - time.monotonic())):
            assert time.monotonic() < deadline, f"obsmem did not exit:\n{self.seen}"
        return self.process.wait(timeout=WAIT)

    def _read(self, timeout: float) -> bool:
        """Read what is there within ``timeout`` s; False at the end of output."""
        ready, _, _ = select.select([self.master], [], [], timeout)
        if not ready:
            return True
        try:
            data = os.read(self.master, 65536)
        except OSError:  # EIO: the child closed the terminal
            return False
        if not data:
            return False
        self.seen += ANSI.sub("", data.decode(errors="replace")).replace("\r\n", "\n")
        return True

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=WAIT)
        os.close(self.master)


@pytest.fixture
def server() -> Iterator[FlakyServer]:
    with flaky_server() as s:
        yield s


@pytest.fixture
def terminal(tmp_path: Path, server: FlakyServer) -> Iterator[Terminal]:
    term = Terminal(tmp_path, server)
    try:
        yield term
    finally:
        term.close()


def test_a_server_error_is_one_line_and_the_chat_goes_on_then_ctrl_c_leaves(
    terminal: Terminal, server: FlakyServer, tmp_path: Path
) -> None:
    terminal.expect("/help for commands.")
    terminal.expect("you> ")
    server.failing_agent = True
    terminal.type("Remember that my favorite color is blue.\r")
    shown = terminal.expect("you> ")
    assert server.failed >= 1
    [line] = [x for x in shown.splitlines() if "HTTP 500" in x]
    assert line.startswith("obsmem: ")
    assert SERVER_MESSAGE in line
    assert "Traceback" not in terminal.seen
    assert "ModelServerError" not in terminal.seen

    server.failing_agent = False
    terminal.type("What is my favorite color?\r")
    shown = terminal.expect("you> ")
    assert "agent> Your favorite color is blue." in shown
    assert "[messages " in shown

    terminal.type("\x03")  # Ctrl-C at the prompt
    assert terminal.exit_code() in (0, 130)
    assert "Traceback" not in terminal.seen
    history = (tmp_path / ".obsmem_history").read_text(encoding="utf-8")
    assert "What is my favorite color?" in history


def test_a_local_model_too_small_for_the_thresholds_is_a_warning_at_start(tmp_path: Path) -> None:
    with flaky_server(context_size=8192) as small:
        term = Terminal(tmp_path, small)
        try:
            shown = term.expect("/help for commands.")
            [line] = [x for x in shown.splitlines() if "warning" in x]
            assert line.startswith("obsmem: warning: the thresholds do not fit openai/local-test")
            assert "8,192 tokens (llama.cpp /props)" in line
            assert "--message-tokens 2900 --observation-tokens 2700" in line
            term.expect("you> ")
            term.type("\x04")  # Ctrl-D
            assert term.exit_code() == 0
        finally:
            term.close()


def test_ctrl_d_at_the_prompt_leaves(terminal: Terminal) -> None:
    terminal.expect("you> ")
    terminal.type("\x04")
    assert terminal.exit_code() == 0
    assert "Traceback" not in terminal.seen


def test_ctrl_c_during_a_reply_cancels_it_and_the_spinner_shows_meanwhile(
    terminal: Terminal,
) -> None:
    terminal.expect("you> ")
    terminal.type("please hang\r")
    terminal.expect("thinking")  # the spinner, redrawn while the reply is awaited
    terminal.type("\x03")
    shown = terminal.expect("you> ")
    assert "(cancelled)" in shown
    terminal.type("/help\r")
    assert "/observations" in terminal.expect("you> ")
    terminal.type("/quit\r")
    assert terminal.exit_code() == 0
    assert "Traceback" not in terminal.seen


def test_a_reply_that_never_ends_stops_at_the_output_cap(tmp_path: Path) -> None:
    """A model that rambles on and a server that ignores max_tokens: the start-up check gets an
    answer (cut off at its cap), each reply is read as a stream and cut off at --max-tokens
    (default 4,096), the server sees the client hang up, and the chat goes on."""
    from obsmem.tokens import HeuristicEstimator

    with strict_server_thread(answer=rambling()) as server:
        term = Terminal(tmp_path, server)
        try:
            term.expect("you> ")
            for turn in range(2):
                term.type("Tell me everything you know.\r")
                shown = term.expect("you> ")
                reply = shown[shown.index("agent> ") : shown.index("(reply cut off")]
                assert "(reply cut off at its output cap: --max-tokens 4,096)" in shown
                # Counted every 1,000 characters as it streams: cut within one count of the cap.
                assert 4_096 < HeuristicEstimator().count_text(reply) < 4_096 + 400
                assert "[messages " in shown
                server.wait_hung_up_from(2 + turn)  # the check's answer, then each reply
            replies = [r for r in server.requests if INSTRUCTIONS in str(r["messages"][0])]
            assert len(replies) == 2
            for sent in replies:
                assert sent["stream"] is True
                assert sent["max_completion_tokens"] == 4_096  # pydantic-ai's name for max_tokens
            term.type("\x04")
            assert term.exit_code() == 0
        finally:
            term.close()
    assert "Traceback" not in term.seen
    assert not ASYNCIO_NOISE.search(term.seen), term.seen


def test_ctrl_c_during_a_reply_hangs_up_on_the_server(
    terminal: Terminal, server: FlakyServer
) -> None:
    """The reply has begun streaming when Ctrl-C comes: the request is closed (the server sees
    the client hang up, and would stop generating), and nothing is left behind on stderr."""
    terminal.expect("you> ")
    terminal.type("Tell me a long story, please begin.\r")
    assert server.began.wait(WAIT)
    terminal.type("\x03")
    assert "(cancelled)" in terminal.expect("you> ")
    server.wait_hung_up_from(1)
    terminal.type("/quit\r")
    assert terminal.exit_code() == 0
    assert "Traceback" not in terminal.seen
    assert not ASYNCIO_NOISE.search(terminal.seen), terminal.seen


def test_the_status_line_says_when_memory_fails_and_what_is_left_out(tmp_path: Path) -> None:
    """The Observer's calls are refused: the status line after the reply names the failing
    role and the cause in a few words, and the messages the context leaves out meanwhile."""
    with flaky_server() as server:
        server.failing_memory, server.memory_status = True, 400  # a 400 is not retried
        term = Terminal(tmp_path, server, "--message-tokens", "40", "--buffer-tokens", "off")
        try:
            term.expect("you> ")
            term.type("My favorite color is blue and I live in Lisbon near the river.\r")
            [status] = [x for x in term.expect("you> ").splitlines() if "[messages " in x]
            assert "failing" not in status  # below the threshold: no Observer call yet
            term.type("I also have a cat named Tom who likes fish.\r")
            [status] = [x for x in term.expect("you> ").splitlines() if "[messages " in x]
            term.type("\x04")
            assert term.exit_code() == 0
        finally:
            term.close()
    assert server.failed >= 1
    assert f"· Observer failing: HTTP 400: {SERVER_MESSAGE} ·" in status
    assert re.search(r"· \d+ messages? left out\]$", status.strip()), status
    assert not ASYNCIO_NOISE.search(term.seen), term.seen


STOP_BOUND = 45.0
"""Seconds the chat may take to leave after SIGTERM here (the goal is 10 s)."""
LONG = " ".join(["We planned the trip to Lisbon, the budget and the hotel near the harbour."] * 6)
"""A user message of about 100 tokens: with --message-tokens 300 (buffering every 60 tokens),
each turn starts background buffering."""


def _stopped_by_sigterm(terminal: Terminal) -> int:
    """SIGTERM to the chat, and its exit code (within ``STOP_BOUND`` s)."""
    terminal.process.send_signal(signal.SIGTERM)
    return _stopped_by_sigterm_sent(terminal)


def _stopped_by_sigterm_sent(terminal: Terminal) -> int:
    started = time.monotonic()
    code = terminal.exit_code()
    assert time.monotonic() - started < STOP_BOUND, terminal.seen
    return code


def test_sigterm_leaves_at_once_abandoning_memory_work_that_resumes_at_the_next_start(
    server: FlakyServer, tmp_path: Path
) -> None:
    server.holding_memory = True
    flags = ("--message-tokens", "300")
    first = Terminal(tmp_path, server, *flags)
    try:
        first.expect("you> ")
        first.type(f"{LONG}\r")
        first.expect("you> ")
        assert server.memory_held.wait(WAIT)  # buffering waits on an Observer that never answers
        code = _stopped_by_sigterm(first)
    finally:
        first.close()
    assert code == -signal.SIGTERM, first.seen
    assert "Traceback" not in first.seen
    abandoned = "obsmem chat: memory work abandoned (1 buffering cycle); it resumes at the next"
    assert abandoned in first.seen

    server.holding_memory = False  # the Observer answers from now on
    second = Terminal(tmp_path, server, *flags)
    try:
        second.expect("you> ")
        second.type("What did we plan?\r")
        second.expect("you> ")
        second.type("\x04")  # Ctrl-D: leaves once memory work finished
        assert second.exit_code() == 0, second.seen
    finally:
        second.close()
    record = asyncio.run(_record(tmp_path / "obsmem.db", "chat"))
    assert record is not None
    assert record.covered_through("chat") > 0


async def _record(db: Path, thread: str) -> OMRecord | None:
    store = SQLiteStore(db)
    try:
        return await store.get_record(record_key("thread", thread_id=thread, resource_id=None))
    finally:
        await store.aclose()


def test_sigterm_during_a_reply_leaves_instead_of_cancelling_the_reply(
    terminal: Terminal,
) -> None:
    terminal.expect("you> ")
    terminal.type("please hang\r")
    terminal.expect("thinking")
    code = _stopped_by_sigterm(terminal)
    assert code == -signal.SIGTERM, terminal.seen
    assert "(cancelled)" not in terminal.seen
    assert "Traceback" not in terminal.seen


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux's /proc")
def test_a_sigterm_taken_by_another_thread_still_leaves_at_once(terminal: Terminal) -> None:
    """A process's signal may be taken by any of its threads, while the main thread waits in
    ``input()``, which runs a signal's handler only when its own wait is interrupted."""
    terminal.expect("you> ")
    pid = terminal.process.pid
    others = sorted(int(t) for t in os.listdir(f"/proc/{pid}/task") if int(t) != pid)
    assert others  # the chat's event loop runs on a thread of its own
    os.kill(others[0], signal.SIGTERM)  # a thread's id: that thread takes the signal
    assert _stopped_by_sigterm_sent(terminal) == -signal.SIGTERM, terminal.seen
    assert "ending now" not in terminal.seen  # left by itself, not by the deadline


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux's /proc")
def test_a_ctrl_c_taken_by_another_thread_still_leaves_at_once(terminal: Terminal) -> None:
    """The same for Ctrl-C at the prompt (it is a process's signal too); so is one typed the
    instant the prompt shows, before readline waits for input."""
    terminal.expect("you> ")
    pid = terminal.process.pid
    others = sorted(int(t) for t in os.listdir(f"/proc/{pid}/task") if int(t) != pid)
    assert others
    os.kill(others[0], signal.SIGINT)
    assert terminal.exit_code() == 130, terminal.seen
    assert "Traceback" not in terminal.seen


# -- the demo's progress while memory waits -----------------------------------------------------


class Plain(io.StringIO):
    """stderr that is not a terminal: progress comes as plain lines."""

    def isatty(self) -> bool:
        return False


class Screen(io.StringIO):
    """stderr on a terminal: progress redraws one line."""

    def isatty(self) -> bool:
        return True


def _conversation() -> list[Message]:
    said = [
        ("user", "My favorite color is blue, and I am planning a trip to Lisbon next month."),
        ("assistant", "Lisbon in spring is lovely; noted that you like blue."),
        ("user", "I will stay in Alfama for a week and want to see the tile museum."),
        ("assistant", "The National Tile Museum is a short ride from Alfama."),
    ]
    return [Message.user(t) if r == "user" else Message.assistant(t) for r, t in said]


def _pauses(quick: int) -> Callable[[float], Awaitable[None]]:
    """Retry pauses: the first ``quick`` shortened a hundredfold (the retries and their reasons
    stay as they are), then one that lasts until the call's deadline cuts it off, so the
    deadline comes after those retries however loaded the machine is."""
    taken: list[float] = []

    async def pause(seconds: float) -> None:
        taken.append(seconds)
        if len(taken) > quick:
            await asyncio.Event().wait()
        await asyncio.sleep(seconds / 100)

    return pause


async def test_replay_against_a_failing_observer_says_what_it_waits_on_and_why_it_failed(
    tmp_path: Path, server: FlakyServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from openai import AsyncOpenAI
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    client = AsyncOpenAI(base_url=server.base_url, api_key="test", max_retries=0)
    model = OpenAIChatModel("local-test", provider=OpenAIProvider(openai_client=client))
    server.failing_memory = True
    om = ObservationalMemory(
        SQLiteStore(tmp_path / "obsmem.db"),
        {
            "observation": {"model": model, "messageTokens": 30, "bufferTokens": False},
            "reflection": {"model": model, "observationTokens": 10_000},
        },
        caller=ModelCaller(sleep=_pauses(quick=1)),
        sync_timeout=5.0,  # only ever reached in the endless pause after the second failure
    )
    progress = Progress("demo", Plain())
    try:
        async with progress.ticking():
            report = await replay(
                om, _conversation(), progress=progress, activity=progress.activity
            )
    finally:
        await om.aclose()
    assert server.failed >= 2
    lines = progress.stream.getvalue().splitlines()  # pyright: ignore[reportAttributeAccessIssue]
    waits = [x for x in lines if "waiting" in x]
    retry = next(x for x in waits if "retry 2" in x)
    assert "Observer call to local-test" in retry
    assert f"after HTTP 500: {SERVER_MESSAGE}" in retry
    assert lines[-1].startswith("demo [")
    assert "2/2 turns" in lines[-1]

    out = io.StringIO()
    _summary(report, out, thread="replay", quiet=True)
    failed = [x for x in out.getvalue().splitlines() if x.strip().startswith("failed:")]
    assert failed, out.getvalue()
    assert "timed out" in failed[0]
    assert f"last error: HTTP 500: {SERVER_MESSAGE}" in failed[0]


def test_the_progress_line_redraws_with_the_reason_while_a_call_waits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from obsmem.llm import CallActivity, LLMRequest

    monkeypatch.setenv("COLUMNS", "300")
    screen = Screen()
    progress = Progress("demo", screen)
    progress(3, 10)
    request = LLMRequest(role="observer", model="openai/m", system="s", user=["u"])
    start = CallActivity(kind="start", request=request, call_id=1, model_name="m")
    progress.activity(start)
    progress.tick()
    assert screen.getvalue().endswith("\x1b[K")
    assert "3/10 turns" in screen.getvalue().rsplit("\r", 1)[-1]
    assert "on Observer call to m" in screen.getvalue().rsplit("\r", 1)[-1]
    error = RuntimeError("boom")
    progress.activity(
        CallActivity(
            kind="retry", request=request, call_id=1, model_name="m", attempt=2, error=error
        )
    )
    assert "retry 2 in 0.0 s after RuntimeError: boom" in screen.getvalue().rsplit("\r", 1)[-1]
    progress.activity(CallActivity(kind="end", request=request, call_id=1, model_name="m"))
    assert "waiting" not in screen.getvalue().rsplit("\r", 1)[-1]
    assert progress.last_retry is not None
    assert "RuntimeError: boom" in progress.last_retry

    monkeypatch.setenv("COLUMNS", "40")  # a narrow terminal: the line is cut, never wrapped
    progress.activity(start)
    drawn = screen.getvalue().rsplit("\r", 1)[-1].removesuffix("\x1b[K")
    assert len(drawn) < 40
    assert drawn.endswith("…")


async def test_the_progress_line_redraws_on_its_own_while_a_call_waits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No activity comes while a call hangs: ``ticking`` still redraws the line, its spinner
    turning and the reason kept, so a wait never looks like a hang."""
    from obsmem.llm import CallActivity, LLMRequest

    class CountingScreen(Screen):
        def __init__(self) -> None:
            super().__init__()
            self.redrawn = asyncio.Event()
            self.draws = 0

        def write(self, s: str) -> int:
            if s.startswith("\r") and "waiting" in s:
                self.draws += 1
                if self.draws >= 4:
                    self.redrawn.set()
            return super().write(s)

    monkeypatch.setenv("COLUMNS", "300")
    monkeypatch.setattr(Progress, "TICK", 0.01)
    screen = CountingScreen()
    progress = Progress("demo", screen)
    progress(1, 5)
    request = LLMRequest(role="observer", model="openai/m", system="s", user=["u"])
    progress.activity(CallActivity(kind="start", request=request, call_id=1, model_name="m"))
    assert screen.draws == 1
    async with progress.ticking():
        async with asyncio.timeout(10):
            await screen.redrawn.wait()
    drawn = [x for x in screen.getvalue().split("\r") if "waiting" in x]
    assert len(drawn) >= 4
    assert all("1/5 turns" in x and "on Observer call to m" in x for x in drawn)
    spinners = {x.split("waiting")[0].rstrip()[-1] for x in drawn}
    assert len(spinners) >= 3, drawn
    assert screen.getvalue().endswith("\n")  # left on a fresh line when the block ends
