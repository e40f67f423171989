"""Token estimates for images and files, by provider.

Every function here is pure: it takes what is known about an attachment (pixel dimensions, byte
size, detail level, media resolution) and the model it is sent to, and returns a count.

- **OpenAI** (and unknown providers): ``base + tiles * tile`` with per-family constants; detail
  ``low`` is the base alone; ``high`` fits the image in 2048x2048, shrinks the shortest side to
  768 and counts 512-pixel tiles; without dimensions the byte size picks 1/4/6/8 tiles.
- **Anthropic**: long edge capped at 1568 (scaled proportionally), ``ceil(w * h / 750)``; by
  bytes 341/1366/2048/2731; 1600 when nothing is known.
- **Google**: ``gemini-3*`` models cost a fixed amount per media resolution; older models cost
  258 per 768-pixel tile (one tile when the size is unknown).
- **Files**: PDFs by provider, everything else ``ceil(bytes / 4)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal, TypeAlias

__all__ = [
    "ModelRef",
    "ProviderFamily",
    "anthropic_image_tokens",
    "file_tokens",
    "google_image_tokens",
    "image_dimensions",
    "image_tokens",
    "openai_image_tokens",
    "parse_model",
]

ProviderFamily: TypeAlias = Literal["openai", "anthropic", "google", "other"]

KB = 1024
MB = 1024 * 1024
_BYTE_BANDS = (512 * KB, 2 * MB, 4 * MB)  # upper bounds of the first three size bands


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelRef:
    """A model as far as token estimation cares: the provider family and the model id."""

    family: ProviderFamily
    model: str  # lower-cased model id without the provider prefix ("gpt-5-mini")


_FAMILY_BY_PROVIDER: dict[str, ProviderFamily] = {
    "openai": "openai",
    "azure": "openai",
    "openai-chat": "openai",
    "openai-responses": "openai",
    "anthropic": "anthropic",
    "claude": "anthropic",
    "google": "google",
    "google-gla": "google",
    "google-vertex": "google",
    "vertex": "google",
    "vertexai": "google",
    "gemini": "google",
}


def _family_of_model(model: str) -> ProviderFamily:
    if model.startswith("gemini"):
        return "google"
    if model.startswith("claude"):
        return "anthropic"
    if model.startswith(("gpt", "chatgpt", "o1", "o3", "o4", "computer-use")):
        return "openai"
    return "other"


def parse_model(provider_model: str | None) -> ModelRef:
    """Split ``"openai/gpt-5-mini"`` or ``"openai:gpt-5-mini"`` into family and model id.

    A bare model id (``"claude-sonnet-4-5"``) is recognised by its prefix; routers such as
    ``"openrouter/anthropic/claude-..."`` are looked through. Anything unknown is ``"other"``,
    which the image rules treat like OpenAI's defaults.
    """
    if not provider_model:
        return ModelRef(family="other", model="")
    text = provider_model.strip().lower()
    cuts = [i for i in (text.find("/"), text.find(":")) if i >= 0]
    if not cuts:
        return ModelRef(family=_family_of_model(text), model=text)
    cut = min(cuts)
    provider, model = text[:cut], text[cut + 1 :]
    family = _FAMILY_BY_PROVIDER.get(provider)
    if family is not None:
        return ModelRef(family=family, model=model)
    inner = parse_model(model)
    if inner.family != "other":
        return inner
    return ModelRef(family=_family_of_model(model), model=model)


def _band(size: int) -> int:
    for i, limit in enumerate(_BYTE_BANDS):
        if size <= limit:
            return i
    return len(_BYTE_BANDS)


def _known(width: int | None, height: int | None) -> tuple[int, int] | None:
    if width is None or height is None or width <= 0 or height <= 0:
        return None
    return width, height


# --------------------------------------------------------------------------------------------
# OpenAI
# --------------------------------------------------------------------------------------------

_OPENAI_TILES_BY_SIZE = (1, 4, 6, 8)


def _openai_constants(model: str) -> tuple[int, int, int]:
    """(base, per-tile, fallback tiles) for an OpenAI model id."""
    if model.startswith("gpt-5"):
        return 70, 140, 4
    if model.startswith("gpt-4o-mini"):
        return 2833, 5667, 1
    if model.startswith(("o1", "o3")):
        return 75, 150, 4
    if "computer-use" in model:
        return 65, 129, 4
    return 85, 170, 4


def _openai_tiles(width: int, height: int) -> int:
    w, h = Fraction(width), Fraction(height)
    longest = max(w, h)
    if longest > 2048:
        w, h = w * 2048 / longest, h * 2048 / longest
    shortest = min(w, h)
    if shortest > 768:
        w, h = w * 768 / shortest, h * 768 / shortest
    return math.ceil(w / 512) * math.ceil(h / 512)


def openai_image_tokens(
    model: str,
    *,
    width: int | None = None,
    height: int | None = None,
    size: int | None = None,
    detail: str | None = None,
) -> int:
    """``base + tiles * tile`` for ``model`` (an OpenAI model id, or ``""`` for the defaults)."""
    base, tile, fallback_tiles = _openai_constants(model)
    dims = _known(width, height)
    level = (detail or "auto").lower()
    if level not in ("low", "high"):
        big_dims = dims is not None and max(dims) > 768
        big_file = size is not None and size > MB
        level = "high" if big_dims or big_file else "low"
    if level == "low":
        return base
    if dims is not None:
        tiles = _openai_tiles(*dims)
    elif size is not None:
        tiles = _OPENAI_TILES_BY_SIZE[_band(size)]
    else:
        tiles = fallback_tiles
    return base + tiles * tile


# --------------------------------------------------------------------------------------------
# Anthropic
# --------------------------------------------------------------------------------------------

ANTHROPIC_MAX_EDGE = 1568
_ANTHROPIC_BY_SIZE = (341, 1366, 2048, 2731)
ANTHROPIC_UNKNOWN = 1600


def anthropic_image_tokens(
    *, width: int | None = None, height: int | None = None, size: int | None = None
) -> int:
    dims = _known(width, height)
    if dims is not None:
        w, h = Fraction(dims[0]), Fraction(dims[1])
        longest = max(w, h)
        if longest > ANTHROPIC_MAX_EDGE:
            w, h = w * ANTHROPIC_MAX_EDGE / longest, h * ANTHROPIC_MAX_EDGE / longest
        return math.ceil(w * h / 750)
    if size is not None:
        return _ANTHROPIC_BY_SIZE[_band(size)]
    return ANTHROPIC_UNKNOWN


# --------------------------------------------------------------------------------------------
# Google
# --------------------------------------------------------------------------------------------

GEMINI3_BY_RESOLUTION = {
    "low": 280,
    "medium": 560,
    "high": 1120,
    "ultra_high": 2240,
    "unspecified": 1120,
}
GOOGLE_TILE = 258


def _resolution(value: str | None) -> str:
    if not value:
        return "unspecified"
    v = value.strip().lower().replace("-", "_")
    return v.removeprefix("media_resolution_")


def google_image_tokens(
    model: str,
    *,
    width: int | None = None,
    height: int | None = None,
    media_resolution: str | None = None,
) -> int:
    if model.startswith("gemini-3"):
        return GEMINI3_BY_RESOLUTION.get(_resolution(media_resolution), 1120)
    dims = _known(width, height)
    if dims is None:
        return GOOGLE_TILE
    return GOOGLE_TILE * math.ceil(dims[0] / 768) * math.ceil(dims[1] / 768)


def image_tokens(
    model: ModelRef,
    *,
    width: int | None = None,
    height: int | None = None,
    size: int | None = None,
    detail: str | None = None,
    media_resolution: str | None = None,
) -> int:
    """The estimate for one image sent to ``model`` (OpenAI rules for unknown providers)."""
    match model.family:
        case "anthropic":
            return anthropic_image_tokens(width=width, height=height, size=size)
        case "google":
            return google_image_tokens(
                model.model, width=width, height=height, media_resolution=media_resolution
            )
        case "openai":
            return openai_image_tokens(
                model.model, width=width, height=height, size=size, detail=detail
            )
        case "other":
            return openai_image_tokens("", width=width, height=height, size=size, detail=detail)


# --------------------------------------------------------------------------------------------
# Files
# --------------------------------------------------------------------------------------------


def file_tokens(
    family: ProviderFamily, *, media_type: str, size: int, filename: str | None = None
) -> int:
    """A non-image file of ``size`` bytes: PDFs by provider, anything else ``ceil(size / 4)``."""
    is_pdf = "pdf" in media_type.lower() or (filename or "").lower().endswith(".pdf")
    if is_pdf:
        if family == "google":
            return max(258, math.ceil(size / 20))
        if family == "anthropic":
            return max(1500, math.ceil(size / 3))
        return max(500, math.ceil(size / 4))
    return math.ceil(size / 4)


# --------------------------------------------------------------------------------------------
# Image headers
# --------------------------------------------------------------------------------------------

_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# JPEG start-of-frame markers (every SOFn except DHT 0xC4, JPG 0xC8 and DAC 0xCC)
_JPEG_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}


def _png(data: bytes) -> tuple[int, int] | None:
    if len(data) < 24 or data[12:16] != b"IHDR":
        return None
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def _gif(data: bytes) -> tuple[int, int] | None:
    if len(data) < 10:
        return None
    return int.from_bytes(data[6:8], "little"), int.from_bytes(data[8:10], "little")


def _jpeg(data: bytes) -> tuple[int, int] | None:
    i, end = 2, len(data)
    while i + 4 <= end:
        if data[i] != 0xFF:
            i += 1  # not at a marker: resynchronise
            continue
        marker = data[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker in (0x01, 0xD8) or 0xD0 <= marker <= 0xD7:  # markers without a length
            i += 2
            continue
        if marker in (0xD9, 0xDA):  # end of image / start of scan: no frame header came first
            return None
        length = int.from_bytes(data[i + 2 : i + 4], "big")
        if marker in _JPEG_SOF:
            if i + 9 > end:
                return None
            height = int.from_bytes(data[i + 5 : i + 7], "big")
            width = int.from_bytes(data[i + 7 : i + 9], "big")
            return width, height
        if length < 2:
            return None
        i += 2 + length
    return None


def _webp(data: bytes) -> tuple[int, int] | None:
    chunk = data[12:16]
    if chunk == b"VP8 " and len(data) >= 30 and data[23:26] == b"\x9d\x01\x2a":
        width = int.from_bytes(data[26:28], "little") & 0x3FFF
        height = int.from_bytes(data[28:30], "little") & 0x3FFF
        return width, height
    if chunk == b"VP8L" and len(data) >= 25 and data[20] == 0x2F:
        bits = int.from_bytes(data[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8X" and len(data) >= 30:
        return int.from_bytes(data[24:27], "little") + 1, int.from_bytes(data[27:30], "little") + 1
    return None


def image_dimensions(data: bytes) -> tuple[int, int] | None:
    """(width, height) read from a PNG, JPEG, GIF or WebP header; ``None`` if not recognised."""
    dims: tuple[int, int] | None = None
    if data.startswith(_PNG_SIGNATURE):
        dims = _png(data)
    elif data.startswith(b"\xff\xd8"):
        dims = _jpeg(data)
    elif data.startswith((b"GIF87a", b"GIF89a")):
        dims = _gif(data)
    elif data.startswith(b"RIFF") and data[8:12] == b"WEBP":
        dims = _webp(data)
    if dims is None or dims[0] <= 0 or dims[1] <= 0:
        return None
    return dims
