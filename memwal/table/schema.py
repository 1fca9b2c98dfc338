"""What a table's schema declares about itself: its primary key.

Lance records an unenforced primary key as field metadata; merging, reading, pruning and
verifying all need it, and they must agree on which columns it names, so it is read here
and nowhere else.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa

from memwal.errors import BadInputError

if TYPE_CHECKING:
    from memwal.table import Table

#: The field metadata key Lance uses for the (unenforced) primary key.
PK_METADATA_KEY = b"lance-schema:unenforced-primary-key"


def primary_key(schema: pa.Schema) -> list[str]:
    """The primary-key columns a schema declares, in schema order (maybe none)."""
    return [f.name for f in schema if (f.metadata or {}).get(PK_METADATA_KEY, b"").lower() == b"true"]


def primary_key_of(table: Table) -> list[str]:
    """The base table's primary key; without one nothing can be merged (exit 2)."""
    pk = primary_key(table.dataset().schema)
    if not pk:
        raise BadInputError(f"{table.uri}: the base table has no unenforced primary key; nothing can be merged")
    return pk
