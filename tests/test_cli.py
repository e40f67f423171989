from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

from obsmem.cli import main
from obsmem.messages import Message, ToolCallPart
from obsmem.stores import SQLiteStore


async def _populate(path: Path) -> None:
    store = SQLiteStore(path)
    await store.create_thread("t1", "user-1", title="Colors")
    await store.append_messages(
        "t1",
        [
            Message.user("My favorite color is blue."),
            Message(role="assistant", parts=(ToolCallPart(tool_call_id="c", tool_name="note"),)),
            Message.assistant("Noted: blue."),
        ],
    )
    record = await store.get_or_create_record(
        "thread:t1", scope="thread", thread_id="t1", resource_id="user-1"
    )
    await store.commit_observation(
        record.id,
        record.version,
        observations="Date: Dec 4, 2025\n* 🔴 (14:30) User's favorite color is blue.",
        observation_tokens=14,
        cursor={"t1": 2},
    )
    await store.aclose()


async def test_inspect_lists_threads_and_memory(tmp_path: Path) -> None:
    db = tmp_path / "obsmem.db"
    await _populate(db)
    out = io.StringIO()
    assert await _run_main(["inspect", "--db", str(db)], out) == 0
    text = out.getvalue()
    assert "resource user-1" in text
    assert 'thread t1  "Colors"  3 messages' in text
    assert "generation 0, log 14 tokens, observed through message 2, 0 buffered chunks" in text


async def test_inspect_thread_shows_log_and_messages(tmp_path: Path) -> None:
    db = tmp_path / "obsmem.db"
    await _populate(db)
    out = io.StringIO()
    assert await _run_main(["inspect", "--db", str(db), "--thread", "t1"], out) == 0
    text = out.getvalue()
    assert "* 🔴 (14:30) User's favorite color is blue." in text
    assert "#1 user: My favorite color is blue." in text
    assert "#2 assistant [tool-call]:" in text
    assert "latest 3 of 3 messages" in text


def test_inspect_without_a_database_says_what_to_do(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "obsmem.cli", "inspect", "--db", str(tmp_path / "none.db")],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2
    assert "No obsmem database at" in result.stderr
    assert not (tmp_path / "none.db").exists()


async def _run_main(argv: list[str], out: io.StringIO) -> int:
    # main() runs its own event loop; run it off this test's loop.
    import asyncio

    return await asyncio.to_thread(main, argv, out=out)
