"""An event loop on its own thread, for sync callers of async code.

``asyncio.run`` per call would close the loop after every call, cancelling the background
memory work a turn started and orphaning the store's connections. A :class:`LoopThread` keeps
one loop alive on a daemon thread: each sync call runs its coroutine there and waits for the
result, and background tasks carry on between calls.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")

__all__ = ["LoopThread"]


class LoopThread:
    """``run(coro)`` from sync code: the coroutine runs on this object's loop thread."""

    def __init__(self, name: str = "obsmem") -> None:
        self._name = name
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self._loop is not None

    @property
    def here(self) -> bool:
        """The caller runs on this loop's thread."""
        return self._thread is not None and threading.current_thread() is self._thread

    def _start(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is not None:
                return self._loop
            loop = asyncio.new_event_loop()
            ready = threading.Event()

            def main() -> None:
                asyncio.set_event_loop(loop)
                loop.call_soon(ready.set)
                loop.run_forever()

            thread = threading.Thread(target=main, name=self._name, daemon=True)
            thread.start()
            ready.wait()
            self._loop, self._thread = loop, thread
            return loop

    def check_caller(self) -> None:
        """Refuse a caller that must not block: one inside a running event loop (it would stall
        that loop; it should await instead), or this loop's own thread (it would wait on
        itself)."""
        if self.here:
            raise RuntimeError("the sync API was called from memory's own loop thread")
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return
        raise RuntimeError(
            "this is the sync API, called from inside a running event loop; await the async "
            "method instead (for example `await memory.aclose()` for `memory.close()`)"
        )

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the loop thread and return its result (its exception is raised)."""
        try:
            self.check_caller()
        except RuntimeError:
            coro.close()
            raise
        loop = self._start()
        future: Future[T] = asyncio.run_coroutine_threadsafe(coro, loop)
        try:
            return future.result(timeout)
        except BaseException:  # a timeout or Ctrl-C: the work must not carry on unseen
            future.cancel()
            raise

    def submit(self, coro: Coroutine[Any, Any, T]) -> Future[T]:
        """Start ``coro`` on the loop thread without waiting (``asyncio.wrap_future`` awaits it
        from another loop)."""
        loop = self._start()
        return asyncio.run_coroutine_threadsafe(coro, loop)

    def stop(self) -> None:
        """Stop the loop and join its thread (after the last :meth:`run`)."""
        if self.here:
            raise RuntimeError("memory's loop thread cannot stop itself; close from outside it")
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None or thread is None:
            return
        for finish in (loop.shutdown_asyncgens, loop.shutdown_default_executor):
            asyncio.run_coroutine_threadsafe(finish(), loop).result()
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()
