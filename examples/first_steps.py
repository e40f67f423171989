"""First steps with obsmem's foundation: store a conversation, count its tokens, check options.

Runs offline with no API key and needs no extra: ``pip install obsmem`` (or, in a checkout,
run it with the project's environment: ``.venv/bin/python examples/first_steps.py``). Writes
./obsmem.db (the embedded default store); look at it afterwards with `obsmem inspect`.
"""

from __future__ import annotations

import asyncio
import sys

try:
    from obsmem import ConfigError, resolve_options
    from obsmem.convert import from_openai_chat
    from obsmem.stores import SQLiteStore
    from obsmem.tokens import HeuristicEstimator
except ImportError as exc:
    print(
        f"This example needs obsmem ({exc}): pip install obsmem, or run it with the "
        "environment obsmem is installed in (in a checkout: .venv/bin/python "
        "examples/first_steps.py)",
        file=sys.stderr,
    )
    raise SystemExit(2) from None

CONVERSATION = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "Remember that my favorite color is blue."},
    {"role": "assistant", "content": "Got it: your favorite color is blue."},
    {"role": "user", "content": "Which venues are free on Dec 11?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "find_venues", "arguments": '{"date": "2025-12-11"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": '["Hall A", "Loft B", "Garden C"]'},
    {"role": "assistant", "content": "Hall A, Loft B and Garden C are free on Dec 11."},
]


async def main() -> None:
    store = SQLiteStore("obsmem.db")
    try:
        thread = await store.create_thread("first-steps", "user-123", title="First steps")
        if thread.message_count == 0:
            stored = await store.append_messages("first-steps", from_openai_chat(CONVERSATION))
            print(f"stored {len(stored)} messages in obsmem.db (thread 'first-steps')")
        else:
            stored = await store.list_messages("first-steps")
            print(f"thread 'first-steps' already holds {len(stored)} messages")

        estimator = HeuristicEstimator("openai/gpt-6.1-terra")
        for message in stored:
            print(f"  #{message.seq} {message.role:<9} ~{estimator.count_message(message)} tokens")
        print(f"whole conversation: ~{estimator.count_messages(stored)} tokens")

        options = resolve_options(True)
        assert options is not None
        obs, refl = options.observation, options.reflection
        print(
            f"default cycle: buffer every {obs.buffer_tokens} tokens, activate at "
            f"{obs.message_tokens}, keep ~{obs.retention_floor} raw, block after "
            f"{obs.block_after}; reflect at {refl.observation_tokens}"
        )
        try:
            resolve_options({"observation": {"messageTokens": 30_000, "bufferTokens": 40_000}})
        except ConfigError as err:
            print(f"a bad option is caught early: {err}")
    finally:
        await store.aclose()
    print("next: obsmem inspect --thread first-steps")


if __name__ == "__main__":
    asyncio.run(main())
