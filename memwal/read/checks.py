"""What every read checks first, and how a failed read is reported.

Bad input to a read (a filter Lance cannot parse or type-check, an unknown column) is
refused with :class:`~memwal.errors.BadInputError` (exit 2) *before* anything is read;
whatever fails after that failed inside Lance or Arrow, and becomes a
:class:`~memwal.errors.ReadError` naming the table (exit 1). The API never lets a raw
Lance or Arrow exception out, and messages never carry the Rust source locations of
Lance's build machine (:func:`memwal.errors.first_line`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

import lance
import pyarrow as pa
from lance.mem_wal import LsmScanner

from memwal.errors import BadInputError, MemWalError, ReadError, first_line
from memwal.table.schema import primary_key

if TYPE_CHECKING:
    from memwal.table import Table


@contextmanager
def reading(table: Table) -> Iterator[None]:
    """A failure inside Lance (or Arrow) while reading becomes a :class:`ReadError` naming the
    table (exit 1): bad input is refused before reading, so what is left is a failed read,
    never the user's fault and never a raw exception from the API."""
    try:
        yield
    except MemWalError:
        raise
    except (OSError, ValueError, RuntimeError, pa.ArrowException) as exc:
        raise ReadError(f"{table.uri}: cannot read: {first_line(exc, table.uri)}") from exc


def check_columns(schema: pa.Schema, columns: Sequence[str] | None) -> None:
    if columns is None:
        return
    if isinstance(columns, str) or not all(isinstance(c, str) for c in columns):
        raise BadInputError(f"columns: {columns!r} is not a list of column names")
    if not columns:
        raise BadInputError("columns: no column named")
    if unknown := [c for c in columns if c not in schema.names]:
        raise BadInputError(f"columns: no such column {', '.join(unknown)}")


def check_filter(ds: lance.LanceDataset, filter: str | None) -> None:
    """Refuse a filter Lance cannot parse or type-check against the table (exit 2), before
    anything is read: Lance plans it against the base table (no data read) and against an
    LSM scanner of no generation (which refuses system columns the base allows)."""
    if filter is None:
        return
    if not isinstance(filter, str):
        raise BadInputError(f"filter: {filter!r} is not a string")
    if not filter.strip():
        raise BadInputError(f"filter {filter!r}: empty")
    try:
        ds.scanner(filter=filter, columns=primary_key(ds.lance_schema) or None).explain_plan()
        LsmScanner.from_snapshots(ds, []).filter(filter)
    except (ValueError, OSError, RuntimeError) as exc:
        raise BadInputError(f"filter {filter!r}: {lance_reason(exc)}") from exc


# Lance wraps the parser's message in its error's name ('SQL error: ParserError("...")') and
# prefixes "Invalid user input: ": the reason is what is inside.
_WRAPPED = re.compile(r'\b[A-Z]\w*(?:Error|Exception)\("(.*)"\)')


def lance_reason(exc: BaseException) -> str:
    """The one-line reason Lance gives for refusing input, without class names or prefixes."""
    text = _WRAPPED.sub(r"\1", first_line(exc))
    return text.replace("Invalid user input: ", "").strip() or "refused by Lance"
