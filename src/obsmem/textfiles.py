"""Reading a text file a user named, with an error that says which file and what is wrong."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

__all__ = ["read_text"]


def read_text(file: Path, error: Callable[[str], Exception], *, expected: str) -> str:
    """The UTF-8 text of ``file``. A file that cannot be read, or is not UTF-8, raises
    ``error(message)`` naming the file; ``expected`` ends the second message by saying what the
    file should be."""
    try:
        return file.read_text(encoding="utf-8")
    except OSError as exc:
        raise error(f"cannot read {file}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise error(f"{file} is not UTF-8 text (byte {exc.start}): {expected}") from exc
