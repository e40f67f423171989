"""``obsmem proxy --upstream URL``: run the memory proxy (imports its libraries when it runs)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING, Any, TextIO

from ..errors import require_modules

if TYPE_CHECKING:
    from ..cli.arguments import Run

__all__ = ["DEFAULT_PORT", "add"]

DEFAULT_PORT = 8766


def add(parser: argparse.ArgumentParser) -> Run:
    """Serves /v1/chat/completions and /v1/responses (streaming or not) in front of any
    OpenAI-compatible upstream; the client changes only its base URL. A request that names its
    conversation (the X-Obsmem-Thread header, or metadata.thread) gets memory's context in place
    of its history, and both sides are stored; one that names none passes through, as its
    X-Obsmem-Memory header says. The user and safety_identifier fields name the end user (each
    gets memory of their own), never a conversation. Memory belongs to the client's API key (or
    the resource --keys names for it); a request without a key gets a 401 unless --resource names
    its owner. Memory starts for a key once the upstream has answered it in this process. SIGTERM
    or Ctrl-C stops it within about 10 s; memory work still running resumes at the next start."""
    from ..cli.arguments import add_listening, add_memory_options

    parser.add_argument(
        "--upstream",
        required=True,
        help="the upstream's base URL, with its /v1 (e.g. http://localhost:8000/v1)",
    )
    add_listening(parser, port=DEFAULT_PORT)
    add_memory_options(
        parser,
        model_default="the upstream, with the model the first client asks for; auto picks "
        "one as the other commands do",
    )
    parser.add_argument(
        "--keys",
        help="JSON file mapping API keys (or sha256:<hex> of them) to resource ids; "
        "default: each key is its own resource",
    )
    parser.add_argument(
        "--known-keys-only",
        action="store_true",
        help="refuse (401) every API key the --keys file does not name",
    )
    parser.add_argument(
        "--resource",
        metavar="ID",
        help="the resource (owner) of every request without an API key; default: refuse them (401)",
    )
    parser.add_argument(
        "--memory-key-env",
        help="environment variable holding the API key memory's own upstream calls send "
        "(default: none, for a local upstream); not needed with --model",
    )
    _add_guard_options(parser)
    return _run


_GUARD_FLAGS = {  # the ProxyConfig field each guard flag sets (its dest), and the flag
    "allowed_hosts": "--allow-host",
    "allowed_origins": "--allow-origin",
    "max_request_bytes": "--max-request-bytes",
    "max_json_depth": "--max-json-depth",
}
_ANY_ADDRESS = ("0.0.0.0", "::", "")


def _add_guard_options(parser: argparse.ArgumentParser) -> None:
    """What every request must pass (:mod:`obsmem.proxy.guard`)."""
    from .config import (
        DEFAULT_MAX_JSON_DEPTH,
        DEFAULT_MAX_REQUEST_BYTES,
        MAX_JSON_DEPTH_CEILING,
        MIN_JSON_DEPTH,
    )

    parser.add_argument(
        "--allow-host",
        dest="allowed_hosts",
        action="append",
        default=[],
        metavar="NAME",
        help="a host name clients address the proxy by, besides loopback ones and the --host "
        "address (repeatable; '*': any, for a reverse proxy in front that checks it); other "
        "requests get a 421",
    )
    parser.add_argument(
        "--allow-origin",
        dest="allowed_origins",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="the origin of a web app whose pages may call the proxy from a browser, e.g. "
        "https://app.example.com (repeatable; pages on loopback hosts may already); requests "
        "from other pages get a 403",
    )
    parser.add_argument(
        "--max-request-bytes",
        type=int,
        default=DEFAULT_MAX_REQUEST_BYTES,
        metavar="BYTES",
        help=f"the largest request body read (default {DEFAULT_MAX_REQUEST_BYTES:,}, 32 MiB); "
        "larger ones get a 413",
    )
    parser.add_argument(
        "--max-json-depth",
        type=int,
        default=DEFAULT_MAX_JSON_DEPTH,
        metavar="LEVELS",
        help=f"the deepest JSON nesting of a request and of each tool call's arguments "
        f"(default {DEFAULT_MAX_JSON_DEPTH}; {MIN_JSON_DEPTH} to {MAX_JSON_DEPTH_CEILING}); "
        "deeper ones get a 400",
    )


def _guard_config(args: argparse.Namespace) -> dict[str, Any]:
    """The ProxyConfig fields of the guard flags: the address the proxy listens on is a host
    it answers too (unless it listens on every address)."""
    config = {field: getattr(args, field) for field in _GUARD_FLAGS}
    if args.host not in _ANY_ADDRESS:
        config["allowed_hosts"] = [*config["allowed_hosts"], args.host]
    return config


def _run(args: argparse.Namespace, out: TextIO) -> int:
    from ..cli.common import CannotStart, db_label, listen, memory_options, open_store
    from ..cli.errors import refuse_unusable_model

    require_modules("obsmem proxy", "proxy", ("starlette", "uvicorn", "httpx"))
    from ..cli.serving import BoundedServer
    from ..errors import ConfigError
    from .app import ProxyConfig, create_app
    from .identity import KeyMap, Owners

    upstream = str(args.upstream).rstrip("/")
    if not upstream.startswith(("http://", "https://")):
        raise CannotStart(
            f"--upstream {args.upstream!r} is not an http(s) URL; give the upstream's base URL "
            "with its /v1, e.g. http://localhost:8000/v1"
        )
    try:
        keys = KeyMap.load(args.keys) if args.keys else KeyMap()
        owners = Owners(keys, resource=args.resource, known_keys_only=args.known_keys_only)
    except ValueError as exc:
        raise CannotStart(str(exc)) from exc
    refuse_unusable_model(args.model)
    memory_key = None
    if args.memory_key_env:
        memory_key = os.environ.get(args.memory_key_env)
        if not memory_key:
            raise CannotStart(
                f"--memory-key-env {args.memory_key_env}: that environment variable is not set"
            )
    store = open_store(args.db)
    try:
        config = ProxyConfig(
            upstream=upstream,
            store=store,
            options=memory_options(args, None),
            memory_model=args.model,
            memory_key=memory_key,
            owners=owners,
            **_guard_config(args),
        )
    except ConfigError as exc:
        flag = _GUARD_FLAGS.get(exc.option.removeprefix("ProxyConfig."), exc.option)
        raise CannotStart(f"{flag} {exc.value!r}: {exc.rule}") from None
    sock, url = listen(args.host, args.port)
    print(
        f"obsmem proxy: {url}/v1 -> {upstream}; store {db_label(args.db)}; "
        f"memory model {args.model or 'the upstream, with the client model'}; "
        f"{owners.describe()}",
        file=out,
        flush=True,
    )
    if args.host in _ANY_ADDRESS and not args.allowed_hosts:
        print(
            "obsmem proxy: listening on every address, it answers requests addressed to a "
            "loopback name only: add --allow-host NAME for each name clients use",
            file=out,
            flush=True,
        )
    server = BoundedServer(
        create_app(config),
        command="proxy",
        log_level="warning",
        access_log=False,  # request lines are not needed, and nothing that names a key
        lifespan="on",
    )
    server.run(sockets=[sock])
    print("obsmem proxy: stopped", file=sys.stderr)
    return 0
