"""The README's first command runs examples/first_steps.py; it must keep working."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "first_steps.py"


def test_first_steps_runs_offline_and_is_repeatable(tmp_path: Path) -> None:
    first = subprocess.run(
        [sys.executable, str(EXAMPLE)], cwd=tmp_path, capture_output=True, text=True
    )
    assert first.returncode == 0, first.stderr
    assert "stored 7 messages" in first.stdout
    assert "activate at 30000, keep ~6000 raw, block after 36000; reflect at 40000" in first.stdout
    assert "observation.buffer_tokens" in first.stdout
    assert (tmp_path / "obsmem.db").exists()
    again = subprocess.run(
        [sys.executable, str(EXAMPLE)], cwd=tmp_path, capture_output=True, text=True
    )
    assert again.returncode == 0, again.stderr
    assert "already holds 7 messages" in again.stdout
    inspect = subprocess.run(
        [sys.executable, "-m", "obsmem.cli", "inspect", "--thread", "first-steps"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert inspect.returncode == 0, inspect.stderr
    assert "#7 assistant: Hall A, Loft B and Garden C are free on Dec 11." in inspect.stdout
