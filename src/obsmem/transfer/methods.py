"""``Memory.export`` and ``Memory.import_``: the transfer functions on a Memory's store."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..engine import ObservationalMemory
    from ..stores import CoreStore
    from .format import DataRecord, Header
    from .importing import ImportReport, OnConflict, Source

__all__ = ["Transfers"]


class Transfers:
    """Export and import, for a class with a ``store`` and an ``om`` (Memory)."""

    store: CoreStore
    om: ObservationalMemory | None

    def export(
        self,
        *,
        thread: str | None = None,
        resource: str | None = None,
        all: bool = False,
        ledger: bool = False,
    ) -> AsyncIterator[Header | DataRecord]:
        """The ``obsmem-export`` records (``docs/export-format.md``) of one thread, one resource
        or the whole store, header first, read a page at a time; ``ledger``: with the cycle
        ledger. ``obsmem.transfer.write_export`` writes them to a file."""
        from .exporting import export_records

        return export_records(self.store, thread=thread, resource=resource, all=all, ledger=ledger)

    async def import_(
        self,
        source: Source,
        *,
        dry_run: bool = False,
        on_conflict: OnConflict = "refuse",
        resource_map: Mapping[str, str] | None = None,
        progress: Callable[[str, int], None] | None = None,
    ) -> ImportReport:
        """Import an export file (its path), or its records (models or dicts, an iterable or an
        async iterable, header first: how a reader of another system feeds it), all or nothing.
        Every line is validated before the first write. Stored ids are refused unless
        ``on_conflict`` is ``"skip"`` (keep what is stored) or ``"replace"`` (erase it first);
        ``resource_map`` moves resources to new ids; ``dry_run`` writes nothing."""
        from .importing import import_records

        report = await import_records(
            self.store,
            source,
            dry_run=dry_run,
            on_conflict=on_conflict,
            resource_map=resource_map,
            progress=progress,
        )
        if self.om is not None and report.replaced_threads:
            self.om.forget_erased(report.replaced_threads, resource_id=None)
        return report
