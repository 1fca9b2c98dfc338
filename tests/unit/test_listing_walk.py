"""A listing of chosen generation folders on a disk (the lag's, GC's listing pass): it walks only
those folders, and tells of them, of the WAL and manifest versions when asked, and of every link
in ``_mem_wal/`` and in a shard's folder exactly what the walk of the whole tree tells."""

from __future__ import annotations

import os
from pathlib import Path

from memwal.store import open_store
from memwal.table.listing import MemWalListing, list_mem_wal
from memwal.table.naming import manifest_key, wal_key

SHARD = "00000000-0000-0000-0000-00000000000a"
OTHER = "00000000-0000-0000-0000-00000000000b"


def _file(root: Path, key: str, body: bytes = b"x") -> None:
    path = root / key
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(body)


def _table(root: Path, outside: Path) -> None:
    """Two shards: generations 1 to 4 (2 twice: a failed flush's folder under another prefix, 3 an
    empty folder), manifest versions, WAL entries, links in the shard folder, in a chosen and in an
    unchosen generation folder, and in ``_mem_wal/``; a staging folder and a run record."""
    for sid in (SHARD, OTHER):
        for v in (1, 2, 3):
            _file(root, manifest_key(sid, v))
        for p in (1, 2):
            _file(root, wal_key(sid, p))
        _file(root, f"_mem_wal/{sid}/aaaaaaa1_gen_1/_versions/1.manifest")
        _file(root, f"_mem_wal/{sid}/aaaaaaa2_gen_2/data/a.lance")
        _file(root, f"_mem_wal/{sid}/bbbbbbb2_gen_2/data/b.lance")
        (root / f"_mem_wal/{sid}/ccccccc3_gen_3").mkdir()
        _file(root, f"_mem_wal/{sid}/ddddddd4_gen_4/_pk_index/page_lookup.lance")
        _file(root, f"_mem_wal/{sid}/stray.txt")
    outside.mkdir()
    os.symlink(outside, root / f"_mem_wal/{SHARD}/eeeeeee5_gen_5")
    os.symlink(outside, root / f"_mem_wal/{SHARD}/aaaaaaa2_gen_2/data/evil")  # in a chosen folder
    os.symlink(outside, root / f"_mem_wal/{SHARD}/aaaaaaa1_gen_1/evil")  # in a folder not chosen
    os.symlink(outside, root / "_mem_wal/planted")
    _file(root, "_mem_wal/_staging/crashed/part-0.lance")
    _file(root, "_mem_wal/_jobs/history/run.json")


def _chosen(shard: str, generation: int) -> bool:
    return generation in (2, 3, 5) if shard == SHARD else generation == 4


def _as_whole_walk_tells(whole: MemWalListing, generations: bool) -> dict[str, object]:
    """What the whole walk tells, restricted to the chosen folders (links inside an unchosen one
    are not walked to)."""
    from memwal.table.naming import parse_generation_dir

    def keep(sid: str, name: str) -> bool:
        g = parse_generation_dir(name)
        return g is not None and _chosen(sid, g)

    return {
        "shards": {sid: ({n: [o.key for o in objs] for n, objs in s.generations.items() if keep(sid, n)}
                         if generations else {n: [o.key for o in objs] for n, objs in s.generations.items()},
                         sorted(s.manifests), s.manifest_dirs, [e.key for e in s.wal], s.wal_listed)
                   for sid, s in whole.shards.items()},
        "staging": {k: [o.key for o in v] for k, v in whole.staging.items()},
        "links": [k for k in whole.links if not k.startswith(f"_mem_wal/{SHARD}/aaaaaaa1_gen_1/")],
    }


def test_a_walk_of_chosen_folders_tells_what_the_whole_walk_tells_of_them(tmp_path: Path) -> None:
    root = tmp_path / "t.lance"
    _table(root, tmp_path / "outside")
    store = open_store(str(root))
    for options in ({}, {"wal": False, "staging": False}, {"wal": False, "staging": False, "manifests": False}):
        whole = list_mem_wal(store, **options)  # type: ignore[arg-type]
        chosen = list_mem_wal(store, generations=_chosen, **options)  # type: ignore[arg-type]
        assert _as_whole_walk_tells(chosen, False) == _as_whole_walk_tells(whole, True), options
    chosen = list_mem_wal(store, wal=False, staging=False, manifests=False, generations=_chosen)
    shard = chosen.shards[SHARD]
    # both folders of generation 2, the empty folder of 3; the linked 5 is a link, never a folder
    assert sorted(shard.generations) == ["aaaaaaa2_gen_2", "bbbbbbb2_gen_2", "ccccccc3_gen_3"]
    assert shard.generations["ccccccc3_gen_3"] == ()
    assert sorted(chosen.shards[OTHER].generations) == ["ddddddd4_gen_4"]
    assert chosen.links == ("_mem_wal/00000000-0000-0000-0000-00000000000a/aaaaaaa2_gen_2/data/evil",
                            "_mem_wal/00000000-0000-0000-0000-00000000000a/eeeeeee5_gen_5", "_mem_wal/planted")
    assert not shard.wal and not shard.manifests and not chosen.staging


def test_a_disk_lists_a_folder_s_subfolders_and_links_at_once(tmp_path: Path) -> None:
    root = tmp_path / "t.lance"
    _table(root, tmp_path / "outside")
    store = open_store(str(root))
    folder = f"_mem_wal/{SHARD}/"
    assert store.list_dirs_and_links(folder) == (store.list_dirs(folder), store.list_links(folder, recursive=False))
    dirs, links = store.list_dirs_and_links(folder)
    assert "eeeeeee5_gen_5" not in dirs and links == [f"{folder}eeeeeee5_gen_5"]
    assert store.list_dirs_and_links(f"{folder}eeeeeee5_gen_5/") == ([], [f"{folder}eeeeeee5_gen_5"])
    assert store.list_dirs_and_links("_mem_wal/nothing-here/") == ([], [])


def test_a_disk_s_least_key_and_level_are_the_listing_s(tmp_path: Path) -> None:
    """A table's latest version is the least of its version names: the least regular file, past a
    link, a folder and a temporary file that sort before it, as the sorted listing's first."""
    from memwal.store.local_walk import TEMP_MARKER

    root = tmp_path / "t.lance"
    _table(root, tmp_path / "outside")
    store = open_store(str(root))
    versions = root / "_versions"
    versions.mkdir()
    for v in (18446744073709551610, 18446744073709551611, 18446744073709551612):
        (versions / f"{v}.manifest").write_bytes(b"m")
    assert store.least_key("_versions/") == next(iter(store.list_keys("_versions/"))) \
        == "_versions/18446744073709551610.manifest"
    os.symlink(tmp_path / "outside", versions / "0-a-link.manifest")
    (versions / "00-a-folder.manifest").mkdir()
    (versions / f"000{TEMP_MARKER}x.manifest").write_bytes(b"partial")
    assert store.least_key("_versions/") == next(iter(store.list_keys("_versions/"))) \
        == "_versions/18446744073709551610.manifest"
    assert store.least_key("_versions/184467440737095516") == "_versions/18446744073709551610.manifest"
    assert store.least_key("_versions/9") is None and store.least_key("nothing/") is None
    for n in range(12):  # more links than it passes over: the sorted listing decides, as it would
        os.symlink(tmp_path / "outside", versions / f"1{n:02d}.manifest")
    assert store.least_key("_versions/") == "_versions/18446744073709551610.manifest"
    for folder in (f"_mem_wal/{SHARD}/", f"_mem_wal/{SHARD}/manifest/", "_versions/", "_mem_wal/", "nothing/"):
        assert store.list_level(folder) == (list(store.list_keys(folder)), store.list_dirs(folder)), folder
