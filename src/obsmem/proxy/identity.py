"""Whose conversation a request is: the thread, and the resource that owns it.

* **Thread**: the ``X-Obsmem-Thread`` header, else the request's ``metadata`` (``thread``,
  ``thread_id`` or ``obsmem_thread``), else its ``user`` field. Without one, memory is off for the
  request: it passes through unchanged.
* **Resource**: ``key-`` and a hash of the client's API key (the ``Authorization: Bearer`` token,
  or ``api-key`` header), so a client reaches only its own memory; a request without a key is the
  resource ``anonymous``. A keys file maps keys to resources the operator names (several keys
  for one user, say): a JSON object whose names are API keys, or ``sha256:<hex>`` of them (so
  the file need not hold the keys themselves), and whose values are resource ids.

The key itself is never stored or logged: only its hash is kept, as the resource id.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

__all__ = ["THREAD_HEADER", "Identity", "KeyMap", "api_key_of", "hash_key", "thread_of"]

THREAD_HEADER = "x-obsmem-thread"
ANONYMOUS = "anonymous"
_METADATA_NAMES = ("thread", "thread_id", "obsmem_thread")


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def api_key_of(headers: Mapping[str, str]) -> str | None:
    """The client's API key from its headers (lower-case names), or None."""
    auth = headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        token = auth[7:].strip()
        return token or None
    key = headers.get("api-key", "").strip()
    return key or None


def thread_of(headers: Mapping[str, str], body: Mapping[str, Any]) -> str | None:
    """The thread id the request names (module doc), or None."""
    given = headers.get(THREAD_HEADER, "").strip()
    if given:
        return given
    metadata = body.get("metadata")
    if isinstance(metadata, dict):
        meta = cast(dict[str, Any], metadata)
        for name in _METADATA_NAMES:
            value = meta.get(name)
            if isinstance(value, str) and value.strip():
                return value.strip()
    user = body.get("user")
    if isinstance(user, str) and user.strip():
        return user.strip()
    return None


class KeyMap:
    """API keys (by hash) to the resources the operator named for them."""

    def __init__(self, by_hash: Mapping[str, str] | None = None) -> None:
        self.by_hash = dict(by_hash or {})

    @classmethod
    def load(cls, path: str | Path) -> KeyMap:
        """Read a keys file (module doc); ValueError naming the problem when it is not one."""
        file = Path(path)
        try:
            data = json.loads(file.read_text(encoding="utf-8"))
        except OSError as exc:
            raise ValueError(f"cannot read the keys file {file}: {exc.strerror or exc}") from exc
        except ValueError as exc:
            raise ValueError(
                f"the keys file {file} is not JSON ({exc}); write it as "
                '{"<api key or sha256:hex>": "<resource id>", ...}'
            ) from exc
        if not isinstance(data, dict):
            raise ValueError(
                f"the keys file {file} must hold one JSON object: "
                '{"<api key or sha256:hex>": "<resource id>", ...}'
            )
        by_hash: dict[str, str] = {}
        for name, resource in cast(dict[Any, Any], data).items():
            if not isinstance(resource, str) or not resource.strip():
                raise ValueError(
                    f"the keys file {file}: the resource for a key must be a non-empty string"
                )
            if ":" in resource:
                raise ValueError(
                    f"the keys file {file}: resource {resource!r} has a ':'; resource ids there "
                    "name threads as <resource>:<thread>, so give one without it"
                )
            text = str(name)
            digest = text[7:].lower() if text.startswith("sha256:") else hash_key(text)
            by_hash[digest] = resource.strip()
        return cls(by_hash)

    def resource(self, key: str | None) -> str:
        if key is None:
            return ANONYMOUS
        digest = hash_key(key)
        return self.by_hash.get(digest) or f"key-{digest[:24]}"


@dataclass(frozen=True, slots=True)
class Identity:
    thread: str | None
    resource: str
