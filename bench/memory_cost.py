"""Memory-side model input tokens per conversation token: obsmem vs mem0.

Both libraries talk to the same loopback OpenAI-compatible server (``_common.CountingServer``),
which answers like a tiny deterministic model (Observer/Reflector lines for obsmem, mem0's JSON
memories, hashed bag-of-words embeddings) and counts every prompt token it is sent with tiktoken
o200k (or obsmem's heuristic when the ``tiktoken`` extra is missing). The conversation is one
LoCoMo conversation when ``../shared/data/locomo10`` exists next to the repository, else a
synthetic one.

obsmem: default options, replayed turn by turn, then ``observe()`` so every message has been
through the Observer. mem0: ``Memory.add`` per turn (user message + reply), with its OpenAI LLM
and embedder pointed at the server and a FAISS vector store in a temporary directory.

    python bench/memory_cost.py             # one LoCoMo conversation
    python bench/memory_cost.py --quick     # tiny sizes (smoke test)
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import tempfile
import time
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

from _common import CountingServer, Talk, Usage, header, locomo_files, ratio, table

from obsmem.engine import ObservationalMemory
from obsmem.messages import Message, TextPart
from obsmem.replay import load_conversation, replay, turns_of
from obsmem.stores import InMemoryStore


def text_of(message: Message) -> str:
    return "\n".join(p.text for p in message.parts if isinstance(p, TextPart))


async def run_obsmem(
    server: CountingServer, messages: Sequence[Message], options: dict[str, Any]
) -> float:
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    provider = OpenAIProvider(base_url=server.base_url, api_key="bench")
    observation = {"model": OpenAIChatModel("obsmem-observer", provider=provider)}
    reflection = {"model": OpenAIChatModel("obsmem-reflector", provider=provider)}
    observation.update(options.get("observation", {}))
    reflection.update(options.get("reflection", {}))
    om = ObservationalMemory(
        InMemoryStore(), {"observation": observation, "reflection": reflection}
    )
    failures: list[str] = []
    om.subscribe(
        lambda event: (
            failures.append(f"{event.type}: {getattr(event, 'error', '')}")
            if event.type.endswith("-failed")
            else None
        )
    )
    started = time.perf_counter()
    await replay(om, messages)
    await om.observe("replay", "replay-user")  # flush: every message goes through the Observer
    await om.settle()
    await om.aclose()
    if failures:  # a failed call costs tokens too, but measures nothing worth a figure
        raise SystemExit("obsmem's memory calls failed; no figure:\n" + "\n".join(failures))
    return time.perf_counter() - started


def sessions(
    messages: Sequence[Message], gap: timedelta = timedelta(hours=1)
) -> list[list[Message]]:
    """The messages split where more than ``gap`` passed between two of them."""
    out: list[list[Message]] = []
    for m in messages:
        if not out or m.created_at - out[-1][-1].created_at > gap:
            out.append([])
        out[-1].append(m)
    return out


def batches(messages: Sequence[Message], mode: str) -> list[list[Message]]:
    if mode == "session":
        return sessions(messages)
    return [[*inputs, *replies] for inputs, replies in turns_of(messages)]


def run_mem0(
    server: CountingServer, messages: Sequence[Message], tmp: Path, mode: str
) -> float | str:
    """Seconds taken, or why mem0 could not run here. ``mode``: one ``add`` per turn or per
    session."""
    os.environ.setdefault("MEM0_TELEMETRY", "False")
    try:
        from mem0 import Memory
    except ImportError:
        return 'mem0 is not installed (pip install "obsmem[bench]" or mem0ai faiss-cpu)'
    logging.getLogger("mem0").setLevel(logging.ERROR)
    dims = server.dims
    config = {
        "llm": {
            "provider": "openai",
            "config": {
                "model": f"mem0-{mode}-llm",
                "api_key": "bench",
                "openai_base_url": server.base_url,
                "temperature": 0,
            },
        },
        "embedder": {
            "provider": "openai",
            "config": {
                "model": f"mem0-{mode}-embedder",
                "api_key": "bench",
                "openai_base_url": server.base_url,
                "embedding_dims": dims,
            },
        },
        "vector_store": {
            "provider": "faiss",
            "config": {
                "collection_name": f"bench-{mode}",
                "path": str(tmp / f"faiss-{mode}"),
                "embedding_model_dims": dims,
            },
        },
        "history_db_path": str(tmp / f"mem0-{mode}-history.db"),
    }
    try:
        memory = Memory.from_config(config)
    except Exception as exc:  # an optional third-party stack: report, don't crash
        return f"mem0 could not be configured offline: {type(exc).__name__}: {exc}"
    started = time.perf_counter()
    for batch in batches(messages, mode):
        chat = [{"role": m.role, "content": text_of(m)} for m in batch]
        chat = [c for c in chat if c["role"] in ("user", "assistant") and c["content"]]
        if chat:
            memory.add(chat, user_id=f"bench-{mode}")
    return time.perf_counter() - started


def totals(server: CountingServer, prefix: str) -> Usage:
    out = Usage()
    for model, u in server.usage.items():
        if model.startswith(prefix):
            out.requests += u.requests
            out.prompt_tokens += u.prompt_tokens
            out.completion_tokens += u.completion_tokens
            out.embedding_requests += u.embedding_requests
            out.embedding_tokens += u.embedding_tokens
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--conversation", default=None, help="a LoCoMo file name, e.g. 26.json")
    parser.add_argument("--no-mem0", action="store_true", help="measure obsmem only")
    parser.add_argument("--quick", action="store_true", help="tiny sizes for the smoke test")
    args = parser.parse_args()

    options: dict[str, Any] = {}
    files = locomo_files()
    if args.quick:
        messages = Talk(seed=6, user_tokens=60, assistant_tokens=90).messages(16)
        source = "synthetic (quick)"
        options = {"observation": {"message_tokens": 1_000}}
    elif files:
        chosen = [f for f in files if f.name == args.conversation] if args.conversation else files
        if not chosen:
            parser.error(f"no LoCoMo conversation named {args.conversation}")
        messages = load_conversation(chosen[0])
        source = f"LoCoMo {chosen[0].name}"
    else:
        messages = Talk(seed=6).messages(150)
        source = "synthetic (no ../shared/data/locomo10 next to the repository)"

    with CountingServer() as server, tempfile.TemporaryDirectory(prefix="obsmem-bench-") as tmp:
        counter = server.counter
        conversation_tokens = sum(counter.text(text_of(m)) for m in messages)
        header(
            "memory-side model input tokens per conversation token",
            conversation=source,
            messages=len(messages),
            conversation_tokens=f"{conversation_tokens:,} ({counter.name})",
            obsmem_options=options or "defaults",
        )
        om_seconds = asyncio.run(run_obsmem(server, messages, options))
        mem0_results: dict[str, float | str] = {}
        if not args.no_mem0:
            for mode in ("turn", "session"):
                mem0_results[mode] = run_mem0(server, messages, Path(tmp), mode)

    om = totals(server, "obsmem-")
    rows: list[tuple[object, ...]] = [
        (
            "obsmem (defaults)",
            om.requests,
            f"{om.prompt_tokens:,}",
            f"{om.prompt_tokens / conversation_tokens:.2f}",
            f"{om.completion_tokens:,}",
            "-",
            f"{om_seconds:.1f}",
        )
    ]
    measured: dict[str, Usage] = {}
    for mode, result in mem0_results.items():
        if isinstance(result, str):
            continue
        m0 = measured[mode] = totals(server, f"mem0-{mode}-")
        rows.append(
            (
                f"mem0, one add per {mode}",
                m0.requests,
                f"{m0.prompt_tokens:,}",
                f"{m0.prompt_tokens / conversation_tokens:.2f}",
                f"{m0.completion_tokens:,}",
                f"{m0.embedding_tokens:,} in {m0.embedding_requests} requests",
                f"{result:.1f}",
            )
        )
    print()
    table(
        rows,
        [
            "library",
            "LLM requests",
            "LLM input tokens",
            "per conversation token",
            "LLM output tokens",
            "embedding input tokens",
            "seconds",
        ],
    )
    print()
    ratio(
        "obsmem memory-side input tokens / conversation token",
        om.prompt_tokens / conversation_tokens,
    )
    for mode, m0 in measured.items():
        ratio(
            f"mem0 (add per {mode}) memory-side input tokens / conversation token",
            m0.prompt_tokens / conversation_tokens,
        )
        ratio(
            f"mem0 (add per {mode}) / obsmem memory-side LLM input tokens",
            m0.prompt_tokens / om.prompt_tokens,
        )
    if args.no_mem0:
        print("MEM0 NOT MEASURED: skipped (--no-mem0)")
    for mode, result in mem0_results.items():
        if isinstance(result, str):
            print(f"MEM0 NOT MEASURED (add per {mode}): {result}")
    print("LangMem: not measured (see BENCHMARKS.md)")


if __name__ == "__main__":
    main()
