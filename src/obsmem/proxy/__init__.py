"""``obsmem proxy``: an OpenAI-compatible server in front of any OpenAI-compatible upstream that
gives every conversation observational memory (the client changes only its base URL).

Needs the ``proxy`` extra (Starlette, uvicorn, httpx). See :mod:`obsmem.proxy.app`.
"""

from __future__ import annotations

__all__ = ["Proxy", "ProxyConfig", "create_app"]

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .app import Proxy, ProxyConfig, create_app


def __getattr__(name: str) -> Any:
    if name in __all__:
        from . import app

        return getattr(app, name)
    raise AttributeError(f"module 'obsmem.proxy' has no attribute {name!r}")
