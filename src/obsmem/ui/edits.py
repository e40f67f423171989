"""``obsmem ui --allow-edits``: delete a thread, delete a resource, revise a log, from the browser.

Each action is two steps of plain HTML, no JavaScript: a page that shows what will be erased or
changed and holds a POST form, then the POST that does it through :class:`~obsmem.Memory` (the
same calls as ``obsmem delete`` and ``obsmem revise``). The confirmation is a GET page, except for
a rewrite of the whole log: its text is POSTed to a preview (a diff against the log it was made
from, nothing written), whose form writes it only while the log is still the one the rewrite was
made from. A POST is refused
(403, nothing changed) unless it carries this process's CSRF secret in its form and, when the
browser sends an ``Origin``, that origin is the inspector's own; the Host and token checks of
:mod:`obsmem.ui.security` apply before either. None of these routes exists without the flag.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlencode, urlsplit

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from ..errors import ConfigError, StoreError
from ..memory import Memory
from ..records import OMRecord, Scope, Thread
from .diff import diff_logs
from .queries import head_of, thread_named, threads_of

if TYPE_CHECKING:
    from ..stores.base import Store
    from .app import Pages

__all__ = ["BY", "CSRF_FIELD", "Editor"]

CSRF_FIELD = "csrf"
"""The hidden form field that carries the process's CSRF secret."""
BY = "ui"
"""Who asked, as the cycle ledger records a revision made here."""
MAX_FORM = 1_000_000
"""The largest form body read (a form over it is refused, 413)."""


def _fingerprint(record: OMRecord) -> str:
    """Which log a rewrite was made from: its generation and a hash of its text (a new
    observation changes the text, a reflection or revision the generation)."""
    digest = hashlib.sha256(record.observations.encode("utf-8", "surrogatepass")).hexdigest()
    return f"{record.generation}:{digest[:32]}"


def _same_origin(request: Request) -> bool:
    """No ``Origin`` (not a browser's cross-site request), or the inspector's own host:port."""
    origin = request.headers.get("origin")
    if origin is None:
        return True
    parts = urlsplit(origin.strip().lower())
    return bool(parts.netloc) and parts.netloc == request.headers.get("host", "").lower()


class Editor:
    """The edit routes over one writable store: the CSRF secret and a Memory per log scope
    (a revision must name the scope of the log it corrects)."""

    def __init__(self, store: Store, pages: Pages) -> None:
        self.store = store
        self.pages = pages
        self.csrf = secrets.token_urlsafe(32)
        self._memories: dict[Scope | None, Memory] = {}

    def memory(self, scope: Scope | None) -> Memory:
        """The Memory that writes for ``scope`` (None: deletes, which need no engine)."""
        if scope not in self._memories:
            options = {"scope": scope} if scope is not None else False
            self._memories[scope] = Memory(self.store, observational_memory=options)
        return self._memories[scope]

    async def aclose(self) -> None:
        """Close each Memory (each closes the shared store; closing twice is harmless)."""
        for memory in self._memories.values():
            await memory.aclose()

    def routes(self) -> list[Route]:
        return [
            Route("/edit/delete-thread", self.delete_thread_page, methods=["GET"]),
            Route("/edit/delete-thread", self._guarded(self.delete_thread), methods=["POST"]),
            Route("/edit/delete-resource", self.delete_resource_page, methods=["GET"]),
            Route("/edit/delete-resource", self._guarded(self.delete_resource), methods=["POST"]),
            Route("/edit/revise", self.revise_page, methods=["GET"]),
            Route("/edit/revise", self._guarded(self.revise), methods=["POST"]),
            Route("/edit/revise-text", self._guarded(self.rewrite_preview), methods=["POST"]),
        ]

    def _guarded(
        self, action: Callable[[Request, dict[str, str]], Awaitable[Response]]
    ) -> Callable[[Request], Awaitable[Response]]:
        """``action`` run on the form only when the POST is the inspector's own."""

        async def endpoint(request: Request) -> Response:
            body = await request.body()
            if len(body) > MAX_FORM:
                return self.pages.problem(request, 413, "the form is too large to read")
            form = dict(parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True))
            given = form.get(CSRF_FIELD, "")
            if not hmac.compare_digest(given.encode(), self.csrf.encode()):
                why = "its form lacks this page's CSRF token" if not given else "a stale token"
                return self._refused(request, f"{why}: reload the page and submit it again")
            if not _same_origin(request):
                return self._refused(request, "it comes from a page of another site")
            try:
                return await action(request, form)
            except (ConfigError, StoreError) as exc:
                return self.pages.problem(request, 400, str(exc), "Not done")

        return endpoint

    def _refused(self, request: Request, why: str) -> Response:
        return self.pages.problem(request, 403, f"Refused, nothing changed: {why}.", "Refused")

    def _conflict(self, request: Request, thread: Thread) -> Response:
        return self.pages.problem(
            request,
            409,
            f"Not written: the log of {thread.id!r} changed since the rewrite was made from it "
            "(new observations or a reflection). Open Revise log again and redo the rewrite.",
            "Not done",
        )

    def _confirm(self, request: Request, context: dict[str, Any]) -> Response:
        return self.pages.render(request, "confirm.html", {**context, "csrf": self.csrf})

    # -- delete a thread -------------------------------------------------------------------------

    async def delete_thread_page(self, request: Request) -> Response:
        thread = await self.pages.thread_or_problem(request)
        if isinstance(thread, Response):
            return thread
        return self._confirm(
            request,
            {
                "action": "/edit/delete-thread",
                "title": f"Delete thread {thread.id}",
                "erase": True,
                "what": f"erase thread {thread.id!r} of resource {thread.resource_id!r}, its "
                f"{thread.message_count:,} messages and everything memory made of them",
                "fields": {"id": thread.id},
                "button": "Delete this thread for good",
                "back": "/thread?" + urlencode({"id": thread.id}),
            },
        )

    async def delete_thread(self, request: Request, form: dict[str, str]) -> Response:
        thread = await self._thread(form.get("id", ""))
        erased = await self.memory(None).delete_thread(
            {"thread": thread.id, "resource": thread.resource_id}
        )
        return self.pages.render(
            request,
            "done.html",
            {
                "message": f"Erased thread {thread.id!r}.",
                "remaining": erased.remaining,
                "back": "/?" + urlencode({"resource": thread.resource_id}),
            },
        )

    # -- delete a resource -----------------------------------------------------------------------

    async def delete_resource_page(self, request: Request) -> Response:
        resource = request.query_params.get("resource", "")
        threads = await threads_of(self.store, resource)
        if not threads:
            return self.pages.problem(request, 404, f"no resource {resource!r} with threads")
        count = sum(t.message_count for t in threads)
        return self._confirm(
            request,
            {
                "action": "/edit/delete-resource",
                "title": f"Delete resource {resource}",
                "erase": True,
                "what": f"erase resource {resource!r}: its {len(threads)} threads, {count:,} "
                "messages, working memory and everything memory made of them",
                "fields": {"resource": resource},
                "button": "Delete this resource for good",
                "back": "/?" + urlencode({"resource": resource}),
            },
        )

    async def delete_resource(self, request: Request, form: dict[str, str]) -> Response:
        resource = form.get("resource", "")
        await self.memory(None).delete_resource(resource)
        return self.pages.render(
            request, "done.html", {"message": f"Erased resource {resource!r}.", "back": "/"}
        )

    # -- revise the log --------------------------------------------------------------------------

    async def revise_page(self, request: Request) -> Response:
        """Without ``old``: the log's lines, each with a replace and a remove form (GET, so
        nothing changes yet). With ``old`` (and ``new`` to replace): the confirmation."""
        thread = await self.pages.thread_or_problem(request)
        if isinstance(thread, Response):
            return thread
        key, record = await head_of(self.store, thread)
        if record is None:
            return self.pages.problem(request, 404, f"thread {thread.id!r} has no log yet")
        params = request.query_params
        old = params.get("old")
        if old is None:
            lines = [line for line in record.observations.splitlines() if line.strip()]
            return self.pages.render(
                request,
                "revise.html",
                {
                    "thread": thread,
                    "key": key,
                    "lines": lines,
                    "log": record.observations,
                    "base": _fingerprint(record),
                    "csrf": self.csrf,
                },
            )
        new = params.get("new") if params.get("how") == "replace" else None
        change = f"replace the line {old!r} with {new!r}" if new is not None else None
        fields = {"id": thread.id, "old": old} | ({"new": new} if new is not None else {})
        return self._confirm(
            request,
            {
                "action": "/edit/revise",
                "title": f"Revise the log of {thread.id}",
                "what": change or f"remove the line {old!r}",
                "fields": fields,
                "button": "Write the revised log",
                "back": "/edit/revise?" + urlencode({"id": thread.id}),
                "thread": thread,
            },
        )

    async def rewrite_preview(self, request: Request, form: dict[str, str]) -> Response:
        """The whole log rewritten (a POSTed textarea): its diff against the log it was made
        from and the form that writes it. Nothing is written here."""
        thread = await self._thread(form.get("id", ""))
        _, record = await head_of(self.store, thread)
        if record is None or form.get("base") != _fingerprint(record):
            return self._conflict(request, thread)
        text = _text_of(form)
        diff = diff_logs(record.observations, text)
        if all(line.kind == "kept" for line in diff):
            return self.pages.problem(
                request, 400, "The rewritten log is the log as it is: nothing to write.", "Not done"
            )
        return self._confirm(
            request,
            {
                "action": "/edit/revise",
                "title": f"Rewrite the log of {thread.id}",
                "what": f"replace the whole log with the text below ({len(text.splitlines())} "
                "lines); the changes against the log as it is now",
                "diff": diff,
                "fields": {"id": thread.id, "base": form["base"], "text": text},
                "button": "Write the rewritten log",
                "back": "/edit/revise?" + urlencode({"id": thread.id}),
                "thread": thread,
            },
        )

    async def revise(self, request: Request, form: dict[str, str]) -> Response:
        thread = await self._thread(form.get("id", ""))
        key, record = await head_of(self.store, thread)
        scope: Scope = "thread" if key.startswith("thread:") else "resource"
        ref = {"thread": thread.id, "resource": thread.resource_id}
        if "text" in form:  # a whole rewrite, previewed against the log it was made from
            if record is None or form.get("base") != _fingerprint(record):
                return self._conflict(request, thread)
            await self.memory(scope).revise(ref, text=_text_of(form), by=BY)
        else:
            old, new = form.get("old", ""), form.get("new")
            await self.memory(scope).revise(
                ref,
                replace={old: new} if new is not None else None,
                remove=[old] if new is None else None,
                by=BY,
            )
        return RedirectResponse("/thread?" + urlencode({"id": thread.id}), status_code=303)

    async def _thread(self, thread_id: str) -> Thread:
        thread = await thread_named(self.store, thread_id)
        if thread is None:
            raise StoreError(f"no thread {thread_id!r}: it may be erased already; see the list")
        return thread


def _text_of(form: dict[str, str]) -> str:
    """The rewritten log as typed (a browser sends a textarea's line breaks as CRLF)."""
    return form.get("text", "").replace("\r\n", "\n").strip("\n")
