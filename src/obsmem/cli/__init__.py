"""The ``obsmem`` command line: demo, replay, chat, inspect, doctor.

Exit codes: 0 done; 1 the work failed (a model or storage error, reported); 2 the command could
not start (bad arguments, a missing file, thread or model, with what to do about it).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import TextIO

from ..errors import ObsmemError
from . import bench, chat, doctor, inspect, replaycmd

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="obsmem", description="Observational memory for LLM agents."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    replaycmd.add_demo(sub)
    replaycmd.add_replay(sub)
    chat.add(sub)
    inspect.add(sub)
    bench.add(sub)
    doctor.add(sub)
    return parser


def main(argv: Sequence[str] | None = None, *, out: TextIO | None = None) -> int:
    args = _parser().parse_args(argv)
    stream = out if out is not None else sys.stdout
    try:
        return int(args.run(args, stream))
    except ObsmemError as exc:
        print(f"obsmem: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("obsmem: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
