"""The store contract as a pytest suite: run it against your own store.

A store needs only :class:`~obsmem.stores.CoreStore` (what the engine uses for turns and
cycles); search, the cycle ledger, an owner's delete and export/import are capabilities it may
add. The suite checks the core on every store, and each capability's tests run where the store
offers it (``isinstance`` on the capability protocol) and are skipped, naming it, elsewhere.

Subclass :class:`StoreConformance` in a test module and give it a ``store`` fixture that yields
a fresh, empty store (pytest-asyncio runs the tests)::

    import pytest_asyncio
    from obsmem.testing.store_conformance import StoreConformance

    class TestMyStore(StoreConformance):
        @pytest_asyncio.fixture
        async def store(self):
            store = MyStore()
            yield store
            await store.aclose()

``docs/writing-a-store.md`` walks through it; ``kit`` holds the helpers the tests share.
"""

from __future__ import annotations

import pytest

# Plain asserts in the suite explain their failures (named one by one: this package itself
# is already being imported).
_PARTS = ("erase", "kit", "ledger", "load_commit", "records", "search", "text", "threads")
pytest.register_assert_rewrite(*(f"{__name__}.{part}" for part in (*_PARTS, "transfer")))

from .erase import EraseContract  # noqa: E402
from .ledger import LedgerContract  # noqa: E402
from .load_commit import LoadCommitContract  # noqa: E402
from .records import RecordContract  # noqa: E402
from .search import SearchContract  # noqa: E402
from .text import TextContract  # noqa: E402
from .threads import ThreadContract  # noqa: E402
from .transfer import TransferContract  # noqa: E402

__all__ = [
    "CoreContract",
    "EraseContract",
    "LedgerContract",
    "SearchContract",
    "StoreConformance",
    "TransferContract",
]


class CoreContract(ThreadContract, TextContract, LoadCommitContract, RecordContract):
    """What every store must pass: threads and messages, load and commit, the head record's
    compare-and-set and the rules of each change, with the record invariants checked."""


@pytest.mark.asyncio
class StoreConformance(
    CoreContract, SearchContract, LedgerContract, EraseContract, TransferContract
):
    """The whole suite. Subclass it as ``Test...`` with a ``store`` fixture; the tests of a
    capability the store does not offer are skipped with a reason naming it."""
