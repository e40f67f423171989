"""The public names are a promise: changing them is a decision, not an accident."""

from __future__ import annotations

import obsmem
import obsmem.stores


def test_top_level_names_are_pinned() -> None:
    assert sorted(obsmem.__all__) == sorted(
        [
            "Agent",
            "ConfigError",
            "ConflictError",
            "DataPart",
            "Extractor",
            "FilePart",
            "GenerateResult",
            "Hooks",
            "ImagePart",
            "Memory",
            "Message",
            "MemoryUnavailableError",
            "MissingExtraError",
            "ModelByInputTokens",
            "ModelError",
            "ObservationOptions",
            "ObservationalMemory",
            "ObservationalMemoryOptions",
            "ObserverOutputError",
            "ObsmemError",
            "PreparedContext",
            "ReasoningPart",
            "ReflectionOptions",
            "RetrievalOptions",
            "StoreError",
            "TextPart",
            "ToolCallPart",
            "ToolResultPart",
            "__version__",
            "resolve_options",
        ]
    )
    for name in obsmem.__all__:
        assert hasattr(obsmem, name), name


def test_store_names_are_pinned() -> None:
    assert sorted(obsmem.stores.__all__) == [
        "ActivateChunks",
        "AddChunk",
        "Change",
        "Commit",
        "CommitObservation",
        "CommitResult",
        "CoreStore",
        "ErasableStore",
        "Erasure",
        "InMemoryStore",
        "LedgerStore",
        "LoadRequest",
        "PostgresStore",
        "ResourcePatch",
        "SQLiteStore",
        "SearchableStore",
        "SetBufferedReflection",
        "StartGeneration",
        "Store",
        "ThreadChange",
        "ThreadPatch",
        "TransferStore",
    ]


def test_error_tree() -> None:
    assert issubclass(obsmem.ConflictError, obsmem.StoreError)
    assert issubclass(obsmem.StoreError, obsmem.ObsmemError)
    assert issubclass(obsmem.ConfigError, obsmem.ObsmemError)
    assert issubclass(obsmem.ObserverOutputError, obsmem.ModelError)
    assert issubclass(obsmem.MissingExtraError, ImportError)
    err = obsmem.MissingExtraError("PostgreSQL storage", "postgres", package="psycopg")
    assert 'pip install "obsmem[postgres]"' in str(err)
