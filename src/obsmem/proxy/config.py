"""The proxy's settings (:class:`ProxyConfig`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .identity import Owners

if TYPE_CHECKING:
    from ..stores import Store

__all__ = ["ProxyConfig"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ProxyConfig:
    upstream: str
    """The upstream's base URL, up to and including its ``/v1``."""
    store: Store
    options: Mapping[str, Any] = field(default_factory=dict[str, Any])
    """Memory's options (``observation``/``reflection`` sections) without the model."""
    memory_model: Any = None
    """The Observer and Reflector model: a model spec, or None for the upstream with the model
    the first client asked for."""
    memory_key: str | None = None
    """The API key memory's own calls to the upstream send (None: a placeholder)."""
    owners: Owners = field(default_factory=Owners)
    """Who owns a request's memory: its API key (a keys file can name resources for keys),
    or ``owners.resource`` for a request without one; see :mod:`.identity`. By default a
    request without a key is refused."""
    timeout: float = 600.0
    """Seconds to wait on the upstream."""
    cache_breakpoints: bool | None = None
    """Whether the upstream takes OpenAI's prompt-cache breakpoints, which the proxy then sets
    at the end of memory's prefix for the models that have them (GPT-5.6 and later). None:
    when the upstream is OpenAI's own API (``api.openai.com``); other OpenAI-compatible
    servers may refuse the field."""
    finish_memory_work: bool = False
    """At shutdown, wait for the background memory work still running (a catch-up of a long
    history, buffering, a reflection: model calls that may take minutes) instead of abandoning
    it. Abandoning loses nothing: memory's state is in the store, and a thread that is behind
    catches up at its next request."""
