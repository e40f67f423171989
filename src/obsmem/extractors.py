"""Extractors: named values the Observer or Reflector pulls out of each cycle, besides the log.

An :class:`Extractor` names a value (``"User profile"`` becomes the slug ``user-profile``), says
how to find it, and optionally gives its shape:

- **inline** (no ``schema``): the Observer (or Reflector) writes the value as a ``<slug>``
  section of its answer; the section is parsed out and never reaches the log;
- **structured** (``schema`` a pydantic model class or a JSON-schema dict): after the main call,
  one follow-up request per extractor shows the model what the main call saw and wrote, with the
  previous value, and asks for JSON matching the schema. A bad answer is asked again once, with
  the error shown; then the extractor records a failure ``{slug, error}``.

The built-in hints (``current-task``, ``suggested-response``, ``thread-title``) and the Observer's
working memory run through the same pipeline as internal slots. ``on_extracted(ctx)`` sees each
user value before it is stored and may keep it (return ``None``), replace it (any other value,
validated again) or drop it (return :data:`DROP`). One extractor's failure never blocks another's
value. Storing the values is the cycles' job (:mod:`obsmem.cycles.extraction`).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, Final, Literal, TypeAlias, cast

from pydantic import BaseModel, ValidationError

from .answers import ParsedOutput
from .errors import ConfigError
from .llm import LLMRequest, ModelCaller
from .models import ModelSpec

__all__ = [
    "DROP",
    "RESERVED_SLUGS",
    "ExtractionContext",
    "ExtractionResult",
    "Extractor",
    "Slot",
    "check_extractors",
    "run_extractors",
    "slugify",
    "validate_value",
]

RESERVED_SLUGS: Final = frozenset(
    {
        "observations",
        "current-task",
        "suggested-response",
        "thread-title",
        "extracted-values",
        "working-memory",
        "thread",
    }
)
"""Slugs obsmem uses itself; a user extractor cannot take them."""

Schema: TypeAlias = type[BaseModel] | Mapping[str, Any]
OperationType: TypeAlias = Literal["observation", "reflection"]


class _Drop:
    __slots__ = ()

    def __repr__(self) -> str:
        return "obsmem.extractors.DROP"


DROP: Final = _Drop()
"""Returned by ``on_extracted``: forget this cycle's value (the stored one stays)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ExtractionContext:
    """What ``on_extracted`` sees: the new value and where it comes from."""

    slug: str
    value: Any
    """The value just extracted (validated; a pydantic model's value as a JSON-ready dict)."""
    previous: Any
    """The value stored before this cycle, or None."""
    thread_id: str
    resource_id: str | None
    operation_type: OperationType
    cycle_id: str


OnExtracted: TypeAlias = Callable[[ExtractionContext], Any | Awaitable[Any]]

_SLUG_CHARS = re.compile(r"[^a-z0-9]+")
_KEY_SEGMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")


def slugify(name: str) -> str:
    """``name`` in lowercase with every run of other characters turned into one ``-``."""
    return _SLUG_CHARS.sub("-", name.lower()).strip("-")


@dataclass(frozen=True, slots=True)
class Extractor:
    """A value to extract in every observation (or reflection) cycle.

    ``name`` becomes the slug (lowercase, other characters to ``-``); ``instructions`` say what
    to extract. ``schema`` (a pydantic model class or a JSON-schema dict) makes the extraction a
    structured follow-up request; without one the value is a ``<slug>`` section of the main
    answer. ``include_previous_extraction`` shows the stored value to the model and puts it in
    the actor's context. ``on_extracted(ctx)`` (sync or async) may normalise or drop the value.
    ``metadata_key_path`` (dotted, such as ``"profile.user"``) also writes the value there in
    the thread's metadata; it is always stored under ``"om:extracted"`` by slug.
    """

    name: str
    instructions: str
    _: KW_ONLY
    schema: Schema | None = None
    include_previous_extraction: bool = True
    on_extracted: OnExtracted | None = None
    metadata_key_path: str | None = None
    slug: str = field(init=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():  # pyright: ignore[reportUnnecessaryIsInstance]
            raise ConfigError("extractor.name", self.name, "must be a non-empty string")
        slug = slugify(self.name)
        if not slug or not slug[0].isalpha():
            raise ConfigError(
                "extractor.name",
                self.name,
                "must start with a letter once made a slug (lowercase letters, digits, '-'); "
                "choose a name such as 'User profile'",
            )
        if slug in RESERVED_SLUGS:
            raise ConfigError(
                "extractor.name",
                self.name,
                f"its slug {slug!r} is reserved by obsmem "
                f"({', '.join(sorted(RESERVED_SLUGS))}); rename the extractor",
            )
        if not isinstance(self.instructions, str) or not self.instructions.strip():  # pyright: ignore[reportUnnecessaryIsInstance]
            raise ConfigError(
                f"extractor[{slug}].instructions", self.instructions, "must be a non-empty string"
            )
        if self.schema is not None and not _is_schema(self.schema):
            raise ConfigError(
                f"extractor[{slug}].schema",
                self.schema,
                "must be a pydantic model class or a JSON-schema dict (or None for an inline "
                "text value)",
            )
        if self.on_extracted is not None and not callable(self.on_extracted):
            raise ConfigError(
                f"extractor[{slug}].on_extracted", self.on_extracted, "must be callable"
            )
        path = self.metadata_key_path
        if path is not None:
            parts = path.split(".") if isinstance(path, str) else []  # pyright: ignore[reportUnnecessaryIsInstance]
            if (
                not parts
                or not all(_KEY_SEGMENT.match(p) and not p.startswith("__") for p in parts)
                or parts[0].startswith("om")
            ):
                raise ConfigError(
                    f"extractor[{slug}].metadata_key_path",
                    path,
                    "must be dotted names such as 'profile.user' (letters, digits, '_' or '-'; "
                    "no '__' prefixes; not under obsmem's own 'om…' keys)",
                )
        object.__setattr__(self, "slug", slug)

    @property
    def structured(self) -> bool:
        return self.schema is not None


def _is_schema(value: object) -> bool:
    if isinstance(value, type):
        return issubclass(value, BaseModel)
    return isinstance(value, Mapping)


def check_extractors(option: str, value: object) -> tuple[Extractor, ...]:
    """``value`` as a tuple of extractors with distinct slugs, or a ``ConfigError``."""
    if isinstance(value, str | bytes) or not isinstance(value, list | tuple):
        raise ConfigError(option, value, "must be a list of Extractor objects")
    items = tuple(cast("list[Any] | tuple[Any, ...]", value))
    seen: set[str] = set()
    for item in items:
        if not isinstance(item, Extractor):
            raise ConfigError(
                option, item, "each entry must be an Extractor (obsmem.Extractor(name, ...))"
            )
        if item.slug in seen:
            raise ConfigError(
                option,
                item.name,
                f"two extractors share the slug {item.slug!r}; give each a distinct name",
            )
        seen.add(item.slug)
    return cast(tuple[Extractor, ...], items)


# ---------------------------------------------------------------------------------------------
# values and schemas
# ---------------------------------------------------------------------------------------------

_FENCE = re.compile(r"^\s*```[a-zA-Z]*\s*\n?|\n?\s*```\s*$")


def parse_json(text: str) -> Any:
    """The JSON value in a model's answer (a code fence and prose around an object allowed)."""
    body = _FENCE.sub("", text.strip()).strip()
    try:
        return json.loads(body)
    except ValueError:
        pass
    start, end = body.find("{"), body.rfind("}")
    if 0 <= start < end:
        try:
            return json.loads(body[start : end + 1])
        except ValueError:
            pass
    raise ValueError("the answer is not valid JSON")


def validate_value(schema: Schema | None, value: Any) -> Any:
    """``value`` checked against ``schema`` and made JSON-ready; raises ``ValueError`` saying
    what is wrong. Without a schema any JSON value passes (strings are stripped)."""
    if schema is None:
        if isinstance(value, BaseModel):
            return value.model_dump(mode="json")
        if isinstance(value, str):
            return value.strip()
        try:
            json.dumps(value)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"the value cannot be stored as JSON: {exc}") from exc
        return value
    if isinstance(schema, type):
        model = schema
        if isinstance(value, model):
            return value.model_dump(mode="json")
        if isinstance(value, BaseModel):
            value = value.model_dump(mode="json")
        try:
            if isinstance(value, str):
                return model.model_validate_json(value).model_dump(mode="json")
            return model.model_validate(value).model_dump(mode="json")
        except ValidationError as exc:
            raise ValueError(_validation_summary(exc)) from exc
    _check_json_schema(schema, value, "value")
    return value


def _validation_summary(exc: ValidationError) -> str:
    problems = [
        f"{'.'.join(str(p) for p in err['loc']) or 'value'}: {err['msg']}" for err in exc.errors()
    ]
    return "does not match the schema (" + "; ".join(problems[:5]) + ")"


_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
    "null": (type(None),),
}


def _check_json_schema(schema: Mapping[str, Any], value: Any, where: str) -> None:
    """A minimal JSON-schema check: ``type``, ``enum``, ``required``, ``properties``,
    ``items``. Enough to catch a wrong shape; not a full validator."""
    kinds = schema.get("type")
    if kinds is not None:
        names = [kinds] if isinstance(kinds, str) else list(cast(list[str], kinds))
        ok = False
        for name in names:
            types = _JSON_TYPES.get(name, (object,))
            if name in ("integer", "number") and isinstance(value, bool):
                continue
            ok = ok or isinstance(value, types)
        if not ok:
            raise ValueError(f"{where} should be of type {' or '.join(names)}")
    enum = schema.get("enum")
    if isinstance(enum, list) and value not in enum:
        raise ValueError(f"{where} should be one of {enum}")
    if isinstance(value, dict):
        obj = cast(dict[str, Any], value)
        required = schema.get("required", [])
        for key in cast(list[str], required):
            if key not in obj:
                raise ValueError(f"{where}.{key} is required")
        properties = cast(Mapping[str, Any], schema.get("properties", {}))
        for key, sub in properties.items():
            if key in obj and isinstance(sub, Mapping):
                _check_json_schema(cast(Mapping[str, Any], sub), obj[key], f"{where}.{key}")
    items = schema.get("items")
    if isinstance(value, list) and isinstance(items, Mapping):
        for i, item in enumerate(cast(list[Any], value)):
            _check_json_schema(cast(Mapping[str, Any], items), item, f"{where}[{i}]")


def schema_json(schema: Schema) -> str:
    shape = schema.model_json_schema() if isinstance(schema, type) else dict(schema)
    return json.dumps(shape, indent=2, ensure_ascii=False)


# ---------------------------------------------------------------------------------------------
# the pipeline
# ---------------------------------------------------------------------------------------------

SlotKind: TypeAlias = Literal["builtin", "internal", "user"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Slot:
    """One value a cycle extracts: a user :class:`Extractor`, a built-in hint, or working
    memory (``internal``: never shown in events or stored under ``"om:extracted"``)."""

    slug: str
    instructions: str
    kind: SlotKind
    schema: Schema | None = None
    include_previous: bool = True
    on_extracted: OnExtracted | None = None
    metadata_key_path: str | None = None
    check: Callable[[Any], Any] | None = None
    """Validates an internal slot's value instead of ``schema``; raises ``ValueError``."""

    @classmethod
    def of(cls, extractor: Extractor) -> Slot:
        return cls(
            slug=extractor.slug,
            instructions=extractor.instructions,
            kind="user",
            schema=extractor.schema,
            include_previous=extractor.include_previous_extraction,
            on_extracted=extractor.on_extracted,
            metadata_key_path=extractor.metadata_key_path,
        )

    @property
    def inline(self) -> bool:
        return self.kind != "user" or self.schema is None

    def validate(self, value: Any) -> Any:
        if self.check is not None:
            return self.check(value)
        return validate_value(self.schema, value)


@dataclass(frozen=True, slots=True, kw_only=True)
class ExtractionResult:
    """What one cycle extracted: values by slug (built-ins, working memory and user values) and
    the failures, ``{"slug", "error"}`` each."""

    values: Mapping[str, Any] = field(default_factory=dict[str, Any])
    failures: tuple[Mapping[str, str], ...] = ()
    internal: frozenset[str] = frozenset()

    @property
    def public_values(self) -> dict[str, Any]:
        """The values events carry and chunks keep (working memory left out)."""
        return {k: v for k, v in self.values.items() if k not in self.internal}


@dataclass(frozen=True, slots=True, kw_only=True)
class Exchange:
    """The main call a follow-up request looks at: what the model saw and what it wrote."""

    seen: str
    answer: str
    model: ModelSpec
    model_settings: Mapping[str, Any] = field(default_factory=dict[str, Any])


_BUILTIN_FIELDS = {
    "current-task": "current_task",
    "suggested-response": "suggested_response",
    "thread-title": "thread_title",
}


def inline_value(slot: Slot, parsed: ParsedOutput) -> Any:
    """The raw value of an inline slot in an answer (None when the answer has none)."""
    attribute = _BUILTIN_FIELDS.get(slot.slug)
    if attribute is not None:
        return getattr(parsed, attribute)
    if slot.slug in parsed.extracted_values:
        return parsed.extracted_values[slot.slug]
    return parsed.sections.get(slot.slug)


async def run_extractors(
    slots: Sequence[Slot],
    *,
    caller: ModelCaller,
    parsed: ParsedOutput,
    previous: Mapping[str, Any],
    exchange: Exchange | None,
    thread_id: str,
    resource_id: str | None,
    operation_type: OperationType,
    cycle_id: str,
    timeout: float | None = None,  # noqa: ASYNC109 (passed on to LLMRequest)
) -> ExtractionResult:
    """Collect every slot's value: inline ones from ``parsed``, structured ones by follow-up
    requests through ``caller`` (in parallel), then the ``on_extracted`` hooks. Never raises for
    one slot: a bad value, a failed request or a failing hook becomes a failure of that slot
    only."""
    values: dict[str, Any] = {}
    failures: list[dict[str, str]] = []

    async def one(slot: Slot) -> None:
        try:
            if slot.inline:
                raw = inline_value(slot, parsed)
                if raw is None or (isinstance(raw, str) and not raw.strip()):
                    return
                value = slot.validate(raw)
            else:
                if exchange is None:
                    raise ValueError("a structured extractor needs the main call's exchange")
                value = await _follow_up(
                    slot,
                    previous.get(slot.slug) if slot.include_previous else None,
                    exchange,
                    caller=caller,
                    timeout=timeout,
                    cycle_id=cycle_id,
                    operation=operation_type,
                )
                if value is None:
                    return
            if slot.on_extracted is not None:
                value = await _call_hook(
                    slot,
                    ExtractionContext(
                        slug=slot.slug,
                        value=value,
                        previous=previous.get(slot.slug),
                        thread_id=thread_id,
                        resource_id=resource_id,
                        operation_type=operation_type,
                        cycle_id=cycle_id,
                    ),
                )
                if value is DROP or value is None:
                    return
            values[slot.slug] = value
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            failures.append({"slug": slot.slug, "error": _describe(exc)})

    await asyncio.gather(*(one(slot) for slot in slots))
    order = {slot.slug: i for i, slot in enumerate(slots)}
    return ExtractionResult(
        values=dict(sorted(values.items(), key=lambda kv: order[kv[0]])),
        failures=tuple(sorted(failures, key=lambda f: order[f["slug"]])),
        internal=frozenset(s.slug for s in slots if s.kind == "internal"),
    )


async def _call_hook(slot: Slot, ctx: ExtractionContext) -> Any:
    """The value after ``on_extracted``: the same, a replacement (validated), or DROP."""
    hook = cast(OnExtracted, slot.on_extracted)
    try:
        returned = hook(ctx)
        if inspect.isawaitable(returned):
            returned = await returned
    except Exception as exc:
        raise ValueError(f"on_extracted raised {type(exc).__name__}: {exc}") from exc
    if returned is None:
        return ctx.value
    if returned is DROP:
        return DROP
    try:
        return slot.validate(returned)
    except ValueError as exc:
        raise ValueError(f"the value on_extracted returned {exc}") from exc


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return text if text else type(exc).__name__


# -- structured follow-up requests ---------------------------------------------------------------

_FOLLOW_UP_SYSTEM = """\
You read the work of a memory model: the input it was given and the notes it wrote. From them, \
extract one value, named "{slug}".

What to extract:
{instructions}

Answer with a single JSON value that matches this JSON schema, and nothing else:
{schema}

When nothing in the input tells you the value and no previous value is given, answer null."""

_RETRY = """\
Your previous answer could not be used: {error}. Reply again with ONLY the JSON value (no \
prose, no code fence), matching the schema exactly."""


def follow_up_user_message(slot: Slot, previous: Any, exchange: Exchange) -> str:
    """The user message of a structured extractor's follow-up request."""
    parts = [
        f"## The input the memory model saw\n\n{exchange.seen.strip()}",
        f"## What it wrote\n\n{exchange.answer.strip()}",
    ]
    if previous is not None:
        shown = previous if isinstance(previous, str) else json.dumps(previous, indent=2)
        parts.append(
            f"## Previous value of {slot.slug}\n\n{shown}\n\nKeep what still holds; change only "
            "what the input above changes or adds."
        )
    parts.append(f"## Your answer\n\nThe JSON value of {slot.slug}:")
    return "\n\n".join(parts)


EXTRACTOR_OUTPUT_CAP = 4_000
"""Most tokens an extractor's follow-up answer (one JSON value) may take."""


async def _follow_up(
    slot: Slot,
    previous: Any,
    exchange: Exchange,
    *,
    caller: ModelCaller,
    timeout: float | None,  # noqa: ASYNC109
    cycle_id: str,
    operation: str,
) -> Any:
    """Ask for ``slot``'s value as JSON; ask once more with the error if the answer is bad."""
    schema = cast(Schema, slot.schema)
    system = _FOLLOW_UP_SYSTEM.format(
        slug=slot.slug, instructions=slot.instructions.strip(), schema=schema_json(schema)
    )
    user = follow_up_user_message(slot, previous, exchange)
    error = ""
    for attempt in range(2):
        request = LLMRequest(
            role="extractor",
            model=exchange.model,
            system=system if attempt == 0 else f"{system}\n\n{_RETRY.format(error=error)}",
            user=[user],
            model_settings=dict(exchange.model_settings),
            timeout=timeout,
            operation=f"{operation}-extraction",
            cycle_id=cycle_id,
            max_output_tokens=EXTRACTOR_OUTPUT_CAP,
        )
        try:
            result = await caller.call(request)
            if result.cut_off is not None:
                raise ValueError(f"the answer was cut off while streaming ({result.cut_off})")
            value = parse_json(result.text)
            return None if value is None else slot.validate(value)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a failed call or a bad answer: ask once more
            error = _describe(exc)
    raise ValueError(f"no usable value after two requests: {error}")
