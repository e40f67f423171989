"""``obsmem chat``: talk to an agent with observational memory and watch the windows.

Lines are read on the main thread with ``input()`` (line editing and a history kept in
``~/.obsmem_history`` when the stdlib ``readline`` is there and stdin is a terminal); the
agent's turns and memory run on an event loop of their own thread, so the prompt answers
Ctrl-C and Ctrl-D at once. While a reply is awaited a terminal shows a spinner (with the memory
call it waits on, if any), erased when the answer comes.

A reply is capped at ``--max-tokens``: sent as ``max_tokens``, and enforced on the reply as it
streams in, for a server that ignores it (:class:`obsmem.models.output_cap.OutputCapped`). After
each reply a status line shows the windows against their thresholds and, when memory fails, who
fails and why, and how many messages the context leaves out.

A failed turn (a model, server or store error) is reported in one line and the conversation
goes on. Ctrl-C during a reply cancels that reply and returns to the prompt; Ctrl-C at the
prompt leaves at once (exit 130), abandoning background memory work; Ctrl-D or ``/quit``
leaves (exit 0) after background memory work finished (Ctrl-C then abandons it). SIGTERM leaves
at once from anywhere (a reply is cancelled), abandoning background memory work, and ends the
process by the signal. Abandoned work is named on stderr; it resumes at the next start.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
import threading
import time
import traceback
from collections.abc import Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO, TypeVar

from .arguments import Run, add_memory_options, positive_tokens
from .common import (
    check_model,
    db_label,
    describe_error,
    memory_options,
    open_store,
    pick_model,
)
from .stopping import Terminated, close_memory, end_by_signal, signals_reach_the_main_thread

if TYPE_CHECKING:
    from .._sync import LoopThread
    from ..agent import Agent
    from ..failures import MemoryStatus
    from ..llm import CallActivity
    from ..memory import Memory

__all__ = ["add"]

T = TypeVar("T")

HELP = """commands:
  /observations        the observation log
  /recall [FROM:TO]    the stored messages (by position), e.g. /recall 1:10
  /threads             this resource's threads
  /help                this help
  /quit                leave (Ctrl-D works too; Ctrl-C leaves at once)
Ctrl-C while the agent answers cancels that reply."""

HISTORY_FILE = "~/.obsmem_history"
"""Where the prompt's history is kept between sessions (when ``readline`` is available)."""
HISTORY_LENGTH = 1_000
MAX_REPLY_TOKENS = 4_096
"""``--max-tokens`` by default: a long answer fits; a model that rambles stops there."""


def add(parser: argparse.ArgumentParser) -> Run:
    """Chat with an agent whose memory lives in the store; a status line shows the message and
    observation windows against their thresholds. A failed turn is reported and the chat goes
    on; Ctrl-C cancels a reply, or leaves at the prompt."""
    add_memory_options(parser)
    parser.add_argument("--thread", default="chat", help="conversation id (default: chat)")
    parser.add_argument("--resource", default="me", help="user id (default: me)")
    parser.add_argument("--instructions", default="You are a helpful assistant.")
    parser.add_argument(
        "--max-tokens",
        type=positive_tokens,
        default=MAX_REPLY_TOKENS,
        help=f"most tokens of one reply (default {MAX_REPLY_TOKENS:,}): sent to the server as "
        "max_tokens, and the reply is read as a stream and cut off there (as obsmem estimates "
        "tokens) when the server goes on, which closes the request; a cut reply says so, and "
        "the thread keeps it as shown",
    )
    return _run


def _run(args: argparse.Namespace, out: TextIO) -> int:
    model = pick_model(args)
    if model is None:
        return 2
    from .._sync import LoopThread

    loop = LoopThread("obsmem-chat")
    session = _Session(args, out, model, loop)
    try:
        return session.run()
    finally:
        if loop.running:
            loop.run(_cancel_leftovers())
        loop.stop()
        if session.terminated:
            end_by_signal(signal.SIGTERM)


class _Spinner:
    """A "thinking…" line on a terminal, redrawn while a reply is awaited and erased when it
    comes; it names the memory-model call being waited on, if any. Nothing off a terminal."""

    FRAMES = "|/-\\"

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.tty = out.isatty()
        self._label = ""
        self._since = 0.0
        self._frame = 0
        self._shown = False
        self._memory: dict[int, str] = {}
        """What memory-model calls in flight wait on, by call id (set on the loop's thread)."""

    def activity(self, event: CallActivity) -> None:
        """A ``ModelCaller`` activity listener (runs on the loop's thread)."""
        if event.kind == "end":
            self._memory.pop(event.call_id, None)
        else:
            self._memory[event.call_id] = event.describe()

    def start(self, label: str) -> None:
        self._label, self._since, self._frame = label, time.monotonic(), 0

    def tick(self) -> None:
        if not self.tty or not self._label:
            return
        self._frame += 1
        waits = list(self._memory.values())
        memory = f"  (memory: {waits[-1]})" if waits else ""
        line = (
            f"{self.FRAMES[self._frame % len(self.FRAMES)]} {self._label} "
            f"{time.monotonic() - self._since:.0f}s{memory}"
        )
        import shutil

        columns = shutil.get_terminal_size(fallback=(100, 24)).columns
        if len(line) >= columns:
            line = line[: max(10, columns - 2)] + "…"
        self.out.write("\r" + line + "\x1b[K")
        self.out.flush()
        self._shown = True

    def clear(self) -> None:
        self._label = ""
        if self._shown:
            self.out.write("\r\x1b[K")
            self.out.flush()
            self._shown = False


class _Session:
    TICK = 0.1
    """Seconds between the spinner's redraws (and checks for the reply)."""

    def __init__(self, args: argparse.Namespace, out: TextIO, model: str, loop: LoopThread):
        self.args = args
        self.out = out
        self.model = model
        self.loop = loop
        self.spinner = _Spinner(out)
        self.memory: Memory | None = None
        self.agent: Agent | None = None
        self.history: Path | None = None
        self._sigterm = threading.Event()

    @property
    def terminated(self) -> bool:
        """A SIGTERM came: the session leaves (abandoning memory work) and the process ends by
        the signal."""
        return self._sigterm.is_set()

    # -- the session -----------------------------------------------------------------------

    def run(self) -> int:
        if threading.current_thread() is not threading.main_thread():
            return self._run()  # Python runs signal handlers in the main thread only
        with signals_reach_the_main_thread("chat") as sigterm:
            self._sigterm = sigterm
            try:
                return self._run()
            except Terminated:  # between the steps that catch it
                self._close(abandon=True)
                return 130

    def _run(self) -> int:
        try:
            problem = self._wait(check_model(self.model), "checking the model…")
        except KeyboardInterrupt:
            self._newline()
            return 130
        if problem is not None:
            print(f"obsmem: {problem}", file=sys.stderr)
            return 2
        from .doctor import fit_warning

        warning = self._wait(
            fit_warning(
                self.model,
                message_tokens=self.args.message_tokens,
                observation_tokens=self.args.observation_tokens,
            ),
            "reading the context window…",
        )
        if warning is not None:
            print(f"obsmem: warning: {warning}", file=sys.stderr)
        self.memory, self.agent = self.loop.run(self._open())
        remove = (
            self.memory.om.caller.add_activity_listener(self.spinner.activity)
            if self.memory.om is not None
            else None
        )
        code = 0
        try:
            self._start_history()
            print(
                f"obsmem chat: thread {self.args.thread!r} in {db_label(self.args.db)}, model "
                f"{self.model}. /help for commands.",
                file=self.out,
            )
            code = self._repl()
        finally:
            self._save_history()
            self._close(abandon=code != 0)
            if remove is not None:
                remove()
        return code

    async def _open(self) -> tuple[Memory, Agent]:
        """Memory and the agent, made on the loop they are used on."""
        from ..agent import Agent  # pydantic-ai's agent machinery loads only for a chat
        from ..memory import Memory

        memory = Memory(
            open_store(self.args.db), observational_memory=memory_options(self.args, self.model)
        )
        agent = Agent(
            id="obsmem-chat",
            instructions=self.args.instructions,
            model=self.model,
            memory=memory,
            max_output_tokens=self.args.max_tokens,
        )
        return memory, agent

    def _repl(self) -> int:
        """Read and answer lines until Ctrl-D or /quit (0) or Ctrl-C at the prompt (130)."""
        while True:
            try:
                line = self._read("you> ")
            except KeyboardInterrupt:
                self._newline()
                return 130
            if line is None:
                self._newline()
                return 0
            text = line.strip()
            if not text:
                continue
            try:
                if text.startswith("/"):
                    if not self._wait(self._command(text), "reading memory…"):
                        return 0
                    continue
                self._turn(text)
            except KeyboardInterrupt:
                if self.terminated:
                    self._newline()
                    return 130
                print("(cancelled)", file=self.out)
            except Exception as exc:  # the conversation stays usable
                self._report(exc)

    def _read(self, prompt: str) -> str | None:
        """One line from the user (None at the end of input)."""
        try:
            if self.out is sys.stdout:
                return input(prompt)
            self.out.write(prompt)
            self.out.flush()
            return input()
        except EOFError:
            return None

    def _turn(self, text: str) -> None:
        assert self.agent is not None
        ref = {"resource": self.args.resource, "thread": self.args.thread}
        result = self._wait(self.agent.generate(text, memory=ref), "thinking…")
        print(f"agent> {result.text}", file=self.out)
        if result.cut_off:
            print(
                f"  (reply cut off at its output cap: --max-tokens {self.args.max_tokens:,})",
                file=self.out,
            )
        self._wait(self._status(), "reading memory…")

    def _report(self, exc: Exception) -> None:
        """A failed turn or command in one line (a bug gets its traceback); the chat goes on."""
        known = describe_error(exc, self.model)
        if known is None:
            traceback.print_exception(exc, file=sys.stderr)
            print("obsmem: that was a bug in obsmem; the chat goes on", file=sys.stderr)
        else:
            print(f"obsmem: {known[1]}", file=sys.stderr)
        sys.stderr.flush()

    def _newline(self) -> None:
        """End the prompt's line (Ctrl-C and Ctrl-D leave the cursor after ``you>``)."""
        print(file=self.out)
        self.out.flush()

    # -- running on the loop thread ----------------------------------------------------------

    def _wait(self, work: Coroutine[Any, Any, T], label: str) -> T:
        """Run ``work`` on the loop thread and return its result, with the spinner redrawing
        meanwhile. Ctrl-C cancels it, waits for it to unwind, and raises KeyboardInterrupt."""
        done = threading.Event()
        task: asyncio.Task[T] = self.loop.run(_spawn(work, done))
        self.spinner.start(label)
        try:
            while not done.wait(self.TICK):
                self.spinner.tick()
        except KeyboardInterrupt:
            self.spinner.clear()
            self.loop.submit(_cancel(task))
            done.wait(10.0)  # a second Ctrl-C stops waiting for it
            raise
        finally:
            self.spinner.clear()
        return task.result()

    def _close(self, *, abandon: bool) -> None:
        """Close memory: after its background work finished, or (``abandon``, or Ctrl-C while
        it finishes) abandoning that work."""
        if self.memory is None:
            return
        memory, self.memory = self.memory, None
        if not abandon and not self.terminated:
            try:
                self._wait(memory.aclose(), "finishing memory work (Ctrl-C abandons it)…")
                return
            except KeyboardInterrupt:
                self._newline()
            except Exception as exc:
                self._report(exc)
                return
        try:
            self.loop.run(close_memory(memory, "chat", abandon=True))
        except Exception as exc:
            self._report(exc)

    # -- history -------------------------------------------------------------------------------

    def _start_history(self) -> None:
        """Line editing and history for a terminal, when the stdlib ``readline`` is there; a
        history that cannot be read is ignored."""
        if not sys.stdin.isatty():
            return
        try:
            import readline
        except ImportError:  # not on every platform: input() still works
            return
        self.history = Path(HISTORY_FILE).expanduser()
        readline.set_history_length(HISTORY_LENGTH)
        with contextlib.suppress(OSError, ValueError):  # none yet, unreadable: start afresh
            readline.read_history_file(self.history)

    def _save_history(self) -> None:
        if self.history is None:
            return
        with contextlib.suppress(ImportError, OSError, ValueError):  # a convenience only
            import readline

            readline.write_history_file(self.history)

    # -- the commands --------------------------------------------------------------------------

    async def _status(self) -> None:
        memory = self.memory
        assert memory is not None
        status = await memory.status({"resource": self.args.resource, "thread": self.args.thread})
        print(f"  [{' · '.join(status_words(status))}]", file=self.out)

    async def _command(self, text: str) -> bool:
        memory, args, out = self.memory, self.args, self.out
        assert memory is not None
        name, _, rest = text.partition(" ")
        if name in ("/quit", "/exit"):
            return False
        if name == "/help":
            print(HELP, file=out)
        elif name == "/observations":
            assert memory.om is not None
            log = await memory.om.observations(args.thread, args.resource)
            print(log or "(no observations yet)", file=out)
        elif name == "/threads":
            for thread in await memory.threads(args.resource):
                marker = "*" if thread.id == args.thread else " "
                print(
                    f" {marker} {thread.id}  {thread.message_count} messages  {thread.title or ''}",
                    file=out,
                )
        elif name == "/recall":
            messages = await memory.messages(args.thread)
            if rest.strip():
                try:
                    first, last = (int(x) for x in rest.strip().split(":"))
                except ValueError:
                    print("usage: /recall FROM:TO, e.g. /recall 1:10", file=out)
                    return True
                messages = [m for m in messages if first <= (m.seq or 0) <= last]
            else:
                messages = messages[-10:]
            for m in messages:
                print(f"  #{m.seq} {m.role}: {m.text}", file=out)
        else:
            print(f"unknown command {name}; /help lists them", file=out)
        return True


def status_words(status: MemoryStatus) -> list[str]:
    """The status line's parts: the windows against their thresholds, then, when memory does not
    work, who fails and why in a few words, and how many messages the context leaves out (the
    whole story, with the fix, is ``obsmem inspect``'s and the warning logged at the failure)."""
    from ..failures import brief

    words = [
        f"messages {status.unobserved_tokens:,}/{status.message_threshold:,}",
        f"log {status.observation_tokens:,}/{status.observation_threshold:,}",
        f"{status.buffered_chunks} buffered",
        f"generation {status.generation}",
    ]
    if status.credentials is not None:
        words.append(f"memory failing: {brief(status.credentials)}")
    for failure in status.failures:
        where = f" for thread {failure.thread_id}" if failure.thread_id else ""
        words.append(f"{failure.role.capitalize()}{where} failing: {brief(failure.error)}")
    if status.left_out:
        many = "message" if status.left_out == 1 else "messages"
        words.append(f"{status.left_out} {many} left out")
    return words


async def _spawn(work: Coroutine[Any, Any, T], done: threading.Event) -> asyncio.Task[T]:
    """``work`` as a task of the loop it runs on, setting ``done`` when it ends (however)."""
    task = asyncio.ensure_future(work)
    task.add_done_callback(lambda _: done.set())
    return task


async def _cancel(task: asyncio.Task[Any]) -> None:
    task.cancel()


async def _cancel_leftovers() -> None:
    """Cancel and await what a cancelled reply left on the loop, as ``asyncio.run`` does before
    it closes its loop (a task destroyed pending would be reported at exit)."""
    current = asyncio.current_task()
    tasks = [t for t in asyncio.all_tasks() if t is not current]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
