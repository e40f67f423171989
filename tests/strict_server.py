"""A strict OpenAI-compatible chat server on loopback, for tests.

It enforces what the chat templates of llama.cpp's server and vLLM enforce, and answers a broken
rule the way those servers do:

- message content is a string (a list of parts makes llama.cpp's template fail with a 500:
  ``can only concatenate str (not "list") to str``);
- system messages come first, and there is one (vLLM and many templates: ``System message must be
  at the beginning``);
- after it, user and assistant turns alternate (tool results follow the assistant's call):
  ``Conversation roles must alternate user/assistant/user/assistant/...``;
- parameters the model rejects (``reject_params``) are a 400, as OpenAI's reasoning models answer
  ``temperature``;
- with ``context_size``, a request longer than that many tokens (about four characters each) is a
  400 with llama.cpp's ``exceed_context_size_error`` (or vLLM's wording, ``serves="vllm"``), and
  the window is told where those servers tell it: llama.cpp's ``GET /props``
  (``default_generation_settings.n_ctx``) and ``/v1/models`` (``meta.n_ctx_train``), vLLM's
  ``/v1/models`` (``max_model_len``), Ollama's ``POST /api/show`` (``serves="ollama"``);
- with ``named_model_only``, a request for another model than ``model_id`` is a 404, as vLLM
  answers it (``The model `local` does not exist.``).

``answer(request)`` gives the reply text, or an iterator (or async iterator) of pieces to stream (it
may never end, or wait: the server stops when the client hangs up, as llama.cpp does, noticing it
at its next write or while it waits for the next piece, and counts what it sent). A request not
streamed gets the pieces joined, once they end. Every request is kept in ``requests``;
``refusals`` lists the rules broken.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import itertools
import json
import time
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ToolCalls:
    """An answer that calls tools: ``ToolCalls((name, {args}), ...)``."""

    calls: tuple[tuple[str, dict[str, Any]], ...]

    def __init__(self, *calls: tuple[str, dict[str, Any]]) -> None:
        object.__setattr__(self, "calls", calls)

    def wire(self, first_id: int) -> list[dict[str, Any]]:
        return [
            {
                "id": f"call_{first_id + i}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(args)},
            }
            for i, (name, args) in enumerate(self.calls)
        ]


class _EmptyStream:
    """An answer whose stream ends at once, with no chunk at all (what small local models
    sometimes send)."""


EMPTY_STREAM = _EmptyStream()

Pieces = Iterable[str] | AsyncIterable[str]
"""An answer streamed piece by piece (an async iterator may wait between pieces)."""

Answer = Callable[
    [dict[str, Any]],
    "str | ToolCalls | _EmptyStream | Pieces | Awaitable[str | ToolCalls | Pieces]",
]


def _fixed(text: str) -> Answer:
    return lambda request: text


def endless(piece: str = "The user keeps talking about many things and more things. ") -> Answer:
    """A model that never stops: the same piece, forever (cut off by the client, or never)."""
    return lambda request: itertools.repeat(piece)


def rambling() -> Answer:
    """A model that never stops and never repeats a 200-character window: only an output cap
    stops it."""

    def pieces(request: dict[str, Any]) -> Iterator[str]:
        for n in itertools.count():
            yield f"* 🟡 (09:{n % 60:02d}) Observation number {n} about topic {n * 7919 % 10007}.\n"

    return pieces


@dataclass
class StrictServer:
    answer: Answer = field(default_factory=lambda: _fixed("ok"))
    reject_params: frozenset[str] = frozenset()
    multimodal: bool = False
    """Whether list content (text and images) is accepted (a model with a vision projector)."""
    report_usage: bool = True
    """Whether answers carry token usage (many local servers leave it out of a stream)."""
    outage: int = 0
    """The first ``outage`` requests are answered 503 (a server that is down for a while)."""
    context_size: int | None = None
    """The model's context window in tokens (None: unlimited)."""
    serves: str = "llama.cpp"
    """Whose answers to give about the context: ``"llama.cpp"``, ``"vllm"`` or ``"ollama"``."""
    model_id: str = "local"
    """The model ``/v1/models`` lists (vLLM and Ollama serve named models)."""
    named_model_only: bool = False
    """Refuse a request for any other model than ``model_id`` with a 404, as vLLM does."""
    refuse: Callable[[dict[str, Any]], tuple[int, str] | None] | None = None
    """The status and message to refuse a request with (None: serve it), after the rules
    above: an upstream that refuses some calls (a key it does not take)."""
    requests: list[dict[str, Any]] = field(default_factory=list[dict[str, Any]])
    refusals: list[str] = field(default_factory=list[str])
    streamed_pieces: int = 0
    hung_up: int = 0
    """Answers the client hung up on before they ended (streamed or not)."""
    port: int = 0
    _server: asyncio.Server | None = None
    _tasks: set[asyncio.Task[Any]] = field(default_factory=set[asyncio.Task[Any]])
    _closing: bool = False
    _writers: set[asyncio.StreamWriter] = field(default_factory=set[asyncio.StreamWriter])
    _hang_ups: asyncio.Condition = field(default_factory=asyncio.Condition)

    loop: asyncio.AbstractEventLoop | None = None
    """The loop the server runs on (another thread's, with ``strict_server_thread``)."""

    async def wait_hung_up(self, count: int) -> None:
        """Until the client has hung up on ``count`` answers (the server noticed, as a real one
        does, and stopped generating)."""
        async with asyncio.timeout(10), self._hang_ups:
            await self._hang_ups.wait_for(lambda: self.hung_up >= count)

    def wait_hung_up_from(self, count: int) -> None:
        """:meth:`wait_hung_up` from a thread other than the server's (its loop runs in
        ``strict_server_thread``)."""
        assert self.loop is not None
        asyncio.run_coroutine_threadsafe(self.wait_hung_up(count), self.loop).result(15)

    async def _hang_up(self) -> None:
        async with self._hang_ups:
            self.hung_up += 1
            self._hang_ups.notify_all()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def start(self) -> StrictServer:
        self.loop = asyncio.get_running_loop()
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def aclose(self) -> None:
        self._closing = True  # a stream still running ends at its next piece
        if self._server is not None:
            self._server.close()
            for writer in self._writers:  # idle keep-alive connections too
                writer.close()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            await self._server.wait_closed()

    # -- the rules -----------------------------------------------------------------------------

    def check(self, body: dict[str, Any]) -> tuple[int, str] | None:
        """The status and message a strict server answers ``body`` with, or None to accept."""
        if self.named_model_only and body.get("model") != self.model_id:
            return 404, f"The model `{body.get('model')}` does not exist."
        for name in sorted(self.reject_params & set(body)):
            return 400, (f"Unsupported parameter: '{name}' is not supported with this model.")
        messages = body.get("messages") or []
        for message in messages:
            content = message.get("content")
            if isinstance(content, list) and not self.multimodal:
                return 500, 'can only concatenate str (not "list") to str'
        roles = [m.get("role") for m in messages]
        leading = len(list(itertools.takewhile(lambda r: r in ("system", "developer"), roles)))
        if leading > 1 or any(r in ("system", "developer") for r in roles[leading:]):
            return 400, "System message must be at the beginning."
        # A tool call's results and the answer after them belong to the assistant's turn.
        turns: list[str | None] = []
        after_tool = False
        for role in roles[leading:]:
            if role == "tool":
                after_tool = True
                continue
            if not (after_tool and role == "assistant" and turns and turns[-1] == "assistant"):
                turns.append(role)
            after_tool = False
        for earlier, later in itertools.pairwise(turns):
            if earlier == later:
                return 400, ("Conversation roles must alternate user/assistant/user/assistant/...")
        if turns and turns[0] != "user":
            return 400, "Conversation roles must alternate user/assistant/user/assistant/..."
        return None

    def tokens_of(self, body: dict[str, Any]) -> int:
        """The request's size as this server counts it: about four characters a token."""
        messages = body.get("messages") or []
        chars = sum(len(json.dumps(m.get("content") or "")) + 8 for m in messages)
        return chars // 4

    def _overflow(self, body: dict[str, Any]) -> dict[str, Any] | None:
        """The error body a request too long for ``context_size`` gets, or None."""
        if self.context_size is None:
            return None
        size = self.tokens_of(body)
        if size <= self.context_size:
            return None
        if self.serves == "vllm":
            message = (
                f"This model's maximum context length is {self.context_size} tokens. However, "
                f"your request has {size} input tokens. Please reduce the length of the input "
                "messages."
            )
            error = {"object": "error", "message": message, "type": "BadRequestError"}
            return {"error": {**error, "param": None, "code": 400}}
        message = (
            f"request ({size} tokens) exceeds the available context size "
            f"({self.context_size} tokens), try increasing it"
        )
        error = {"code": 400, "message": message, "type": "exceed_context_size_error"}
        return {"error": {**error, "n_prompt_tokens": size, "n_ctx": self.context_size}}

    def _model_card(self) -> dict[str, Any]:
        card: dict[str, Any] = {"id": self.model_id, "object": "model", "owned_by": self.serves}
        if self.context_size is not None and self.serves == "vllm":
            card["max_model_len"] = self.context_size
        elif self.context_size is not None:
            card["meta"] = {"n_ctx_train": self.context_size, "n_vocab": 49152}
        return card

    # -- HTTP ----------------------------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        self._writers.add(writer)
        try:
            # One request per connection (Connection: close): no idle sockets left behind.
            request_line = await reader.readline()
            if not request_line:
                return
            method, path, _ = request_line.decode().split(" ", 2)
            headers: dict[str, str] = {}
            while (line := await reader.readline()) not in (b"\r\n", b"\n", b""):
                name, _, value = line.decode().partition(":")
                headers[name.strip().lower()] = value.strip()
            raw = await reader.readexactly(int(headers.get("content-length", "0")))
            if method == "GET" and path.rstrip("/").endswith("/models"):
                await self._json(writer, 200, {"object": "list", "data": [self._model_card()]})
                return
            if method == "GET" and path.rstrip("/").endswith("/props"):
                if self.serves != "llama.cpp" or self.context_size is None:
                    await self._json(writer, 404, {"error": {"code": 404, "message": "Not Found"}})
                    return
                props = {"default_generation_settings": {"n_ctx": self.context_size}}
                await self._json(writer, 200, {**props, "total_slots": 1})
                return
            body = json.loads(raw or b"{}")
            if method == "POST" and path.rstrip("/").endswith("/responses"):
                await self._responses(writer, body)
                return
            if method == "POST" and path.rstrip("/").endswith("/api/show"):
                if self.serves != "ollama" or self.context_size is None:
                    await self._json(writer, 404, {"error": "not found"})
                    return
                info = {"general.architecture": "llama", "llama.context_length": 131072}
                parameters = f"num_ctx                        {self.context_size}"
                await self._json(writer, 200, {"model_info": info, "parameters": parameters})
                return
            self.requests.append(body)
            refused = self.check(body)
            if refused is None and self.refuse is not None:
                refused = self.refuse(body)
            if len(self.requests) <= self.outage:
                refused = (503, "Service Unavailable: loading model")
            overflow = self._overflow(body) if refused is None else None
            if overflow is not None:
                self.refusals.append(overflow["error"]["message"])
                await self._json(
                    writer, 400, overflow if self.serves == "llama.cpp" else overflow["error"]
                )
                return
            if refused is not None:
                status, message = refused
                self.refusals.append(message)
                kind = "server_error" if status >= 500 else "invalid_request_error"
                error = {"error": {"code": status, "message": message, "type": kind}}
                await self._json(writer, status, error)
                return
            reply = self.answer(body)
            if inspect.isawaitable(reply):
                reply = await reply
            if isinstance(reply, _EmptyStream):
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                    b"Connection: close\r\n\r\ndata: [DONE]\n\n"
                )
                await writer.drain()
                return
            if isinstance(reply, ToolCalls):
                calls = reply.wire(len(self.requests) * 100)
                if body.get("stream"):
                    await self._stream(writer, body, [], tool_calls=calls)
                else:
                    await self._json(writer, 200, _completion(body, None, tool_calls=calls))
                return
            pieces: Pieces = [reply] if isinstance(reply, str) else reply
            if body.get("stream"):
                await self._stream(writer, body, pieces, hang_up=_eof(reader))
                return
            text = await self._joined(pieces, _eof(reader))
            if text is not None:
                await self._json(writer, 200, _completion(body, text))
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self._writers.discard(writer)
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
            if task is not None:
                self._tasks.discard(task)

    async def _responses(self, writer: asyncio.StreamWriter, body: dict[str, Any]) -> None:
        """``POST /v1/responses``: an input the API refuses is a 400 as OpenAI words it;
        otherwise the answer as a response object, or streamed as the API's events."""
        self.requests.append(body)
        refused = check_responses_input(body.get("input"))
        if refused is not None:
            self.refusals.append(refused)
            error = {"message": refused, "type": "invalid_request_error", "code": None}
            await self._json(writer, 400, {"error": error})
            return
        reply = self.answer(body)
        if inspect.isawaitable(reply):
            reply = await reply
        n = len(self.requests)
        if isinstance(reply, ToolCalls):
            output = [
                {
                    "type": "function_call",
                    "id": f"fc_{n}_{i}",
                    "call_id": c["id"],
                    "name": c["function"]["name"],
                    "arguments": c["function"]["arguments"],
                    "status": "completed",
                }
                for i, c in enumerate(reply.wire(n * 100))
            ]
            pieces: list[str] = []
        else:
            pieces = [reply] if isinstance(reply, str) else list(reply)
            text = {"type": "output_text", "text": "".join(pieces), "annotations": []}
            output = [
                {
                    "type": "message",
                    "id": f"msg_{n}",
                    "role": "assistant",
                    "status": "completed",
                    "content": [text],
                }
            ]
        response = _response_object(body, n, output)
        if not body.get("stream"):
            await self._json(writer, 200, response)
            return
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Cache-Control: no-cache\r\nConnection: close\r\n\r\n"
        )
        for event in _response_events(response, pieces):
            writer.write(f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode())
            await writer.drain()
            self.streamed_pieces += 1

    async def _json(self, writer: asyncio.StreamWriter, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        writer.write(
            f"HTTP/1.1 {status} {'OK' if status == 200 else 'Error'}\r\n"
            "Content-Type: application/json\r\n"
            "Connection: close\r\n"  # one request per connection: no idle sockets left behind
            f"Content-Length: {len(data)}\r\n\r\n".encode()
            + data
        )
        await writer.drain()

    async def _joined(self, pieces: Pieces, hang_up: asyncio.Future[bytes]) -> str | None:
        """The pieces of an answer not streamed, joined; None when the client hung up first
        (noticed between pieces, as a server notices while it generates)."""
        joined: list[str] = []
        try:
            async for piece in _pieces(pieces, hang_up):
                if self._closing:
                    return None
                joined.append(piece)
                await asyncio.sleep(0)  # a model that never stops must not stall the server
        except ConnectionError:
            await self._hang_up()
            return None
        finally:
            hang_up.cancel()
        return "".join(joined)

    async def _stream(
        self,
        writer: asyncio.StreamWriter,
        body: dict[str, Any],
        pieces: Pieces,
        *,
        tool_calls: list[dict[str, Any]] | None = None,
        hang_up: asyncio.Future[bytes] | None = None,
    ) -> None:
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Cache-Control: no-cache\r\nConnection: close\r\n\r\n"
        )
        created = int(time.time())
        try:
            async for piece in _pieces(pieces, hang_up):
                if self._closing:
                    return
                chunk = {
                    "id": "chatcmpl-strict",
                    "object": "chat.completion.chunk",
                    "created": created,
                    "model": body.get("model", "local"),
                    "choices": [{"index": 0, "delta": {"role": "assistant", "content": piece}}],
                }
                writer.write(f"data: {json.dumps(chunk)}\n\n".encode())
                await writer.drain()
                self.streamed_pieces += 1
                await asyncio.sleep(0)  # let the client read (and hang up)
            if tool_calls:
                delta = {
                    "role": "assistant",
                    "tool_calls": [{"index": i, **c} for i, c in enumerate(tool_calls)],
                }
                chunk = {
                    "id": "chatcmpl-strict",
                    "object": "chat.completion.chunk",
                    "created": created,
                    "model": body.get("model", "local"),
                    "choices": [{"index": 0, "delta": delta}],
                }
                writer.write(f"data: {json.dumps(chunk)}\n\n".encode())
            done = {
                "id": "chatcmpl-strict",
                "object": "chat.completion.chunk",
                "created": created,
                "model": body.get("model", "local"),
                "choices": [
                    {
                        "index": 0,
                        "delta": {},
                        "finish_reason": "tool_calls" if tool_calls else "stop",
                    }
                ],
            }
            if self.report_usage:
                done["usage"] = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
            writer.write(f"data: {json.dumps(done)}\n\ndata: [DONE]\n\n".encode())
            await writer.drain()
        except ConnectionError:
            await self._hang_up()
        finally:
            if hang_up is not None:
                hang_up.cancel()


def _eof(reader: asyncio.StreamReader) -> asyncio.Future[bytes]:
    """Done when the client closes its side of the connection (the request is read already)."""
    return asyncio.ensure_future(reader.read(1))


async def _pieces(pieces: Pieces, hang_up: asyncio.Future[bytes] | None) -> AsyncIterator[str]:
    """The pieces of an answer, ending with ConnectionError when ``hang_up`` (the client closing
    the connection) comes first."""
    iterator = aiter(pieces) if isinstance(pieces, AsyncIterable) else _async(pieces)
    while True:
        if hang_up is not None and hang_up.done():
            raise ConnectionError("the client hung up")
        following = asyncio.ensure_future(anext(iterator))
        if hang_up is not None:
            await asyncio.wait({following, hang_up}, return_when=asyncio.FIRST_COMPLETED)
            if not following.done():
                following.cancel()
                with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                    await following
                raise ConnectionError("the client hung up")
        try:
            yield await following
        except StopAsyncIteration:
            return


async def _async(pieces: Iterable[str]) -> AsyncIterator[str]:
    for piece in pieces:
        yield piece


def _completion(
    body: dict[str, Any], text: str | None, *, tool_calls: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return {
        "id": "chatcmpl-strict",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model", "local"),
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if tool_calls else "stop",
            }
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


def check_responses_input(value: Any) -> str | None:
    """What OpenAI's Responses API refuses in an ``input``, in its words, or None: an item
    that is not an object, a message whose content is not a string or a list of input parts, a
    ``function_call_output`` with no ``function_call`` of its ``call_id`` before it."""
    if isinstance(value, str):
        return None
    if not isinstance(value, list):
        return "Invalid type for 'input': expected a string or an array of input items."
    calls: set[str] = set()
    for i, item in enumerate(value):
        if not isinstance(item, dict):
            return f"Invalid type for 'input[{i}]': expected an object."
        kind = item.get("type", "message")
        if kind == "function_call":
            calls.add(item.get("call_id", ""))
        elif kind == "function_call_output":
            if item.get("call_id") not in calls:
                return (
                    "No tool call found for function call output with call_id "
                    f"{item.get('call_id')}."
                )
        elif kind == "message":
            content = item.get("content")
            if not isinstance(content, (str, list)):
                return f"Invalid type for 'input[{i}].content': expected a string or an array."
            if item.get("role") not in ("user", "assistant", "system", "developer"):
                return f"Invalid value for 'input[{i}].role': {item.get('role')!r}."
        else:
            return f"Invalid value for 'input[{i}].type': {kind!r}."
    return None


def _response_object(body: dict[str, Any], n: int, output: list[Any]) -> dict[str, Any]:
    return {
        "id": f"resp_{n}",
        "object": "response",
        "created_at": int(time.time()),
        "status": "completed",
        "model": body.get("model", "local"),
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": body.get("tools", []),
        "usage": {
            "input_tokens": 10,
            "output_tokens": 5,
            "total_tokens": 15,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0},
        },
    }


def _response_events(response: dict[str, Any], pieces: list[str]) -> Iterator[dict[str, Any]]:
    """The Responses API's stream of one answer: created, each output item added, its text
    (or arguments) in deltas, done, then completed with the whole response."""
    seq = itertools.count()
    started = {**response, "status": "in_progress", "output": []}
    yield {"type": "response.created", "sequence_number": next(seq), "response": started}
    for index, item in enumerate(response["output"]):
        if item["type"] == "message":
            empty = {**item, "status": "in_progress", "content": []}
            yield {
                "type": "response.output_item.added",
                "sequence_number": next(seq),
                "output_index": index,
                "item": empty,
            }
            for piece in pieces:
                yield {
                    "type": "response.output_text.delta",
                    "sequence_number": next(seq),
                    "item_id": item["id"],
                    "output_index": index,
                    "content_index": 0,
                    "delta": piece,
                    "logprobs": [],
                }
        else:
            yield {
                "type": "response.output_item.added",
                "sequence_number": next(seq),
                "output_index": index,
                "item": {**item, "arguments": "", "status": "in_progress"},
            }
            yield {
                "type": "response.function_call_arguments.delta",
                "sequence_number": next(seq),
                "item_id": item["id"],
                "output_index": index,
                "delta": item["arguments"],
            }
        yield {
            "type": "response.output_item.done",
            "sequence_number": next(seq),
            "output_index": index,
            "item": item,
        }
    yield {"type": "response.completed", "sequence_number": next(seq), "response": response}


@contextlib.asynccontextmanager
async def strict_server(**kwargs: Any) -> AsyncIterator[StrictServer]:
    server = await StrictServer(**kwargs).start()
    try:
        yield server
    finally:
        await server.aclose()


@contextlib.contextmanager
def strict_server_thread(**kwargs: Any) -> Iterator[StrictServer]:
    """The server on its own event loop in a thread: for code that runs its own loop (the
    command line's ``asyncio.run``)."""
    import threading

    loop = asyncio.new_event_loop()
    ready = threading.Event()
    holder: list[StrictServer] = []

    def run() -> None:
        asyncio.set_event_loop(loop)

        async def begin() -> None:
            holder.append(await StrictServer(**kwargs).start())
            ready.set()

        loop.run_until_complete(begin())
        loop.run_forever()

    thread = threading.Thread(target=run, name="strict-server", daemon=True)
    thread.start()
    ready.wait(10)
    server = holder[0]
    try:
        yield server
    finally:
        asyncio.run_coroutine_threadsafe(server.aclose(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
