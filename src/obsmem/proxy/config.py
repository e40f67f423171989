"""The proxy's settings (:class:`ProxyConfig`)."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from ..errors import ConfigError
from ..hosts import read_allowed_hosts, read_allowed_origins
from .identity import Owners

if TYPE_CHECKING:
    from ..stores import Store

__all__ = [
    "DEFAULT_MAX_JSON_DEPTH",
    "DEFAULT_MAX_REQUEST_BYTES",
    "MAX_JSON_DEPTH_CEILING",
    "MIN_JSON_DEPTH",
    "ProxyConfig",
]

DEFAULT_MAX_REQUEST_BYTES = 32 * 1024 * 1024
"""32 MiB: room for a conversation carrying a few photos or a dozen screenshots as data URLs
(Anthropic's Messages API takes up to 32 MB too). Text alone never needs it: a million tokens
is about 4 MB."""
DEFAULT_MAX_JSON_DEPTH = 64
"""Levels of JSON nesting a request (and each tool call's arguments) may have: a chat request
with a tool whose schema nests ten objects deep is about 25."""
MIN_JSON_DEPTH = 16
"""Less refuses ordinary requests: a tool's schema alone is 7 levels deep."""
MAX_JSON_DEPTH_CEILING = 128
"""The most ``max_json_depth`` may be: memory stores JSON nested up to 200 levels
(:data:`obsmem.messages.MAX_JSON_DEPTH`), and a message sits a few levels into its request."""


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
    allowed_hosts: Collection[str] = ()
    """Host names or addresses the proxy answers besides loopback ones (``--allow-host``; the
    port is not compared; ``"*"``: every one, for a reverse proxy in front that checks them)."""
    allowed_origins: Collection[str] = ()
    """Origins of web pages that may send requests besides pages on a loopback host
    (``--allow-origin``, e.g. ``https://app.example.com``; ``"*"``: every one)."""
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    """The largest request body the proxy reads (413 past it)."""
    max_json_depth: int = DEFAULT_MAX_JSON_DEPTH
    """The deepest nesting a request's JSON, and each tool call's arguments, may have (400
    past it)."""

    def __post_init__(self) -> None:
        for name, section in cast(Mapping[object, object], self.options).items():
            if name not in ("observation", "reflection") or not isinstance(section, Mapping):
                raise ConfigError(
                    f"ProxyConfig.options[{name!r}]",
                    section,
                    "give only 'observation' and 'reflection' sections, each a mapping of "
                    "their options: the proxy keeps one log per conversation (thread scope)",
                )
        hosts = read_allowed_hosts(self.allowed_hosts, "ProxyConfig.allowed_hosts")
        origins = read_allowed_origins(self.allowed_origins, "ProxyConfig.allowed_origins")
        object.__setattr__(self, "allowed_hosts", hosts)
        object.__setattr__(self, "allowed_origins", origins)
        size = cast(object, self.max_request_bytes)
        if isinstance(size, bool) or not isinstance(size, int) or size < 1024:
            raise ConfigError(
                "ProxyConfig.max_request_bytes", size, "give a number of bytes, at least 1024"
            )
        depth = cast(object, self.max_json_depth)
        if (
            isinstance(depth, bool)
            or not isinstance(depth, int)
            or not MIN_JSON_DEPTH <= depth <= MAX_JSON_DEPTH_CEILING
        ):
            raise ConfigError(
                "ProxyConfig.max_json_depth",
                depth,
                f"give a number from {MIN_JSON_DEPTH} (a tool's schema alone is 7 levels deep) "
                f"to {MAX_JSON_DEPTH_CEILING} (memory stores JSON nested up to 200 levels)",
            )
