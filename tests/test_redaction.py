"""Secrets are taken out of error text where it is first captured: the keys this process hands
a provider, bearer tokens and provider-shaped keys, and nothing that is an ordinary word."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from obsmem.cycles.common import describe_error
from obsmem.errors import ModelError
from obsmem.failures import FailureState, next_failure
from obsmem.redaction import REDACTED, redact, remember_key, remember_model_keys

NOW = datetime(2025, 12, 4, 10, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    "secret",
    [
        "sk-Q7vX2mNcR4tY8uWz1aBd5eFg9hJk3LpS",
        "sk-proj-Q7vX2mNcR4tY8uWz1aBd5eFg9hJk3LpS_x-9",
        "sk-ant-api03-Q7vX2mNcR4tY8uWz1aBd5eFg9hJk3LpS-AA",
        "sk-or-v1-0123456789abcdef0123456789abcdef",
        "sk-svcacct-Q7vX2mNcR4tY8uWz1aBd5eFg9",
        "AIzaSyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY",
        "xai-Q7vX2mNcR4tY8uWz1aBd5eFg9hJk3LpS",
        "gsk_Q7vX2mNcR4tY8uWz1aBd5eFg9hJk3LpS",
        "hf_Q7vX2mNcR4tY8uWz1aBd5eFg9hJk3LpS",
        "pplx-Q7vX2mNcR4tY8uWz1aBd5eFg9hJk3LpS",
        "ghp_Q7vX2mNcR4tY8uWz1aBd5eFg9hJk3LpS",
        "AKIAIOSFODNN7EXAMPLE",
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    ],
)
def test_provider_shaped_keys_are_redacted(secret: str) -> None:
    text = f"Incorrect API key provided: {secret}. See https://example.com/keys"
    assert redact(text) == f"Incorrect API key provided: {REDACTED}. See https://example.com/keys"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Authorization: Bearer abc123def456ghi789", f"Authorization: Bearer {REDACTED}"),
        ("bearer eyJ0eXAi.x.y failed", f"bearer {REDACTED} failed"),
        ("got 'Bearer QwErTyUiOpAsDfGhJkLz'", f"got 'Bearer {REDACTED}'"),
        ('{"api_key": "local-secret-99", "x": 1}', f'{{"api_key": "{REDACTED}", "x": 1}}'),
        ("x-api-key: abcd1234efgh", f"x-api-key: {REDACTED}"),
        ("GET /v1/models?key=token1234567&alt=json", f"GET /v1/models?key={REDACTED}&alt=json"),
    ],
)
def test_bearer_tokens_and_assigned_keys_are_redacted(text: str, expected: str) -> None:
    assert redact(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "A Bearer token is required: send Authorization: Bearer <token>",
        "Bearer authentication failed for this request",
        "task-scheduler-configuration-was-invalid and desk-organisation-example-value",
        "sk-learn is not a key, nor is sk-short1, nor xai-grok",
        "Please check your API key; api_key: required",
        "HTTP 401: Incorrect API key provided. You can find your API key at "
        "https://platform.openai.com/account/api-keys",
        "the observer call to model 'gpt-5-mini' failed: HTTP 429: rate limited, retry in 20 s",
    ],
)
def test_ordinary_words_are_kept(text: str) -> None:
    assert redact(text) == text


def test_a_remembered_key_is_redacted_whatever_its_shape() -> None:
    key = "operator-local-key-of-no-known-shape"
    assert redact(f"refused {key}!") == f"refused {key}!"
    remember_key(key)
    assert redact(f"refused {key}!") == f"refused {REDACTED}!"
    remember_key("short")  # too short to be told from a word: not remembered
    assert redact("a short answer") == "a short answer"


def test_the_key_of_a_model_is_remembered() -> None:
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    key = "memory-key-handed-to-the-provider"
    provider = OpenAIProvider(base_url="http://127.0.0.1:9/v1", api_key=key)
    remember_model_keys(OpenAIChatModel("local", provider=provider))
    assert redact(f"401: {key} is not valid") == f"401: {REDACTED} is not valid"


def test_a_cycle_error_and_the_failure_state_are_redacted() -> None:
    secret = "sk-proj-Q7vX2mNcR4tY8uWz1aBd5eFg9hJk3LpS"
    error = describe_error(RuntimeError(f"refused Bearer {secret}"))
    assert secret not in error
    assert describe_error(ModelError(f"HTTP 401: {secret}")) == f"HTTP 401: {REDACTED}"
    state = next_failure(
        None,
        role="observer",
        error=f"Incorrect API key provided: {secret}",
        model="openai/gpt-5-mini",
        now=NOW,
        next_retry_at=None,
        left_out=0,
    )
    assert state.error == f"Incorrect API key provided: {REDACTED}"
    stored_before = {**state.to_json(), "error": f"HTTP 401: {secret}"}  # an older version's
    read = FailureState.from_json(stored_before)
    assert read is not None
    assert read.error == f"HTTP 401: {REDACTED}"
    assert secret not in read.summary()


def test_a_ledger_row_stored_before_redaction_is_read_redacted() -> None:
    from obsmem.records import CycleRecord
    from obsmem.stores.rows import CYCLES

    secret = "sk-proj-Q7vX2mNcR4tY8uWz1aBd5eFg9hJk3LpS"
    row = CycleRecord(
        cycle_id="c-1",
        key="thread:t",
        resource_id="r",
        thread_ids=("t",),
        kind="observation",
        outcome="failed",
        error=f"HTTP 401: Incorrect API key provided: {secret}",
        started_at=NOW,
        duration_ms=1.0,
    )
    read = CYCLES.parse(CYCLES.row(row))
    assert read.error == f"HTTP 401: Incorrect API key provided: {REDACTED}"


def test_a_known_key_that_starts_a_longer_one_leaves_no_tail() -> None:
    """A key remembered earlier in the process (another proxy's, another test's) that is the
    start of the key in an error must not leave the rest of that key readable."""
    remember_key("sk-proj-Q7vX2mNcR4tY8uWz1aBd5eFg9hJk3LpS")
    text = "Incorrect API key provided: sk-proj-Q7vX2mNcR4tY8uWz1aBd5eFg9hJk3LpS_x-9."
    assert redact(text) == f"Incorrect API key provided: {REDACTED}."
