"""Counting messages: the estimator seam, the part rules and the per-message overheads.

``count_message`` = tokens(role) + 3.8 + the parts' tokens, rounded half up; a conversation adds
24 once. Part rules:

- text: its text;
- tool call: name + arguments (a string as it is; an object as compact JSON, less 12);
- tool result: one extra 3.8 plus the result (``metadata["model_output"]`` when the part has
  one, else the full content; a string as it is, anything else as JSON less 12) plus its
  attachments;
- image and file: :mod:`obsmem.tokens.media` by the estimator's provider, unless the caller set
  ``token_estimate``;
- reasoning and data: 0.

Part-level counts are cached in the part's metadata (:mod:`obsmem.tokens.cache`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any, ClassVar, Protocol, Self, runtime_checkable

from obsmem.messages import FilePart, ImagePart, Message, Part, ToolResultPart
from obsmem.tokens.cache import cached_tokens
from obsmem.tokens.media import ModelRef, file_tokens, image_dimensions, image_tokens, parse_model
from obsmem.tokens.text import estimate_text_tokens

__all__ = [
    "JSON_OVERHEAD",
    "TOKENS_PER_CONVERSATION",
    "TOKENS_PER_MESSAGE",
    "BaseEstimator",
    "HeuristicEstimator",
    "TokenEstimator",
    "to_json",
]

TOKENS_PER_MESSAGE = 3.8
"""Added once per message, and once more per tool result."""
TOKENS_PER_CONVERSATION = 24
"""Added once per non-empty list of messages."""
JSON_OVERHEAD = 12
"""Subtracted from the count of a JSON-serialised object (its quoting and braces are cheap)."""


@runtime_checkable
class TokenEstimator(Protocol):
    """What the engine needs to know about token counts."""

    def count_text(self, text: str) -> int: ...

    def count_message(self, message: Message) -> int: ...

    def count_messages(self, messages: Sequence[Message]) -> int: ...


def to_json(value: Any) -> str:
    """Compact JSON as JavaScript's ``JSON.stringify`` writes it (key order kept, no spaces)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)


def _round_half_up(x: float) -> int:
    return math.floor(x + 0.5)


def _metadata_str(metadata: dict[str, Any], key: str) -> str | None:
    value = metadata.get(key)
    return value if isinstance(value, str) else None


class BaseEstimator:
    """The message and part rules around a text counter. Subclasses set ``source`` (the cache
    source; two estimators never share numbers) and implement :meth:`count_text`."""

    __slots__ = ("_model", "_roles", "provider_model")
    source: ClassVar[str] = ""

    def __init__(self, provider_model: str | None = None) -> None:
        self.provider_model = provider_model
        self._model: ModelRef = parse_model(provider_model)
        self._roles: dict[str, int] = {}
        """Each role's tokens, counted once (a window of 100,000 messages counts it 100,000
        times)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(provider_model={self.provider_model!r})"

    def for_model(self, provider_model: str | None) -> Self:
        """The same estimator for another model (image and PDF costs depend on the provider)."""
        return type(self)(provider_model)

    # -- text -------------------------------------------------------------------------------

    def count_text(self, text: str) -> int:
        raise NotImplementedError

    def _cached_text(self, metadata: dict[str, Any], kind: str, text: str) -> int:
        return cached_tokens(metadata, kind, text, self.source, lambda: self.count_text(text))

    def _value(self, metadata: dict[str, Any], kind: str, value: Any) -> int:
        """A string as it is; anything else as JSON less the JSON overhead (never below 0)."""
        if isinstance(value, str):
            return self._cached_text(metadata, kind, value)
        counted = self._cached_text(metadata, f"{kind}-json", to_json(value))
        return max(0, counted - JSON_OVERHEAD)

    # -- messages ---------------------------------------------------------------------------

    def count_message(self, message: Message) -> int:
        role = self._roles.get(message.role)
        if role is None:
            role = self._roles[message.role] = self.count_text(message.role)
        total = role + TOKENS_PER_MESSAGE
        for part in message.parts:
            total += self.count_part(part)
        return _round_half_up(total)

    def count_messages(self, messages: Sequence[Message]) -> int:
        """The messages plus the conversation overhead (0 for no messages)."""
        if not messages:
            return 0
        return TOKENS_PER_CONVERSATION + sum(self.count_message(m) for m in messages)

    def count_part(self, part: Part) -> float:
        """One part's tokens, without the message overhead (a tool result includes its own)."""
        match part.kind:
            case "text":
                return self._cached_text(part.metadata, "text", part.text)
            case "tool-call":
                name = self._cached_text(part.metadata, "tool-call-name", part.tool_name)
                return name + self._value(part.metadata, "tool-call-args", part.args)
            case "tool-result":
                return self._tool_result(part)
            case "image":
                return self.count_image(part)
            case "file":
                return self.count_file(part)
            case "reasoning" | "data":
                return 0

    def _tool_result(self, part: ToolResultPart) -> float:
        if "model_output" in part.metadata:
            result = self._value(
                part.metadata, "tool-result-model-output", part.metadata["model_output"]
            )
        else:
            result = self._value(part.metadata, "tool-result", part.content)
        attachments = sum(self.count_part(a) for a in part.attachments)
        return TOKENS_PER_MESSAGE + result + attachments

    # -- media ------------------------------------------------------------------------------

    def _image_count(
        self,
        metadata: dict[str, Any],
        kind: str,
        *,
        data: bytes | None,
        url: str | None,
        width: int | None,
        height: int | None,
        detail: str | None,
    ) -> int:
        if (width is None or height is None) and data is not None:
            width, height = image_dimensions(data) or (width, height)
        size = None if data is None else len(data)
        resolution = _metadata_str(metadata, "media_resolution")
        model = self._model
        inputs = {
            "model": f"{model.family}:{model.model}",
            "width": width,
            "height": height,
            "size": size,
            "detail": detail,
            "media_resolution": resolution,
            "url": url if data is None else None,
        }
        return cached_tokens(
            metadata,
            kind,
            to_json(inputs),
            self.source,
            lambda: image_tokens(
                model,
                width=width,
                height=height,
                size=size,
                detail=detail,
                media_resolution=resolution,
            ),
        )

    def count_image(self, part: ImagePart) -> int:
        if part.token_estimate is not None:
            return part.token_estimate
        return self._image_count(
            part.metadata,
            "image",
            data=part.data,
            url=part.url,
            width=part.width,
            height=part.height,
            detail=part.detail or _metadata_str(part.metadata, "detail"),
        )

    def count_file(self, part: FilePart) -> int:
        if part.token_estimate is not None:
            return part.token_estimate
        meta = part.metadata
        if part.media_type.lower().startswith("image/"):
            return self._image_count(
                meta,
                "image-like-file",
                data=part.data,
                url=part.url,
                width=None,
                height=None,
                detail=_metadata_str(meta, "detail"),
            )
        if part.data is None:
            descriptor: dict[str, str] = {"type": "file", "mimeType": part.media_type}
            if part.filename is not None:
                descriptor["filename"] = part.filename
            return self._cached_text(meta, "file-descriptor", to_json(descriptor))
        family, size, media_type, filename = (
            self._model.family,
            len(part.data),
            part.media_type,
            part.filename,
        )
        inputs = {
            "family": family,
            "media_type": media_type,
            "filename": filename,
            "size": size,
        }
        return cached_tokens(
            meta,
            "non-image-file",
            to_json(inputs),
            self.source,
            lambda: file_tokens(family, media_type=media_type, size=size, filename=filename),
        )


class HeuristicEstimator(BaseEstimator):
    """The default: the tokenx-style text heuristic, no dependencies, about a million words a
    second. ``provider_model`` (``"openai/gpt-5-mini"``, ``"anthropic:claude-..."``) picks the
    image and PDF rules; ``None`` means OpenAI's defaults."""

    __slots__ = ()
    source = "v1:heuristic"

    def count_text(self, text: str) -> int:
        return estimate_text_tokens(text)


def for_actor(estimator: TokenEstimator, model: str | None) -> TokenEstimator:
    """``estimator`` with the image and PDF rules of ``model``'s provider (``"anthropic/..."``).

    Only an estimator of ours built without a model changes: one built for a model keeps it (the
    caller chose), and a custom estimator is used as it is."""
    if not model or not isinstance(estimator, BaseEstimator) or estimator.provider_model:
        return estimator
    return estimator.for_model(model)
