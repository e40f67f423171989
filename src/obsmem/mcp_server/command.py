"""``obsmem mcp``: the command's arguments, the memory it opens, and the transports."""

from __future__ import annotations

import argparse
import asyncio
import hmac
import logging
import os
import signal
import sys
from typing import TYPE_CHECKING, Any, TextIO

from ..asgi import JSON, ASGIApp, HTTPMiddleware, Receive, Scope, Send, answer
from ..cli.stopping import close_memory, end_by_signal, start_deadline
from ..errors import ConfigError, check_id
from ..hosts import is_loopback
from .client_config import CLIENTS, print_config
from .server import build_server, require_sdk
from .tools import MemoryTools

if TYPE_CHECKING:
    from mcp.server import MCPServer

    from ..cli.arguments import Run
    from ..memory import Memory

__all__ = ["add"]


class BearerToken(HTTPMiddleware):
    """An ASGI app in front of ``app`` that answers 401 to an HTTP request whose
    ``Authorization`` header is not ``Bearer <token>`` (compared in constant time)."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        super().__init__(app)
        self._expected = f"Bearer {token}".encode()

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        given = dict(scope.get("headers") or ()).get(b"authorization", b"")
        if hmac.compare_digest(given, self._expected):
            await self.app(scope, receive, send)
            return
        body = b'{"error": "send the server\'s token: Authorization: Bearer TOKEN"}'
        await answer(send, 401, body, (JSON, (b"www-authenticate", b"Bearer")))


def add(parser: argparse.ArgumentParser) -> Run:
    """Serves one resource's observational memory to MCP clients over stdio (the default: the
    client starts the command) or streamable HTTP. The resource comes from --resource (or
    OBSMEM_RESOURCE), never from the model."""
    from ..cli.arguments import add_choice, add_listening, add_memory_options

    parser.add_argument(
        "--resource",
        default=os.environ.get("OBSMEM_RESOURCE"),
        help="the user (or account) whose memory this server serves (default: OBSMEM_RESOURCE)",
    )
    parser.add_argument(
        "--thread",
        default=os.environ.get("OBSMEM_THREAD") or None,
        help="serve only this conversation, its id as given (default: OBSMEM_THREAD; without "
        "it, calls may name any conversation of the resource, by default mcp:RESOURCE; the id "
        "ID a call names is stored as mcp:RESOURCE:ID, so no other resource can take it)",
    )
    add_memory_options(parser)
    add_choice(
        parser,
        "--scope",
        ("thread", "resource"),
        "one log per conversation, or one across the resource's conversations",
    )
    add_choice(
        parser,
        "--working-memory",
        ("off", "agent", "observer"),
        "a document about the user shown by memory_context: kept by the client's model (an "
        "update_working_memory tool) or by the Observer (default: off)",
    )
    parser.add_argument(
        "--search",
        metavar="EMBEDDER",
        default=None,
        help="offer recall's mode \"search\" (notes found by meaning): 'local' (the packaged "
        "MiniLM, extra 'vector') or an embedding model such as openai/text-embedding-3-small",
    )
    add_choice(
        parser,
        "--transport",
        ("stdio", "http"),
        "stdio (the client starts the command; the default) or streamable HTTP at /mcp",
    )
    add_listening(
        parser,
        port=8767,
        token="every request must send 'Authorization: Bearer TOKEN' (default: "
        "OBSMEM_MCP_TOKEN; required to listen anywhere but loopback)",
        token_default=os.environ.get("OBSMEM_MCP_TOKEN") or None,
        when="HTTP: ",
    )
    parser.add_argument(
        "--print-config",
        choices=tuple(CLIENTS),
        metavar="CLIENT",
        help="print the configuration that adds this server, with these options, to an MCP "
        f"client ({', '.join(CLIENTS)}), with absolute paths, and where it goes; serve nothing",
    )
    parser.set_defaults(default_of=parser.get_default)
    return _run


def _run(args: argparse.Namespace, out: TextIO) -> int:
    from ..cli.common import CannotStart

    if args.print_config is None:
        require_sdk()
    if not args.resource:
        raise CannotStart(
            "obsmem mcp needs the resource it serves: pass --resource USER_ID (or set "
            "OBSMEM_RESOURCE)"
        )
    for flag, value in (("--resource", args.resource), ("--thread", args.thread)):
        if value is not None:
            try:
                check_id(flag, value)
            except ConfigError as exc:
                raise CannotStart(f"{flag} {value!r}: {exc.rule}") from None
    if args.print_config is not None:
        return print_config(args, args.default_of, out)
    if not 0 <= args.port <= 65_535:
        raise CannotStart(f"--port {args.port}: give a port from 1 to 65535 (0 picks a free one)")
    from ..cli.errors import refuse_unusable_model

    refuse_unusable_model(args.model)
    if args.transport == "http" and not is_loopback(args.host) and not args.token:
        raise CannotStart(
            f"obsmem mcp --host {args.host} would serve {args.resource!r}'s memory to whoever "
            "reaches it: pass --token TOKEN (or set OBSMEM_MCP_TOKEN), which every request must "
            "then send as 'Authorization: Bearer TOKEN', or listen on 127.0.0.1"
        )
    # WARNINGs (memory failures among them) to stderr: stdout may be the protocol's.
    logging.basicConfig(
        stream=sys.stderr, level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    stopped = asyncio.Event()  # by a SIGTERM while serving over stdio
    asyncio.run(_serve(args, out, stopped))
    if stopped.is_set():
        end_by_signal(signal.SIGTERM)
    return 0


def _options(args: argparse.Namespace) -> dict[str, Any]:
    from ..cli.common import memory_options, served_in_place_of_auto

    options = memory_options(args, args.model or served_in_place_of_auto("obsmem mcp") or "auto")
    # Serving one conversation: recall stays in it too.
    retrieval: dict[str, Any] = {"scope": "thread" if args.thread is not None else "resource"}
    if args.search:
        retrieval.update(vector=True, embedder=args.search)
    options.update(scope=args.scope, retrieval=retrieval, failure_policy="warn")
    if args.working_memory == "observer":
        options["observation"]["manageWorkingMemory"] = True
    return options


async def _serve(args: argparse.Namespace, out: TextIO, stopped: asyncio.Event) -> None:
    from ..cli.common import db_label, open_store
    from ..memory import Memory

    store = open_store(args.db)  # checked: a file or database that is not obsmem's is refused
    memory = Memory(
        store,
        observational_memory=_options(args),
        working_memory=True if args.working_memory != "off" else None,
    )
    try:
        server = build_server(MemoryTools(memory, resource=args.resource, thread=args.thread))
        where = f"resource {args.resource!r} in {db_label(args.db)}"
        if args.transport == "stdio":
            print(f"obsmem mcp: serving {where} on stdio", file=sys.stderr)
            await _serve_stdio(server, memory, stopped)
        else:
            await _serve_http(server, memory, args, out, where)
    finally:
        await close_memory(memory, "mcp", abandon=True)  # closed already, unless serving failed


async def _serve_stdio(server: MCPServer, memory: Memory, stopped: asyncio.Event) -> None:
    """Serve until stdin ends, then finish background memory work. A SIGTERM (how an MCP
    client stops a server that did not exit after it closed stdin) stops either at once,
    abandoning that work."""
    task = asyncio.current_task()
    assert task is not None  # a coroutine asyncio.run runs

    def stop() -> None:
        if not stopped.is_set():
            stopped.set()
            start_deadline("mcp")
            task.cancel()

    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop)
    try:
        await server.run_stdio_async()
        await close_memory(memory, "mcp", abandon=False)
    except asyncio.CancelledError:
        if not stopped.is_set():
            raise
        task.uncancel()
        await close_memory(memory, "mcp", abandon=True)
    finally:
        loop.remove_signal_handler(signal.SIGTERM)


async def _serve_http(
    server: MCPServer, memory: Memory, args: argparse.Namespace, out: TextIO, where: str
) -> None:
    """Serve until SIGTERM or Ctrl-C (see :mod:`obsmem.cli.stopping`): background memory work
    still running then is abandoned."""
    from ..cli.common import listen
    from ..cli.serving import BoundedServer

    app: Any = server.streamable_http_app(host=args.host)
    if args.token:
        app = BearerToken(app, args.token)
    sock, url = listen(args.host, args.port, backlog=128)
    served = BoundedServer(
        app,
        command="mcp",
        closing=lambda: close_memory(memory, "mcp", abandon=True),
        log_config=None,
        access_log=False,
        log_level="warning",
    )
    print(f"obsmem mcp: serving {where} at {url}/mcp", file=out, flush=True)
    await served.serve(sockets=[sock])
