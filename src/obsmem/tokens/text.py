"""The text heuristic: a fast, dependency-free token estimate in the style of ``tokenx``.

The text is cut into segments at runs of whitespace and at runs of the punctuation set
``.,!?;(){}[]<>:/\\|@#$%^&*+=`~_-`` (the separators are segments too). Each segment is priced:

1. whitespace: 0;
2. contains a CJK, Hangul or kana character: 0.73 per such code point and 0.25 per other
   character, rounded, at least 1 (o200k merges common CJK pairs: one per code point over-counts
   Chinese by ~37%);
3. numeric (``^\\d+([.,]\\d+)*$``): 1;
4. at most 3 characters: 1;
5. contains punctuation: ``ceil(len / 2)``;
6. otherwise ``ceil(len / cpt)`` where ``cpt`` is 3 for words with German umlauts/ß or common
   French/Spanish accents, 3.5 for Polish/Czech diacritics and 6 for everything else.

Text that looks like JSON (more than 6% of its characters are ``"``) is priced as o200k prices
JSON instead: quotes are separators too, a digit run is ``ceil(len / 3)`` and each line break
followed by indentation one token. Without this, JSON is under-counted by about a third
(bench/estimator.py).

Because punctuation (including ``.`` and ``,``) always splits a segment, rule 3 only ever sees
plain digit runs, rule 5 only sees punctuation runs, and rule 2 never sees punctuation runs. The
implementation uses that: punctuation runs and word runs are found by two precompiled regexes and
priced separately, with a fast path for ASCII words.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

__all__ = ["PUNCTUATION", "estimate_text_tokens", "segment_text", "segment_tokens"]

PUNCTUATION = ".,!?;(){}[]<>:/\\|@#$%^&*+=`~_-"
"""The separator set; a run of these characters is one segment."""

_P = re.escape(PUNCTUATION)
_SPLIT = re.compile(rf"(\s+|[{_P}]+)")
_PUNCT_RUN = re.compile(rf"[{_P}]+")
_WORD_RUN = re.compile(rf"[^\s{_P}]+")
_HAS_PUNCT = re.compile(rf"[{_P}]")
_WHITESPACE = re.compile(r"\s+")
_NUMERIC = re.compile(r"[0-9]+(?:[.,][0-9]+)*")

# CJK ideographs and symbols, fullwidth forms, kana (hiragana and katakana), Hangul jamo and
# syllables: the ranges tokenx uses, plus hiragana.
_CJK = re.compile(
    "["
    "\u4e00-\u9fff\u3400-\u4dbf\u3000-\u303f\uff00-\uffef\u3040-\u309f\u30a0-\u30ff"
    "\u2e80-\u2eff\u31c0-\u31ef\u3200-\u32ff\u3300-\u33ff\uac00-\ud7af\u1100-\u11ff"
    "\u3130-\u318f\ua960-\ua97f\ud7b0-\ud7ff"
    "]"
)
_CPT3 = re.compile("[äöüßẞéèêëàâîïôûùÿçœæáíóúñ]", re.IGNORECASE)  # German, French, Spanish
_CPT35 = re.compile("[ąćęłńśźżěščřžýůďťň]", re.IGNORECASE)  # Polish, Czech (beyond the above)

SHORT_SEGMENT = 3
DEFAULT_CHARS_PER_TOKEN = 6


def _word_tokens(word: str) -> int:
    """Tokens of one segment that holds no whitespace and no punctuation."""
    n = len(word)
    if word.isascii():
        # ASCII: no CJK and no accents; digit runs and short words are one token, and
        # ceil(n/6) is already 1 for n <= 6.
        return 1 if n <= 6 or word.isdigit() else (n + 5) // 6
    if _CJK.search(word):
        return _cjk_tokens(word)
    if n <= SHORT_SEGMENT or _NUMERIC.fullmatch(word):
        return 1
    if _CPT3.search(word):
        return (n + 2) // 3
    if _CPT35.search(word):
        return (2 * n + 6) // 7  # ceil(n / 3.5)
    return (n + 5) // 6


def _cjk_tokens(segment: str) -> int:
    cjk = len(_CJK.findall(segment))
    return max(1, (73 * cjk + 25 * (len(segment) - cjk) + 50) // 100)


def _punct_tokens(run: str) -> int:
    n = len(run)
    return 1 if n <= SHORT_SEGMENT else (n + 1) // 2


def estimate_text_tokens(text: str) -> int:
    """The heuristic token count of ``text`` (0 for the empty string)."""
    if not text:
        return 0
    count = _json_tokens if text.count('"') * 100 > len(text) * JSON_QUOTE_PERCENT else _tokens
    return sum(map(count, _pieces(text)))


PIECE_CHARS = 1 << 20
"""Long text is counted a piece of about this many characters at a time: each regex scan holds
the GIL, so a counting thread then lets the event loop in between pieces."""
_SPACE_BEFORE_WORD = re.compile(r"\s(?=\S)")


def _pieces(text: str) -> Iterator[str]:
    """``text`` cut right after a whitespace run, every :data:`PIECE_CHARS` or so: no segment
    and no line's indentation spans a cut, so the pieces' counts add up to the whole's."""
    start = 0
    while len(text) - start > PIECE_CHARS:
        cut = _SPACE_BEFORE_WORD.search(text, start + PIECE_CHARS)
        if cut is None:
            break
        yield text[start : cut.end()]
        start = cut.end()
    yield text[start:]


def _tokens(text: str) -> int:
    total = sum(map(_punct_tokens, _PUNCT_RUN.findall(text)))
    return total + sum(map(_word_tokens, _WORD_RUN.findall(text)))


JSON_QUOTE_PERCENT = 6
"""Text with more than this share of ``"`` characters is priced as JSON."""

_JP = re.escape(PUNCTUATION + '"')
_JSON_PUNCT_RUN = re.compile(rf"[{_JP}]+")
_JSON_WORD_RUN = re.compile(rf"[^\s{_JP}]+")
_INDENTED_LINE = re.compile(r"\n[ \t]+")


def _json_tokens(text: str) -> int:
    punct = sum(map(_punct_tokens, _JSON_PUNCT_RUN.findall(text)))
    words = sum(
        (len(w) + 2) // 3 if w.isdigit() else _word_tokens(w) for w in _JSON_WORD_RUN.findall(text)
    )
    return punct + words + len(_INDENTED_LINE.findall(text))


def segment_text(text: str) -> list[str]:
    """The segments of ``text`` in order, separators included (they join back to ``text``)."""
    return [s for s in _SPLIT.split(text) if s]


def segment_tokens(segment: str) -> int:
    """The price of one segment, by the rules in order (a reference for tests and debugging;
    text priced as JSON follows its own rules)."""
    if not segment or _WHITESPACE.fullmatch(segment):
        return 0
    if _CJK.search(segment):
        return _cjk_tokens(segment)
    if _NUMERIC.fullmatch(segment) or len(segment) <= SHORT_SEGMENT:
        return 1
    if _HAS_PUNCT.search(segment):
        return (len(segment) + 1) // 2
    if _CPT3.search(segment):
        return (len(segment) + 2) // 3
    if _CPT35.search(segment):
        return (2 * len(segment) + 6) // 7
    return (len(segment) + 5) // 6
