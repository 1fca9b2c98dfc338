"""Which base-table column each generation column is: by Lance field id, as Lance's readers decide.

Lance keeps a field id per column; a rename keeps the id, a dropped column's id is never given
out again (``max_field_id`` only grows), and pylance's ``ShardWriter`` writes generations and
WAL entries with the base table's field ids (``lance:field_id`` on the WAL's Arrow fields).
pylance's ``LsmScanner`` matches a generation's columns to the base's by those ids, so after a
rename it shows a generation's ``v`` under ``v2`` (observed with pylance 14.0.2). The merger and
memwal's folded reader follow the same mapping, so a merge never changes what readers see:

* a generation column whose field id is a base column's maps to that column, whatever either
  is called now (after a drop and re-add under the old name, the old values stay with the
  renamed column and the re-added one gets nulls);
* a field id at or below the base's ``max_field_id`` that no base column has any more was
  dropped from the base: its values are not merged (readers do not show them either);
* a field id above ``max_field_id`` names a column the base never had (a generation not
  written against this table, or a table restored to before the column existed): refused,
  because merging would lose its values;
* ``_tombstone`` is the MemWAL's own column, matched by name (its field id may equal a column's
  added since).

pylance 14.0.2 refuses other schema changes on a table with a MemWAL (a type change, renaming a
primary-key column, a computed column), so types of one field id differ only in generations
written by something else; those widen losslessly or are refused (:mod:`memwal.merge.inputs`).
"""

from __future__ import annotations

from dataclasses import dataclass

import lance
import pyarrow as pa

from memwal.errors import BadInputError

TOMBSTONE = "_tombstone"
#: Arrow field metadata key under which Lance's WAL writer records a column's field id.
FIELD_ID_KEY = b"lance:field_id"

#: A generation's columns that do not keep their name: (generation name, base name), the
#: base name None for a column dropped from the base. Empty: every column keeps its name.
Renames = tuple[tuple[str, "str | None"], ...]


@dataclass(frozen=True)
class BaseFields:
    """The base table's top-level columns by field id, at one version."""

    names: dict[int, str]
    max_field_id: int

    @classmethod
    def of(cls, ds: lance.LanceDataset) -> BaseFields:
        names = {f.id(): f.name() for f in ds.lance_schema.fields()}
        return cls(names, max(int(ds.max_field_id), max(names, default=-1)))


def dataset_field_ids(ds: lance.LanceDataset) -> dict[str, int]:
    """Top-level column name -> Lance field id of a dataset (a generation)."""
    return {f.name(): f.id() for f in ds.lance_schema.fields()}


def arrow_field_ids(schema: pa.Schema) -> dict[str, int]:
    """Column name -> field id recorded in Arrow field metadata (WAL entries); columns
    without one are left out."""
    out = {}
    for f in schema:
        raw = (f.metadata or {}).get(FIELD_ID_KEY)
        if raw is not None and raw.strip().lstrip(b"-").isdigit():
            out[f.name] = int(raw)
    return out


def renames(ids: dict[str, int], base: BaseFields, where: str) -> Renames:
    """The generation columns (``ids``: name -> field id) that do not keep their name.

    Refuses (BadInputError) a field id the base table never had.
    """
    out: list[tuple[str, str | None]] = []
    for name, fid in ids.items():
        if name == TOMBSTONE:
            continue
        target = base.names.get(fid)
        if target is None and fid > base.max_field_id:
            raise BadInputError(
                f"{where}: column {name} (field id {fid}) is not in the base table schema, which never had that "
                f"field id (max field id {base.max_field_id}): the generation was not written against this table, "
                "or the table was restored to before the column existed; add it to the base table before merging"
            )
        if target != name:
            out.append((name, target))
    return tuple(sorted(out, key=lambda p: p[0]))


def to_base_names(t: pa.Table, renamed: Renames) -> pa.Table:
    """``t`` with its columns under their base-table names; columns dropped from the base removed."""
    if not renamed:
        return t
    mapping = dict(renamed)
    present = [c for c in t.column_names if c not in mapping or mapping[c] is not None]
    t = t.select(present)
    return t.rename_columns([mapping.get(c) or c for c in t.column_names])


def describe(renamed: Renames) -> str:
    """``v -> v2, old -> (dropped)`` for messages and logs."""
    return ", ".join(f"{a} -> {b or '(dropped)'}" for a, b in renamed)
