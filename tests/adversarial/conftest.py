"""Fixtures of the adversarial suite (hostile inputs and states). Its tools (``tree_digest``,
``run_cli``, ``assert_one_line_error``) live in :mod:`tests.helpers`, shared with the other kinds."""

from __future__ import annotations

import lance
import pytest

import memwal
from memwal.demo import Model, Workload, create_base_table, write_generations
from tests.helpers import tree_digest


@pytest.fixture
def unchanged():
    """``with unchanged(path, ...):`` asserts the trees are byte-for-byte the same afterwards."""
    from contextlib import contextmanager

    @contextmanager
    def check(*roots: str):
        before = {r: tree_digest(r) for r in roots}
        yield
        for r in roots:
            assert tree_digest(r) == before[r], f"{r} changed"

    return check


@pytest.fixture
def canary(tmp_path):
    """A folder outside every table, with a file in it: asserted byte for byte unchanged afterwards."""
    folder = tmp_path / "canary"
    folder.mkdir()
    (folder / "keep.txt").write_text("outside every table")
    before = tree_digest(str(folder))
    yield folder
    assert tree_digest(str(folder)) == before


SMALL_V1 = Workload(base_rows=50, shards=2, generations=3, rows_per_generation=10, indexes=False, seed=3)


@pytest.fixture(scope="module")
def v1_template(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Model]:
    """A MemWAL table whose manifests have V1 names (``<version>.manifest``), its generations
    written by pylance's ShardWriter and merged."""
    root = tmp_path_factory.mktemp("v1")
    ds, _ = create_base_table(str(root / "src"), SMALL_V1)
    uri = str(root / "t")
    lance.write_dataset(ds.to_table(), uri, enable_v2_manifest_paths=False).initialize_mem_wal(
        bucket_column="id", num_buckets=SMALL_V1.shards)
    model = Model()
    model.put(ds.to_table())
    write_generations(uri, SMALL_V1, model)
    assert memwal.open(uri).merge().ok
    return uri, model
