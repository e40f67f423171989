from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from pydantic import ValidationError
from pydantic_ai.models.test import TestModel

from obsmem.errors import ConfigError
from obsmem.models import DEFAULT_MODEL as MODELS_DEFAULT_MODEL
from obsmem.models import ModelByInputTokens
from obsmem.options import (
    DEFAULT_MODEL,
    ContinuationHints,
    ContinuationHintsOptions,
    ObservationalMemoryOptions,
    ObservationOptions,
    ReflectionOptions,
    ResolvedOptions,
    ResolvedRetrieval,
    RetrievalOptions,
    compression_start_level,
    parse_idle,
    resolve_options,
)


def resolve(value: Any) -> ResolvedOptions:
    resolved = resolve_options(value)
    assert resolved is not None
    return resolved


def config_error(value: Any) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        resolve_options(value)
    return info.value


# --- defaults -----------------------------------------------------------------------------------


def test_defaults_resolve_to_the_documented_numbers() -> None:
    r = resolve(True)
    obs, ref = r.observation, r.reflection
    assert r.scope == "thread"
    assert r.async_buffering is True
    assert r.share_token_budget is False
    assert r.temporal_markers is False
    assert r.retrieval is None
    assert obs.model == ref.model == "auto"
    assert obs.message_tokens == 30_000
    assert obs.buffer_tokens == 6_000
    assert obs.buffer_activation == 0.8
    assert obs.buffer_activation_kind == "ratio"
    assert obs.retention_floor == 6_000
    assert obs.block_after == 36_000
    assert obs.buffer_on_idle is False
    assert obs.previous_observer_tokens == 2_000
    assert obs.max_tokens_per_batch == 10_000
    assert obs.instruction is None
    assert obs.continuation_hints == ContinuationHints(current_task=True, suggested_response=True)
    assert obs.thread_title is False
    assert obs.observe_attachments == ("image/*", "application/pdf")
    assert obs.extract == ()
    assert obs.manage_working_memory is False
    assert obs.activate_after_idle is None
    assert obs.activate_on_provider_change is False
    assert dict(obs.model_settings) == {"temperature": 0.3}
    assert ref.observation_tokens == 40_000
    assert ref.buffer_activation == 0.5
    assert ref.buffer_start_tokens == 20_000
    assert ref.block_after == 48_000
    assert dict(ref.model_settings) == {"temperature": 0.0}
    assert ref.activate_after_idle is None
    assert ref.activate_on_provider_change is False
    assert r.max_message_tokens == 30_000


@pytest.mark.parametrize(
    "value",
    [True, {}, {"enabled": True}, ObservationalMemoryOptions(), {"model": "default"}],
)
def test_every_spelling_of_defaults_resolves_the_same(value: Any) -> None:
    assert resolve(value) == resolve(True)


def test_default_model_matches_models_module() -> None:
    assert DEFAULT_MODEL == MODELS_DEFAULT_MODEL


@pytest.mark.parametrize(
    "value",
    [
        None,
        False,
        {"enabled": False},
        {"enabled": False, "hooks": {}, "messageTokenz": 1},
        ObservationalMemoryOptions(enabled=False),
    ],
)
def test_disabled_forms(value: Any) -> None:
    assert resolve_options(value) is None


@pytest.mark.parametrize("value", ["yes", 1, [1], 3.5])
def test_other_top_level_values_are_errors(value: Any) -> None:
    err = config_error(value)
    assert err.option == "observational_memory"


def test_enabled_must_be_a_bool() -> None:
    err = config_error({"enabled": "no"})
    assert err.option == "enabled"
    assert "True or False" in str(err)


def test_resolved_options_are_frozen_and_pass_through() -> None:
    r = resolve(True)
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.scope = "resource"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.observation.message_tokens = 1  # type: ignore[misc]
    with pytest.raises(TypeError):
        r.observation.model_settings["temperature"] = 1  # type: ignore[index]
    assert resolve_options(r) is r


# --- camelCase, typed objects -------------------------------------------------------------------

MASTRA_CONFIG: dict[str, Any] = {
    "model": "openai/gpt-5-mini",
    "shareTokenBudget": False,
    "activateAfterIdle": "5m",
    "activateOnProviderChange": True,
    "temporalMarkers": True,
    "retrieval": {"vector": True, "scope": "thread", "instructions": "Be brief."},
    "observation": {
        "messageTokens": 20_000,
        "modelSettings": {"temperature": 0.2, "maxOutputTokens": 8_000},
        "bufferTokens": 0.25,
        "bufferActivation": 2_000,
        "blockAfter": 1.5,
        "bufferOnIdle": True,
        "previousObserverTokens": 1_500,
        "maxTokensPerBatch": 5_000,
        "instruction": "Note dates.",
        "continuationHints": {"currentTask": True, "suggestedResponse": False},
        "threadTitle": True,
        "observeAttachments": ["image/png"],
        "manageWorkingMemory": True,
    },
    "reflection": {
        "observationTokens": 30_000,
        "modelSettings": {"temperature": 0.1},
        "bufferActivation": 0.4,
        "blockAfter": 40_000,
        "instruction": "Keep names.",
        "continuationHints": False,
        "activateAfterIdle": "1h",
        "activateOnProviderChange": True,
    },
}

SNAKE_CONFIG: dict[str, Any] = {
    "model": "openai/gpt-5-mini",
    "share_token_budget": False,
    "activate_after_idle": "5m",
    "activate_on_provider_change": True,
    "temporal_markers": True,
    "retrieval": {"vector": True, "scope": "thread", "instructions": "Be brief."},
    "observation": {
        "message_tokens": 20_000,
        "model_settings": {"temperature": 0.2, "max_tokens": 8_000},
        "buffer_tokens": 0.25,
        "buffer_activation": 2_000,
        "block_after": 1.5,
        "buffer_on_idle": True,
        "previous_observer_tokens": 1_500,
        "max_tokens_per_batch": 5_000,
        "instruction": "Note dates.",
        "continuation_hints": {"current_task": True, "suggested_response": False},
        "thread_title": True,
        "observe_attachments": ["image/png"],
        "manage_working_memory": True,
    },
    "reflection": {
        "observation_tokens": 30_000,
        "model_settings": {"temperature": 0.1},
        "buffer_activation": 0.4,
        "block_after": 40_000,
        "instruction": "Keep names.",
        "continuation_hints": False,
        "activate_after_idle": "1h",
        "activate_on_provider_change": True,
    },
}


def test_pasted_mastra_config_resolves_like_snake_case() -> None:
    camel, snake = resolve(MASTRA_CONFIG), resolve(SNAKE_CONFIG)
    assert camel == snake
    obs, ref = snake.observation, snake.reflection
    assert obs.model == ref.model == "openai/gpt-5-mini"
    assert obs.message_tokens == 20_000
    assert obs.buffer_tokens == 5_000
    assert (obs.buffer_activation, obs.buffer_activation_kind) == (2_000, "absolute")
    assert obs.retention_floor == 2_000
    assert obs.block_after == 30_000
    assert dict(obs.model_settings) == {"temperature": 0.2, "max_tokens": 8_000}
    assert obs.continuation_hints == ContinuationHints(current_task=True, suggested_response=False)
    assert obs.observe_attachments == ("image/png",)
    assert obs.activate_after_idle == 300_000
    assert obs.activate_on_provider_change is True
    assert ref.observation_tokens == 30_000
    assert ref.buffer_start_tokens == 12_000
    assert ref.block_after == 40_000
    assert ref.continuation_hints.any is False
    assert ref.activate_after_idle == 3_600_000
    assert snake.retrieval == ResolvedRetrieval(
        vector=True, scope="thread", instructions="Be brief."
    )
    assert snake.temporal_markers is True


def test_typed_objects_resolve_like_dicts() -> None:
    typed = ObservationalMemoryOptions(
        model="openai/gpt-5-mini",
        activate_after_idle="5m",
        activate_on_provider_change=True,
        temporal_markers=True,
        retrieval=RetrievalOptions(vector=True, scope="thread", instructions="Be brief."),
        observation=ObservationOptions(
            message_tokens=20_000,
            model_settings={"temperature": 0.2, "max_tokens": 8_000},
            buffer_tokens=0.25,
            buffer_activation=2_000,
            block_after=1.5,
            buffer_on_idle=True,
            previous_observer_tokens=1_500,
            max_tokens_per_batch=5_000,
            instruction="Note dates.",
            continuation_hints=ContinuationHintsOptions(suggested_response=False),
            thread_title=True,
            observe_attachments=["image/png"],
            manage_working_memory=True,
        ),
        reflection=ReflectionOptions(
            observation_tokens=30_000,
            model_settings={"temperature": 0.1},
            buffer_activation=0.4,
            block_after=40_000,
            instruction="Keep names.",
            continuation_hints=False,
            activate_after_idle="1h",
            activate_on_provider_change=True,
        ),
    )
    assert resolve(typed) == resolve(SNAKE_CONFIG)


def test_typed_objects_accept_camel_case_keywords_too() -> None:
    assert ObservationOptions(**{"messageTokens": 5_000}).message_tokens == 5_000


def test_mutated_typed_object_is_revalidated() -> None:
    typed = ObservationalMemoryOptions()
    typed.observation.message_tokens = -5
    err = config_error(typed)
    assert err.option == "observation.message_tokens"


# --- pydantic errors become ConfigError ----------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "option", "fragment"),
    [
        ({"observation": {"messageTokenz": 1}}, "observation.messageTokenz", "'message_tokens'"),
        ({"observation": {"buffer_tokenz": 1}}, "observation.buffer_tokenz", "'buffer_tokens'"),
        ({"shareTokenBudgets": True}, "shareTokenBudgets", "'share_token_budget'"),
        ({"reflection": {"foo": 1}}, "reflection.foo", "observation_tokens"),
        (
            {"observation": {"continuationHints": {"currentTazk": True}}},
            "observation.continuation_hints.currentTazk",
            "'current_task'",
        ),
        ({"retrieval": {"vectr": True}}, "retrieval.vectr", "'vector'"),
        ({"providerOptions": {}}, "providerOptions", "model_settings"),
        ({"hooks": {}}, "hooks", "subscribe"),
    ],
)
def test_unknown_keys_name_the_key_and_suggest(value: Any, option: str, fragment: str) -> None:
    err = config_error(value)
    assert err.option == option
    assert "unknown option" in str(err) or "not an obsmem option" in str(err)
    assert fragment in str(err)


@pytest.mark.parametrize(
    ("value", "option", "fragment"),
    [
        ({"scope": "global"}, "scope", '"thread" or "resource"'),
        ({"shareTokenBudget": "yes"}, "share_token_budget", "True or False"),
        ({"temporal_markers": 1}, "temporal_markers", "True or False"),
        ({"observation": 3}, "observation", "dict of observation options"),
        ({"reflection": "x"}, "reflection", "dict of reflection options"),
        ({"observation": {"messageTokens": "30000"}}, "observation.message_tokens", "positive"),
        ({"observation": {"messageTokens": True}}, "observation.message_tokens", "positive"),
        ({"observation": {"bufferTokens": True}}, "observation.buffer_tokens", "ratio"),
        ({"observation": {"bufferOnIdle": "yes"}}, "observation.buffer_on_idle", "True or False"),
        ({"observation": {"modelSettings": 3}}, "observation.model_settings", "dict"),
        ({"observation": {"instruction": 3}}, "observation.instruction", "string"),
        (
            {"observation": {"continuationHints": {"currentTask": 1}}},
            "observation.continuation_hints.current_task",
            "True or False",
        ),
        ({"retrieval": "yes"}, "retrieval", "True, False"),
        ({"retrieval": {"scope": "x"}}, "retrieval.scope", '"thread" or "resource"'),
        ({"reflection": {"observationTokens": [1]}}, "reflection.observation_tokens", "positive"),
    ],
)
def test_type_errors_name_the_option(value: Any, option: str, fragment: str) -> None:
    err = config_error(value)
    assert err.option == option
    assert fragment in str(err)


@pytest.mark.parametrize(
    ("build", "option"),
    [
        (lambda: ObservationOptions(message_tokenz=1), "observation.message_tokenz"),
        (lambda: ObservationOptions(message_tokens="x"), "observation.message_tokens"),
        (lambda: ReflectionOptions(observation_tokens="x"), "reflection.observation_tokens"),
        (lambda: RetrievalOptions(scope="x"), "retrieval.scope"),
        (lambda: ContinuationHintsOptions(current_task=3), "continuation_hints.current_task"),
        (lambda: ObservationalMemoryOptions(scope="x"), "scope"),
        (
            lambda: ObservationalMemoryOptions(observation={"bufferTokenz": 1}),
            "observation.bufferTokenz",
        ),
    ],
)
def test_typed_constructors_raise_config_error_not_validation_error(
    build: Any, option: str
) -> None:
    with pytest.raises(ConfigError) as info:
        build()
    assert not isinstance(info.value, ValidationError)
    assert info.value.option == option


# --- value rules (reference §2.5) ----------------------------------------------------------------


def obs(**values: Any) -> dict[str, Any]:
    return {"observation": values}


def ref(**values: Any) -> dict[str, Any]:
    return {"reflection": values}


@pytest.mark.parametrize(
    ("value", "option", "fragment"),
    [
        # models
        ({"model": "a/b", "observation": {"model": "c/d"}}, "observation.model", "not both"),
        ({"model": "a/b", "reflection": {"model": "c/d"}}, "reflection.model", "not both"),
        ({"model": ""}, "model", "must not be empty"),
        ({"model": 3}, "model", "pydantic-ai"),
        (obs(model=["a/b"]), "observation.model", "ModelByInputTokens"),
        # share_token_budget
        ({"share_token_budget": True}, "share_token_budget", "buffer_tokens=False"),
        # resource scope and background buffering
        (
            {"scope": "resource", **obs(buffer_tokens=0.3)},
            "observation.buffer_tokens",
            "not supported",
        ),
        (
            {"scope": "resource", **obs(buffer_activation=0.5)},
            "observation.buffer_activation",
            "not supported",
        ),
        (
            {"scope": "resource", **ref(buffer_activation=0.5)},
            "reflection.buffer_activation",
            "not supported",
        ),
        # thresholds
        (obs(message_tokens=0), "observation.message_tokens", "positive whole number"),
        (obs(message_tokens=-5), "observation.message_tokens", "positive whole number"),
        (obs(message_tokens=1.5), "observation.message_tokens", "positive whole number"),
        (ref(observation_tokens=0), "reflection.observation_tokens", "positive whole number"),
        (obs(max_tokens_per_batch=0), "observation.max_tokens_per_batch", "positive"),
        # buffer_tokens
        (obs(buffer_tokens=0), "observation.buffer_tokens", "must be > 0"),
        (obs(buffer_tokens=-0.2), "observation.buffer_tokens", "must be > 0"),
        (obs(buffer_tokens=float("nan")), "observation.buffer_tokens", "must be > 0"),
        (obs(buffer_tokens=30_000), "observation.buffer_tokens", "less than"),
        (obs(buffer_tokens=50_000), "observation.buffer_tokens", "less than"),
        (obs(buffer_tokens=0.00001), "observation.buffer_tokens", "0 tokens"),
        # observation buffer_activation
        (obs(buffer_activation=0), "observation.buffer_activation", "(0, 1]"),
        (obs(buffer_activation=-1), "observation.buffer_activation", "(0, 1]"),
        (obs(buffer_activation=1.5), "observation.buffer_activation", "between 1 and 1000"),
        (obs(buffer_activation=999), "observation.buffer_activation", "between 1 and 1000"),
        (obs(buffer_activation=30_000), "observation.buffer_activation", "less than"),
        # observation block_after
        (obs(block_after=0.5), "observation.block_after", "[1, 100)"),
        (obs(block_after=20_000), "observation.block_after", ">= observation.message_tokens"),
        (obs(block_after=100), "observation.block_after", ">= observation.message_tokens"),
        (obs(buffer_tokens=False, block_after=1.5), "observation.block_after", "buffering"),
        (
            {"scope": "resource", **obs(block_after=1.5)},
            "observation.block_after",
            'scope="resource"',
        ),
        # previous_observer_tokens
        (obs(previous_observer_tokens=-1), "observation.previous_observer_tokens", ">= 0"),
        (
            obs(previous_observer_tokens=float("inf")),
            "observation.previous_observer_tokens",
            "finite",
        ),
        (obs(previous_observer_tokens=True), "observation.previous_observer_tokens", "False"),
        # reflection buffer_activation / block_after
        (ref(buffer_activation=0), "reflection.buffer_activation", "(0, 1]"),
        (ref(buffer_activation=1.5), "reflection.buffer_activation", "(0, 1]"),
        (ref(buffer_activation=5_000), "reflection.buffer_activation", "(0, 1]"),
        (ref(block_after=0.9), "reflection.block_after", "[1, 100)"),
        (ref(block_after=30_000), "reflection.block_after", ">= reflection.observation_tokens"),
        (
            {**obs(buffer_tokens=False), **ref(block_after=1.5)},
            "reflection.block_after",
            "buffer_tokens=False",
        ),
        # observe_attachments
        (obs(observe_attachments="image/*"), "observation.observe_attachments", "list of MIME"),
        (obs(observe_attachments=["image"]), "observation.observe_attachments", "MIME type"),
        (obs(observe_attachments=["*/pdf"]), "observation.observe_attachments", "MIME type"),
        (obs(observe_attachments=[3]), "observation.observe_attachments", "MIME"),
        # extract
        (obs(extract="summary"), "observation.extract", "Extractor"),
        (ref(extract=["summary"]), "reflection.extract", "Extractor"),
        # model settings
        (
            obs(model_settings={"temperature": "hot"}),
            "observation.model_settings.temperature",
            ">= 0",
        ),
        (
            ref(model_settings={"maxOutputTokens": 0}),
            "reflection.model_settings.max_tokens",
            "positive",
        ),
        # durations
        ({"activate_after_idle": "soon"}, "activate_after_idle", "duration string"),
        (obs(activate_after_idle="5 fortnights"), "observation.activate_after_idle", "unit"),
        (ref(activate_after_idle=True), "reflection.activate_after_idle", "auto"),
        # retrieval
        ({"retrieval": {"embedder": " "}}, "retrieval.embedder", "empty"),
    ],
)
def test_value_rules(value: dict[str, Any], option: str, fragment: str) -> None:
    err = config_error(value)
    assert err.option == option
    assert fragment in err.rule
    assert option in str(err)


# --- async buffering on/off -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        obs(buffer_tokens=False),
        obs(buffer_tokens=False, buffer_activation=0.5),
        {**obs(buffer_tokens=False), **ref(buffer_activation=0.3)},
        {"scope": "resource"},
        {"scope": "resource", **obs(buffer_tokens=False)},
    ],
)
def test_async_off_resolves_every_buffering_value_to_none(value: dict[str, Any]) -> None:
    r = resolve(value)
    assert r.async_buffering is False
    o, rf = r.observation, r.reflection
    assert (o.buffer_tokens, o.buffer_activation, o.buffer_activation_kind) == (None, None, None)
    assert (o.retention_floor, o.block_after) == (None, None)
    assert (rf.buffer_activation, rf.buffer_start_tokens, rf.block_after) == (None, None, None)
    assert o.message_tokens == 30_000
    assert rf.observation_tokens == 40_000


def test_resource_scope_keeps_its_thresholds() -> None:
    r = resolve({"scope": "resource", **obs(message_tokens=12_000, max_tokens_per_batch=3_000)})
    assert r.scope == "resource"
    assert r.observation.message_tokens == 12_000
    assert r.observation.max_tokens_per_batch == 3_000


def test_share_token_budget_with_buffering_off() -> None:
    r = resolve({"shareTokenBudget": True, "observation": {"bufferTokens": False}})
    assert r.share_token_budget is True
    assert r.max_message_tokens == 70_000


def test_share_token_budget_in_resource_scope_without_buffering() -> None:
    assert resolve({"share_token_budget": True, "scope": "resource"}).share_token_budget


# --- numbers --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("observation", "expected"),
    [
        ({}, (6_000, 6_000, 36_000)),
        ({"buffer_tokens": 0.1}, (3_000, 6_000, 36_000)),
        ({"buffer_tokens": 5_000}, (5_000, 6_000, 36_000)),
        ({"buffer_tokens": 1}, (1, 6_000, 36_000)),
        ({"buffer_tokens": 0.99}, (29_700, 6_000, 36_000)),
        ({"buffer_activation": 1}, (6_000, 0, 36_000)),
        ({"buffer_activation": 0.5}, (6_000, 15_000, 36_000)),
        ({"buffer_activation": 1_000}, (6_000, 1_000, 36_000)),
        ({"buffer_activation": 29_999}, (6_000, 29_999, 36_000)),
        ({"block_after": 1}, (6_000, 6_000, 30_000)),
        ({"block_after": 2.5}, (6_000, 6_000, 75_000)),
        ({"block_after": 99}, (6_000, 6_000, 2_970_000)),
        ({"block_after": 30_000}, (6_000, 6_000, 30_000)),
        ({"block_after": 50_000}, (6_000, 6_000, 50_000)),
        ({"message_tokens": 10_000}, (2_000, 2_000, 12_000)),
        ({"message_tokens": 10_001}, (2_000, 2_000, 12_001)),
        ({"message_tokens": 30_000.0}, (6_000, 6_000, 36_000)),
    ],
)
def test_observation_numbers(observation: dict[str, Any], expected: tuple[int, int, int]) -> None:
    o = resolve({"observation": observation}).observation
    assert (o.buffer_tokens, o.retention_floor, o.block_after) == expected
    assert all(isinstance(n, int) for n in expected)


@pytest.mark.parametrize(
    ("reflection", "expected"),
    [
        ({}, (20_000, 48_000)),
        ({"buffer_activation": 1}, (40_000, 48_000)),
        ({"buffer_activation": 0.25}, (10_000, 48_000)),
        ({"block_after": 1}, (20_000, 40_000)),
        ({"block_after": 60_000}, (20_000, 60_000)),
        ({"observation_tokens": 10_000}, (5_000, 12_000)),
    ],
)
def test_reflection_numbers(reflection: dict[str, Any], expected: tuple[int, int]) -> None:
    rf = resolve({"reflection": reflection}).reflection
    assert (rf.buffer_start_tokens, rf.block_after) == expected


def test_retention_floor_for_another_threshold() -> None:
    ratio = resolve(True).observation
    assert ratio.retention_floor_for(20_000) == 4_000
    absolute = resolve(obs(buffer_activation=3_000)).observation
    assert absolute.retention_floor_for(20_000) == 3_000
    assert resolve(obs(buffer_tokens=False)).observation.retention_floor_for(20_000) is None


@pytest.mark.parametrize(("value", "expected"), [(False, None), (0, 0), (500, 500), (2.4, 2)])
def test_previous_observer_tokens(value: Any, expected: int | None) -> None:
    resolved = resolve(obs(previous_observer_tokens=value)).observation
    assert resolved.previous_observer_tokens == expected


# --- durations -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),
        (False, None),
        (0, 0),
        (1_500, 1_500),
        (2.6, 3),
        ("500ms", 500),
        ("250", 250),
        ("30s", 30_000),
        ("30 sec", 30_000),
        ("5m", 300_000),
        ("5min", 300_000),
        ("5 minutes", 300_000),
        ("1h", 3_600_000),
        ("1hr", 3_600_000),
        ("1.5h", 5_400_000),
        ("2 hours", 7_200_000),
        ("2 HOURS", 7_200_000),
        ("1d", 86_400_000),
        ("2 days", 172_800_000),
        ("1w", 604_800_000),
        (" 10s ", 10_000),
        ("auto", "auto"),
        ("AUTO", "auto"),
    ],
)
def test_durations(value: Any, expected: int | str | None) -> None:
    assert parse_idle("activate_after_idle", value) == expected


@pytest.mark.parametrize(
    "value", [True, "", "soon", "5 lightyears", "-5m", "m5", "5m 3s", float("inf"), -1, [5]]
)
def test_invalid_durations_name_the_option(value: Any) -> None:
    with pytest.raises(ConfigError) as info:
        parse_idle("observation.activate_after_idle", value)
    assert info.value.option == "observation.activate_after_idle"
    assert '"5m"' in info.value.rule


@pytest.mark.parametrize(
    ("value", "observation", "reflection"),
    [
        ({}, (None, False), (None, False)),
        (
            {"activate_after_idle": "5m", "activate_on_provider_change": True},
            (300_000, True),
            (None, False),
        ),
        (
            {"activate_after_idle": "auto", **obs(activate_after_idle=False)},
            (None, False),
            (None, False),
        ),
        (
            {"activate_after_idle": "auto", **obs(activate_after_idle="1h")},
            (3_600_000, False),
            (None, False),
        ),
        (
            {"activate_on_provider_change": True, **obs(activate_on_provider_change=False)},
            (None, False),
            (None, False),
        ),
        (
            ref(activate_after_idle="auto", activate_on_provider_change=True),
            (None, False),
            ("auto", True),
        ),
    ],
)
def test_idle_and_provider_change_inheritance(
    value: dict[str, Any], observation: tuple[Any, bool], reflection: tuple[Any, bool]
) -> None:
    r = resolve(value)
    o, rf = r.observation, r.reflection
    assert (o.activate_after_idle, o.activate_on_provider_change) == observation
    assert (rf.activate_after_idle, rf.activate_on_provider_change) == reflection


# --- models --------------------------------------------------------------------------------------


def test_model_resolution_and_fallbacks() -> None:
    both = resolve({"model": "openai/gpt-5-mini"})
    assert (both.observer_model, both.reflector_model) == ("openai/gpt-5-mini",) * 2
    only_obs = resolve(obs(model="openai:gpt-5-mini"))
    assert (only_obs.observer_model, only_obs.reflector_model) == ("openai:gpt-5-mini",) * 2
    only_ref = resolve(ref(model="anthropic/claude-haiku-4-5"))
    assert only_ref.observer_model == only_ref.reflector_model == "anthropic/claude-haiku-4-5"
    split = resolve({**obs(model="a/b"), **ref(model="c/d")})
    assert (split.observer_model, split.reflector_model) == ("a/b", "c/d")
    default_role = resolve({**obs(model="default"), **ref(model="c/d")})
    assert (default_role.observer_model, default_role.reflector_model) == ("c/d", "c/d")


def test_model_objects_are_accepted_as_given() -> None:
    test_model = TestModel()
    router = ModelByInputTokens(up_to={10_000: "openai/gpt-5-mini", 40_000: test_model})
    r = resolve({**obs(model=test_model), **ref(model=router)})
    assert r.observer_model is test_model
    assert r.reflector_model is router
    typed = resolve(ObservationalMemoryOptions(model=test_model))
    assert typed.observer_model is typed.reflector_model is test_model


@pytest.mark.parametrize(
    ("model", "tokens", "level"),
    [
        ("google/gemini-2.5-flash", None, 2),
        ("google:gemini-2.5-flash-lite", None, 2),
        ("default", None, 1),
        ("openai/gpt-5-mini", None, 1),
        ("google/gemini-2.5-pro", None, 1),
        (TestModel(), None, 1),
        (
            ModelByInputTokens(up_to={10: "openai/gpt-5-mini", 100: "google/gemini-2.5-flash"}),
            50,
            2,
        ),
        (ModelByInputTokens(up_to={10: "openai/gpt-5-mini", 100: "google/gemini-2.5-flash"}), 5, 1),
        (ModelByInputTokens(up_to={10: "google/gemini-2.5-flash"}), 500, 1),
        (ModelByInputTokens(up_to={10: "google/gemini-2.5-flash"}), None, 1),
    ],
)
def test_compression_start_level(model: Any, tokens: int | None, level: int) -> None:
    assert compression_start_level(model, input_tokens=tokens) == level


def test_compression_start_level_reads_model_names() -> None:
    class Named:
        model_name = "gemini-2.5-flash-preview"

    assert compression_start_level(Named()) == 2


# --- smaller options -----------------------------------------------------------------------------


def test_model_settings_merge_over_defaults() -> None:
    r = resolve(
        {
            "observation": {"modelSettings": {"maxOutputTokens": 4_000, "topP": 0.9}},
            "reflection": {"modelSettings": {"temperature": None, "seed": 7}},
        }
    )
    assert dict(r.observation.model_settings) == {
        "temperature": 0.3,
        "max_tokens": 4_000,
        "top_p": 0.9,
    }
    assert dict(r.reflection.model_settings) == {"seed": 7}


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (True, True),
        (False, False),
        ("auto", "auto"),
        ([], ()),
        (["IMAGE/PNG", "image/*", "*", "application/vnd.ms-excel"], None),
        (("text/plain",), ("text/plain",)),
    ],
)
def test_observe_attachments(value: Any, expected: Any) -> None:
    resolved = resolve(obs(observe_attachments=value)).observation.observe_attachments
    if expected is None:
        expected = ("image/png", "image/*", "*", "application/vnd.ms-excel")
    assert resolved == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (False, None),
        (True, ResolvedRetrieval()),
        ({}, ResolvedRetrieval()),
        ({"vector": True}, ResolvedRetrieval(vector=True, scope="resource")),
        (
            {"scope": "thread", "instructions": "x", "embedder": "openai/text-embedding-3-small"},
            ResolvedRetrieval(
                scope="thread", instructions="x", embedder="openai/text-embedding-3-small"
            ),
        ),
        (RetrievalOptions(vector=True), ResolvedRetrieval(vector=True)),
    ],
)
def test_retrieval(value: Any, expected: ResolvedRetrieval | None) -> None:
    assert resolve({"retrieval": value}).retrieval == expected


def test_extractors_are_kept_in_order() -> None:
    from obsmem import Extractor

    a, b = Extractor("a", "the a"), Extractor("b", "the b")
    r = resolve({**obs(extract=[a, b]), **ref(extract=(b,))})
    assert r.observation.extract == (a, b)
    assert r.reflection.extract == (b,)
    assert r.snapshot()["observation"]["extract"] == ["a", "b"]


def test_snapshot_is_json_ready() -> None:
    r = resolve({**MASTRA_CONFIG, "model": TestModel()})
    text = json.dumps(r.snapshot())
    again = json.loads(text)
    assert again["observation"]["message_tokens"] == 20_000
    assert again["observation"]["model"] == "test:test"
    assert again["retrieval"]["scope"] == "thread"


def test_cycle_retention_defaults_to_1000_and_takes_a_count() -> None:
    assert resolve(True).cycle_retention == 1000
    assert resolve({"cycleRetention": 0}).cycle_retention == 0
    assert resolve(ObservationalMemoryOptions(cycle_retention=50)).cycle_retention == 50
    assert resolve({"cycle_retention": 7}).snapshot()["cycle_retention"] == 7


@pytest.mark.parametrize("value", [-1, 2.5, True, "10", None])
def test_cycle_retention_must_be_a_count(value: Any) -> None:
    with pytest.raises(ConfigError, match=r"cycle_retention.*whole number of cycles to keep"):
        resolve({"cycle_retention": value})


def test_cycle_detail_keeps_the_newest_20_by_default_and_takes_a_count_or_false() -> None:
    assert resolve(True).cycle_detail == 20
    assert resolve({"cycleDetail": False}).cycle_detail == 0
    assert resolve({"cycle_detail": True}).cycle_detail == 20
    assert resolve(ObservationalMemoryOptions(cycle_detail=5)).cycle_detail == 5
    assert resolve({"cycle_detail": 3}).snapshot()["cycle_detail"] == 3


@pytest.mark.parametrize("value", [-1, 2.5, "10", None])
def test_cycle_detail_must_be_a_switch_or_a_count(value: Any) -> None:
    with pytest.raises(ConfigError, match=r"cycle_detail.*True .*False .*whole number"):
        resolve({"cycle_detail": value})
