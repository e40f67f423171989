"""Which conversation a LangGraph call belongs to, and where its events go.

The thread and resource come from ``thread=``/``resource=`` (ids, or functions of the runtime
context), else from the run's runtime context, then ``config["configurable"]``. A
:class:`BoundCall` is one hook call: its :class:`~obsmem.integrations.door.Door` and, while
open, the door's events queued for LangGraph's custom stream.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeAlias, TypeVar

from langchain_core.runnables import RunnableConfig

from obsmem.errors import ConfigError
from obsmem.events import Event
from obsmem.integrations.door import Door
from obsmem.memory import ThreadRef

__all__ = [
    "RESOURCE_KEYS",
    "BoundCall",
    "IdFrom",
    "StreamWriter",
    "current_config",
    "find_ref",
    "run_sync",
    "runtime_context",
    "stream_writer",
]

RESOURCE_KEYS = ("resource_id", "user_id")
"""Where the resource (the user) is read from, in order: keys of the runtime context (a mapping or
an object with these attributes), then of ``config["configurable"]``."""

IdFrom: TypeAlias = Callable[[Any], str]
"""A thread or resource id read from the run's runtime context (``lambda ctx: ctx.user.id``)."""

StreamWriter: TypeAlias = Callable[[Any], None]

T = TypeVar("T")
P = TypeVar("P")
R = TypeVar("R")


def _first_id(sources: Sequence[Any], keys: Sequence[str]) -> str | None:
    """The first non-empty id under ``keys`` in ``sources`` (mappings or objects), as text."""
    for source in sources:
        for key in keys:
            value = source.get(key) if isinstance(source, Mapping) else getattr(source, key, None)
            if isinstance(value, str | int) and not isinstance(value, bool) and str(value):
                return str(value)
    return None


def _given(option: str, given: str | IdFrom | None, context: Any) -> str | None:
    """The id fixed at construction, or read by its function from the runtime ``context``."""
    if not callable(given):
        return given
    value: Any = given(context)
    if not isinstance(value, str) or not value:
        raise ConfigError(option, value, f"the {option}= function must return a non-empty string")
    return value


def find_ref(
    config: Mapping[str, Any] | None,
    context: Any,
    *,
    thread: str | IdFrom | None,
    resource: str | IdFrom | None,
) -> ThreadRef:
    """The conversation of a call (see the module docstring)."""
    sources = (context, (config or {}).get("configurable") or {})
    found_thread = _given("thread", thread, context) or _first_id(sources, ("thread_id",))
    if found_thread is None:
        raise ConfigError(
            "thread",
            None,
            "run the graph with config={'configurable': {'thread_id': ...}} (or give thread=...)",
        )
    found_resource = _given("resource", resource, context) or _first_id(sources, RESOURCE_KEYS)
    if found_resource is None:
        raise ConfigError(
            "resource",
            None,
            "say whose conversation it is: config={'configurable': {'thread_id': ..., "
            "'resource_id': ...}} or context={'resource_id': ...} ('user_id' works too), "
            "or resource=... (an id, or a function of the runtime context)",
        )
    return ThreadRef(thread=found_thread, resource=found_resource)


def runtime_context() -> Any:
    """The runtime context of the graph run this is called in (None outside one)."""
    try:
        from langgraph.runtime import get_runtime

        return getattr(get_runtime(), "context", None)
    except (ImportError, RuntimeError, KeyError):
        return None


def current_config() -> RunnableConfig:
    """The config of the graph run this is called in (empty outside one)."""
    try:
        from langgraph.config import get_config

        return get_config()
    except (ImportError, RuntimeError):
        return {}


def stream_writer() -> StreamWriter:
    """LangGraph's custom stream of the running node (a no-op outside a graph run)."""
    try:
        from langgraph.config import get_stream_writer

        return get_stream_writer()
    except (ImportError, RuntimeError, AttributeError, KeyError):
        return lambda _: None


def run_sync(door: Door, work: Coroutine[Any, Any, T]) -> T:
    """``door.run_sync(work)`` for a sync graph run, also on a thread whose event loop is
    running (a notebook cell, an async server calling ``invoke``): a helper thread hands the
    work over and this thread blocks, as LangGraph's sync ``invoke`` blocks anyway."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return door.run_sync(work)
    with ThreadPoolExecutor(1, thread_name_prefix="obsmem-sync") as pool:
        return pool.submit(door.run_sync, work).result()


class BoundCall:
    """One hook call: its :class:`Door`, and, while open (``with``), the door's memory events
    queued as memory emits them (on memory's loop thread in a sync run) and written to
    LangGraph's custom stream from the hook's own thread, at :meth:`flush` and at the end."""

    def __init__(self, door: Door, write: StreamWriter) -> None:
        self.door = door
        self._write = write
        self._pending: deque[dict[str, Any]] = deque()
        self._unsubscribe: Callable[[], None] | None = None

    def _listen(self, event: Event) -> None:
        self._pending.append(event.to_dict())

    def flush(self) -> None:
        """Write the events queued so far to the custom stream."""
        while self._pending:
            self._write(self._pending.popleft())

    def run(self, work: Coroutine[Any, Any, T]) -> T:
        """Run memory work from sync code, on the memory's own loop (:func:`run_sync`)."""
        return run_sync(self.door, work)

    def exchange(
        self, begin: Callable[[], Coroutine[Any, Any, P]], send: Callable[[P], R]
    ) -> tuple[P, R]:
        """The door's exchange (:meth:`Door.exchange_sync`) from a sync hook: ``begin()`` on
        memory's loop, its events written, then ``send``; once more after a compaction."""

        def began() -> P:
            prepared = self.run(begin())
            self.flush()
            return prepared

        return self.door.exchange_sync(began, send, self.run)

    async def aexchange(
        self, begin: Callable[[], Coroutine[Any, Any, P]], send: Callable[[P], Awaitable[R]]
    ) -> tuple[P, R]:
        """:meth:`exchange` for an async hook (:meth:`Door.exchange`)."""

        async def began() -> P:
            prepared = await begin()
            self.flush()
            return prepared

        return await self.door.exchange(began, send)

    def __enter__(self) -> BoundCall:
        self._unsubscribe = self.door.subscribe(self._listen)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        self.flush()
