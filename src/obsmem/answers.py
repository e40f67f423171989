"""What an Observer or Reflector answers, read as real models write it.

:func:`parse_output` reads an answer in the pinned format (an ``<observations>`` block of dated,
prioritised lines, then optional sections such as ``<current-task>``) tolerantly: reasoning
blocks, code fences, tags in any case or with attributes, unclosed or cut-off sections, date
headers written another way, JSON answers, thread blocks without their wrapper.
:func:`match_thread_blocks` gives each ``<thread>`` block of a resource-scope answer to its
thread. The line rules (:data:`DATE_LINE`, :func:`is_entry`) are the log's own, shared with
:mod:`obsmem.observations`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date
from typing import Any, cast

__all__ = [
    "DATE_LINE",
    "MAX_LINE_CHARS",
    "ParsedOutput",
    "is_entry",
    "match_thread_blocks",
    "parse_output",
]

MAX_LINE_CHARS = 10_000
"""Longer observation lines are cut and end in :data:`_TRUNCATED`."""

_TRUNCATED = " … [truncated]"
_HINTS = ("current-task", "suggested-response", "thread-title")


@dataclass(frozen=True, slots=True, kw_only=True)
class ParsedOutput:
    """What an Observer or Reflector answer holds."""

    observations: str
    """The ``<observations>`` content (list lines when the tags are missing), sanitised."""
    current_task: str | None = None
    suggested_response: str | None = None
    thread_title: str | None = None
    sections: Mapping[str, str] = field(default_factory=dict[str, str])
    """Every other ``<slug>…</slug>`` section (inline extractor values), by slug."""
    extracted_values: Mapping[str, Any] = field(default_factory=dict[str, Any])
    """The JSON object of an ``<extracted-values>`` section (ignored when it is not valid)."""
    threads: Mapping[str, ParsedOutput] = field(default_factory=dict[str, "ParsedOutput"])
    """Resource scope: one entry per ``<thread id="…">`` block inside ``<observations>``."""
    well_formed: bool = False
    """The answer is in the format asked for: an ``<observations>`` block opened and closed
    (empty or not), as a model that follows the format writes it when nothing is worth noting;
    an echo or rambling has none."""

    @property
    def is_empty(self) -> bool:
        """True when neither the log nor any thread block holds an observation (``Date:``
        headers alone hold none: small models write one and stop)."""
        noted = any(
            line.strip() and not DATE_LINE.match(line) for line in self.observations.splitlines()
        )
        return not noted and all(t.is_empty for t in self.threads.values())


# Tags are matched in any case and may carry attributes (``<Current-Task>``,
# ``<thread title="…" id="…">``); an opening ``<observations>`` tag must start a line.
_OBS_OPEN = re.compile(r"^[ \t]*<observations(?:\s[^<>]*)?>[ \t]*\n?", re.MULTILINE | re.IGNORECASE)
_OBS_CLOSE = re.compile(r"</observations\s*>", re.IGNORECASE)
_HINT_OPEN = re.compile(
    r"^[ \t]*<(?:current-task|suggested-response|thread-title)(?:\s[^<>]*)?>",
    re.MULTILINE | re.IGNORECASE,
)
_SECTION = re.compile(r"<([a-z][a-z0-9_-]*)(?:\s[^<>]*)?>(.*?)</\1\s*>", re.DOTALL | re.IGNORECASE)
# Where the model's own sections may start: a line's start, or right after one of its sections
# (``</current-task><suggested-response>``). A tag inside an observation line is that line's
# text, never a section: a page the model quoted cannot set a hint, a title or a value.
_LINE_START = re.compile(r"^[ \t]*(?=<)", re.MULTILINE)
_THREAD_BLOCK = re.compile(
    r"^[ \t]*<thread\b[^<>]*?(?<![\w-])id\s*=\s*(?:[\"']([^\"']*)[\"']|([^\s\"'<>]+))[^<>]*>"
    r"(.*?)</thread\s*>",
    re.DOTALL | re.IGNORECASE | re.MULTILINE,
)
_THREAD_TAG = re.compile(r"[ \t]*</?thread(?![\w-])[^>]*>[ \t]*\n?", re.IGNORECASE)
# What starts a list item: the bullets and numbering models write (ASCII, typographic dashes,
# dots, circles, squares, triangles; 1. 1) (1) ① 1． 1、 a) ii.), followed by a space or
# directly by a priority marker. A line of bullets alone ("— — —", "* * *") is a rule, not an item.
_BULLET = (
    r"(?:[*+\-•◦‣⁃∙·・●○◉⚬⬤◆◇■□▪▫▸▹►▻▶▷➤➢➔⦁⦾⦿–—−‐‑⋅❖✦✧①-⑳]"
    r"|\d{1,3}[.)．、）]|[(（]\d{1,3}[)）]|[a-z][.)]|\([a-z]\)|[ivx]{1,5}[.)])"
)
# Priority markers as models write them: the four of the prompt and their look-alikes (other
# colours, squares, check marks; with or without a variation selector), the text markers the
# parser keeps as written, and emoji shortcodes.
_MARKER = (
    r"(?:[🔴🟠🟡🟢🔵🟣🟤⚫⚪🟥🟧🟨🟩🟦🟪✅✔☑✓][\ufe0e\ufe0f]?"
    r"|(?i:\[(?:high|medium|med|low|critical|important|done|completed?)\])"
    r"|(?i:\((?:red|orange|yellow|green|high|medium|low|done)\))"
    r"|:(?:large_)?(?:red|orange|yellow|green|blue|purple|brown|white|black)_(?:circle|square):"
    r"|:(?:white|heavy)_check_mark:|:ballot_box_with_check:)"
)
# A time as the log writes it, "(14:30)", or in 12-hour form, "(2:30 PM)".
_TIME = r"[(\[]\d{1,2}:\d{2}(?:\s?(?i:[ap]\.?m\.?))?[)\]]"
_LIST_LINE = re.compile(rf"^\s*{_BULLET}(?:\s+(?=.*\w)|(?={_MARKER}))")
# A line that reads as an observation with or without a bullet: it starts (after the bullet, a
# checkbox or bold markup) with a priority marker, or with a time after at most a symbol or two
# ("⚠️ (10:25) …").
_ENTRY_LINE = re.compile(
    rf"^\s*(?:{_BULLET}\s*)?(?:\[[ xX]\]\s*)?(?:\*\*|__)?"
    rf"(?:{_MARKER}|(?:[^\w\s()\[\]]{{1,4}}\s*)?{_TIME})"
)
# A sub-item written without its bullet: "-> assistant …", "→ …", "↳ …".
_ARROW_LINE = re.compile(rf"^\s*(?:{_BULLET}\s+)?(?:-+>|=>|[→↳⇒⮑➝⟶])")
# After the closed sections are taken out, an opening tag at the start of a line is a section
# the answer never closed (cut off): nothing from there on is an observation.
_UNCLOSED_SECTION = re.compile(
    r"^[ \t]*<(?!(?:observations|thread)(?![\w-]))[a-z][\w-]*(?:\s[^<>]*)?>",
    re.IGNORECASE | re.MULTILINE,
)
DATE_LINE = re.compile(r"^\s*Date:\s")
_FENCE = re.compile(r"^```[a-zA-Z]*\s*|\s*```$")
_FENCE_LINE = re.compile(r"^[ \t]*```[\w+-]*[ \t]*$")
_NEWLINE = re.compile(r"\r\n?")
# Reasoning: a <think>/<thinking> block that starts the answer (to the end when never closed),
# and a closing tag on its own line whose opening tag the chat template already swallowed.
_REASONING = re.compile(
    r"\A\s*<(think|thinking)(?:\s[^<>]*)?>.*?(?:</\1\s*>|\Z)", re.DOTALL | re.IGNORECASE
)
_REASONING_END = re.compile(r"^[ \t]*</(?:think|thinking)\s*>", re.IGNORECASE | re.MULTILINE)
# A tag the answer was cut off in: "<observ", "</observations", "<current-task" at the end.
_CUT_TAG = re.compile(r"(?:^[ \t]*<[/A-Za-z]|</)[^<>\n]*\Z", re.MULTILINE)

_MONTH_NAMES = (
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
)
_MONTH_NUMBER = {
    **{name: i for i, name in enumerate(_MONTH_NAMES, 1)},
    **{name[:3]: i for i, name in enumerate(_MONTH_NAMES, 1)},
    "sept": 9,
}
_CANONICAL_DATE = re.compile(r"^\s*Date: [A-Z][a-z]{2,8} \d{1,2}, \d{4}$")
_HEADER_MARKUP = re.compile(r"^#{1,6}\s+|\*\*|__")
_DATE_LABEL = re.compile(r"^Date\s*:\s*", re.IGNORECASE)
_HEADER_DATE = re.compile(
    r"(?:(?:mon|tue|wed|thu|fri|sat|sun)[a-z]*\.?,?\s+)?"
    r"(?:(?P<month>[a-z]{3,9})\.?\s+(?P<day>\d{1,2})(?:st|nd|rd|th)?,?\s+(?P<year>\d{4})"
    r"|(?P<day2>\d{1,2})(?:st|nd|rd|th)?\s+(?P<month2>[a-z]{3,9})\.?,?\s+(?P<year2>\d{4})"
    r"|(?P<iso>\d{4})-(?P<iso_month>\d{2})-(?P<iso_day>\d{2}))",
    re.IGNORECASE,
)


def parse_output(
    text: str, *, multi_thread: bool = True, extra_slugs: Collection[str] = ()
) -> ParsedOutput:
    """Parse an Observer or Reflector answer.

    One or more ``<observations>`` blocks (the opening tag must start a line) are joined; without
    them only list-item lines (any bullet or numbering), lines led by a priority marker or a
    time, their indented or ``->`` continuation lines, date headers and ``<thread>`` blocks are
    kept (or, for an answer written as a JSON object, its ``"observations"``). Around the blocks
    the same is read, in order, when every block is empty; otherwise only date headers, marked
    or timed lines with their continuations and ``<thread>`` blocks are taken from there, so a
    date header above the block or lines after a block closed too early are kept and remarks
    about the answer are not. Reasoning (``<think>`` blocks), the code
    fence around an answer, CRLF line endings and a tag the answer was cut off in are dropped
    first, and date headers written another way become ``Date: Dec 4, 2025`` lines. Tags are
    matched in any case and may carry attributes. ``<thread id="…">`` blocks inside
    the observations become :attr:`ParsedOutput.threads` (their own hints parsed from each block)
    and stay in :attr:`ParsedOutput.observations` without those hints. With
    ``multi_thread=False`` (single-thread output) stray ``<thread>`` tags are stripped instead.
    ``extra_slugs`` are the inline extractor sections asked for: written inside
    ``<observations>`` they are taken out of the log too (and used when missing outside).
    """
    text = _CUT_TAG.sub("", _without_reasoning(_NEWLINE.sub("\n", text)))
    blocks, between = _observation_blocks(text)
    if blocks is None and (rewritten := _json_answer(text)) is not None:
        blocks, between = _observation_blocks(rewritten)
    body = _loose_lines(text) if blocks is None else _joined_blocks(blocks, between)
    outside = "".join(between)
    threads: dict[str, ParsedOutput] = {}
    if multi_thread:
        body = _THREAD_BLOCK.sub(lambda m: _take_thread(m, threads), body)
    else:
        body = _THREAD_TAG.sub("", body)
    top = _inner(outside)
    stray = _inner(body)  # hints written inside <observations> count when missing outside
    extra = frozenset(extra_slugs)
    stray_sections = {k: v for k, v in stray.sections.items() if k in extra}
    return ParsedOutput(
        observations=_sanitise(_without_sections(body, lambda m: _drop_stray_hint(m, extra))),
        current_task=top.current_task or stray.current_task,
        suggested_response=top.suggested_response or stray.suggested_response,
        thread_title=top.thread_title or stray.thread_title,
        sections={**stray_sections, **top.sections},
        extracted_values=top.extracted_values or stray.extracted_values,
        threads=threads,
        well_formed=blocks is not None and _OBS_CLOSE.search(text) is not None,
    )


def _observation_blocks(text: str) -> tuple[list[str] | None, list[str]]:
    """The ``<observations>`` contents (``None`` when there are none) and the text outside
    them: one piece before each block and one after the last."""
    blocks: list[str] = []
    outside: list[str] = []
    pos = 0
    while (opening := _OBS_OPEN.search(text, pos)) is not None:
        outside.append(text[pos : opening.start()])
        closing = _OBS_CLOSE.search(text, opening.end())
        if closing is None:  # unclosed: the block runs to the first hint section or the end
            rest = text[opening.end() :]
            hint = _HINT_OPEN.search(rest)
            cut = hint.start() if hint else len(rest)
            blocks.append(_without_closing_remarks(rest[:cut]))
            pos = opening.end() + cut
            break
        blocks.append(text[opening.end() : closing.start()])
        pos = closing.end()
    outside.append(text[pos:])
    return (blocks or None), outside


def _joined_blocks(blocks: list[str], between: list[str]) -> str:
    """The blocks (a blank line between two) with the observations written around them, in
    the order of the answer: a date header above the first block, lines after a block closed
    too early, ``<thread>`` blocks after the wrapper. When every block is empty (a model that
    opened and closed the block at once, then wrote its log) the text after the first block is
    read like an answer without tags; otherwise, and always before the first block, only lines
    that read as observations are taken (so a list of remarks about the answer stays out)."""
    blocks = [_unfenced(b) for b in blocks]
    strict = any(b.strip() for b in blocks)
    pieces: list[str] = []
    for i, block in enumerate(blocks):
        if around := _loose_lines(between[i], strict=strict or not i):
            pieces.append(around)
        elif i:
            pieces.append("")
        pieces.append(block)
    pieces.append(_loose_lines(between[-1], strict=strict))
    return "\n".join(pieces)


def _inner(text: str) -> ParsedOutput:
    """The hint sections of ``text``; the rest (tags removed) is the observations."""
    hints: dict[str, str | None] = dict.fromkeys(_HINTS)
    sections: dict[str, str] = {}
    values: dict[str, Any] = {}
    for match in _own_sections(text):
        slug, content = match.group(1).lower(), match.group(2).strip()
        if slug in ("observations", "thread"):
            continue
        if slug in hints:
            hints[slug] = content or None
        elif slug == "extracted-values":
            values = _json_object(content)
        else:
            sections[slug] = content
    return ParsedOutput(
        observations=_sanitise(_without_sections(text)),
        current_task=hints["current-task"],
        suggested_response=hints["suggested-response"],
        thread_title=hints["thread-title"],
        sections=sections,
        extracted_values=values,
    )


def match_thread_blocks(
    thread_ids: Sequence[str], blocks: Mapping[str, ParsedOutput]
) -> dict[str, ParsedOutput]:
    """Which of the Observer's ``<thread id>`` blocks belongs to which of ``thread_ids`` (the
    threads it was shown, in order), tolerating what models get wrong: an exact id first, then
    the same id up to case and surrounding space, then a unique prefix either way (a cut or
    extended id), then, when as many blocks as threads are left, their order. A thread no block
    can be matched to is absent from the result (its messages stay unobserved)."""
    left = dict(blocks)
    found: dict[str, ParsedOutput] = {}

    def take(tid: str, key: str) -> None:
        found[tid] = left.pop(key)

    for tid in thread_ids:
        if tid in left:
            take(tid, tid)
    for tid in [t for t in thread_ids if t not in found]:
        same = [k for k in left if k.strip().lower() == tid.strip().lower()]
        if len(same) == 1:
            take(tid, same[0])
    for tid in [t for t in thread_ids if t not in found]:
        near = [k for k in left if _near(tid, k)]
        rivals = [t for t in thread_ids if t not in found and near and _near(t, near[0])]
        if len(near) == 1 and rivals == [tid]:
            take(tid, near[0])
    missing = [t for t in thread_ids if t not in found]
    if missing and len(left) == len(missing):
        for tid, key in zip(missing, list(left), strict=True):
            take(tid, key)
    return {t: found[t] for t in thread_ids if t in found}


def _near(thread_id: str, key: str) -> bool:
    key = key.strip()
    return bool(key) and (thread_id.startswith(key) or key.startswith(thread_id))


def _take_thread(match: re.Match[str], into: dict[str, ParsedOutput]) -> str:
    thread_id, content = match.group(1) or match.group(2) or "", match.group(3)
    parsed = _inner(content)
    into[thread_id] = parsed
    return f'<thread id="{thread_id}">\n{parsed.observations}\n</thread>'


def _drop_stray_hint(match: re.Match[str], extra: frozenset[str] = frozenset()) -> str:
    """Hint and extractor sections that slipped into the observations are removed; other tags
    stay as text."""
    slug = match.group(1).lower()
    if slug in _HINTS or slug == "extracted-values" or slug in extra:
        return ""
    return match.group(0)


def _own_sections(text: str) -> list[re.Match[str]]:
    """The ``<slug>…</slug>`` sections of ``text`` that the model wrote as sections: each
    opens a line or follows another one directly; tags inside a line of text are its text."""
    found: list[re.Match[str]] = []
    for start in _LINE_START.finditer(text):
        if found and start.start() < found[-1].end():
            continue
        pos = start.end()
        while (match := _SECTION.match(text, pos)) is not None:
            found.append(match)
            pos = match.end()
            while text[pos : pos + 1] in (" ", "\t"):
                pos += 1
    return found


def _without_sections(text: str, keep: Callable[[re.Match[str]], str] | None = None) -> str:
    """``text`` with its own sections (:func:`_own_sections`) replaced by ``keep(match)``
    (removed when ``keep`` is None)."""
    pieces: list[str] = []
    pos = 0
    for match in _own_sections(text):
        pieces += [text[pos : match.start()], keep(match) if keep else ""]
        pos = match.end()
    pieces.append(text[pos:])
    return "".join(pieces)


def _json_object(content: str) -> dict[str, Any]:
    try:
        value = json.loads(_FENCE.sub("", content.strip()))
    except ValueError:
        return {}
    return cast(dict[str, Any], value) if isinstance(value, dict) else {}


def _loose_lines(text: str, *, strict: bool = False) -> str:
    """The log written outside ``<observations>`` tags (a whole answer without them, or the
    text around the blocks): its ``<thread>`` blocks whole and, outside any section, its
    observation lines (see :func:`_log_lines`)."""
    parts: list[str] = []
    pos = 0
    for match in _THREAD_BLOCK.finditer(text):
        parts += [_log_lines(text[pos : match.start()], strict=strict), match.group(0)]
        pos = match.end()
    parts.append(_log_lines(text[pos:], strict=strict))
    return "\n".join(p for p in parts if p)


def _log_lines(text: str, *, strict: bool) -> str:
    """Date headers, lines that read as observations (a priority marker or a time first, with
    or without a bullet), any list item unless ``strict``, and the lines right under one of
    those that continue it (indented, or a ``->`` sub-item); prose, closed sections, and all
    from a section the answer never closed are left out."""
    text = _without_sections(text)
    if (unclosed := _UNCLOSED_SECTION.search(text)) is not None:
        text = text[: unclosed.start()]
    kept: list[str] = []
    under_entry = False
    for line in text.split("\n"):
        if _is_date_line(line):
            kept.append(line)
            under_entry = False
        elif _ENTRY_LINE.match(line) or (not strict and _LIST_LINE.match(line)):
            kept.append(line)
            under_entry = True
        elif under_entry and line.strip() and (line[:1] in " \t" or _ARROW_LINE.match(line)):
            kept.append(line)
        else:
            under_entry = False
    return "\n".join(kept)


def is_entry(line: str) -> bool:
    """``line`` is an observation: a list item, or a line led by a priority marker or time."""
    return bool(_LIST_LINE.match(line) or _ENTRY_LINE.match(line))


def _is_date_line(line: str) -> bool:
    return bool(DATE_LINE.match(line)) or _date_header(line) is not None


def _date_header(line: str) -> str | None:
    """``line`` as a ``Date: Dec 4, 2025`` header when it is a date header written another way
    (``**Date: Dec 4, 2025**``, ``## Dec 4, 2025``, ``Date: 2025-12-04``, ``December 4th,
    2025:``, ``Thursday, 4 December 2025``); ``None`` for other lines and canonical headers."""
    if _CANONICAL_DATE.match(line):
        return None
    core = _HEADER_MARKUP.sub("", line.strip()).strip().rstrip(":").strip()
    core = _DATE_LABEL.sub("", core).rstrip(":").strip()
    match = _HEADER_DATE.fullmatch(core)
    if match is None:
        return None
    if match["iso"]:
        year, month, day = int(match["iso"]), int(match["iso_month"]), int(match["iso_day"])
    else:
        year = int(match["year"] or match["year2"])
        day = int(match["day"] or match["day2"])
        month = _MONTH_NUMBER.get((match["month"] or match["month2"]).lower(), 0)
    try:
        when = date(year, month, day)
    except ValueError:
        return None
    return f"Date: {_MONTH_NAMES[when.month - 1][:3].title()} {when.day}, {when.year}"


def _without_reasoning(text: str) -> str:
    """``text`` without the model's reasoning, which only ever leads the answer: a
    ``<think>``/``<thinking>`` block that starts it (to the end when never closed), or, when the
    chat template swallowed the opening tag (llama.cpp with Qwen or DeepSeek models), all before
    the first closing tag on a line of its own, provided no ``<observations>`` block opened
    before it or one opens after it (drafts inside reasoning). A ``<think>`` line later in the
    answer is the answer's text: it never takes notes with it."""
    text = _REASONING.sub("", text, count=1)
    end = _REASONING_END.search(text)
    if end is None:
        return text
    if _OBS_OPEN.search(text, 0, end.start()) and not _OBS_OPEN.search(text, end.end()):
        return text  # a closing tag inside the answer's own block, not reasoning before it
    return text[end.end() :]


def _json_answer(text: str) -> str | None:
    """An answer written as a JSON object (``{"observations": [...], "current_task": ...}``,
    fenced or not) rewritten in the tag format; ``None`` when ``text`` is not one. A list's
    items are observation lines ("* " is added to those that are neither list items nor date
    headers); a string is the block as written."""
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        return None
    try:
        value = json.loads(text[start : end + 1])
    except ValueError:
        return None
    if not isinstance(value, dict):
        return None
    fields = {str(k).lower().replace("_", "-"): v for k, v in cast(dict[Any, Any], value).items()}
    observations = fields.get("observations")
    if isinstance(observations, str):
        body = observations
    elif isinstance(observations, list):
        items = [i for i in cast(list[Any], observations) if isinstance(i, str)]
        body = "\n".join(i if _LIST_LINE.match(i) or _is_date_line(i) else f"* {i}" for i in items)
    else:
        return None
    hints = [f"<{h}>{v}</{h}>" for h in _HINTS if isinstance(v := fields.get(h), str)]
    return "\n".join([f"<observations>\n{body}\n</observations>", *hints])


def _unfenced(block: str) -> str:
    """``block`` without a code fence around all of it, or a lone fence at its start or end
    (opened or closed outside the tags); fences that pair up around a snippet inside stay."""
    lines = block.strip("\n").split("\n")
    fences = [i for i, line in enumerate(lines) if _FENCE_LINE.match(line)]
    if len(fences) % 2 == 0 and fences and fences[0] == 0 and fences[-1] == len(lines) - 1:
        lines = lines[1:-1]
    elif len(fences) % 2 == 1 and fences[-1] == len(lines) - 1:
        lines = lines[:-1]
    elif len(fences) % 2 == 1 and fences[0] == 0:
        lines = lines[1:]
    return "\n".join(lines)


def _without_closing_remarks(block: str) -> str:
    """An unclosed block without the paragraphs of prose after its last observation ("Let me
    know if…"): trailing paragraphs with no list item, date header, indented line or tag."""
    while True:
        head, blank, tail = block.rstrip().rpartition("\n\n")
        if not blank or any(_is_log_line(line) for line in tail.splitlines()):
            return block
        block = head


def _is_log_line(line: str) -> bool:
    return is_entry(line) or _is_date_line(line) or line[:1] in (" ", "\t", "<")


def _sanitise(text: str) -> str:
    out: list[str] = []
    for line in text.splitlines():
        line = _date_header(line) or line.rstrip()
        if len(line) > MAX_LINE_CHARS:
            line = line[: MAX_LINE_CHARS - len(_TRUNCATED)] + _TRUNCATED
        out.append(line)
    return re.sub(r"\n{3,}", "\n\n", "\n".join(out)).strip("\n")
