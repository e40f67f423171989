"""Which requests obsmem's HTTP servers answer, by their ``Host`` and ``Origin`` headers.

A server on loopback is still within reach of a browser. A page of another site can send it a
request (a cross-site ``POST``, the CSRF shape), and it can rebind its own name to 127.0.0.1
(DNS rebinding) to read the answers. Both show in the headers: a rebound page's requests carry
its own name as ``Host``, and a browser sends the page's ``Origin`` with every cross-site
request. So a server answers a ``Host`` that is a loopback name or address, or one the operator
allows, and an ``Origin``, when there is one, that is on a loopback host, or one the operator
allows. Clients that are programs send no ``Origin``.

``obsmem ui`` checks the host (:class:`obsmem.ui.security.LoopbackHost`), ``obsmem proxy`` both
(:mod:`obsmem.proxy.guard`); ``obsmem mcp`` gets the same checks from the MCP SDK.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Collection
from urllib.parse import urlsplit

from .errors import ConfigError

__all__ = [
    "ANY",
    "host_allowed",
    "host_name",
    "is_loopback",
    "origin_allowed",
    "read_allowed_hosts",
    "read_allowed_origins",
]

ANY = "*"
"""An allowed host or origin that allows every one (behind a reverse proxy that checks them)."""


def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback name or address (``localhost``, 127.0.0.0/8, ``::1``)."""
    name = host.strip().strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def host_name(header: str) -> str:
    """The host of a ``Host`` header, without its port (``[::1]:8765`` is ``::1``)."""
    value = header.strip()
    if value.startswith("["):
        return value[1:].split("]", 1)[0]
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


def _host_key(header: str) -> str:
    return host_name(header).lower().rstrip(".")


def host_allowed(header: str | None, allowed: Collection[str] = ()) -> bool:
    """Whether a request with this ``Host`` header is answered: a loopback host, or one of
    ``allowed`` (read by :func:`read_allowed_hosts`; the port is not compared)."""
    if ANY in allowed:
        return True
    if not header:
        return False
    name = _host_key(header)
    return is_loopback(name) or name in allowed


def _origin_key(origin: str) -> str | None:
    """``scheme://host[:port]`` in lower case, or None when ``origin`` is not one."""
    try:
        parts = urlsplit(origin.strip().lower())
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username:
        return None
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return f"{parts.scheme}://{host}" + (f":{port}" if port is not None else "")


def origin_allowed(origin: str | None, allowed: Collection[str] = ()) -> bool:
    """Whether a request with this ``Origin`` header is answered: none (not a browser's), a
    page on a loopback host, or one of ``allowed`` (read by :func:`read_allowed_origins`).
    ``null`` (a sandboxed page, a local file) is refused."""
    if origin is None or ANY in allowed:
        return True
    key = _origin_key(origin)
    if key is None:
        return False
    return is_loopback(urlsplit(key).hostname or "") or key in allowed


def read_allowed_hosts(values: Collection[str], field: str = "allowed_hosts") -> frozenset[str]:
    """The host names an operator allows, as :func:`host_allowed` compares them."""
    out: set[str] = set()
    for value in values:
        key = value.strip() if value.strip() == ANY else _host_key(value)
        if not key or "/" in key or " " in key:
            raise ConfigError(field, value, "give a host name or address, e.g. proxy.internal")
        out.add(key)
    return frozenset(out)


def read_allowed_origins(values: Collection[str], field: str = "allowed_origins") -> frozenset[str]:
    """The origins an operator allows, as :func:`origin_allowed` compares them."""
    out: set[str] = set()
    for value in values:
        key = ANY if value.strip() == ANY else _origin_key(value)
        if key is None:
            raise ConfigError(
                field, value, "give an origin as a browser sends it, e.g. https://app.example.com"
            )
        out.add(key)
    return frozenset(out)
