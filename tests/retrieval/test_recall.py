"""The recall tool's message and thread modes, including an adversarial suite: nothing from
another resource (or, in thread scope, another thread) is ever returned."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from obsmem import Memory
from obsmem.messages import Message, TextPart, ToolCallPart, ToolResultPart
from obsmem.recall import RecallBoundary, recall
from obsmem.stores import InMemoryStore, Store
from obsmem.testing import scripted_observer, scripted_reflector

T0 = datetime(2025, 12, 1, 9, 0, tzinfo=UTC)
SECRET = "the launch code is 0000"


async def _seed(store: Store) -> None:
    await store.create_thread("t1", "alice")
    await store.create_thread("t2", "alice")
    await store.create_thread("evil", "mallory")
    messages = [
        Message(
            role="user" if i % 2 == 0 else "assistant",
            parts=(TextPart(text=f"alice message {i} " + "detail " * (150 if i == 3 else 2)),),
            id=f"a{i}",
            created_at=T0 + timedelta(minutes=i),
        )
        for i in range(1, 31)
    ]
    await store.append_messages("t1", messages)
    await store.append_messages("t2", [Message.user("other thread of alice", id="b1")])
    await store.append_messages("evil", [Message.user(SECRET, id="m1")])
    big = "log line\n" * 5_000
    await store.append_messages(
        "t1",
        [
            Message(
                role="assistant",
                parts=(ToolCallPart(tool_call_id="c1", tool_name="fetch_logs", args={}),),
                id="call",
                created_at=T0 + timedelta(hours=1),
            ),
            Message(
                role="tool",
                parts=(ToolResultPart(tool_call_id="c1", tool_name="fetch_logs", content=big),),
                id="result",
                created_at=T0 + timedelta(hours=1),
            ),
        ],
    )


ALICE = RecallBoundary(resource_id="alice", thread_id="t1", scope="resource")
ALICE_THREAD_ONLY = RecallBoundary(resource_id="alice", thread_id="t1", scope="thread")


async def test_paging_forward_and_back_from_a_cursor(store: Store) -> None:
    await _seed(store)
    first = await recall(store, ALICE)  # no cursor: from the start
    assert "[a1]" in first
    assert "[a20]" in first
    assert "[a21]" not in first  # limit 20
    forward = await recall(store, ALICE, cursor="a20", page=1, limit=5)  # starts at the cursor
    assert "[a19]" not in forward
    assert "[a20]" in forward
    assert "[a24]" in forward
    assert "[a25]" not in forward
    assert 'next: cursor="a20" page=2' in forward
    second = await recall(store, ALICE, cursor="a20", page=2, limit=5)
    assert "[a25]" in second
    assert "[a29]" in second
    assert "[a24]" not in second
    back = await recall(store, ALICE, cursor="a10", page=-1, limit=3)
    assert [x for x in ("[a7]", "[a8]", "[a9]") if x in back] == ["[a7]", "[a8]", "[a9]"]
    assert "[a10]" not in back
    end = await recall(store, ALICE, page=-1, limit=2)
    assert "[result]" in end


async def test_low_detail_truncates_with_a_hint_that_leads_to_the_full_text(store: Store) -> None:
    await _seed(store)
    low = await recall(store, ALICE, cursor="a3", page=1, limit=1)
    assert 'more characters: recall cursor="a3" part_index=0 char_offset=' in low
    tool = await recall(store, ALICE, cursor="a30", page=1, limit=3)
    assert 'cursor="result" part_index=0 char_offset=' in tool
    # Follow the hints: the whole tool result comes back in chunks.
    collected = ""
    offset = 0
    for _ in range(50):
        chunk = await recall(store, ALICE, cursor="result", part_index=0, char_offset=offset)
        body = chunk.split("\n", 1)[1].rsplit("\n[characters", 1)[0]
        collected += body
        if "the end of this part" in chunk:
            break
        offset = int(chunk.rsplit("char_offset=", 1)[1].rstrip("]"))
    assert collected == "tool result fetch_logs: " + "log line\n" * 5_000


async def test_threads_mode_lists_the_resource_or_only_the_current_thread(store: Store) -> None:
    await _seed(store)
    listed = await recall(store, ALICE, mode="threads")
    assert "id t1" in listed
    assert "id t2" in listed
    assert "evil" not in listed
    only = await recall(store, ALICE_THREAD_ONLY, mode="threads")
    assert "id t1" in only
    assert "id t2" not in only


@pytest.mark.parametrize(
    "attack",
    [
        {"cursor": "m1"},  # another resource's message id
        {"cursor": "m1", "page": -1},
        {"cursor": "m1", "part_index": 0},
        {"cursor": "a1:m1"},  # a range spanning resources
        {"cursor": "m1:a1"},
        {"thread_id": "evil"},  # another resource's thread
        {"thread_id": "evil", "page": -1},
        {"cursor": "'; DROP TABLE messages; --"},
        {"cursor": "a1", "thread_id": "evil"},
        {"thread_id": "../evil"},
        {"mode": "threads", "thread_id": "evil"},
        {"cursor": "m1", "limit": 1000, "detail": "high"},
        {"query": "launch code", "mode": "messages", "thread_id": "evil"},
    ],
)
async def test_nothing_from_another_resource_is_ever_returned(store: Store, attack: dict) -> None:  # type: ignore[type-arg]
    await _seed(store)
    for boundary in (ALICE, ALICE_THREAD_ONLY):
        answer = await recall(store, boundary, **attack)
        assert SECRET not in answer
        assert "mallory" not in answer
    assert len(await store.list_messages("evil")) == 1  # and nothing was changed


async def test_thread_scope_keeps_to_the_current_thread(store: Store) -> None:
    await _seed(store)
    refused = await recall(store, ALICE_THREAD_ONLY, thread_id="t2")
    assert "Only this conversation" in refused
    assert "other thread of alice" not in refused
    cursor_elsewhere = await recall(store, ALICE_THREAD_ONLY, cursor="b1")
    assert "No message 'b1'" in cursor_elsewhere
    allowed = await recall(store, ALICE, thread_id="t2")
    assert "other thread of alice" in allowed


async def test_every_mode_and_detail_stays_within_the_budget(store: Store) -> None:
    """A 240 KB tool result and a 5 MB paste: no answer is ever over its budget, and paging by
    part and character offset reads all of it."""
    from obsmem.tokens import HeuristicEstimator

    await store.create_thread("big", "alice", title="T" * 10_000)
    huge_result = ToolResultPart(
        tool_call_id="c1", tool_name="snapshot", content={"dom": "<div>x</div>" * 20_000}
    )
    paste = "lorem ipsum dolor sit amet " * 200_000
    await store.append_messages(
        "big",
        [
            Message(
                role="assistant",
                parts=(ToolCallPart(tool_call_id="c1", tool_name="snapshot"),),
                id="call",
            ),
            Message(role="tool", parts=(huge_result,), id="snap"),
            Message.user(paste, id="paste"),
        ],
    )
    boundary = RecallBoundary(resource_id="alice", thread_id="big", scope="resource")
    estimator = HeuristicEstimator()
    requests = [
        {"mode": "threads"},
        {"cursor": "call", "page": 1, "detail": "high"},
        {"cursor": "call", "page": 1, "detail": "low"},
        {"cursor": "paste", "page": -1, "detail": "high", "limit": 20},
        {"cursor": "snap", "page": 1, "detail": "high", "limit": 20},
        {"cursor": "snap", "part_index": 0},
        {"cursor": "paste", "part_index": 0, "char_offset": 2_500_000},
        {"page": -1, "detail": "high"},
    ]
    for budget in (2_000, 500):
        for request in requests:
            answer = await recall(store, boundary, None, budget, **request)
            assert estimator.count_text(answer) <= budget, (budget, request)
    # Following the hints reads a whole huge part, one budget at a time.
    text = await recall(store, boundary, cursor="snap", page=1, detail="high")
    assert 'cursor="snap" part_index=0 char_offset=' in text
    collected, offset = "", 0
    for _ in range(200):
        chunk = await recall(store, boundary, cursor="snap", part_index=0, char_offset=offset)
        collected += chunk.split("\n", 1)[1].rsplit("\n[characters", 1)[0]
        if "the end of this part" in chunk:
            break
        offset = int(chunk.rsplit("char_offset=", 1)[1].rstrip("]"))
    assert collected.endswith("<div>x</div>" * 100 + '"}')
    assert len(collected) == len('tool result snapshot: {"dom": "' + "<div>x</div>" * 20_000 + '"}')


async def test_an_unknown_parameter_is_answered_with_what_to_send(store: Store) -> None:
    """The parameters are RecallRequest's: one it does not have is answered in words, like any
    other bad argument, rather than raised."""
    await _seed(store)
    answer = await recall(store, ALICE, mode="messages", pages=2)
    assert answer.startswith("recall was not run: pages:"), answer
    assert "Send a JSON object" in answer


async def test_the_recall_function_takes_the_tools_arguments_only() -> None:
    """A model's ``budget`` or ``search`` is one more unknown parameter, never recall's own
    setting (before, ``budget=5`` cut every answer and ``search="x"`` raised); positional
    arguments are the tool's parameters in order, as the plain function's always were."""
    memory = Memory(
        InMemoryStore(),
        observational_memory={
            "observation": {"model": scripted_observer()},
            "reflection": {"model": scripted_reflector()},
            "retrieval": True,
        },
    )
    function = memory.recall_function({"resource": "r", "thread": "t"})
    for sent in ({"budget": 5}, {"search": "x"}, {"mode": "threads", "budget": 7}):
        answer = await function(**sent)
        assert answer.startswith("recall was not run"), (sent, answer)
        assert "budget" in answer or "search" in answer
    # None stands for "not given", as for every parameter: the answer is the usual one.
    assert await function(mode="threads", budget=None) == "No conversations stored yet."
    assert await function("threads") == await function(mode="threads")
    assert (await function(*["threads"] * 12)).startswith("recall was not run")
    await memory.aclose()
