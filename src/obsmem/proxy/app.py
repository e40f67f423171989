"""The proxy: an OpenAI-compatible server that gives every conversation observational memory.

A chat request (``POST /v1/chat/completions`` or ``/v1/responses``) first meets the door
(:mod:`.admission`); one with a thread id (:mod:`.identity`) and an accepted key takes the door
protocol's phases, which ``docs/inspector-and-proxy.md`` walks through: begin (:mod:`.history`
lines the client's messages up with the thread), send, compact once on overflow, finish.

Memory never fails a request: when a memory step fails the client's own request goes upstream
unchanged, and the ``X-Obsmem-Memory`` header says ``failing; <cause>`` (also a WARNING on the
``obsmem`` logger); ``on`` when memory served the request, ``off; <why>`` when it did not.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from collections import OrderedDict
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..background import abandoned
from ..convert.openai_chat import from_openai_chat, to_openai_chat
from ..errors import ConflictError
from ..integrations.door import Door
from ..memory import Memory, MemoryContext, ThreadRef
from ..models.capabilities import prompt_cache_mark
from .admission import MEMORY_HEADER, NOT_ACCEPTED_YET, REFUSED_KEY, UPSTREAM_REFUSED, Admission
from .apis import CHAT, RESPONSES, Api
from .config import ProxyConfig
from .guard import guarding, off_loop, read_json
from .history import (
    align,
    erased_prefix,
    fingerprint,
    for_strict_template,
    free_id,
    new_messages,
    split_instructions,
    step_from,
    with_cache_breakpoint,
)
from .identity import Caller, end_user_of, thread_of
from .responses import Unsupported
from .steps import LINE_UP_ATTEMPTS, MAX_CACHED_THREADS, Step, Threads
from .upstream import Upstream, cause

if TYPE_CHECKING:
    from pydantic_ai.models import Model

__all__ = ["MEMORY_HEADER", "Proxy", "ProxyConfig", "create_app", "for_strict_template"]

log = logging.getLogger("obsmem")

PLACEHOLDER_KEY = "obsmem-proxy-no-key"
"""The key memory's own calls send an upstream that needs none (a local server)."""
OPENAI_API_HOST = "api.openai.com"
"""The upstream that takes OpenAI's prompt-cache breakpoints unless the config says."""


def _upstream_model(name: str, base_url: str, key: str | None) -> Model:
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.profiles.openai import OpenAIModelProfile
    from pydantic_ai.providers.openai import OpenAIProvider

    provider = OpenAIProvider(base_url=base_url, api_key=key or PLACEHOLDER_KEY)
    strict = OpenAIModelProfile(openai_chat_supports_multiple_system_messages=False)
    return OpenAIChatModel(name, provider=provider, profile=strict)


class Proxy:
    """The proxy's state: the upstream client, the memory (made at the first request that uses
    it), what it knows of each thread's stored messages."""

    def __init__(self, config: ProxyConfig) -> None:
        self.config = config
        self.upstream = Upstream(config.upstream, config.timeout)
        self._memory: Memory | None = None
        self._memory_lock = asyncio.Lock()
        self._threads = Threads()
        self._actors: dict[str, Any] = {}
        self.admission = Admission(config.owners)
        self._continued: OrderedDict[str, ThreadRef] = OrderedDict()
        """The stored thread each end user's thread id continues (:meth:`_thread_ref`)."""
        breakpoints = config.cache_breakpoints
        if breakpoints is None:
            breakpoints = urlsplit(self.upstream.base).hostname == OPENAI_API_HOST
        self._breakpoints = breakpoints

    # -- memory ----------------------------------------------------------------------------------

    def actor(self, name: str) -> Any:
        """The client's model on the upstream (what memory's context is for)."""
        model = self._actors.get(name)
        if model is None:
            model = _upstream_model(name, self.upstream.base, self.config.memory_key)
            self._actors[name] = model
        return model

    async def memory(self, client_model: str) -> Memory:
        if self._memory is not None:
            return self._memory
        async with self._memory_lock:
            if self._memory is None:
                model = self.config.memory_model or self.actor(client_model)
                options = {k: dict(v) for k, v in self.config.options.items()}
                options.setdefault("observation", {})["model"] = model
                options.setdefault("reflection", {})["model"] = model
                self._memory = Memory(self.config.store, observational_memory=options)
            return self._memory

    @property
    def memory_if_made(self) -> Memory | None:
        return self._memory

    async def settle(self) -> None:
        if self._memory is not None:
            await self._memory.settle()

    async def aclose(self) -> None:
        """Close the upstream client and memory (see ``ProxyConfig.finish_memory_work``); a
        WARNING on the ``obsmem`` logger says what background work was abandoned."""
        await self.upstream.aclose()
        memory = self._memory
        if memory is None:
            await self.config.store.aclose()
            return
        left = () if self.config.finish_memory_work else memory.background_work
        if left:
            log.warning("%s", abandoned("obsmem proxy", left, next_step="request"))
        await memory.aclose(cancel=not self.config.finish_memory_work)

    # -- the step: begin and finish --------------------------------------------------------------

    async def prepare(
        self, ref: ThreadRef, raw: list[dict[str, Any]], model_name: str
    ) -> tuple[list[dict[str, Any]], Step]:
        """Begin the step: the messages to send upstream (the client's instructions and
        memory's context) for the client's ``raw`` messages, and the step to finish."""
        memory = await self.memory(model_name)
        instructions, conversation = split_instructions(raw)
        prints = await off_loop(lambda: [fingerprint(m) for m in conversation])
        line_up = (memory, ref, conversation, prints, model_name)
        async with self._threads.lock(ref.thread):
            lined = None
            for attempt in range(LINE_UP_ATTEMPTS):
                last = attempt == LINE_UP_ATTEMPTS - 1
                lined = await self._line_up(*line_up, read=attempt > 0, check=not last)
                if lined is not None:
                    break
        assert lined is not None  # the last attempt checks nothing: it always runs its step
        step, context = lined
        shown = context.messages
        if step.asked_again:  # the client asks again: what it leaves out is not shown to the model
            left_out = {e.id for e in step.asked_again}
            shown = [m for m in shown if m.id not in left_out]
        messages = for_strict_template([*instructions, *to_openai_chat(shown)])
        if self._breakpoints:
            messages = with_cache_breakpoint(messages, prompt_cache_mark(step.door.actor_model))
        return messages, step

    async def _line_up(
        self,
        memory: Memory,
        ref: ThreadRef,
        conversation: list[dict[str, Any]],
        prints: list[str],
        model_name: str,
        *,
        read: bool,
        check: bool,
    ) -> tuple[Step, MemoryContext] | None:
        """Line the client's messages up with the thread, take back what an edit replaced, and
        run the memory step with what is new (under the thread's lock). ``read``: read the
        thread first (else this process's copy is trusted unread). ``check``: the step's load
        checks the copy lined up with. None: line up again, reading the thread (the copy was
        refused, an edit took messages back, or what the step stored did not follow on)."""
        seen = None if read else self._threads.unread(ref.thread)
        unread = seen is not None
        if seen is None:
            seen = await self._threads.known(memory, ref)
        expect = seen.as_copy() if check else None
        shown, status, skip = seen.shown(), seen.status, 0
        if seen.erased and (skip := erased_prefix(conversation, prints, shown)):
            conversation, prints = conversation[skip:], prints[skip:]
        alignment = align(prints, shown)
        taken = set(seen.retracted)
        tail = tuple(shown[len(shown) - alignment.retract :]) if alignment.retract else ()
        again = bool(tail) and alignment.known == len(conversation)
        if tail and not again:  # an edit: the thread follows the client now
            if not unread:  # taken back from the thread as read, never from a copy
                await self._take_back(memory, ref, len(tail), taken)
            if check:
                return None  # lined up again, with the thread read
        after = (
            alignment.after.id
            if alignment.after is not None
            else (shown[-1].id if shown and alignment.retract == 0 else None)
        )
        new, after = await off_loop(
            new_messages, conversation, alignment.known, ref, prints, after, taken
        )
        door = Door(memory, ref, actor_model=self.actor(model_name))
        try:
            context = await door.step(
                new, step_from=step_from(conversation, alignment), expect=expect
            )
        except ConflictError as exc:
            if expect is None:
                raise
            log.debug("obsmem proxy: %s", exc)  # another process changed the thread
            self._threads.distrust(ref.thread)
            return None
        stored, incarnation = context.stored_input, context.incarnation
        if not await self._threads.saw(ref.thread, stored, incarnation) and check:
            return None
        if skip and not seen.told:
            seen.told = True
            status = self._not_stored_again(ref, skip, status)
        return Step(door, after, frozenset(taken), tail if again else (), status), context

    @staticmethod
    def _not_stored_again(ref: ThreadRef, skipped: int, status: str) -> str:
        """Say (once a thread, in the log and the request's header) that the client resent an
        erased conversation, and that memory goes on from its new turn without it."""
        why = (
            f"was erased: the {skipped} earlier messages the client resent were not stored "
            "again; memory goes on from the new turn"
        )
        log.warning("obsmem proxy: thread %s %s", ref.thread, why)
        return f"on; this thread {why}" if status == "on" else status

    async def finish(self, step: Step, answer: Mapping[str, Any] | None) -> None:
        """Finish the step: store the upstream's answer (an OpenAI chat assistant message)."""
        if answer is None or self._memory is None:
            return
        reply = {**answer, "role": "assistant"}
        print_ = fingerprint(reply)
        mid = free_id(step.ref.thread, step.after, print_, step.taken_back)
        if step.asked_again:
            if len(step.asked_again) == 1 and step.asked_again[0].id == mid:
                return  # the same answer as before (a retry): stored already, once
            taken = set(step.taken_back)
            await self._take_back(self._memory, step.ref, len(step.asked_again), taken)
            mid = free_id(step.ref.thread, step.after, print_, taken)
        (message,) = from_openai_chat(
            [reply], thread_id=step.ref.thread, resource_id=step.ref.resource
        )
        stored = await step.door.reply([replace(message, id=mid)])
        await self._threads.saw(step.ref.thread, stored)

    async def _take_back(self, memory: Memory, ref: ThreadRef, count: int, taken: set[str]) -> None:
        """Take back the thread's ``count`` newest shown messages (adding their ids to
        ``taken``)."""
        self._threads.distrust(ref.thread)
        for _ in range(count):
            gone = await memory.retract_last(ref)
            if gone is not None:
                taken.add(gone.id)

    # -- HTTP ----------------------------------------------------------------------------------

    async def serve(self, request: Request, api: Api) -> Response:
        """A chat request of ``api`` (its route is ``functools.partial(proxy.serve, api=...)``)."""
        headers = {k.lower(): v for k, v in request.headers.items()}
        caller = self.admission.caller(headers)
        if isinstance(caller, Response):
            return caller
        raw, body = await read_json(request, self.config.max_json_depth)
        thread = thread_of(headers, body)
        off = api.memory_off(body)
        if off is not None:
            return await self._as_is(request, raw, caller, f"off; {off}")
        if thread is None:
            return await self._as_is(request, raw, caller, self.admission.no_thread(body))
        end_user = end_user_of(body)
        ref, legacy = caller.ref(thread, end_user), caller.legacy_ref(thread, body)

        async def with_memory() -> Response:
            return await self._with_memory(request, raw, body, api, ref, legacy)

        if not self.admission.accepted(caller):
            return await self._as_is(request, raw, caller, NOT_ACCEPTED_YET, with_memory)
        response = await with_memory()
        self.admission.judged(caller, response.status_code)
        return response

    async def _with_memory(
        self,
        request: Request,
        raw: bytes,
        body: dict[str, Any],
        api: Api,
        ref: ThreadRef,
        legacy: ThreadRef | None,
    ) -> Response:
        """The request with memory's context in place of the client's history; its answer
        stored."""
        model_name = body["model"] if isinstance(body.get("model"), str) else "default"

        async def begin(ref: ThreadRef) -> tuple[bytes, Step]:
            sent, step = await self.prepare(ref, api.messages_of(body), model_name)
            return json.dumps(api.with_messages(body, sent)).encode(), step

        step: Step | None = None
        try:
            memory = await self.memory(model_name)
            payload, step = await begin(await self._thread_ref(memory, ref, legacy))
            status = step.status
        except Unsupported as exc:
            return await self.upstream.forward(request, raw, f"off; memory cannot read {exc}")
        except Exception as exc:
            log.warning("obsmem proxy: memory failed for thread %s: %s", ref.thread, cause(exc))
            payload, status = raw, f"failing; {cause(exc)}"
        stream = bool(body.get("stream"))
        try:
            answer = await self.upstream.send(request, payload, stream=stream)
            if step is not None and (again := await self._again(step, answer, begin)):
                payload, step = again
                answer = await self.upstream.send(request, payload, stream=stream)
        except httpx.HTTPError as exc:
            return self.upstream.unreachable(exc, status)
        if stream and answer.status_code == 200:
            if step is None:
                return self.upstream.relay(answer, status)
            reader = api.reader()
            finish = functools.partial(self._store_answer, step, reader.message)
            return self.upstream.relay(answer, status, reader.feed, finish)
        headers = self.upstream.response_headers(answer, status)
        content = await answer.aread()
        await answer.aclose()
        if answer.status_code == 200 and step is not None:
            failed = await self._store_answer(step, lambda: api.answer_of(answer.json()))
            if failed is not None:
                headers[MEMORY_HEADER] = f"failing; storing the answer: {failed}"
        return Response(content, status_code=answer.status_code, headers=headers)

    async def _again(
        self,
        step: Step,
        answer: httpx.Response,
        begin: Callable[[ThreadRef], Awaitable[tuple[bytes, Step]]],
    ) -> tuple[bytes, Step] | None:
        """The overflow phase: after the upstream refused the request as longer than the
        model's context and memory compacted the thread (once: the door says so in the log),
        the step begun again; None when not that, or nothing could be compacted."""
        if answer.status_code == 200 or self._memory is None:
            return None
        try:
            if await step.door.retry_after(await self.upstream.overflow(answer)):
                return await begin(step.ref)
        except Exception as exc:
            log.warning(
                "obsmem proxy: compacting thread %s after the upstream's refusal failed: %s",
                step.ref.thread,
                cause(exc),
            )
        return None

    async def _store_answer(
        self, step: Step, answer: Callable[[], Mapping[str, Any] | None]
    ) -> str | None:
        """Finish the step with the upstream's ``answer()``. Memory never fails a request: a
        failure is a WARNING on the ``obsmem`` logger, and its cause is returned."""
        try:
            await self.finish(step, answer())
        except Exception as exc:
            log.warning(
                "obsmem proxy: storing the answer failed for thread %s: %s",
                step.ref.thread,
                cause(exc),
            )
            return cause(exc)
        return None

    async def _thread_ref(
        self, memory: Memory, ref: ThreadRef, legacy: ThreadRef | None
    ) -> ThreadRef:
        """The stored thread a request continues: its own, or, while that does not exist, the
        one the proxy stored for its end user when it took the ``user`` field as the thread
        (``legacy``, :mod:`.identity`)."""
        if legacy is None:
            return ref
        known = self._continued.get(ref.thread)
        if known is None:
            known = ref
            if await memory.thread(ref.thread) is None:
                old = await memory.thread(legacy.thread)
                if old is not None and old.resource_id == legacy.resource:
                    known = legacy
            self._continued[ref.thread] = known
            while len(self._continued) > MAX_CACHED_THREADS:
                self._continued.popitem(last=False)
        return known

    async def _as_is(
        self,
        request: Request,
        raw: bytes,
        caller: Caller,
        status: str,
        with_memory: Callable[[], Awaitable[Response]] | None = None,
    ) -> Response:
        """A chat request as the client sent it: memory is off for it, or (``with_memory``
        given) waits for the upstream to accept the caller's key (:mod:`.admission`). The
        answer tells whether it does; so does a refusal as longer than the model's context
        (the upstream read the request, which it does only for a key it takes), and then the
        request is served again, with memory."""
        answer = await self.upstream.send_as_is(request, raw, status)
        if isinstance(answer, Response):
            return answer
        self.admission.judged(caller, answer.status_code)
        if with_memory is not None:
            if await self.upstream.overflow(answer) is not None:
                self.admission.accept(caller)
                return await with_memory()
            if answer.status_code in REFUSED_KEY:
                status = UPSTREAM_REFUSED
        return self.upstream.relay(answer, status)

    async def passthrough(self, request: Request) -> Response:
        """Any other ``/v1/...`` request, as it came (the upstream judges its key)."""
        return await self.upstream.forward(request, await request.body(), "off; not a chat request")


def create_app(config: ProxyConfig) -> Starlette:
    """The proxy as an ASGI app (``app.state.proxy`` is its :class:`Proxy`)."""
    import contextlib

    proxy = Proxy(config)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncGenerator[None]:
        try:
            yield
        finally:
            await proxy.aclose()

    app = Starlette(
        routes=[
            Route(
                "/v1/chat/completions", functools.partial(proxy.serve, api=CHAT), methods=["POST"]
            ),
            Route("/v1/responses", functools.partial(proxy.serve, api=RESPONSES), methods=["POST"]),
            Route(
                "/v1/{path:path}",
                proxy.passthrough,
                methods=["GET", "POST", "PUT", "PATCH", "DELETE"],
            ),
        ],
        middleware=[guarding(config)],
        lifespan=lifespan,
    )
    app.state.proxy = proxy
    return app
