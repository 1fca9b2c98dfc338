"""A generation's files are unlinked as listed when their directory was quiet then and its
ctime has not moved since; otherwise each is ``lstat``-ed again right before its unlink.

Which path a file took shows in the bytes reported: a file that grew after the listing (its
directory's entries, and so its ctime, unchanged) is reported at its listed size on the
first path and at its new size on the second. A swapped file moves the ctime and is
refused on either path (tests/adversarial/test_paths.py runs its swaps both ways).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from memwal.store import LocalStore, local_trees
from memwal.store.local_trees import delete_trees
from tests.interleave import running_at

FILES = (("_versions/1.manifest", 10), ("data/a.lance", 100), ("data/b.lance", 7))
GROWN = 1000  # bytes appended to gen_0/data/a.lance after the listing


def _trees(root: Path, n: int = 4) -> list[str]:
    for g in range(n):
        for rel, size in FILES:
            f = root / "shard" / f"gen_{g}" / rel
            f.parent.mkdir(parents=True, exist_ok=True)
            f.write_bytes(b"x" * size)
    return [f"shard/gen_{g}" for g in range(n)]


def _delete_growing_a_file(root: Path) -> list[tuple[int, int, list[str]]]:
    prefixes = _trees(root)

    def grow() -> None:
        with open(root / "shard" / "gen_0" / "data" / "a.lance", "ab") as f:
            f.write(b"y" * GROWN)

    with running_at("store.trees-listed", grow) as reached:
        out = delete_trees(LocalStore(str(root)), prefixes, threads=2, first=lambda key, _: "/_versions/" in key)
    assert reached == ["store.trees-listed"]
    assert os.listdir(root / "shard") == []  # every tree went whole either way
    return out


def test_files_of_a_quiet_unchanged_directory_go_as_listed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local_trees, "QUIET_NS", 0)  # directories made just now count as quiet
    out = _delete_growing_a_file(tmp_path)
    assert out == [(3, 117, [])] * 4  # gen_0's a.lance at its listed 100 bytes: no second lstat


def test_files_of_a_directory_changed_just_before_the_listing_are_lstat_ed_again(tmp_path: Path) -> None:
    out = _delete_growing_a_file(tmp_path)  # made within QUIET_NS of the listing: not quiet
    assert out == [(3, 117 + GROWN, [])] + [(3, 117, [])] * 3
