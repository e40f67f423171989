"""Token estimation: text, messages, images and files, with a per-part cache.

:class:`HeuristicEstimator` is the default (fast, no dependencies); :class:`TiktokenEstimator`
counts text exactly with o200k when the ``tiktoken`` extra is installed. Both satisfy the
:class:`TokenEstimator` protocol the engine uses.
"""

from __future__ import annotations

from obsmem.tokens.cache import CACHE_VERSION, METADATA_KEY, CacheEntry, cache_key
from obsmem.tokens.estimator import (
    JSON_OVERHEAD,
    TOKENS_PER_CONVERSATION,
    TOKENS_PER_MESSAGE,
    BaseEstimator,
    HeuristicEstimator,
    TokenEstimator,
)
from obsmem.tokens.exact import TiktokenEstimator
from obsmem.tokens.media import (
    ModelRef,
    file_tokens,
    image_dimensions,
    image_tokens,
    parse_model,
)
from obsmem.tokens.text import estimate_text_tokens

__all__ = [
    "CACHE_VERSION",
    "JSON_OVERHEAD",
    "METADATA_KEY",
    "TOKENS_PER_CONVERSATION",
    "TOKENS_PER_MESSAGE",
    "BaseEstimator",
    "CacheEntry",
    "HeuristicEstimator",
    "ModelRef",
    "TiktokenEstimator",
    "TokenEstimator",
    "cache_key",
    "estimate_text_tokens",
    "file_tokens",
    "image_dimensions",
    "image_tokens",
    "parse_model",
]
