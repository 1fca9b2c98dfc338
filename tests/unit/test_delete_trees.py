"""GC's tree deletion on several threads: every tree goes whole, with its bytes counted."""

from __future__ import annotations

import os
from pathlib import Path

from memwal.store import LocalStore
from memwal.store.local_trees import delete_trees


def test_trees_deleted_on_four_threads_go_whole_with_their_bytes(tmp_path: Path) -> None:
    sizes = {}
    for g in range(40):
        for rel, n in (("_versions/1.manifest", 10 + g), ("data/a.lance", 100 + g), ("data/b.lance", 7)):
            f = tmp_path / "shard" / f"gen_{g}" / rel
            f.parent.mkdir(parents=True, exist_ok=True)
            f.write_bytes(b"x" * n)
        sizes[f"shard/gen_{g}"] = 10 + g + 100 + g + 7
    (tmp_path / "shard" / "keep.txt").write_bytes(b"kept")
    out = delete_trees(LocalStore(str(tmp_path)), list(sizes), threads=4,
                       first=lambda key, prefix: "/_versions/" in key)
    assert out == [(3, sizes[p], []) for p in sizes]
    assert os.listdir(tmp_path / "shard") == ["keep.txt"] and (tmp_path / "shard" / "keep.txt").read_bytes() == b"kept"
