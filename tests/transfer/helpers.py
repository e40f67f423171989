"""A store with memory in it (two threads of one resource, a log, groups, embeddings, working
memory, a tool call and an image), and what a next turn and recall give back from it."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from obsmem import Memory, Message
from obsmem.messages import ImagePart, TextPart, ToolCallPart, ToolResultPart, part_to_dict
from obsmem.stores import Store
from obsmem.testing import scripted_observer
from obsmem.transfer import write_export

ALICE = {"resource": "alice", "thread": "t1"}
OTHER = {"resource": "alice", "thread": "t2"}
PROBE_AT = datetime.now(UTC)


def options(scope: str = "resource") -> dict[str, Any]:
    return {
        "scope": scope,
        "retrieval": {"vector": True},
        "observation": {
            "model": scripted_observer(words=8),
            "messageTokens": 200,
            "bufferTokens": False,
        },
        "reflection": {"observationTokens": 50_000},
    }


def _tool_turn(thread: str) -> list[Message]:
    return [
        Message(
            role="assistant",
            parts=(
                TextPart(text="looking it up"),
                ToolCallPart(tool_call_id="c1", tool_name="weather", args={"city": "Oslo"}),
            ),
            id=f"{thread}-call",
        ),
        Message(
            role="tool",
            parts=(ToolResultPart(tool_call_id="c1", tool_name="weather", content="rain"),),
            id=f"{thread}-result",
        ),
        Message(
            role="user",
            parts=(
                TextPart(text="and this picture"),
                ImagePart(data=b"\x89PNG fake", media_type="image/png"),
            ),
            id=f"{thread}-image",
        ),
    ]


async def talk(memory: Memory, ref: dict[str, str], word: str, turns: int = 4) -> None:
    for i in range(turns):
        text = f"{word} {word} note {i}. " * 12
        new = [Message.user(text, id=f"{ref['thread']}-{i}")]
        if i == 1:
            new = _tool_turn(ref["thread"]) + new
        await memory.context(ref, new, actor_model=None)
    await memory.settle()


async def filled(store: Store) -> Memory:
    memory = Memory(store, observational_memory=options(), working_memory=True)
    await talk(memory, ALICE, "zanzibar")
    await talk(memory, OTHER, "harbor")
    await memory.update_working_memory(OTHER, "# User\nlikes quokkas")
    return memory


async def export_to(memory: Memory, path: Path, **scope: Any) -> int:
    from obsmem.transfer import open_private

    if not scope:
        scope = {"all": True}
    with open_private(str(path)) as out:
        return await write_export(memory.export(**scope), out)


def shown(messages: list[Message]) -> list[tuple[str, list[dict[str, Any]]]]:
    """What a context says: roles and parts, without the ids memory's own messages get anew
    each turn and the token counts a process caches on parts."""
    return [
        (m.role, [{k: v for k, v in part_to_dict(p).items() if k != "metadata"} for p in m.parts])
        for m in messages
    ]


def _groups_unnamed(text: str) -> str:
    """Recall's text without group ids (a cycle the probe turn runs names its group anew)."""
    return re.sub(r"group [0-9a-f]{16}", "group …", text)


_UPDATED = re.compile(r"updated \d{4}-\d\d-\d\d \d\d:\d\d")


async def next_turn(memory: Memory, ref: dict[str, str]) -> dict[str, Any]:
    """The context of a next turn and what recall finds, as comparable values."""
    recall = memory.recall_function(ref)
    context = await memory.context(
        ref,
        [Message.user("what did we say?", id=f"{ref['thread']}-probe", created_at=PROBE_AT)],
        actor_model=None,
    )
    return {
        "context": shown(context.messages),
        "search": _groups_unnamed(await recall(mode="search", query="zanzibar note")),
        "messages": await recall(mode="messages", cursor=f"{ref['thread']}-0"),
        # The probe just stored makes each thread "updated" now, on each store's own clock.
        "threads": _UPDATED.sub("updated (now)", await recall(mode="threads")),
    }
