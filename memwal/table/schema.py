"""What a table's schema declares about itself: its primary key.

Lance records an unenforced primary key as field metadata, in two forms: pylance's
``lance-schema:unenforced-primary-key: "true"`` and Lance 13's (LanceDB's)
``lance-schema:unenforced-primary-key:position: "N"``, which also orders a composite key.
Merging, reading, pruning and verifying all need the key and must agree on its columns and
their order, so it is read here and nowhere else, and read by Lance itself
(``LanceSchema.unenforced_primary_key()``): the metadata strings are Lance's format to parse,
not ours.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pyarrow as pa

from memwal.errors import BadInputError

if TYPE_CHECKING:
    from lance import LanceDataset
    from lance.lance.schema import LanceField
    from lance.schema import LanceSchema

    from memwal.table import Table


def primary_key(schema: LanceSchema | pa.Schema) -> list[str]:
    """The primary-key columns a schema declares, in the key's order (maybe none).

    The order is Lance's: by declared position, then the fields marked ``true``, in schema
    order. Pass a dataset's ``lance_schema`` where there is one; an Arrow schema (one that
    came from a dataset, with its field metadata) is handed to Lance to read the same way.
    A key column inside a struct is refused (exit 2): memwal's merge keys on top-level columns.
    """
    if isinstance(schema, pa.Schema):
        from lance.schema import LanceSchema

        schema = LanceSchema.from_pyarrow(schema)
    paths = dict(_field_paths(schema.fields(), ()))
    key = [paths[f.id()] for f in schema.unenforced_primary_key()]
    nested = [".".join(k) for k in key if len(k) > 1]
    if nested:
        raise BadInputError(f"primary key column(s) {', '.join(nested)}: a key inside a struct is not supported")
    return [name for (name,) in key]


def primary_key_of(table: Table, ds: LanceDataset | None = None) -> list[str]:
    """The base table's primary key (read from ``ds`` when the caller has the table open: an
    open costs a listing of its versions); without one nothing can be merged (exit 2)."""
    pk = primary_key((table.dataset() if ds is None else ds).lance_schema)
    if not pk:
        raise BadInputError(f"{table.uri}: the base table has no unenforced primary key; nothing can be merged: "
                            "declare it in the schema the table is created with, on a non-null column: Arrow field "
                            "metadata {'lance-schema:unenforced-primary-key': 'true'} (docs/guides/pylance.md; "
                            "LanceDB: set_unenforced_primary_key)")
    return pk


def _field_paths(fields: list[LanceField], parents: tuple[str, ...]) -> Iterator[tuple[int, tuple[str, ...]]]:
    """(field id, names from the top-level column down) of every field, nested ones included:
    Lance reports a key field by its own name, which says nothing of the struct it may sit in."""
    for f in fields:
        path = (*parents, f.name())
        yield f.id(), path
        yield from _field_paths(f.children(), path)
