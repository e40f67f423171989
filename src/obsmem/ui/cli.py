"""``obsmem ui --db PATH_OR_DSN [--allow-edits]``: serve the web inspector, read-only unless
``--allow-edits`` (it imports Starlette, uvicorn and Jinja2 only when it runs)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, TextIO

from ..errors import require_modules

if TYPE_CHECKING:
    from ..cli.arguments import Run

__all__ = ["DEFAULT_PORT", "add"]

DEFAULT_PORT = 8765


def add(parser: argparse.ArgumentParser) -> Run:
    """Serves a web inspector of a store: resources and threads with their memory state, each
    thread's raw messages, observation log, buffered chunks and the context the actor would be
    sent, each reflection as a diff, the cycle ledger and the sawtooth chart; an open thread
    page updates as another process writes. The store is opened read-only and never written,
    unless --allow-edits."""
    from ..cli.arguments import add_db, add_listening, add_thresholds

    add_db(parser, read_only=True)
    add_listening(
        parser,
        port=DEFAULT_PORT,
        token="a secret every request must carry (?token= once, then a cookie; or "
        "Authorization: Bearer); required to listen anywhere but loopback",
    )
    parser.add_argument(
        "--allow-edits",
        action="store_true",
        help="open the store writable and add forms to delete a thread, delete a resource and "
        "revise a log (each confirmed first; off by default)",
    )
    add_thresholds(
        parser,
        30_000,
        40_000,
        observe="the observation threshold for threads with no measured turn (stored before "
        "the thresholds were kept with each turn)",
        reflect="the reflection threshold the chart draws for such threads",
    )
    return _run


def check_extra() -> None:
    """MissingExtraError naming ``pip install "obsmem[ui]"`` when a library is missing."""
    require_modules("obsmem ui", "ui", ("starlette", "uvicorn", "jinja2"))


def _run(args: argparse.Namespace, out: TextIO) -> int:
    from .security import bind_problem

    problem = bind_problem(args.host, args.token)
    if problem is not None:
        print(f"obsmem: {problem}", file=sys.stderr)
        return 2
    check_extra()
    from ..cli.common import db_label, listen, open_store
    from ..cli.serving import BoundedServer
    from .app import UIConfig, create_app
    from .queries import Thresholds

    # CannotStart names the fix (exit 2)
    store = open_store(args.db, read_only=not args.allow_edits)
    sock, url = listen(args.host, args.port, backlog=128)
    config = UIConfig(
        label=db_label(args.db),
        token=args.token,
        thresholds=Thresholds(args.message_tokens, args.observation_tokens),
        allow_edits=args.allow_edits,
    )
    app = create_app(store, config)
    server = BoundedServer(app, command="ui", log_level="warning", lifespan="on")
    # The socket listens already: a browser opening the URL now waits in its backlog.
    query = f"/?token={args.token}" if args.token else "/"
    mode = "edits allowed" if args.allow_edits else "read-only"
    print(f"obsmem ui: {url}{query}  ({mode}; Ctrl-C stops)", file=out)
    out.flush()
    server.run(sockets=[sock])
    return 0
