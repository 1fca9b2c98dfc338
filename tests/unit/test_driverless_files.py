"""What a driverless merge may remove of the files it wrote into the table: only data and
deletion files it never committed. Names read from storage (a task's receipt) are untrusted:
another shape is refused whole, and a file the table's latest version names is kept."""

from __future__ import annotations

from pathlib import Path

import lance
import pyarrow as pa
import pytest

from memwal.errors import MemWalError
from memwal.merge.driverless import named_files, remove_uncommitted
from memwal.table import Table


def _table(tmp_path: Path) -> tuple[Table, str]:
    uri = str(tmp_path / "t")
    ds = lance.write_dataset(pa.table({"id": pa.array(range(10), pa.int64())}), uri)
    ds.delete("id = 3")
    stray = lance.fragment.write_fragments(pa.table({"id": pa.array([99], pa.int64())}), uri)
    return Table(uri), f"data/{stray[0].files[0].path}"


def test_only_uncommitted_files_are_removed(tmp_path):
    table, stray = _table(tmp_path)
    live = sorted(named_files(table.dataset()))
    assert len(live) == 2 and all((Path(table.uri) / k).exists() for k in live)  # a data and a deletion file
    remove_uncommitted(table, [stray, *live])
    assert not (Path(table.uri) / stray).exists()
    assert all((Path(table.uri) / k).exists() for k in live)  # named by the table: kept
    assert table.dataset().count_rows() == 9


@pytest.mark.parametrize("key", ["data/../_versions/1.manifest", "_versions/1.manifest", "data/x.lance/../../y",
                                 "/etc/passwd", "_deletions/1-2-3.txt"])
def test_a_name_of_another_shape_is_refused_and_nothing_removed(tmp_path, key):
    table, stray = _table(tmp_path)
    with pytest.raises(MemWalError, match="refusing to remove unexpected keys"):
        remove_uncommitted(table, [stray, key])
    assert (Path(table.uri) / stray).exists()
