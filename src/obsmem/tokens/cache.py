"""The per-part token cache.

Each part keeps its estimates in ``part.metadata["token_estimates"]``: a dict keyed by cache key,
each value an entry ``{"v": CACHE_VERSION, "source": <estimator source>, "key": <key>,
"tokens": <int>}``. The key is ``"<kind>:<sha256 of the payload>"``, so a part whose content
changes never reuses an old count. An entry is reused only when its version, source and key all
match; anything else is recomputed and overwritten. Overheads (per message, per tool result,
the JSON allowance) are applied outside the cache and never stored.

Parts are frozen dataclasses, but their ``metadata`` dict is mutable, and the stores persist it,
so a count made once survives a reload.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, MutableMapping
from typing import Any, TypedDict, cast

__all__ = [
    "CACHE_VERSION",
    "METADATA_KEY",
    "CacheEntry",
    "cache_key",
    "cached_tokens",
    "read_cached",
    "write_cached",
]

CACHE_VERSION = 2
"""Bump when any estimate formula changes: every stored entry becomes stale at once.
(2: CJK at 0.73 a character, JSON priced as JSON.)"""

METADATA_KEY = "token_estimates"


class CacheEntry(TypedDict):
    v: int
    source: str
    key: str
    tokens: int


def cache_key(kind: str, payload: str | bytes) -> str:
    """``"<kind>:<sha256 hex of payload>"`` (text payloads hash as UTF-8)."""
    raw = payload.encode("utf-8", "surrogatepass") if isinstance(payload, str) else payload
    return f"{kind}:{hashlib.sha256(raw).hexdigest()}"


def read_cached(metadata: MutableMapping[str, Any], key: str, source: str) -> int | None:
    """The cached count for ``key`` if an entry with this version, source and key exists."""
    entries = metadata.get(METADATA_KEY)
    if not isinstance(entries, dict):
        return None
    entry = cast(dict[str, Any], entries).get(key)
    if not isinstance(entry, dict):
        return None
    e = cast(dict[str, Any], entry)
    tokens = e.get("tokens")
    if (
        e.get("v") != CACHE_VERSION
        or e.get("source") != source
        or e.get("key") != key
        or not isinstance(tokens, int)
        or isinstance(tokens, bool)
    ):
        return None
    return tokens


def write_cached(metadata: MutableMapping[str, Any], key: str, source: str, tokens: int) -> None:
    entries = metadata.get(METADATA_KEY)
    if not isinstance(entries, dict):
        entries = {}
        metadata[METADATA_KEY] = entries
    entry: CacheEntry = {"v": CACHE_VERSION, "source": source, "key": key, "tokens": tokens}
    cast(dict[str, Any], entries)[key] = entry


def cached_tokens(
    metadata: MutableMapping[str, Any],
    kind: str,
    payload: str | bytes,
    source: str,
    compute: Callable[[], int],
) -> int:
    """The cached count for (``kind``, ``payload``, ``source``), computing and storing it on a
    miss."""
    key = cache_key(kind, payload)
    hit = read_cached(metadata, key, source)
    if hit is not None:
        return hit
    tokens = compute()
    write_cached(metadata, key, source, tokens)
    return tokens
