"""``obsmem chat``: talk to an agent with observational memory and watch the windows."""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import TYPE_CHECKING, Any, TextIO

from .common import add_memory_options, check_model, memory_options, pick_model

if TYPE_CHECKING:
    from ..memory import Memory

__all__ = ["add"]

HELP = """commands:
  /observations        the observation log
  /recall [FROM:TO]    the stored messages (by position), e.g. /recall 1:10
  /threads             this resource's threads
  /help                this help
  /quit                leave (Ctrl-D works too)"""


def add(sub: Any) -> None:
    parser = sub.add_parser(
        "chat",
        help="a REPL with an agent that has observational memory",
        description="Chat with an agent whose memory lives in the store; a status line shows "
        "the message and observation windows against their thresholds.",
    )
    add_memory_options(parser, message_tokens=30_000, observation_tokens=40_000)
    parser.add_argument("--thread", default="chat", help="conversation id (default: chat)")
    parser.add_argument("--resource", default="me", help="user id (default: me)")
    parser.add_argument("--instructions", default="You are a helpful assistant.")
    parser.set_defaults(run=_run)


def _run(args: argparse.Namespace, out: TextIO) -> int:
    model = pick_model(args)
    if model is None:
        return 2
    return asyncio.run(_chat(args, out, model))


async def _chat(args: argparse.Namespace, out: TextIO, model: str) -> int:
    problem = await check_model(model)
    if problem is not None:
        print(f"obsmem: {problem}", file=sys.stderr)
        return 2
    from ..agent import Agent  # pydantic-ai's agent machinery loads only for a chat
    from ..memory import Memory
    from ..stores import SQLiteStore

    memory = Memory(SQLiteStore(args.db), observational_memory=memory_options(args, model))
    agent = Agent(id="obsmem-chat", instructions=args.instructions, model=model, memory=memory)
    ref = {"resource": args.resource, "thread": args.thread}
    print(
        f"obsmem chat: thread {args.thread!r} in {args.db}, model {model}. /help for commands.",
        file=out,
    )
    loop = asyncio.get_running_loop()
    try:
        while True:
            out.write("you> ")
            out.flush()
            line = await loop.run_in_executor(None, sys.stdin.readline)
            if not line:
                break
            text = line.strip()
            if not text:
                continue
            if text.startswith("/"):
                if not await _command(text, memory, args, out):
                    break
                continue
            result = await agent.generate(text, memory=ref)
            print(f"agent> {result.text}", file=out)
            await _status(memory, args, out)
    finally:
        await memory.aclose()
    return 0


async def _status(memory: Memory, args: argparse.Namespace, out: TextIO) -> None:
    assert memory.om is not None
    status = await memory.om.status(args.thread, args.resource)
    print(
        f"  [messages {status.message_tokens:,}/{status.message_threshold:,} · "
        f"log {status.observation_tokens:,}/{status.observation_threshold:,} · "
        f"{status.buffered_chunks} buffered · generation {status.generation}]",
        file=out,
    )


async def _command(text: str, memory: Memory, args: argparse.Namespace, out: TextIO) -> bool:
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
