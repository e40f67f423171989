"""``obsmem ui``: a read-only web inspector of a store (threads, logs, generations, cycles).

Server-rendered pages (Starlette, Jinja2 templates with autoescape, a little vanilla JS for the
live thread page), static files shipped in the package, nothing from a CDN. The store is opened
read-only (SQLite ``mode=ro``, PostgreSQL READ ONLY transactions) and never written, unless
``--allow-edits`` adds the delete and revise forms (:mod:`obsmem.ui.edits`).

Modules: :mod:`obsmem.ui.cli` (the command), :mod:`obsmem.ui.app` (routes),
:mod:`obsmem.ui.security` (loopback and token rules), :mod:`obsmem.ui.edits` (the edit
forms), :mod:`obsmem.ui.queries` (what a page reads from the store), :mod:`obsmem.ui.render`
(messages and the log for the templates),
:mod:`obsmem.ui.chart` (the sawtooth as SVG), :mod:`obsmem.ui.diff` (generation diffs). Nothing
here is imported by ``import obsmem``; the command imports Starlette only when it runs.
"""

from __future__ import annotations

__all__: list[str] = []
