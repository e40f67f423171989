"""Every ```python block in the README runs as written (```py blocks are illustrations that need
a real model)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)


def test_readme_opens_with_the_two_commands() -> None:
    bash = re.findall(r"```bash\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    assert bash[0].strip().endswith("obsmem demo")
    assert bash[1].strip() == Path(README.parent / ".ci" / "run").read_text().splitlines()[-1]


@pytest.mark.parametrize("code", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_readme_python_block_runs(code: str, tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
