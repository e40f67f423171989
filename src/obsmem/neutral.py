"""Conversation text made data: nothing in it can be read as memory's own structure.

Memory's formats are written in lines and tags: ``Dec 4 2025:`` date headers, ``User (2:30 PM):``
role labels, ``<thread id="…">`` blocks, ``<observations>`` and the hint sections, ``Date:``
lines, ``--- message boundary (…) ---`` and ``[recall range …]`` lines; and what the actor is
shown of memory sits inside blocks of its own (``<observations>``, ``<other-conversation>``,
``<working_memory>``, ``<current-task>``, …) in system messages. Any text a user, a tool or a web
page wrote may hold the same shapes. A memory model that copies its input (the worst case of a
real model quoting a page) would turn them into memory's structure, and the actor would read a
stored ``</observations>`` or ``<system-reminder>`` as memory's own. So:

* every tag-opening ``<`` (one followed by a letter, ``_``, ``:``, ``/``, ``!`` or ``?``) in such
  text becomes the look-alike ``‹`` (U+2039), so no tag of any format survives, while ``a < b``,
  ``x <= 3`` and ``<3`` stay as written (:func:`neutral_text`);
* in a memory model's transcript, every line of a part after its first starts with
  :data:`QUOTED` (``"> "``), so no line of content starts where a date header, a role label or a
  bookkeeping line starts, and no line ends in the log's own ``… [truncated]`` mark (shown as
  ``… (truncated)``) (:func:`neutral_block`);
* names and ids shown in a label or an attribute are kept on one line and quoted
  (:func:`neutral_line`, :func:`neutral_attribute`);
* a stored log keeps its own thread-block lines (:func:`neutral_log`).

All are pure, one-to-one on what they change, and idempotent: a reader still sees the text it
was, a char offset into a part stays valid, and a log segment is shown byte-identical every
turn, so the provider's prompt cache keeps hitting.
"""

from __future__ import annotations

import re
from html import escape

__all__ = [
    "QUOTED",
    "TAG_LOOK_ALIKE",
    "neutral_attribute",
    "neutral_block",
    "neutral_line",
    "neutral_log",
    "neutral_text",
]

QUOTED = "> "
"""What starts every continued line of conversation text in a memory model's input."""
TAG_LOOK_ALIKE = "\u2039"
"""What a tag-opening ``<`` in conversation or stored text is shown as (``‹``)."""

_TAG_OPENING = re.compile(r"<(?=[^\W\d]|[:/!?])")
_TRUNCATED_MARK = re.compile(r"… \[truncated\](?=\s*$)")
_NEWLINES = re.compile(r"\r\n?|[\n\v\f\x1c-\x1e\x85\u2028\u2029]")
# The structure a stored log holds itself: thread blocks, alone on their lines, as the parser
# writes them (the input side and the parser keep content from writing such a line).
_THREAD_OPEN = re.compile(r'<thread id="([^"\n]*)">')
_THREAD_CLOSE = "</thread>"


def neutral_text(text: str) -> str:
    """``text`` with each tag-opening ``<`` shown as ``‹``, so it reads as content only."""
    return _TAG_OPENING.sub(TAG_LOOK_ALIKE, text)


def neutral_block(text: str) -> str:
    """``text`` for a transcript line that a label starts: :func:`neutral_text`, every line
    after the first quoted (every kind of line break counts, as models see them), and a line's
    closing ``… [truncated]`` (the mark of a shortened observation) shown as ``… (truncated)``."""
    lines = [
        _TRUNCATED_MARK.sub("… (truncated)", line) for line in _NEWLINES.split(neutral_text(text))
    ]
    return "\n".join([lines[0], *(f"{QUOTED}{line}".rstrip() for line in lines[1:])])


def neutral_line(text: str) -> str:
    """``text`` (a name, an id, a file name) on one line with no tag and no double quote in
    it, for a label such as ``Tool Result NAME:`` or ``[Image #1: NAME]``."""
    return " ".join(_NEWLINES.split(neutral_text(text))).replace('"', "\u2033")  # ″


def neutral_attribute(value: str) -> str:
    """``value`` safe inside a double-quoted attribute (``&``, ``<``, ``>``, quotes escaped)."""
    return escape(value, quote=True)


def neutral_log(log: str) -> str:
    """``log`` (or a segment of it) neutral, its own thread-block lines kept as tags."""
    lines: list[str] = []
    for line in log.split("\n"):
        if line == _THREAD_CLOSE:
            lines.append(line)
        elif opening := _THREAD_OPEN.fullmatch(line):
            lines.append(f'<thread id="{neutral_attribute(opening.group(1))}">')
        else:
            lines.append(neutral_text(line))
    return "\n".join(lines)
