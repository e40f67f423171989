"""Every ```python block of docs/langgraph.md runs offline as written and prints what the page
says it prints (```py blocks are illustrations that need a real model)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "langgraph.md"
BLOCKS = re.findall(r"```python\n(.*?)```", GUIDE.read_text(encoding="utf-8"), re.S)
PRINTS = [
    ["You are Ana.", "['user', 'assistant', 'user', 'assistant']"],
    [
        "data-om-status trip-1",
        "data-om-status trip-1",
        "['user', 'assistant', 'tool', 'assistant']",
    ],
]
"""What each block prints, line by line."""


def test_every_block_is_checked() -> None:
    assert len(BLOCKS) == len(PRINTS)


@pytest.mark.parametrize(("code", "prints"), list(zip(BLOCKS, PRINTS, strict=True)))
def test_the_guide_runs_as_written(code: str, prints: list[str], tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-W", "error", "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == prints
