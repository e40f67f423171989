"""``obsmem worker``: run the queued memory jobs of a PostgreSQL database
(``background="queue"``), until SIGTERM or Ctrl-C.

Without ``--app`` the worker's memory is built from the model and option flags the other
commands take; with ``--app module:factory`` a function of the application builds its
``Memory`` (its extractors, hooks and models, which cannot travel through a DSN).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import inspect
from typing import TextIO

from ..memory import Memory
from .arguments import Run, add_memory_options, at_least_one
from .common import memory_options, open_store, pick_model
from .errors import CannotStart
from .stores import db_label, is_postgres_dsn

__all__ = ["add"]


def add(parser: argparse.ArgumentParser) -> Run:
    """Claim and run the memory jobs serving processes queued in a PostgreSQL database
    (observational memory with background='queue'): buffering, background reflection and
    catch-up. Run any number, on any machines; SIGTERM finishes or requeues running jobs, then
    exits."""
    add_memory_options(parser)
    parser.add_argument(
        "--app",
        metavar="MODULE:FACTORY",
        help="a function (module.path:name) that returns the application's Memory; the "
        "worker then uses its models, options, extractors and hooks instead of the flags",
    )
    parser.add_argument("--concurrency", type=at_least_one, default=4, help="jobs at once")
    parser.add_argument(
        "--model-limit",
        type=at_least_one,
        default=None,
        help="the most calls to one memory model at once, across every worker",
    )
    parser.add_argument(
        "--until-empty",
        action="store_true",
        help="exit once the queue is empty (to drain it after switching the queue off)",
    )
    for flag, seconds, what in (
        (
            "--shutdown-timeout",
            30.0,
            "running jobs get to finish after SIGTERM (then they are queued again)",
        ),
        ("--heartbeat", 10.0, "between heartbeats"),
        (
            "--stalled-after",
            30.0,
            "without a heartbeat after which a worker's jobs are queued again",
        ),
    ):
        parser.add_argument(
            flag, type=float, default=seconds, help=f"seconds {what} (default {seconds:g})"
        )
    return _run


def _run(args: argparse.Namespace, out: TextIO) -> int:
    if args.app is None and not is_postgres_dsn(args.db):
        raise CannotStart(
            f"--db {args.db}: obsmem worker runs the job queue of a PostgreSQL database; give "
            "its DSN (postgresql://user@host/db)"
        )
    return asyncio.run(_work(args, out))


async def _work(args: argparse.Namespace, out: TextIO) -> int:
    memory = await _memory(args)
    if memory is None:
        return 2
    try:
        worker = memory.worker(
            concurrency=args.concurrency,
            model_limit=args.model_limit,
            shutdown_timeout=args.shutdown_timeout,
            heartbeat=args.heartbeat,
            stalled_after=args.stalled_after,
            until_empty=args.until_empty,
        )
        print(f"obsmem worker: running the memory jobs of {db_label(worker.dsn)}", file=out)
        out.flush()
        await worker.run()
        print(f"obsmem worker: stopped after {worker.jobs_done} jobs", file=out)
        return 0
    finally:
        await memory.aclose()


async def _memory(args: argparse.Namespace) -> Memory | None:
    if args.app is not None:
        return await _app_memory(args.app)
    model = pick_model(args)
    if model is None:
        return None
    options = {**memory_options(args, model), "background": "queue"}
    return Memory(open_store(args.db), observational_memory=options)


async def _app_memory(spec: str) -> Memory:
    """The Memory ``module:factory`` builds (the factory may be async)."""
    module_name, _, name = spec.partition(":")
    if not module_name or not name:
        raise CannotStart(f"--app {spec}: give it as module.path:function_name")
    try:
        factory = getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError) as exc:
        raise CannotStart(
            f"--app {spec}: cannot load it ({exc}); run the worker where the module imports "
            "(its folder on PYTHONPATH)"
        ) from exc
    made = factory()
    if inspect.isawaitable(made):
        made = await made
    if not isinstance(made, Memory):
        raise CannotStart(f"--app {spec}: it returned {type(made).__name__}, not a Memory")
    return made
