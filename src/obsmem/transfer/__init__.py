"""Moving memory between stores and systems: the ``obsmem-export`` format (JSON Lines, see
``docs/export-format.md``), export as a stream of records, import all or nothing, and plain
transcripts and Mastra memory databases read as threads."""

from .exporting import export_records, open_private, write_export
from .format import FORMAT, VERSION, ExportRecord, Header, parse_record
from .importing import ImportInputError, ImportReport, OnConflict, import_records

__all__ = [
    "FORMAT",
    "VERSION",
    "ExportRecord",
    "Header",
    "ImportInputError",
    "ImportReport",
    "OnConflict",
    "export_records",
    "import_records",
    "open_private",
    "parse_record",
    "write_export",
]
