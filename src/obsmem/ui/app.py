"""The inspector's Starlette application: routes, templates, static files, the token gate.

Without ``allow_edits`` every route only reads. Pages: ``/`` (resources and threads),
``/thread`` (one thread), ``/generations``, ``/cycles``, ``/cycle`` (one cycle's input and
answer), ``/chart``;
``/api/state`` is the small JSON the live thread page polls. Threads are named by the ``id``
query parameter (any id, slashes included). With ``allow_edits`` the store is writable and the
edit routes of :mod:`obsmem.ui.edits` are added.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from ..errors import StoreError
from ..records import CYCLE_KINDS, CYCLE_OUTCOMES, Thread
from . import pages
from .edits import Editor
from .queries import CycleQuery, Thresholds, list_threads, thread_named
from .security import LoopbackHost, TokenGate

if TYPE_CHECKING:
    from ..stores.base import Store

__all__ = ["Pages", "UIConfig", "create_app"]

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True, slots=True)
class UIConfig:
    """How the inspector runs: what it shows the store as, its token, its thresholds."""

    label: str = ""
    """The store as it may be shown (a DSN without its password)."""
    token: str | None = None
    thresholds: Thresholds = field(default_factory=Thresholds)
    poll_ms: int = 1_000
    """How often the live thread page asks whether anything changed."""
    close_store: bool = True
    """Close the store when the server stops."""
    allow_edits: bool = False
    """Add the delete and revise forms (the caller opens the store writable)."""


def _templates() -> Jinja2Templates:
    env = Environment(
        loader=FileSystemLoader(HERE / "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
    )
    env.filters["when"] = _when
    env.filters["number"] = _number
    return Jinja2Templates(env=env)


def _number(value: int | float | None) -> str:
    return "-" if value is None else f"{value:,}"


def _when(value: datetime | None) -> str:
    return "-" if value is None else value.strftime("%Y-%m-%d %H:%M:%S")


class Pages:
    """The route handlers over one store."""

    def __init__(self, store: Store, config: UIConfig) -> None:
        self.store = store
        self.config = config
        self.templates = _templates()

    def render(self, request: Request, name: str, context: dict[str, Any], status: int = 200):
        base = {
            "label": self.config.label,
            "poll_ms": self.config.poll_ms,
            "edits": self.config.allow_edits,
        }
        return self.templates.TemplateResponse(
            request, name, {**base, **context}, status_code=status
        )

    def problem(
        self, request: Request, status: int, message: str, heading: str = "Nothing to show"
    ) -> Response:
        context = {"message": message, "heading": heading}
        return self.render(request, "problem.html", context, status)

    async def thread_or_problem(self, request: Request) -> Thread | Response:
        thread_id = request.query_params.get("id", "")
        thread = await thread_named(self.store, thread_id)
        if thread is None:
            what = f"no thread {thread_id!r}" if thread_id else "no thread named (add ?id=...)"
            return self.problem(request, 404, f"{what} in {self.config.label}; see the list.")
        return thread

    async def index(self, request: Request) -> Response:
        params = request.query_params
        listing = await list_threads(
            self.store,
            self.config.thresholds,
            query=params.get("q", "").strip(),
            resource=params.get("resource", ""),
            page=_int(params.get("page"), 1),
        )
        return self.render(request, "index.html", {"listing": listing})

    async def thread(self, request: Request) -> Response:
        thread = await self.thread_or_problem(request)
        if isinstance(thread, Response):
            return thread
        raw = request.query_params.get("page")
        page = _int(raw, 0) if raw else None
        context = await pages.thread_page(self.store, thread, page, self.config.thresholds)
        return self.render(request, "thread.html", {**context, "tab": "thread"})

    async def generations(self, request: Request) -> Response:
        thread = await self.thread_or_problem(request)
        if isinstance(thread, Response):
            return thread
        context = await pages.generations_page(self.store, thread)
        return self.render(request, "generations.html", {**context, "tab": "generations"})

    async def cycles(self, request: Request) -> Response:
        thread = await self.thread_or_problem(request)
        if isinstance(thread, Response):
            return thread
        kinds = tuple(request.query_params.getlist("kind"))
        outcomes = tuple(request.query_params.getlist("outcome"))
        bad = [k for k in kinds if k not in CYCLE_KINDS] + [
            o for o in outcomes if o not in CYCLE_OUTCOMES
        ]
        if bad:
            return self.problem(
                request,
                400,
                f"unknown filter {', '.join(bad)}: kind is one of {', '.join(CYCLE_KINDS)}; "
                f"outcome one of {', '.join(CYCLE_OUTCOMES)}",
            )
        limit = min(max(_int(request.query_params.get("limit"), 200), 1), 1_000)
        query = CycleQuery(kinds, outcomes, limit=limit)
        context = await pages.cycles_page(self.store, thread, query)
        return self.render(
            request,
            "cycles.html",
            {**context, "tab": "cycles", "kinds": CYCLE_KINDS, "outcomes": CYCLE_OUTCOMES},
        )

    async def cycle(self, request: Request) -> Response:
        thread = await self.thread_or_problem(request)
        if isinstance(thread, Response):
            return thread
        cycle_id = request.query_params.get("cycle", "")
        context = await pages.cycle_page(self.store, thread, cycle_id) if cycle_id else None
        if context is None:
            what = f"no cycle {cycle_id!r}" if cycle_id else "no cycle named (add &cycle=...)"
            return self.problem(
                request, 404, f"{what} in the ledger of thread {thread.id!r}; see its cycles."
            )
        return self.render(request, "cycle.html", {**context, "tab": "cycles"})

    async def chart(self, request: Request) -> Response:
        thread = await self.thread_or_problem(request)
        if isinstance(thread, Response):
            return thread
        context = await pages.chart_page(self.store, thread, self.config.thresholds)
        return self.render(request, "chart.html", {**context, "tab": "chart"})

    async def state(self, request: Request) -> Response:
        thread_id = request.query_params.get("id", "")
        thread = await thread_named(self.store, thread_id)
        if thread is None:
            return JSONResponse({"error": f"no thread {thread_id!r}"}, status_code=404)
        return JSONResponse(await pages.live_state(self.store, thread))


def _int(value: str | None, default: int) -> int:
    try:
        return int(value) if value is not None else default
    except ValueError:
        return default


async def _store_error(request: Request, exc: Exception) -> Response:
    text = (
        "<!doctype html><meta charset=utf-8><title>obsmem ui: store error</title>"
        "<p>obsmem ui could not read the store: {}</p>"
    )
    from html import escape

    return HTMLResponse(text.format(escape(str(exc))), status_code=500)


def create_app(store: Store, config: UIConfig | None = None) -> Starlette:
    """The inspector over ``store`` (opened read-only by the caller, or writable with
    ``allow_edits``; kept as ``app.state.store``)."""
    cfg = config or UIConfig()
    handlers = Pages(store, cfg)
    editor = Editor(store, handlers) if cfg.allow_edits else None

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncGenerator[None]:
        try:
            yield
        finally:
            if cfg.close_store:
                if editor is not None:
                    await editor.aclose()
                await store.aclose()

    routes = [
        Route("/", handlers.index),
        Route("/thread", handlers.thread),
        Route("/generations", handlers.generations),
        Route("/cycles", handlers.cycles),
        Route("/cycle", handlers.cycle),
        Route("/chart", handlers.chart),
        Route("/api/state", handlers.state),
        *(editor.routes() if editor is not None else []),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    middleware = (
        [Middleware(TokenGate, token=cfg.token)] if cfg.token else [Middleware(LoopbackHost)]
    )
    app = Starlette(
        routes=routes,
        middleware=middleware,
        lifespan=lifespan,
        exception_handlers={StoreError: _store_error},
    )
    app.state.store = store
    return app
