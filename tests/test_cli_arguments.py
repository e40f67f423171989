"""An option several commands take reads its value the same way in each (``cli/arguments.py``
defines it once): a threshold is a number of tokens, written ``30000``, ``30,000`` or ``30_000``,
at least 1, checked when the arguments are parsed."""

from __future__ import annotations

import argparse

import pytest

from obsmem.cli import _parser  # pyright: ignore[reportPrivateUsage]

# The arguments a command needs besides the one under test.
NEEDS = {
    "replay": ["chat.jsonl"],
    "proxy": ["--upstream", "http://127.0.0.1:9/v1"],
    "bench": ["longmemeval", "--data", "questions.json"],
}
THRESHOLDS = ("demo", "replay", "chat", "bench", "mcp", "proxy", "ui", "worker")


def _parse(name: str, *argv: str) -> argparse.Namespace:
    full = [name, *NEEDS.get(name, ()), *argv]
    return _parser(full).parse_args(full)


@pytest.mark.parametrize("name", THRESHOLDS)
def test_every_threshold_reads_a_number_of_tokens_the_same_way(name: str) -> None:
    args = _parse(name, "--message-tokens", "30,000", "--observation-tokens", "40_000")
    assert (args.message_tokens, args.observation_tokens) == (30_000, 40_000)


@pytest.mark.parametrize("name", THRESHOLDS)
def test_every_threshold_below_one_token_is_refused_with_the_usage(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        _parse(name, "--message-tokens", "0")
    assert exited.value.code == 2
    error = capsys.readouterr().err
    assert error.startswith(f"usage: obsmem {name}")
    assert "argument --message-tokens: '0': give a number of tokens" in error
