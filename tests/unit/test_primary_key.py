"""The one rule for a table's primary key (memwal.table.schema), against Lance's own reading.

Lance records the key in two forms: pylance's ``lance-schema:unenforced-primary-key: "true"``
and Lance 13's (LanceDB's) ``...:position: "N"``, which also orders a composite key. Each
case here is a dataset pylance wrote with that metadata, read back as every caller reads it
(``ds.lance_schema``) and as the merge's generation reader does (an Arrow schema).
"""

from __future__ import annotations

from pathlib import Path

import lance
import pyarrow as pa
import pytest

from memwal.errors import BadInputError
from memwal.table import open_table
from memwal.table.schema import primary_key, primary_key_of
from tests.helpers import run_cli

TRUE = {"lance-schema:unenforced-primary-key": "true"}


def position(n: int) -> dict[str, str]:
    return {"lance-schema:unenforced-primary-key:position": str(n)}


def dataset(tmp_path: Path, *fields: pa.Field) -> lance.LanceDataset:
    rows = {f.name: pa.array([1, 2], f.type) if pa.types.is_integer(f.type) else pa.array(["a", "b"], f.type)
            for f in fields}
    return lance.write_dataset(pa.table(rows, schema=pa.schema(fields)), str(tmp_path / "t"))


@pytest.mark.parametrize(("fields", "key"), [
    ([pa.field("id", pa.int64(), False, TRUE), pa.field("v", pa.int64())], ["id"]),
    ([pa.field("v", pa.int64()), pa.field("id", pa.int64(), False, position(1))], ["id"]),
    # a composite key in its declared order, not the schema's
    ([pa.field("id", pa.int64(), False, position(2)), pa.field("v", pa.int64()),
      pa.field("cat", pa.string(), False, position(1))], ["cat", "id"]),
    # the "true" form on two columns: schema order
    ([pa.field("a", pa.string(), False, TRUE), pa.field("b", pa.int64(), False, TRUE)], ["a", "b"]),
    ([pa.field("id", pa.int64()), pa.field("v", pa.int64())], []),
], ids=["true", "position", "composite-by-position", "composite-true", "none"])
def test_the_key_is_what_lance_reads_in_its_declared_order(tmp_path: Path, fields: list[pa.Field],
                                                          key: list[str]) -> None:
    ds = dataset(tmp_path, *fields)
    assert primary_key(ds.lance_schema) == key
    assert primary_key(ds.schema) == key  # the Arrow schema with its metadata: the same reading


def test_a_key_column_inside_a_struct_is_bad_input() -> None:
    schema = pa.schema([pa.field("s", pa.struct([pa.field("x", pa.int64(), False, position(1))]), False)])
    with pytest.raises(BadInputError, match="s.x"):
        primary_key(schema)


def test_a_memwal_table_without_a_key_is_exit_2_and_names_the_table(tmp_path: Path) -> None:
    ds = dataset(tmp_path, pa.field("id", pa.int64()))
    ds.initialize_mem_wal(unsharded=True)
    with pytest.raises(BadInputError, match="no unenforced primary key"):
        primary_key_of(open_table(ds.uri))
    run = run_cli("merge", ds.uri)
    assert run.rc == 2 and run.stderr.count("\n") == 1
    assert f"{ds.uri}: the base table has no unenforced primary key" in run.stderr
    assert "'lance-schema:unenforced-primary-key': 'true'" in run.stderr  # how to declare one
