"""Text that UTF-8 or SQL text columns cannot carry as is (NUL bytes, lone surrogates, NaN in
metadata) is stored and read back exactly, on every store, and the thread goes on working."""

from __future__ import annotations

import math

from obsmem.messages import Message, TextPart, ToolCallPart, ToolResultPart
from obsmem.stores import Store

AWKWARD = ["nul \x00 inside", "lone \ud800 surrogate", "low \udfff too", "mixed 中文 \x00 \udbff"]


async def test_awkward_text_round_trips_exactly(store: Store) -> None:
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
    await store.append_messages("t-text", messages)
    back = await store.list_messages("t-text")
    assert [m.parts for m in back] == [m.parts for m in messages]
    for sent, got in zip(messages[: len(AWKWARD)], back, strict=False):
        assert got.metadata["note"] == sent.metadata["note"]
        assert math.isnan(got.metadata["score"])
        assert got.metadata["inf"] == math.inf
    # The thread still takes more.
    await store.append_messages("t-text", [Message.user("after")])
    assert (await store.list_messages("t-text"))[-1].text == "after"
