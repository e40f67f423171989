"""The ``obsmem`` command line: the subcommands of :data:`COMMANDS`.

A command's module is imported only when that command runs: ``obsmem --help`` lists every
command from the table alone, and ``obsmem CMD ...`` builds the full parser of CMD only, so
starting one command never loads the stores, servers and model libraries of the others. The
module's ``add(parser)`` (in the table) gives the parser its arguments and returns the function
that runs the command; its docstring is the command's description in ``obsmem CMD --help``.

Exit codes: 0 done; 1 the work failed (a model, server or storage error, reported); 2 the
command could not start (bad arguments, a missing file, thread, model or optional dependency, a
``--db`` that is not obsmem's, with what to do about it). Every error ends in one line on
stderr, ``obsmem: ...``; never a traceback for a model, server or store error.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

TYPE_CHECKING = False  # not ``typing``'s: ``obsmem --help`` does not import ``typing``
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any, TextIO

__all__ = ["COMMANDS", "main"]

# name -> ("module:function" that adds the command's arguments to its parser and returns its
# run function, the line ``obsmem --help`` shows). Adding a command is one line here.
COMMANDS: dict[str, tuple[str, str]] = {
    "demo": (
        "obsmem.cli.replaycmd:add_demo",
        "replay the bundled conversation through memory and draw the sawtooth",
    ),
    "replay": ("obsmem.cli.replaycmd:add_replay", "replay a recorded conversation through memory"),
    "chat": ("obsmem.cli.chat:add", "a REPL with an agent that has observational memory"),
    "inspect": (
        "obsmem.cli.inspect:add",
        "show threads, logs, generations, chunks and messages in a store",
    ),
    "revise": (
        "obsmem.cli.revise:add",
        "correct a thread's observation log: replace or remove lines, or give a new log",
    ),
    "delete": (
        "obsmem.cli.delete:add",
        "erase a thread or a resource (a user) and everything memory made of it",
    ),
    "export": (
        "obsmem.cli.transfer:add_export",
        "write a thread, a resource or the whole store as obsmem-export JSON Lines",
    ),
    "import": (
        "obsmem.cli.transfer:add_import",
        "import an export file, an OpenAI chat transcript, or a Mastra memory database",
    ),
    "bench": ("obsmem.cli.bench:add", "benchmarks (LongMemEval accuracy)"),
    "doctor": ("obsmem.cli.doctor:add", "check that a model can serve as Observer and Reflector"),
    "mcp": (
        "obsmem.mcp_server.command:add",
        "an MCP server: recall, memory context, remember, status",
    ),
    "proxy": (
        "obsmem.proxy.command:add",
        "an OpenAI-compatible server that gives any client observational memory",
    ),
    "ui": (
        "obsmem.ui.cli:add",
        "a web inspector of threads, logs, generations and cycles (read-only by default)",
    ),
    "worker": (
        "obsmem.cli.worker:add",
        'run memory\'s queued background work from PostgreSQL (background="queue")',
    ),
}


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("obsmem")
    except PackageNotFoundError:  # running from a source tree that is not installed
        from .. import __version__

        return __version__


class _Version(argparse.Action):
    """``--version``: the package metadata it reads is slow to load, so only when asked."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        kwargs.update(nargs=0, default=argparse.SUPPRESS)
        super().__init__(option_strings, argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *args: Any) -> None:
        print(f"obsmem {_version()}")
        parser.exit()


class _Formatter(argparse.HelpFormatter):
    """argparse's help layout, the width read as :func:`shutil.get_terminal_size` reads it
    without importing :mod:`shutil` (and its compression modules) just to print help."""

    def __init__(self, prog: str) -> None:
        try:
            columns = int(os.environ.get("COLUMNS", "0")) or os.get_terminal_size().columns
        except (ValueError, OSError):  # not a number, or not a terminal
            columns = 80
        super().__init__(prog, width=columns - 2)


def _chosen(argv: Sequence[str]) -> str | None:
    """The command ``argv`` runs, or None when an option comes first (the top level's options,
    ``--help`` and ``--version``, end the run before any command is reached)."""
    if not argv or argv[0].startswith("-"):
        return None
    return argv[0]


def _parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser of ``argv`` (default: this process's arguments): every command is listed, and
    the one ``argv`` chooses is built in full, importing its module and no other."""
    chosen = _chosen(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(
        prog="obsmem",
        description="Observational memory for LLM agents.",
        formatter_class=_Formatter,
    )
    parser.add_argument("--version", action=_Version, help="show obsmem's version and exit")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (target, line) in COMMANDS.items():
        if name != chosen:
            sub.add_parser(name, help=line, add_help=False)  # a name in the list, never parsed
            continue
        module, _, function = target.partition(":")
        add = getattr(importlib.import_module(module), function)
        command = sub.add_parser(name, help=line, description=add.__doc__)
        command.set_defaults(run=add(command))
    return parser


def main(argv: Sequence[str] | None = None, *, out: TextIO | None = None) -> int:
    args = _parser(argv).parse_args(argv)
    stream = out if out is not None else sys.stdout
    try:
        return int(args.run(args, stream))
    except KeyboardInterrupt:
        print("obsmem: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        from .errors import describe_error

        known = describe_error(exc, getattr(args, "model", None))
        if known is None:
            raise
        code, message = known
        print(f"obsmem: {message}", file=sys.stderr)
        return code


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
