"""Memory on a store with only the core: turns and observation cycles run, and a feature that
needs a capability the store lacks is an error naming the capability and the methods to
implement, never an AttributeError."""

from __future__ import annotations

from typing import Any

import pytest

from obsmem import Memory, Message
from obsmem.errors import ConfigError, StoreError
from obsmem.testing import scripted_observer

from .minimal_store import CoreOnlyStore

REF = {"resource": "r1", "thread": "t1"}


def _options(**extra: Any) -> dict[str, Any]:
    return {
        "observation": {
            "model": scripted_observer(words=8),
            "messageTokens": 200,
            "bufferTokens": False,
        },
        **extra,
    }


async def _talk(memory: Memory) -> None:
    for i in range(4):
        text = f"the quokka note {i}. " * 12
        await memory.context(REF, [Message.user(text, id=f"m{i}")], actor_model=None)
    await memory.settle()


async def test_turns_and_observation_run_on_the_core_alone() -> None:
    memory = Memory(CoreOnlyStore(), observational_memory=_options())
    try:
        await _talk(memory)
        history = await memory.om.history("t1", "r1")  # type: ignore[union-attr]
        assert "quokka" in history[0].observations
        assert len(await memory.messages("t1")) == 4
    finally:
        await memory.aclose()


async def test_each_missing_capability_is_named_with_the_methods_to_write() -> None:
    memory = Memory(CoreOnlyStore())
    try:
        await memory.context(REF, [Message.user("hello", id="m1")], actor_model=None)
        cases = [
            (
                "memory.delete_thread",
                "ErasableStore",
                "delete_thread",
                lambda: memory.delete_thread(REF),
            ),
            (
                "memory.delete_resource",
                "ErasableStore",
                "delete_resource",
                lambda: memory.delete_resource("r1"),
            ),
            ("memory.cycles", "LedgerStore", "list_cycles", lambda: memory.cycles(REF)),
            (
                "memory.cycle_detail",
                "LedgerStore",
                "cycle_detail",
                lambda: memory.cycle_detail("c1"),
            ),
            ("import", "TransferStore", "write_import", lambda: memory.import_([])),
        ]
        for use, capability, method, call in cases:
            with pytest.raises(StoreError, match=f"{use} needs a store with {capability}") as info:
                await call()
            assert method in str(info.value)
            assert "docs/writing-a-store.md" in str(info.value)
        with pytest.raises(StoreError, match="export needs a store with TransferStore"):
            [r async for r in memory.export(all=True)]
        assert [m.text for m in await memory.messages("t1")] == ["hello"]  # nothing was lost
    finally:
        await memory.aclose()


def test_recall_on_a_store_without_groups_is_refused_when_memory_is_made() -> None:
    with pytest.raises(ConfigError, match=r"list_observation_groups.*SearchableStore"):
        Memory(CoreOnlyStore(), observational_memory=_options(retrieval=True))


def test_a_store_without_the_core_is_refused_naming_what_it_lacks() -> None:
    class Half:
        async def load(self, request: object) -> None: ...

    with pytest.raises(ConfigError, match=r"a store needs aclose, clear, commit.*\(CoreStore\)"):
        Memory(Half())  # type: ignore[arg-type]
