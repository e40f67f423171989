"""The ``obsmem`` command line: demo, replay, chat, inspect, revise, delete, export, import,
bench, doctor, mcp, proxy, ui.

Exit codes: 0 done; 1 the work failed (a model, server or storage error, reported); 2 the
command could not start (bad arguments, a missing file, thread, model or optional dependency, a
``--db`` that is not obsmem's, with what to do about it). Every error ends in one line on
stderr, ``obsmem: ...``; never a traceback for a model, server or store error.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import TextIO

from .. import mcp_server
from ..proxy import command as proxy
from ..ui import cli as ui
from . import bench, chat, delete, doctor, inspect, replaycmd, revise, transfer
from .common import describe_error

__all__ = ["main"]


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("obsmem")
    except PackageNotFoundError:  # running from a source tree that is not installed
        from .. import __version__

        return __version__


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="obsmem", description="Observational memory for LLM agents."
    )
    parser.add_argument("--version", action="version", version=f"obsmem {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    replaycmd.add_demo(sub)
    replaycmd.add_replay(sub)
    chat.add(sub)
    inspect.add(sub)
    revise.add(sub)
    delete.add(sub)
    transfer.add_export(sub)
    transfer.add_import(sub)
    bench.add(sub)
    doctor.add(sub)
    mcp_server.add(sub)
    proxy.add(sub)
    ui.add(sub)
    return parser


def main(argv: Sequence[str] | None = None, *, out: TextIO | None = None) -> int:
    args = _parser().parse_args(argv)
    stream = out if out is not None else sys.stdout
    try:
        return int(args.run(args, stream))
    except KeyboardInterrupt:
        print("obsmem: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        known = describe_error(exc, getattr(args, "model", None))
        if known is None:
            raise
        code, message = known
        print(f"obsmem: {message}", file=sys.stderr)
        return code


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
