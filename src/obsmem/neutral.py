"""Conversation text made data: nothing in it can be read as memory's own structure.

Memory's formats are written in lines and tags: ``Dec 4 2025:`` date headers, ``User (2:30 PM):``
role labels, ``<thread id="…">`` blocks, ``<observations>`` and the hint sections, ``Date:``
lines, ``--- message boundary (…) ---`` and ``[recall range …]`` lines. Any text a user, a tool
or a web page wrote may hold the same shapes, and a memory model that copies its input (the
worst case of a real model quoting a page) would turn them into structure. So, before a memory
model sees it, conversation text is neutralised in two ways:

* every tag-opening ``<`` (one followed by a letter, a digit, ``/``, ``!`` or ``?``) becomes
  ``‹`` (U+2039), so ``a < b`` stays as written and no tag of any format survives;
* every line of a part after its first starts with :data:`QUOTED` (``"> "``), so no line of
  content can start where a date header, a role label or a bookkeeping line starts.

Both are one-to-one on what they change, so a reader still sees the text it was, and a char
offset into the original stays a char offset into the neutral first line.
"""

from __future__ import annotations

import re

__all__ = ["QUOTED", "neutral", "neutral_block", "neutral_line", "neutral_log"]

QUOTED = "> "
"""What starts every continued line of conversation text in a memory model's input."""

_TAG_OPEN = re.compile(r"<(?=[\w/!?])")
_LOOK_ALIKE = "\u2039"  # ‹
_NEWLINES = re.compile(r"\r\n?|[\n\v\f\x1c-\x1e\x85\u2028\u2029]")
# The structure a stored log holds itself: thread blocks exactly as the parser writes them.
_LOG_TAG = re.compile(r'<thread id="[^"<>\n]*">|</thread>')


def neutral(text: str) -> str:
    """``text`` with no tag in it: each tag-opening ``<`` becomes ``‹``."""
    return _TAG_OPEN.sub(_LOOK_ALIKE, text)


def neutral_block(text: str) -> str:
    """``text`` for a transcript line that a label starts: :func:`neutral`, and every line
    after the first quoted (every kind of line break counts, as models see them)."""
    lines = _NEWLINES.split(neutral(text))
    return "\n".join([lines[0], *(f"{QUOTED}{line}".rstrip() for line in lines[1:])])


def neutral_line(text: str) -> str:
    """``text`` (a name, an id, a file name) on one line with no tag and no quote mark in it,
    for a place such as ``<thread id="…">`` or ``[Image #1: …]``."""
    return " ".join(_NEWLINES.split(neutral(text))).replace('"', "\u2033")  # ″


def neutral_log(log: str) -> str:
    """A stored log shown to a memory model: its own ``<thread>`` block tags (alone on their
    lines, as the parser writes them) stay; any other tag-opening ``<`` in it is neutralised.
    A log written before neutral input, or by a model that quoted a tag, shows no tag."""
    out: list[str] = []
    for line in log.split("\n"):
        out.append(line if _LOG_TAG.fullmatch(line.strip()) else neutral(line))
    return "\n".join(out)
