"""The inspector's pure pieces: the generation diff, the sawtooth's replay of stored data, the
part views and the log's recall ranges; and the command as it runs (``obsmem ui``)."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx

from obsmem.messages import Message, ToolCallPart
from obsmem.records import CycleRecord, MessageRange, ObservationGroup, OMRecord
from obsmem.ui.chart import chart_data, sawtooth_svg
from obsmem.ui.diff import diff_logs, generation_diffs
from obsmem.ui.render import CUT_AT, group_links, log_blocks, message_href, part_view

from .conftest import Built

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)


def test_the_diff_names_kept_merged_dropped_and_added_lines() -> None:
    before = "Date: Jan 5\n* a\n* b\n* c\n* d\n[recall range x:y]\n* e"
    after = "Date: Jan 5\n* a\n* b and c\n* e\n* f"
    kinds = [(line.kind, line.text) for line in diff_logs(before, after)]
    assert ("kept", "Date: Jan 5") in kinds
    assert ("kept", "* a") in kinds
    assert ("merged", "* b") in kinds
    assert ("merged-into", "* b and c") in kinds
    assert ("added", "* f") in kinds
    assert all("recall range" not in text for _, text in kinds)
    assert [line.kind for line in diff_logs("* a\n* b", "* a")] == ["kept", "dropped"]


def test_a_revision_by_hand_shows_as_a_diff_of_its_own() -> None:
    def generation(n: int, origin: str, log: str) -> OMRecord:
        return OMRecord(
            id=f"om-{n}",
            key="thread:t",
            scope="thread",
            thread_id="t",
            resource_id="t",
            generation=n,
            origin=origin,  # type: ignore[arg-type]
            observations=log,
            created_at=T0 + timedelta(minutes=n),
            updated_at=T0 + timedelta(minutes=n),
        )

    history = [
        generation(1, "revision", "* likes green\n* lives in Porto"),
        generation(0, "initial", "* likes blue\n* lives in Porto"),
    ]
    [diff] = generation_diffs(history)
    assert (diff.origin, diff.before, diff.after) == ("revision", 0, 1)
    assert [(line.kind, line.text) for line in diff.lines] == [
        ("merged", "* likes blue"),
        ("merged-into", "* likes green"),
        ("kept", "* lives in Porto"),
    ]


def _cycle(n: int, kind: str, at: int, last: int | None, outcome: str = "committed") -> CycleRecord:
    ranges = () if last is None else (MessageRange(thread_id="t", first_seq=1, last_seq=last),)
    return CycleRecord(
        cycle_id=f"c{n}",
        key="thread:t",
        resource_id="r",
        thread_ids=("t",),
        kind=kind,  # type: ignore[arg-type]
        outcome=outcome,  # type: ignore[arg-type]
        error="boom" if outcome == "failed" else None,
        started_at=T0 + timedelta(minutes=at),
        duration_ms=1.0,
        ranges=ranges,
    )


def test_the_chart_replays_the_cursor_and_the_log() -> None:
    messages = [
        Message.user(
            "word " * 100,
            thread_id="t",
            seq=n,
            created_at=T0 + timedelta(minutes=n) - timedelta(seconds=1),
        )
        for n in range(1, 11)
    ]
    group = ObservationGroup(
        id="g1",
        key="thread:t",
        resource_id="r",
        thread_id="t",
        cycle_id="c1",
        start_id=messages[0].id,
        end_id=messages[3].id,
        observations="* observed " * 5,
        ranges=(MessageRange(thread_id="t", first_seq=1, last_seq=4),),
        created_at=T0,
    )
    cycles = [_cycle(1, "observation", 5, 4), _cycle(2, "reflection", 7, None),
              _cycle(3, "observation", 9, None, "failed")]  # fmt: skip
    data = chart_data(
        messages,
        cycles,
        [group],
        thread_id="t",
        tokens=lambda m: 100,
        count_text=lambda text: len(text.split()),
        message_tokens=450,
        observation_tokens=20,
    )
    raw = {p.seq: p.raw for p in data.points}
    log = {p.seq: p.log for p in data.points}
    assert raw[4] == 400  # before the observation
    assert raw[5] == 100  # messages 1-4 observed (the cycle ran in message 5's turn)
    assert log[5] == 10  # the group's tokens went into the log
    assert log[7] == 5  # the reflection kept no group: half the log
    assert [(m.kind, m.seq) for m in data.markers] == [
        ("observation", 5),
        ("reflection", 7),
        ("failure", 9),
    ]
    svg = sawtooth_svg(data)
    assert svg.startswith("<svg")
    assert svg.count('class="marker ') == 3
    assert "boom" in svg


def test_parts_and_recall_ranges() -> None:
    call = part_view(ToolCallPart(tool_call_id="c", tool_name="search", args={"q": "<b>"}))
    assert call.label == "tool call search"
    assert '"q": "<b>"' in call.text  # the template escapes it
    huge = part_view(Message.user("x" * (CUT_AT + 10)).parts[0])
    assert huge.cut
    assert len(huge.head) == CUT_AT
    assert message_href("t/1", 150) == "/thread?id=t%2F1&page=2#m-150"
    group = ObservationGroup(
        id="g1", key="thread:t", resource_id="r", thread_id="t", cycle_id="c", start_id="m1",
        end_id="m9", observations="* one", created_at=T0,
        ranges=(MessageRange(thread_id="t", first_seq=1, last_seq=9),),
    )  # fmt: skip
    links = group_links([group], "t")
    blocks = log_blocks(
        "Date: Jan 5\n[recall range m1:m9]\n* one\n[recall range q:r]\n* two", links
    )
    assert [b.text for b in blocks] == ["Date: Jan 5", "* one", "* two"]
    assert blocks[1].group is links[0]
    assert blocks[2].group is None
    assert links[0].href == "/thread?id=t&page=1#m-1"


def test_the_command_serves_until_stopped(built_db: Built, tmp_path: Path) -> None:
    """``obsmem ui --port 0`` prints its URL once it listens, and serves the pages."""
    command = [sys.executable, "-m", "obsmem", "ui", "--db", str(built_db.path), "--port", "0"]
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as proc:
        try:
            assert proc.stdout is not None
            assert proc.stderr is not None
            line = proc.stdout.readline()  # returns once the server listens (or it exited)
            assert line.startswith("obsmem ui: http://127.0.0.1:"), line or proc.stderr.read()
            response = httpx.get(line.split()[2], timeout=30)
            assert response.status_code == 200
            assert "t-main" in response.text
        finally:
            proc.terminate()
            proc.wait(timeout=30)
