"""How the long-running commands (``obsmem proxy``, ``ui``, ``mcp``, ``chat``) stop: within
about ``DEADLINE`` seconds of SIGTERM, whatever is pending.

A server stops taking requests at once and gives those in flight ``GRACE`` seconds; one still
running then is cut off (a 503, or a stream cut short). Background memory work still running
(a catch-up of a long history, buffering, a reflection: model calls that may take minutes) is
abandoned, with a line on stderr saying so, and the store is closed. Nothing is lost: memory's
state is in the store, and a thread that is behind is caught up at its next turn after a
restart. Whatever still holds the process ``DEADLINE`` seconds after the signal (CPU work on the
event loop, such as lining up one request of 100,000 messages; a store that does not answer) is
cut short by a watchdog thread that ends the process (``FORCED_EXIT``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Generator
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from ..memory import Memory

__all__ = [
    "DEADLINE",
    "FORCED_EXIT",
    "GRACE",
    "Terminated",
    "close_memory",
    "end_by_signal",
    "signals_reach_the_main_thread",
    "start_deadline",
]

GRACE = 3
"""Seconds the requests in flight get after SIGTERM (or Ctrl-C) before they are cut off."""
DEADLINE = 10.0
"""Seconds after SIGTERM by which the process has ended, whatever it was doing."""
FORCED_EXIT = 128 + signal.SIGTERM
"""The exit code when the watchdog had to end the process (a shell's code for SIGTERM)."""

_watchdog_lock = threading.Lock()
_watchdog: list[threading.Timer] = []


def start_deadline(command: str, seconds: float = DEADLINE) -> None:
    """Once per process (later calls do nothing): a daemon thread that ends the process
    ``seconds`` from now if it is still running then, saying so on stderr. A thread, so it
    acts even while the event loop or the main thread is busy."""

    def expire() -> None:
        print(
            f"obsmem {command}: still stopping {seconds:.0f} s after the signal; ending now "
            "(unfinished memory work resumes at the next start)",
            file=sys.stderr,
            flush=True,
        )
        os._exit(FORCED_EXIT)

    with _watchdog_lock:
        if _watchdog:
            return
        timer = threading.Timer(seconds, expire)
        timer.daemon = True
        timer.name = "obsmem-stop-deadline"
        _watchdog.append(timer)
        timer.start()


async def close_memory(
    memory: Memory, command: str, *, abandon: bool, err: TextIO | None = None
) -> None:
    """Close ``memory``: after its background work finished, or (``abandon``) abandoning it,
    with a line on stderr naming what was abandoned (nothing when nothing was running)."""
    if abandon and (work := memory.background_work):
        from ..background import abandoned

        print(abandoned(f"obsmem {command}", work), file=err or sys.stderr, flush=True)
    await memory.aclose(cancel=abandon)


def end_by_signal(signum: int) -> None:
    """End the process as the signal ``signum`` ends it by default (a parent sees it killed by
    SIGTERM, as after uvicorn's own shutdown), once the command stopped cleanly."""
    sys.stdout.flush()
    sys.stderr.flush()
    signal.signal(signum, signal.SIG_DFL)
    signal.raise_signal(signum)


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread by :func:`signals_reach_the_main_thread`: a
    KeyboardInterrupt, so it leaves wherever Ctrl-C would have been caught."""


@contextlib.contextmanager
def signals_reach_the_main_thread(command: str) -> Generator[threading.Event]:
    """While inside: the first SIGTERM raises :class:`Terminated` in the main thread (later
    ones are ignored) and starts the deadline; the event yielded is set once it was raised.
    Ctrl-C raises KeyboardInterrupt there, as Python's own handler does, every time.

    The main thread may be blocked in ``input()``, where readline waits in ``select()`` and
    runs a signal's handler only when that wait is interrupted: a signal taken by another
    thread (a process's signal goes to any thread) or landing just before the wait (Ctrl-C
    typed the instant the prompt shows) would go unseen until a key is pressed. So a thread
    woken by the signal's wakeup byte signals the main thread itself until the handler ran:
    SIGTERM again, and for Ctrl-C a SIGUSR1 whose handler does nothing (it only interrupts the
    wait, which then runs the held Ctrl-C), so no Ctrl-C is ever raised twice."""
    raised = threading.Event()
    interrupts = _Interrupts()

    def on_sigterm(signum: int, frame: object) -> None:
        if raised.is_set():
            return
        raised.set()
        raise Terminated

    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    main = threading.main_thread().ident
    assert main is not None

    def watch() -> None:
        while data := os.read(wake_read, 64):
            if signal.SIGTERM in data:
                start_deadline(command)
                while not raised.wait(0.1):
                    signal.pthread_kill(main, signal.SIGTERM)
            if count := data.count(signal.SIGINT):
                interrupts.arrived(count)
                while not interrupts.wait_handled(0.1):
                    signal.pthread_kill(main, signal.SIGUSR1)

    previous = signal.signal(signal.SIGTERM, on_sigterm)
    previous_int = signal.signal(signal.SIGINT, interrupts.handler)
    signal.signal(signal.SIGUSR1, _nothing)  # kept to the end: a late nudge is harmless
    previous_fd = signal.set_wakeup_fd(wake_write, warn_on_full_buffer=False)
    watcher = threading.Thread(target=watch, name="obsmem-signals", daemon=True)
    watcher.start()
    try:
        yield raised
    finally:
        signal.set_wakeup_fd(previous_fd)
        interrupts.stop()
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, previous_int)
        os.close(wake_write)  # the watcher reads the end of the pipe and returns
        watcher.join(1.0)
        if not watcher.is_alive():
            os.close(wake_read)


class _Interrupts:
    """Ctrl-Cs that arrived (seen by the watcher) and were handled (raised in the main
    thread)."""

    def __init__(self) -> None:
        self._changed = threading.Condition(threading.RLock())  # the handler may run inside
        self._arrived = self._handled = 0
        self._stopped = False

    def handler(self, signum: int, frame: object) -> None:
        with self._changed:
            self._handled += 1
            self._changed.notify_all()
        raise KeyboardInterrupt

    def arrived(self, count: int) -> None:
        with self._changed:
            self._arrived += count

    def wait_handled(self, seconds: float) -> bool:
        """Whether every Ctrl-C that arrived was handled (or the watch stopped), waiting up to
        ``seconds`` for it."""
        with self._changed:
            return self._changed.wait_for(self._all_handled, seconds)

    def _all_handled(self) -> bool:
        return self._stopped or self._handled >= self._arrived

    def stop(self) -> None:
        with self._changed:
            self._stopped = True
            self._changed.notify_all()


def _nothing(signum: int, frame: object) -> None:
    """SIGUSR1's handler: the signal only interrupts the main thread's wait."""
