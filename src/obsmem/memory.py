"""Memory: storage plus (optionally) observational memory, shared by any number of agents.

``Memory(store=None, observational_memory=True)`` keeps threads and messages in the embedded
SQLite file ``obsmem.db`` of the working directory (or the store you pass) and, with observational
memory on, runs the engine (``memory.om``). Without it, the whole thread is sent every turn.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import (
    Awaitable,
    Callable,
    Collection,
    Coroutine,
    Mapping,
    Sequence,
)
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo
from typing import TYPE_CHECKING, Any, TypeVar

from ._sync import LoopThread
from .cycles.revision import Revision
from .engine import ObservationalMemory, newest_shown
from .erase import erase_resource, erase_thread, erased_at
from .errors import ConfigError
from .events import EventBus, Hooks, Listener
from .failures import MemoryStatus
from .llm import CallListener
from .messages import Message, utcnow
from .meta_keys import META_RETRACTED, META_RETRACTED_THROUGH, META_WORKING_MEMORY
from .models import ModelSpec
from .options import ObservationalMemoryOptions, ResolvedOptions, resolve_options
from .recall import RECALL_DESCRIPTION, RECALL_NAMES, with_recall_parameters
from .records import CycleRecord, ModelExchange, OMRecord, ThreadCopy, record_key
from .snapshot import Subject
from .stores import CoreStore, Erasure, LedgerStore, SQLiteStore
from .stores.base import missing_methods, require
from .stores.changes import LoadRequest, ThreadPatch
from .thread_access import ThreadAccess
from .tokens import TokenEstimator
from .transfer.methods import Transfers
from .window import is_retracted

if TYPE_CHECKING:
    from .queue.worker import Worker

from .working_memory import (
    WorkingMemory,
    read_working_memory,
    resolve_working_memory,
    working_memory_message,
    write_working_memory,
)

__all__ = ["DEFAULT_DB", "Memory", "MemoryContext", "RecallFunction", "ThreadRef"]

RecallFunction = Callable[..., Awaitable[str]]

T = TypeVar("T")

DEFAULT_DB = "obsmem.db"


@dataclass(frozen=True, slots=True, kw_only=True)
class ThreadRef:
    """Which conversation a call belongs to: ``{"resource": ..., "thread": ...}``."""

    thread: str
    resource: str

    @classmethod
    def of(cls, value: ThreadRef | Mapping[str, Any]) -> ThreadRef:
        if isinstance(value, ThreadRef):
            return value
        thread = value.get("thread") or value.get("thread_id") or value.get("threadId")
        resource = value.get("resource") or value.get("resource_id") or value.get("resourceId")
        if not isinstance(thread, str) or not thread:
            raise ConfigError("memory.thread", thread, "give the conversation id as a string")
        if not isinstance(resource, str) or not resource:
            raise ConfigError(
                "memory.resource", resource, "give the user (or other owner) id as a string"
            )
        return cls(thread=thread, resource=resource)


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryContext:
    """What a turn sends to the model, and the input as stored."""

    messages: list[Message]
    stored_input: list[Message]
    observed_through: int = 0
    """The thread's messages up to this seq are observed (the log holds them; 0: none). A front
    door that keeps its own copy of the conversation can drop those."""
    incarnation: str = ""
    """The incarnation of the thread the input was stored in: a door that keeps a copy of the
    thread names it in the copy it passes as the next step's ``expect``."""


class Memory(Transfers, ThreadAccess):
    """Threads, messages and observational memory on one store.

    A thin facade over the engine (``memory.om``): the store, clock, estimator and hooks pass
    through to it, and it assembles the context (observations, working memory, raw messages).
    Memory owns its store: :meth:`aclose` finishes background work and closes it, exactly as
    ``memory.om.aclose()`` does.
    """

    def __init__(
        self,
        store: CoreStore | None = None,
        *,
        observational_memory: bool
        | Mapping[str, Any]
        | ObservationalMemoryOptions
        | ResolvedOptions
        | None = False,
        working_memory: bool | Mapping[str, Any] | WorkingMemory | None = None,
        hooks: Hooks | None = None,
        tz: tzinfo = UTC,
        sync_timeout: float = 60.0,
        clock: Callable[[], datetime] = utcnow,
        estimator: TokenEstimator | None = None,
    ) -> None:
        if isinstance(store, str | os.PathLike):
            raise ConfigError(
                "store", store, f"give a store, not a path: Memory(SQLiteStore({str(store)!r}))"
            )
        if missing := missing_methods(store, CoreStore) if store is not None else []:
            raise ConfigError(
                "store",
                store,
                f"a store needs {', '.join(missing)} (CoreStore): implement them "
                "(docs/writing-a-store.md) or use a built-in store",
            )
        self.store: CoreStore = store if store is not None else SQLiteStore(DEFAULT_DB)
        self.options = resolve_options(observational_memory)
        managed = self.options is not None and self.options.observation.manage_working_memory
        self.working_memory = resolve_working_memory(
            WorkingMemory() if managed and working_memory is None else working_memory
        )
        self.manages_working_memory = managed
        self.om: ObservationalMemory | None = (
            ObservationalMemory(
                self.store,
                self.options,
                hooks=hooks,
                tz=tz,
                clock=clock,
                estimator=estimator,
                sync_timeout=sync_timeout,
                working_memory=self.working_memory,
            )
            if self.options is not None
            else None
        )
        self._bus = self.om.bus if self.om is not None else EventBus()
        self._sync = LoopThread("obsmem-memory")
        self._undoing = asyncio.Lock()
        """One undo at a time: each takes back the newest message the one before left shown."""

    def __repr__(self) -> str:
        return f"Memory(store={self.store!r}, observational_memory={self.om is not None})"

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Receive every ``data-om-*`` event of every thread; returns the unsubscribe function."""
        return self._bus.subscribe(listener)

    def add_call_listener(self, listener: CallListener) -> Callable[[], None]:
        """Be told about every successful memory-model call (Observer, Reflector, extractors)
        with its usage and cost; returns the function that removes the listener."""
        if self.om is None:
            return lambda: None
        return self.om.add_call_listener(listener)

    # -- the turn --------------------------------------------------------------------------------

    async def context(
        self,
        ref: ThreadRef | Mapping[str, Any],
        new_messages: Sequence[Message],
        *,
        actor_model: ModelSpec | None,
        recall: bool = False,
        step_from: int | None = None,
        keep_raw_from: int | None = None,
        expect: ThreadCopy | None = None,
    ) -> MemoryContext:
        """Store the new input and return what the model should see. ``recall``: the model
        has the ``recall`` tool (the context then says how to use it; otherwise it never
        mentions it). ``step_from``: the current step's first seq when it was stored already
        (it stays raw, as the new input does); ``keep_raw_from`` is its former name, accepted
        for one release. ``expect``: the caller's copy of the thread (a door that skips reading
        it before the step); when the thread is not that, nothing is stored and a
        :class:`~obsmem.errors.ConflictError` is raised: read the thread again."""
        ref = ThreadRef.of(ref)
        if self.om is not None:
            prepared = await self.om.prepare(
                ref.thread,
                ref.resource,
                new_messages,
                actor_model=actor_model,
                recall=recall,
                step_from=step_from or keep_raw_from,
                expect=expect,
            )
            return MemoryContext(
                messages=prepared.messages,
                stored_input=prepared.stored_input,
                observed_through=prepared.record.cursor.get(ref.thread, 0),
                incarnation=prepared.incarnation,
            )
        return await self._whole_thread(ref, new_messages, expect)

    async def _whole_thread(
        self, ref: ThreadRef, new_messages: Sequence[Message], expect: ThreadCopy | None
    ) -> MemoryContext:
        """Without observational memory the whole thread is sent: the input stored and the
        thread (with its metadata) read in one store call."""
        wm = self.working_memory
        snapshot = await self.store.load(
            LoadRequest(
                subject=_plain_subject(ref),
                append=new_messages,
                resource_metadata=wm is not None and wm.scope == "resource",
                expect=expect,
            )
        )
        thread = snapshot.threads[0].thread
        meta = thread.metadata
        messages = [m for m in snapshot.threads[0].unobserved if not is_retracted(m, meta)]
        if wm is not None:
            where = snapshot.resource_metadata if wm.scope == "resource" else meta
            value = where.get(META_WORKING_MEMORY)
            content = value if isinstance(value, str) else wm.blank()
            shown = working_memory_message(content, managed=False)
            at = next((i for i, m in enumerate(messages) if m.role != "system"), len(messages))
            messages = [*messages[:at], shown, *messages[at:]]
        return MemoryContext(
            messages=messages, stored_input=list(snapshot.stored), incarnation=thread.incarnation
        )

    async def hold_calls(
        self, ref: ThreadRef | Mapping[str, Any], call_ids: Collection[str], *, held: bool = True
    ) -> None:
        """Hold tool calls back while they wait for a result that comes later (an approval the
        user gives after more turns): memory never observes them as interrupted, and the
        context answers them "waiting" until their result is stored. ``held=False`` lets them
        go (a call that will never get its result). The front doors call this where their
        framework says a call waits; use it for your own pauses."""
        ref = ThreadRef.of(ref)
        if self.om is not None and call_ids:
            await self.om.hold_calls(ref.thread, ref.resource, call_ids, held=held)

    async def retract_last(self, ref: ThreadRef | Mapping[str, Any]) -> Message | None:
        """Take back the thread's newest message (an undo, the Agents SDK's ``pop_item``) and
        return it, or None when nothing is left. Storage keeps it, marked as taken back; it
        leaves the context and memory never observes it from then on (a buffering cycle in
        flight is called off). A message memory observed or buffered before it was taken back
        stays in the observations."""
        ref = ThreadRef.of(ref)
        async with self._undoing:
            if self.om is not None:
                return await self.om.retract_last(ref.thread, ref.resource)
            last = await newest_shown(self.store, ref.thread)
            if last is not None:  # a patch merged in the store's transaction, as the engine's
                patch = ThreadPatch(thread_id=ref.thread, set=(((META_RETRACTED, last.id), True),))
                await self.store.load(LoadRequest(subject=_plain_subject(ref), patches=[patch]))
            return last

    async def forget_thread(self, ref: ThreadRef | Mapping[str, Any]) -> None:
        """Forget a thread and go on with it empty: its observations, buffered work and hints
        are deleted, and every message stored so far is taken back (storage keeps them,
        marked; nothing shows them again). Thread scope only (a resource's log is shared).
        To erase a thread for good, storage included, use :meth:`delete_thread`."""
        ref = ThreadRef.of(ref)
        if self.om is not None:
            await self.om.forget_thread(ref.thread, ref.resource)
            return
        thread = await self.store.get_thread(ref.thread)
        if thread is not None:
            await self.store.update_thread(
                ref.thread, metadata={META_RETRACTED_THROUGH: thread.message_count}
            )

    async def delete_thread(self, ref: ThreadRef | Mapping[str, Any]) -> Erasure:
        """Erase a thread for good, in one transaction: its messages and everything memory
        made of them (see ``Store.delete_thread``). In resource scope the shared log loses the
        thread's blocks; :attr:`Erasure.remaining` holds the lines it could not trace. Work in
        flight for the thread commits nothing; a later turn starts a fresh thread."""
        ref = ThreadRef.of(ref)
        return await erase_thread(
            self.store, self.om, thread_id=ref.thread, resource_id=ref.resource
        )

    async def erased_at(self, ref: ThreadRef | Mapping[str, Any]) -> datetime | None:
        """When the thread was last erased (``delete_thread``), None when never: a hash of its
        id and the time stay in the resource's metadata, so a client that resends the erased
        conversation is told from one that starts a new thread under the id."""
        ref = ThreadRef.of(ref)
        return await erased_at(self.store, thread_id=ref.thread, resource_id=ref.resource)

    async def delete_resource(self, resource_id: str) -> Erasure:
        """Erase a resource for good, in one transaction: every thread of it with its messages,
        its log, working memory and every other trace."""
        return await erase_resource(self.store, self.om, resource_id=resource_id)

    async def compact(
        self,
        ref: ThreadRef | Mapping[str, Any],
        *,
        step_from: int | None = None,
        keep_tokens: int | None = None,
        keep_raw_from: int | None = None,
    ) -> bool:
        """Shrink the thread's context now: buffered observations are activated and the rest
        observed until only the retention floor (``observation.retention_floor``, or
        ``keep_tokens`` when smaller) stays raw; the messages from seq ``step_from`` on (the
        current step) stay raw (``keep_raw_from`` is its former name, accepted for one
        release). The front doors do it by themselves, once, when the model refuses a request
        as longer than its context. True when the context shrank; False when nothing could be
        observed (or memory is off)."""
        ref = ThreadRef.of(ref)
        if self.om is None:
            return False
        return await self.om.compact(
            ref.thread, ref.resource, step_from=step_from or keep_raw_from, keep_tokens=keep_tokens
        )

    async def revise(
        self,
        ref: ThreadRef | Mapping[str, Any],
        *,
        replace: Mapping[str, str] | None = None,
        remove: Sequence[str] | None = None,
        text: str | None = None,
        by: str | None = None,
    ) -> OMRecord | None:
        """Correct the observation log by hand: ``replace={old_line: new_line}``,
        ``remove=[line, ...]`` or the whole new log as ``text``. A line is named by its whole
        text as the log shows it; one the log lacks, or holds twice, is a ConfigError naming
        it. It writes a new generation, which the actor sees from the next turn on, recorded in
        the cycle ledger as a ``revision`` with ``by`` (who asked) and when. Buffered work made
        from the old log is dropped, and pending chunks get the same edit. The new head (None
        when the memory was cleared meanwhile)."""
        ref = ThreadRef.of(ref)
        if self.om is None:
            raise ConfigError(
                "observational_memory", False, "there is no log to revise: turn memory on"
            )
        revision = Revision.of(replace=replace, remove=remove, text=text)
        if await self.store.get_thread(ref.thread) is None:
            raise ConfigError("memory.thread", ref.thread, "no such thread: nothing to revise")
        return await self.om.revise(ref.thread, ref.resource, revision, by=by)

    # -- recall ------------------------------------------------------------------------------------

    @property
    def retrieval(self) -> bool:
        """Retrieval is on: observation groups are kept and agents get the ``recall`` tool."""
        return self.om is not None and self.om.options.retrieval is not None

    def recall_function(self, ref: ThreadRef | Mapping[str, Any]) -> RecallFunction:
        """The ``recall`` tool as a plain async function bound to one conversation, for any
        framework: its keyword parameters are the tool's, its result the text for the model."""
        om = self.require_retrieval()
        bound = ThreadRef.of(ref)

        async def recall(*args: Any, **request: Any) -> str:
            if len(args) > len(RECALL_NAMES):
                return f"recall was not run: give at most {len(RECALL_NAMES)} arguments"
            given = dict(zip(RECALL_NAMES, args, strict=False))
            return await om.recall(bound.thread, bound.resource, **{**given, **request})

        recall.__doc__ = RECALL_DESCRIPTION
        return with_recall_parameters(recall)

    def recall_tool(self, ref: ThreadRef | Mapping[str, Any] | None = None, **kwargs: str) -> Any:
        """The ``recall`` tool for a pydantic-ai agent, bound to one conversation
        (``memory.recall_tool(resource="u1", thread="t1")``)."""
        from pydantic_ai.tools import Tool

        bound = ThreadRef.of(ref if ref is not None else kwargs)
        return Tool(self.recall_function(bound), name="recall")

    def require_retrieval(self) -> ObservationalMemory:
        """The engine, or ConfigError naming the option when retrieval is off."""
        if self.om is None or self.om.options.retrieval is None:
            raise ConfigError(
                "observational_memory.retrieval",
                None,
                'turn it on: Memory(observational_memory={"retrieval": True})',
            )
        return self.om

    # -- working memory --------------------------------------------------------------------------

    async def get_working_memory(self, ref: ThreadRef | Mapping[str, Any]) -> str:
        """The current working memory (the blank template when nothing was written yet)."""
        wm = self._require_working_memory()
        ref = ThreadRef.of(ref)
        stored = await read_working_memory(
            self.store, wm, thread_id=ref.thread, resource_id=ref.resource
        )
        return stored if stored is not None else wm.blank()

    async def update_working_memory(self, ref: ThreadRef | Mapping[str, Any], content: str) -> str:
        """Replace the working memory (validated against its schema, if it has one)."""
        wm = self._require_working_memory()
        ref = ThreadRef.of(ref)
        await self.store.create_thread(ref.thread, ref.resource)
        return await write_working_memory(
            self.store, wm, content, thread_id=ref.thread, resource_id=ref.resource
        )

    @property
    def agent_updates_working_memory(self) -> bool:
        """Working memory is on and kept by the agent (through its update tool)."""
        return self.working_memory is not None and not self.manages_working_memory

    def _require_working_memory(self) -> WorkingMemory:
        if self.working_memory is None:
            raise ConfigError(
                "working_memory", None, "turn it on with Memory(..., working_memory=True)"
            )
        return self.working_memory

    async def save(
        self,
        ref: ThreadRef | Mapping[str, Any],
        messages: Sequence[Message],
        *,
        actor_model: ModelSpec | None,
    ) -> list[Message]:
        """Store the model's reply (and its tool traffic)."""
        ref = ThreadRef.of(ref)
        if self.om is not None:
            return await self.om.record(ref.thread, ref.resource, messages, actor_model=actor_model)
        snapshot = await self.store.load(
            LoadRequest(subject=_plain_subject(ref), append=messages, resource_metadata=False)
        )
        return list(snapshot.stored)

    async def status(self, ref: ThreadRef | Mapping[str, Any]) -> MemoryStatus:
        """Whether memory works for this conversation, and if not, why and what to do: the
        models (and how ``"auto"`` chose them), missing credentials, the log's stored failure
        state, and how many messages the actor's context leaves out now."""
        ref = ThreadRef.of(ref)
        if self.om is not None:
            return await self.om.health(ref.thread, ref.resource)
        return MemoryStatus(thread_id=ref.thread, resource_id=ref.resource, enabled=False)

    async def cycles(
        self,
        ref: ThreadRef | Mapping[str, Any],
        *,
        kind: str | Sequence[str] | None = None,
        outcome: str | Sequence[str] | None = None,
        limit: int = 100,
        before: datetime | None = None,
    ) -> list[CycleRecord]:
        """The cycle ledger of this conversation's log, newest first: each buffering,
        observation, activation and reflection cycle with its outcome (``committed``,
        ``redundant``, ``failed`` with its error), timing, model, tokens, cost, the messages it
        covered and the generation it produced. In resource scope, the cycles that worked on this
        thread. ``kind``/``outcome`` filter (one name or several); the next page starts
        ``before`` the last row's ``started_at``."""
        ref = ThreadRef.of(ref)
        resource_scope = self.om is not None and self.om.options.scope == "resource"
        key = (
            self.om.key(ref.thread, ref.resource)
            if self.om is not None
            else record_key("thread", thread_id=ref.thread, resource_id=ref.resource)
        )
        return await require(self.store, LedgerStore, "memory.cycles").list_cycles(
            key,
            thread_id=ref.thread if resource_scope else None,
            kinds=_names(kind),
            outcomes=_names(outcome),
            limit=limit,
            before=before,
        )

    async def cycle_detail(self, cycle_id: str) -> list[ModelExchange]:
        """What one cycle's model calls were shown (instructions and input) and answered, in
        call order (a cycle id from :meth:`cycles`); empty when the cycle called no model or
        its detail is no longer kept (the ``cycle_detail`` option says how many cycles keep it,
        0 keeps none)."""
        ledger = require(self.store, LedgerStore, "memory.cycle_detail")
        return await ledger.cycle_detail(cycle_id)

    # -- lifecycle -------------------------------------------------------------------------------

    def worker(self, **settings: Any) -> Worker:
        """A worker for this memory's queued jobs (``background="queue"`` on a PostgresStore),
        with its models, extractors and hooks; ``await memory.worker().run()`` runs it until
        SIGTERM. ``settings``: :class:`obsmem.queue.worker.Worker`'s (``concurrency``,
        ``model_limit``, ``heartbeat``, ``stalled_after``, ``shutdown_timeout``)."""
        from .queue.worker import Worker

        if self.om is None:
            raise ConfigError(
                "observational_memory", False, "a worker runs memory work: turn memory on"
            )
        return Worker(self.om, **settings)

    async def settle(self) -> None:
        """Wait for background memory work (tests and scripts; a server just carries on). With
        ``background="queue"``: until no job this process queued waits or runs, while a worker
        is alive (with none alive it returns at once, with a WARNING when jobs wait)."""
        if self.om is not None:
            await self.om.settle()

    @property
    def background_work(self) -> tuple[str, ...]:
        """The background memory work running now, by name (``obs:<key>`` buffering,
        ``catch-up:<key>``, ``refl:<key>``; empty without observational memory): what
        ``aclose(cancel=True)`` would abandon. Memory's state is in the store, so abandoned
        work is done again later: a thread that is behind catches up at its next turn."""
        return self.om.background_work if self.om is not None else ()

    async def aclose(self, *, cancel: bool = False) -> None:
        """Finish background work (or, with ``cancel=True``, abandon it) and close the store.
        A memory that runs on its own loop (sync code, :meth:`on_own_loop`) is closed there,
        and its loop thread stopped."""
        if self._sync.running and not self._sync.here:
            await self.on_own_loop(self._aclose(cancel=cancel))
            await asyncio.to_thread(self._sync.stop)
            return
        await self._aclose(cancel=cancel)

    async def _aclose(self, *, cancel: bool = False) -> None:
        if self.om is not None:
            await self.om.aclose(cancel=cancel)
        else:
            await self.store.aclose()

    async def __aenter__(self) -> Memory:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- sync code -------------------------------------------------------------------------------

    def run_sync(self, work: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``work`` (a coroutine using this memory) from sync code and return its result.

        It runs on the memory's own event loop, on a thread started at the first call, so the
        background work a turn starts carries on between calls. A memory used this way belongs
        to that loop: keep using it through ``run_sync`` (the sync front doors do) and end with
        :meth:`close`. From async code, await the coroutine instead."""
        return self._sync.run(work, timeout)

    async def on_own_loop(self, work: Coroutine[Any, Any, T]) -> T:
        """Await ``work`` on the memory's own loop thread, from any event loop: for frameworks
        that start a new event loop per call (the Agents SDK's ``Runner.run_sync``), whose loop
        ends with the call, while the background work a turn started must carry on."""
        return await asyncio.wrap_future(self._sync.submit(work))

    def close(self, *, cancel: bool = False) -> None:
        """:meth:`aclose` for sync code: finishes background work, closes the store and stops
        the memory's loop thread. ``with Memory(...) as memory:`` calls it at the end."""
        self._sync.check_caller()  # inside a running loop: refused, nothing stopped
        try:
            self._sync.run(self._aclose(cancel=cancel))
        finally:
            self._sync.stop()

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _names(value: str | Sequence[str] | None) -> tuple[str, ...]:
    if value is None:
        return ()
    return (value,) if isinstance(value, str) else tuple(value)


def _plain_subject(ref: ThreadRef) -> Subject:
    """The thread alone, as a memory without observational memory reads and writes it."""
    return Subject(scope="thread", thread_id=ref.thread, resource_id=ref.resource)
