"""A replay whose Observer fails shows it: the report's turns carry failed-cycle marks and the
messages left out, its summary says memory is failing and why, and the plot marks failed cycles
and left-out turns apart from observations. Once the Observer answers again, the same thread
reports healthy."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

from obsmem.cli import replaycmd
from obsmem.engine import ObservationalMemory
from obsmem.options import resolve_options
from obsmem.plot import sawtooth_figure
from obsmem.replay import load_conversation, replay
from obsmem.stores import SQLiteStore
from obsmem.testing import scripted_observer, scripted_reflector

DEMO = Path(__file__).resolve().parents[1] / "src" / "obsmem" / "data" / "demo_conversation.jsonl"


def _engine(path: Path, on: dict[str, bool]) -> ObservationalMemory:
    options = resolve_options(
        {
            "observation": {
                "model": scripted_observer(fault=lambda n: "error" if on["fail"] else None),
                "messageTokens": 3_000,
                "bufferTokens": False,
            },
            "reflection": {"model": scripted_reflector(), "observationTokens": 50_000},
        }
    )
    assert options is not None
    return ObservationalMemory(SQLiteStore(path), options)


def _labels(figure: Any) -> list[str]:
    [ax] = figure.axes
    return [text.get_text() for text in ax.get_legend().get_texts()]


async def test_a_failing_observer_is_marked_in_the_report_and_the_plot(tmp_path: Path) -> None:
    on = {"fail": True}
    messages = load_conversation(DEMO)
    om = _engine(tmp_path / "m.db", on)
    report = await replay(om, messages[:60], thread_id="t")
    await om.aclose()
    assert not report.healthy
    assert any("failing" in line for line in report.status)
    assert any("scripted model failure" in line for line in report.status)
    assert any("failed" in p.marks for p in report.points)
    assert any(p.left_out for p in report.points)
    assert not any("observed" in p.marks for p in report.points)
    labels = _labels(sawtooth_figure(report))
    assert "failed cycle" in labels
    assert any(label.startswith("messages left out") for label in labels)
    assert "observation" not in labels

    on["fail"] = False
    om = _engine(tmp_path / "m.db", on)
    report = await replay(om, messages[60:90], thread_id="t")
    await om.aclose()
    assert report.healthy, report.status
    assert any("observed" in p.marks for p in report.points)
    assert "observation" in _labels(sawtooth_figure(report))


async def test_the_summary_and_the_json_report_name_the_failure(tmp_path: Path) -> None:
    """What ``obsmem replay`` and ``obsmem demo`` print after the run, and their JSON report."""
    om = _engine(tmp_path / "m.db", {"fail": True})
    report = await replay(om, load_conversation(DEMO)[:60], thread_id="t")
    await om.aclose()
    out = io.StringIO()
    replaycmd._summary(report, out, thread="t", quiet=True)
    text = out.getvalue()
    assert "memory is not working as it should" in text
    assert f"memory cycles done, {len(report.failures)} failed (" in text
    assert "scripted model failure" in text
    assert "Fix:" in text
    data = json.loads(json.dumps(report.to_json(), default=str))
    assert data["healthy"] is False
    assert any("Observer" in line for line in data["status"])


def test_the_plots_failure_heading_is_cut_at_a_word_with_an_ellipsis() -> None:
    from obsmem.plot import _failure_heading  # pyright: ignore[reportPrivateUsage]

    short = _failure_heading("Observer (openai/m) failed once: HTTP 500.")
    assert short == "memory is failing: Observer (openai/m) failed once: HTTP 500."
    long = _failure_heading("Observer failed: " + " ".join(f"word{i}" for i in range(80)))
    first, second = long.split("\n")
    assert len(first) <= 110
    assert len(second) <= 110
    assert second.endswith(" …")
    # Cut between words, never inside one.
    assert all(
        w.startswith("word") or w in ("memory", "is", "failing:", "Observer", "failed:")
        for w in long.replace(" …", "").split()
    )
