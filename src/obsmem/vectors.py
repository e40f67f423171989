"""Vector scoring for semantic recall: cosine similarity of unit vectors, top k.

Stores keep each observation group's embedding; this module encodes vectors compactly (float32
bytes) and ranks candidates, with numpy when it is installed and plain Python otherwise.
"""

from __future__ import annotations

import array
import heapq
from collections.abc import Iterable, Sequence

__all__ = ["decode", "encode", "top_k"]


def encode(vector: Sequence[float]) -> bytes:
    return array.array("f", vector).tobytes()


def decode(blob: bytes) -> list[float]:
    values = array.array("f")
    values.frombytes(bytes(blob))
    return values.tolist()


def top_k(
    query: Sequence[float], candidates: Iterable[tuple[str, bytes]], k: int
) -> list[tuple[str, float]]:
    """The ``k`` candidate ids most similar to ``query`` (dot product of unit vectors)."""
    rows = list(candidates)
    if not rows or k <= 0:
        return []
    try:
        import numpy as np
    except ImportError:
        scored = (
            (cid, sum(a * b for a, b in zip(query, decode(blob), strict=False)))
            for cid, blob in rows
        )
        return heapq.nlargest(k, scored, key=lambda item: item[1])
    q = np.asarray(query, dtype=np.float32)
    matrix = np.stack([np.frombuffer(bytes(blob), dtype=np.float32) for _, blob in rows])
    scores = matrix @ q
    order = np.argsort(-scores)[:k]
    return [(rows[i][0], float(scores[i])) for i in order]
