"""The merge's reads of the base follow its batch, not the base's size (issue 82).

The merge refuses a batch whose keys the base holds twice (:mod:`memwal.merge.unique`). That
check once indexed the batch's keys again for every batch of a scan of the base: 32 times the
merge's floor at 16M rows, unseen by any test. Here the work is counted, never timed, on bases
of 1M and 4M rows holding the same generations (pylance's ``ShardWriter``):

* a flush's worth of keys: Lance's own I/O counters (bytes the merge reads of the base, the
  check's lookup included) are the same at both sizes, and so are the rows merged;
* a batch too large for the key index: its keys are indexed once for the whole scan, whatever
  the base's size, and the scan reads the key column once;
* a key the base holds twice is refused through either join, naming it, with nothing written.

Figures (whole processes against one ``merge_insert``) live in docs/benchmarks/reads.md.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pytest

import memwal
from memwal.errors import BadInputError
from memwal.merge.join import use_key_index
from memwal.merge.keys import IntKeySet
from memwal.merge.plan import plan_merge
from memwal.merge.unique import check_unique_keys
from memwal.table import open_table
from tests.helpers import tree_digest

SIZES = (1_000_000, 4_000_000)
SCHEMA = pa.schema([
    pa.field("id", pa.int64(), nullable=False, metadata={"lance-schema:unenforced-primary-key": "true"}),
    pa.field("val", pa.int64()),
])


def _base(path: Path, rows: int) -> str:
    """A base of ``rows`` keys (0..rows-1) with a BTREE on the key, and a MemWAL of one shard."""
    uri = str(path)
    ids = np.arange(rows, dtype=np.int64)
    lance.write_dataset(pa.table({"id": ids, "val": ids}, schema=SCHEMA), uri, max_rows_per_file=1_000_000)
    lance.dataset(uri).create_scalar_index("id", "BTREE")
    lance.dataset(uri).initialize_mem_wal(bucket_column="id", num_buckets=1)
    return uri


def _flush(uri: str, keys: np.ndarray) -> None:
    """``keys`` (val = -key), written and flushed by pylance's ShardWriter."""
    writer = lance.dataset(uri).mem_wal_writer(str(uuid.uuid4()), durable_write=False)
    for part in np.array_split(keys, -(-len(keys) // 50_000)):  # a put is at most a MemTable's rows
        writer.put(pa.table({"id": part, "val": -part}, schema=SCHEMA))
    writer.close()


@pytest.fixture(scope="module")
def bases(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    """Pristine bases of each size (copied per test: a merge changes them)."""
    root = tmp_path_factory.mktemp("merge-work")
    return {n: Path(_base(root / f"base-{n}", n)) for n in SIZES}


@pytest.fixture
def copy_of(bases: dict[int, Path], tmp_path: Path) -> Callable[[int], str]:
    def copy(n: int) -> str:
        import shutil

        dest = tmp_path / f"t-{n}"
        shutil.copytree(bases[n], dest)
        return str(dest)

    return copy


class _Counted:
    """A Lance scanner whose rows handed to memwal are counted (see :func:`base_reads`)."""

    def __init__(self, scanner: lance.LanceScanner, count: Callable[[int], None]) -> None:
        self._scanner, self._count = scanner, count

    def to_batches(self) -> Iterator[pa.RecordBatch]:
        for batch in self._scanner.to_batches():
            self._count(batch.num_rows)
            yield batch

    def to_table(self) -> pa.Table:
        t = self._scanner.to_table()
        self._count(t.num_rows)
        return t

    def __getattr__(self, name: str) -> object:
        return getattr(self._scanner, name)


@pytest.fixture
def base_reads(monkeypatch: pytest.MonkeyPatch) -> Callable[[str], int]:
    """``read(uri)``: rows memwal's own code read of the table at ``uri`` (not of its generations)
    since the last call: every row a Lance scan of it handed over (``ds.to_table`` scans too).
    Lance's join inside ``merge_insert`` is Lance's own, chosen like the check's
    (:func:`memwal.merge.join.use_key_index`, tests/integration/test_cost_follows_work.py)."""
    rows: dict[str, int] = {}
    real = lance.LanceDataset.scanner

    def scanner(self: lance.LanceDataset, *args: object, **kwargs: object) -> _Counted:
        where = str(Path(self.uri).resolve())

        def count(n: int) -> None:
            rows[where] = rows.get(where, 0) + n

        return _Counted(real(self, *args, **kwargs), count)

    monkeypatch.setattr(lance.LanceDataset, "scanner", scanner)
    return lambda uri: rows.pop(str(Path(uri).resolve()), 0)


def test_a_flush_merged_reads_the_same_bytes_of_a_1m_and_a_4m_row_base(copy_of, base_reads):
    keys = np.arange(0, 120, 2, dtype=np.int64)  # a flush of 60 rows: the key index's join
    assert use_key_index(len(keys), SIZES[0])
    read = {}
    for n in SIZES:
        uri = copy_of(n)
        _flush(uri, keys)
        base_reads(uri)
        result = memwal.open(uri).merge().value
        read[n] = base_reads(uri)
        assert result.commits >= 1
        got = lance.dataset(uri).to_table(filter="id < 200").sort_by("id")
        assert got.column("val").to_pylist() == [-k if k % 2 == 0 and k < 120 else k for k in range(200)]
        assert lance.dataset(uri).count_rows() == n
    assert read == {n: len(keys) for n in SIZES}, read  # the check's lookup: the batch's rows, at either size


def test_a_batch_too_large_for_the_index_indexes_its_keys_once_and_reads_the_key_column_once(
        copy_of, base_reads, monkeypatch):
    keys = np.arange(0, 240_000, 2, dtype=np.int64)  # 120,000 keys: the scan's join at either size
    assert not any(use_key_index(len(keys), n) for n in SIZES)
    indexed: list[int] = []
    real = IntKeySet.__init__

    def counted(self: IntKeySet, wanted: np.ndarray, asked: int) -> None:
        indexed.append(len(wanted))
        real(self, wanted, asked)

    monkeypatch.setattr(IntKeySet, "__init__", counted)  # wherever it is built
    read = {}
    for n in SIZES:
        uri = copy_of(n)
        _flush(uri, keys)
        table = open_table(uri)
        plan = plan_merge(table, check_keys=False)
        indexed.clear()
        base_reads(uri)
        check_unique_keys(table, plan)
        read[n] = base_reads(uri)
        assert indexed == [len(keys)], indexed  # once, whatever the base's size
        assert read[n] == n  # the key column's rows, once


@pytest.mark.parametrize("keys", [np.array([10, 12, 14], np.int64), np.arange(0, 40_000, 2, dtype=np.int64)],
                         ids=["index", "scan"])
def test_a_key_held_twice_is_refused_through_either_join_with_nothing_written(tmp_path, keys):
    uri = _base(tmp_path / "t", 100_000)
    held = np.array([12], np.int64)
    lance.write_dataset(pa.table({"id": held, "val": held + 1}, schema=SCHEMA), uri, mode="append")
    _flush(uri, keys)
    before = tree_digest(uri)
    table = open_table(uri)
    with pytest.raises(BadInputError, match=r"key 12 is held by 2 rows .*\(1 such keys"):
        plan_merge(table)
    assert tree_digest(uri) == before
