"""A failure's cause in a few words, as ``obsmem chat``'s status line shows it."""

from __future__ import annotations

import pytest

from obsmem.failures import brief

REFUSED = (
    "the observer call to model 'local-test' failed: ModelRequestRejectedError: status_code: "
    "400, model_name: local-test, body: {'code': 400, 'message': 'upstream exploded: the GPU "
    "fell over', 'type': 'invalid_request_error'}. This error is not retried; check the model "
    "name, its settings and the provider account"
)


@pytest.mark.parametrize(
    ("error", "words"),
    [
        (REFUSED, "HTTP 400: upstream exploded: the GPU fell over"),
        ("HTTP 500: the GPU fell over", "HTTP 500: the GPU fell over"),
        (
            "timed out; last error: HTTP 503: Service Unavailable: loading model",
            "timed out retrying HTTP 503: Service Unavailable: loading model",
        ),
        ("timed out", "timed out"),
        (
            "the observer call to model 'm' failed: ConnectError: All connection attempts "
            "failed. This error is not retried; check the model name",
            "ConnectError: All connection attempts failed",
        ),
        (
            "The Observer's answer was empty (not one observation in it) twice in a row; no "
            "observations were recorded",
            "The Observer's answer was empty (not one observation in it) twice in a row",
        ),
    ],
)
def test_brief_keeps_the_cause(error: str, words: str) -> None:
    assert brief(error) == words


def test_brief_is_short() -> None:
    line = brief("the model said " + "nothing useful " * 20)
    assert len(line) == 80
    assert line.endswith("…")
