"""Argument types the commands share (argparse ``type=`` functions)."""

from __future__ import annotations

import argparse

__all__ = ["at_least_one"]


def at_least_one(text: str) -> int:
    """A whole number of at least 1; argparse reports anything else in one line."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give a number of at least 1")
    return value
