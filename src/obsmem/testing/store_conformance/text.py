"""The core contract: text that UTF-8 or SQL text columns cannot carry as is (NUL bytes, lone
surrogates, NaN in metadata) is stored and read back exactly, and the thread goes on working."""

from __future__ import annotations

import math

from obsmem.messages import Message, TextPart, ToolCallPart, ToolResultPart
from obsmem.snapshot import Subject
from obsmem.stores import CoreStore, LoadRequest, ThreadPatch

from .kit import append

AWKWARD = ["nul \x00 inside", "lone \ud800 surrogate", "low \udfff too", "mixed 中文 \x00 \udbff"]


class TextContract:
    """Awkward text round-trips exactly."""

    async def test_awkward_text_round_trips_exactly(self, store: CoreStore) -> None:
        await store.create_thread("t-text", "r-text")
        messages = [
            Message(
                role="user",
                parts=(TextPart(text=text),),
                metadata={"note": text, "score": math.nan, "inf": math.inf},
            )
            for text in AWKWARD
        ]
        call = ToolCallPart(tool_name="f", args={"q": "\x00\ud800"}, tool_call_id="c\x00")
        result = ToolResultPart(tool_name="f", tool_call_id="c\x00", content={"v": "\udc00"})
        messages += [
            Message(role="assistant", parts=(call,)),
            Message(role="tool", parts=(result,)),
        ]
        await append(store, "t-text", messages)
        back = await store.list_messages("t-text")
        assert [m.parts for m in back] == [m.parts for m in messages]
        for sent, got in zip(messages[: len(AWKWARD)], back, strict=False):
            assert got.metadata["note"] == sent.metadata["note"]
            assert math.isnan(got.metadata["score"])
            assert got.metadata["inf"] == math.inf
        # The thread still takes more.
        await append(store, "t-text", [Message.user("after")])
        assert (await store.list_messages("t-text"))[-1].text == "after"

    async def test_awkward_titles_and_metadata_round_trip(self, store: CoreStore) -> None:
        """A title or metadata value with NUL, a lone surrogate or NaN (from an Observer's answer or
        a caller) never breaks the thread: metadata is read back exactly, a title (display text)
        with U+FFFD in their place."""

        meta = {"note": "a\x00b\ud800", "score": math.nan}
        await store.create_thread("t-meta", "r-meta", title="t\x00itle \udc00", metadata=meta)
        thread = await store.get_thread("t-meta")
        assert thread is not None
        assert thread.title == "t\ufffditle \ufffd"  # a title is display text
        assert thread.metadata["note"] == "a\x00b\ud800"
        assert math.isnan(thread.metadata["score"])
        patch = ThreadPatch(
            thread_id="t-meta", set=((("om:x",), "v\x00\udfff"),), suggested_title="new\x00 title"
        )
        subject = Subject(scope="thread", thread_id="t-meta", resource_id="r-meta")
        await store.load(LoadRequest(subject=subject, patches=[patch]))
        thread = await store.get_thread("t-meta")
        assert thread is not None
        assert thread.metadata["om:x"] == "v\x00\udfff"
        assert thread.title == "new\ufffd title"
        await append(store, "t-meta", [Message.user("still works")])
        assert (await store.list_messages("t-meta"))[-1].text == "still works"
