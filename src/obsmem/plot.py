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
    """Draw raw-message tokens, log tokens and their sum per turn, with the thresholds."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise MissingExtraError("drawing the context plot", "cli", package="matplotlib") from exc
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
    peak = max([*total, 1])
    ax.set_ylim(0, peak * 1.6)
    ax.set_xlabel("turn")
    ax.set_ylabel("tokens")
    ax.set_title(title or "Context size per turn with observational memory")
    ax.legend(loc="upper left", fontsize=8)
    ax.grid(alpha=0.25)
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)
    return out
