"""``obsmem ui --db PATH_OR_DSN [--allow-edits]``: serve the web inspector (read-only unless
``--allow-edits``) (imports Starlette, uvicorn
and Jinja2 only when it runs)."""

from __future__ import annotations

import argparse
import sys
from typing import Any, TextIO

from ..errors import require_modules

__all__ = ["DEFAULT_PORT", "add"]

DEFAULT_PORT = 8765


def add(sub: Any) -> None:
    """Register the ``ui`` subcommand."""
    from ..cli.common import DB_HELP, DEFAULT_DB

    parser = sub.add_parser(
        "ui",
        description="Serves a web inspector of a store: resources and threads with their "
        "memory state, each thread's raw messages, observation log, buffered chunks and the "
        "context the actor would be sent, each reflection as a diff, the cycle ledger and the "
        "sawtooth chart; an open thread page updates as another process writes. The store is "
        "opened read-only and never written, unless --allow-edits.",
    )
    parser.add_argument("--db", default=DEFAULT_DB, help=DB_HELP + "; opened read-only")
    parser.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)"
    )
    parser.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT}; 0: any)"
    )
    parser.add_argument(
        "--token",
        help="a secret every request must carry (?token= once, then a cookie; or "
        "Authorization: Bearer); required to listen anywhere but loopback",
    )
    parser.add_argument(
        "--allow-edits",
        action="store_true",
        help="open the store writable and add forms to delete a thread, delete a resource and "
        "revise a log (each confirmed first; off by default)",
    )
    parser.add_argument(
        "--message-tokens",
        type=int,
        default=30_000,
        help="the observation threshold for threads with no measured turn (stored before the "
        "thresholds were kept with each turn; default 30000)",
    )
    parser.add_argument(
        "--observation-tokens",
        type=int,
        default=40_000,
        help="the reflection threshold the chart draws for such threads (default 40000)",
    )
    parser.set_defaults(run=_run)


def check_extra() -> None:
    """MissingExtraError naming ``pip install "obsmem[ui]"`` when a library is missing."""
    require_modules("obsmem ui", "ui", ("starlette", "uvicorn", "jinja2"))


def _run(args: argparse.Namespace, out: TextIO) -> int:
    from .security import bind_problem

    problem = bind_problem(args.host, args.token)
    if problem is not None:
        print(f"obsmem: {problem}", file=sys.stderr)
        return 2
    if args.message_tokens < 1 or args.observation_tokens < 1:
        print("obsmem: --message-tokens and --observation-tokens must be positive", file=sys.stderr)
        return 2
    check_extra()
    from ..cli.common import db_label, listening_socket, open_store
    from ..cli.serving import BoundedServer
    from .app import UIConfig, create_app
    from .queries import Thresholds

    # CannotStart names the fix (exit 2)
    store = open_store(args.db, read_only=not args.allow_edits)
    sock = listening_socket(args.host, args.port, backlog=128)
    config = UIConfig(
        label=db_label(args.db),
        token=args.token,
        thresholds=Thresholds(args.message_tokens, args.observation_tokens),
        allow_edits=args.allow_edits,
    )
    app = create_app(store, config)
    server = BoundedServer(app, command="ui", log_level="warning", lifespan="on")
    # The socket listens already: a browser opening the URL now waits in its backlog.
    port = sock.getsockname()[1]
    host = f"[{args.host}]" if ":" in args.host else args.host
    query = f"/?token={args.token}" if args.token else "/"
    mode = "edits allowed" if args.allow_edits else "read-only"
    print(f"obsmem ui: http://{host}:{port}{query}  ({mode}; Ctrl-C stops)", file=out)
    out.flush()
    server.run(sockets=[sock])
    return 0
