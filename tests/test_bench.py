"""Smoke test of the benchmarks: each runs with --quick and prints its measured ratios.

Only that they run and report is checked here; the figures themselves are performance claims,
which live in bench/ and BENCHMARKS.md, never in timed assertions.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
RATIO = re.compile(r"^RATIO .+: (?:\d+\.\d\dx|n/a)", re.MULTILINE)
SCRIPTS = [
    "overhead",
    "blocking",
    "tokens_1m",
    "memory_cost",
    "estimator",
    "locomo",
    "startup",
    "proxy",
    "ui_scale",
    "shutdown",
    "proxy_large",
    "export",
    "workers",
]

pytestmark = pytest.mark.slow


def _run(script: str, *args: str) -> str:
    env = {**os.environ, "MEM0_TELEMETRY": "False"}
    result = subprocess.run(
        [sys.executable, str(BENCH / f"{script}.py"), "--quick", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, f"{script}.py failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout


@pytest.mark.parametrize("script", SCRIPTS)
def test_benchmark_runs_and_prints_ratios(script: str) -> None:
    with_mem0 = script == "memory_cost" and importlib.util.find_spec("mem0") is not None
    out = _run(script, *([] if with_mem0 or script != "memory_cost" else ["--no-mem0"]))
    if "SKIPPED" in out:
        pytest.skip(out.strip().splitlines()[-1])
    assert RATIO.search(out), f"{script}.py printed no RATIO line:\n{out}"
    if with_mem0:  # mem0 is optional ("bench" extra); when present it must be compared
        assert "RATIO mem0 (add per turn) / obsmem memory-side LLM input tokens" in out, out
