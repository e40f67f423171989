"""Start-up cost: ``obsmem --help`` and ``import obsmem`` against a bare ``python -c pass``.

``import obsmem`` loads no model library, provider SDK, numpy or matplotlib; the command line
imports what a command needs only when it runs. Each command is run ``--runs`` times in
alternation (a noisy neighbour slows all alike) and the medians are compared.

    python bench/startup.py            # 20 runs each
    python bench/startup.py --quick    # 3 runs each (smoke test)
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _common import header, ratio, table

HEAVY = ("pydantic_ai", "openai", "anthropic", "google", "numpy", "matplotlib", "genai_prices")
_SCRIPT = Path(sys.executable).with_name("obsmem")  # the installed command, beside python
COMMANDS = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "import obsmem": [sys.executable, "-c", "import obsmem"],
    "obsmem --help": (
        [str(_SCRIPT), "--help"] if _SCRIPT.exists() else [sys.executable, "-m", "obsmem", "--help"]
    ),
}


def _wall(command: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - started


def _loaded(code: str) -> list[str]:
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout
    names = {m.split(".")[0] for m in json.loads(out.strip().splitlines()[-1])}
    return sorted(n for n in names if n in HEAVY)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--quick", action="store_true", help="3 runs each (smoke test)")
    args = parser.parse_args()
    runs = 3 if args.quick else args.runs
    header("obsmem start-up time", runs=runs)
    for name, code in (("import obsmem", "import obsmem"), ("obsmem --help", _HELP)):
        print(f"# heavy modules loaded by {name}: {', '.join(_loaded(code)) or 'none'}")
    times: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for _ in range(runs):
        for name, command in COMMANDS.items():
            times[name].append(_wall(command))
    med = {name: statistics.median(t) * 1000 for name, t in times.items()}
    print()
    table([(name, f"{ms:.0f}") for name, ms in med.items()], ["command", "median ms"])
    print()
    ratio(
        "import obsmem / python -c pass (wall time)", med["import obsmem"] / med["python -c pass"]
    )
    ratio(
        "obsmem --help / python -c pass (wall time)", med["obsmem --help"] / med["python -c pass"]
    )


_HELP = (
    "import contextlib, io\nfrom obsmem.cli import main\n"
    "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
    "    main(['--help'])"
)

if __name__ == "__main__":
    main()
