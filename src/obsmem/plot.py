"""The context-size sawtooth as a PNG (needs ``pip install "obsmem[cli]"`` for matplotlib)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .errors import MissingExtraError
from .replay import ReplayReport

__all__ = ["can_plot", "plot_sawtooth"]


def can_plot() -> None:
    """Raise MissingExtraError (with the install line) when matplotlib is not installed."""
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:
        raise MissingExtraError("drawing the context plot", "cli", package="matplotlib")


def plot_sawtooth(report: ReplayReport, path: str | Path, *, title: str = "") -> Path:
    """Draw raw-message tokens, log tokens and their sum per turn, with the thresholds, what
    memory did at each turn (observations, activations, reflections, failed cycles) and the
    turns whose context left messages out; write it as a PNG."""
    plt = _pyplot()
    fig = sawtooth_figure(report, title=title)
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)
    return out


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise MissingExtraError("drawing the context plot", "cli", package="matplotlib") from exc
    return plt


def sawtooth_figure(report: ReplayReport, *, title: str = "") -> Any:
    """The sawtooth as a matplotlib figure (see :func:`plot_sawtooth`)."""
    plt = _pyplot()
    turns = [p.turn for p in report.points]
    raw = [p.raw_tokens for p in report.points]
    log = [p.log_tokens for p in report.points]
    total = [p.context_tokens for p in report.points]
    cumulative: list[int] = []
    running = 0
    per_turn = report.conversation_tokens / max(1, len(turns))
    for _ in turns:
        running += int(per_turn)
        cumulative.append(running)

    fig: Any
    ax: Any
    fig, ax = plt.subplots(figsize=(10, 5.5), dpi=110)
    ax.plot(turns, cumulative, color="#bbbbbb", linestyle=":", label="full history (no memory)")
    ax.plot(turns, total, color="#1f4e79", linewidth=2.2, label="context sent (with memory)")
    ax.plot(turns, raw, color="#2e86de", linewidth=1.2, label="raw messages")
    ax.plot(turns, log, color="#e67e22", linewidth=1.2, label="observation log")
    lines = [
        ("message_tokens", "#2e86de", "--", "observe at"),
        ("block_after", "#2e86de", ":", "block after"),
        ("observation_tokens", "#e67e22", "--", "reflect at"),
    ]
    for key, color, style, label in lines:
        value = report.thresholds.get(key)
        if value:
            ax.axhline(value, color=color, linestyle=style, linewidth=0.9, alpha=0.8)
            ax.annotate(
                f"{label} {value:,}",
                (turns[0] if turns else 0, value),
                color=color,
                fontsize=8,
                xytext=(2, 2),
                textcoords="offset points",
            )
    _mark_memory(ax, report)
    peak = max([*total, 1])
    ax.set_ylim(0, peak * 1.6)
    ax.set_xlabel("turn")
    ax.set_ylabel("tokens")
    heading = title or "Context size per turn with observational memory"
    if not report.healthy:
        heading += "\n" + _failure_heading(report.status[2] if len(report.status) > 2 else "")
    ax.set_title(heading, fontsize=10 if not report.healthy else None)
    ax.legend(loc="upper left", fontsize=8)
    ax.grid(alpha=0.25)
    fig.tight_layout()
    return fig


_MARKERS = {
    "observed": ("^", "#27ae60", "observation"),
    "activated": ("o", "#16a085", "activation"),
    "reflected": ("s", "#8e44ad", "reflection"),
    "failed": ("X", "#c0392b", "failed cycle"),
}


def _mark_memory(ax: Any, report: ReplayReport) -> None:
    """Mark what memory did at each turn, and shade the turns whose context left raw messages
    out (memory behind or failing): a drop that is only messages left out never looks like
    memory working."""
    for mark, (shape, color, label) in _MARKERS.items():
        points = [p for p in report.points if mark in p.marks]
        if points:
            ax.scatter(
                [p.turn for p in points],
                [p.context_tokens for p in points],
                marker=shape,
                color=color,
                s=46 if mark == "failed" else 30,
                zorder=5,
                label=label,
            )
    left = [p for p in report.points if p.left_out]
    if left:
        ax.bar(
            [p.turn for p in left],
            [p.context_tokens for p in left],
            width=1.0,
            color="#c0392b",
            alpha=0.12,
            label=f"messages left out (up to {max(p.left_out for p in left)})",
            zorder=1,
        )


def _failure_heading(line: str, *, width: int = 110, lines: int = 2) -> str:
    """The failure under the title: at most ``lines`` lines of ``width`` characters, cut at a
    word with an ellipsis when longer (the summary and ``inspect`` have all of it)."""
    import textwrap

    wrapped = textwrap.wrap(f"memory is failing: {line}", width)
    if len(wrapped) > lines:
        last = textwrap.wrap(wrapped[lines - 1], width - 2)[0]
        wrapped = [*wrapped[: lines - 1], f"{last} …"]
    return "\n".join(wrapped)
