"""The store contract: every store that runs here (a local directory, obstore's in-memory
store, S3 on moto, Azure Blob Storage on Azurite) behaves the same, through one suite.

The ``store`` fixture (tests/conftest.py) parametrises every test that takes it over the
four stores. GCS runs the same ObjectStore code; its conditional writes match the object
generation, which ``test_gcs_generation_contract`` checks against a loopback responder.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from memwal.errors import BadInputError, NotFoundError, PreconditionFailedError
from memwal.store import TEMP_MARKER, LocalStore, Store, open_store
from memwal.store.object import ObjectStore
from tests.azureserver import AzureServer
from tests.s3server import S3Server

# --------------------------------------------------------------------------- helpers
# (the ``store`` fixture and the ``s3_server`` / ``azure_server`` ones come from tests/conftest.py)


def _kind(store: Store) -> str:
    if isinstance(store, LocalStore):
        return "local"
    assert isinstance(store, ObjectStore)
    return {"s3": "s3", "az": "azure", "memory": "memory"}[store.location.scheme]


def _bulk_put(store: Store, keys: list[str], body: bytes = b"x") -> None:
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda k: store.put(k, body), keys))


def _seed(request: pytest.FixtureRequest, store: Store, keys: list[str]) -> None:
    """Create many small objects fast (setup only): straight into moto's state on S3,
    concurrent uploads on Azurite, whose container goes when the test ends, whatever is left in
    it (Azurite's deletes slow with every blob the server holds, in any container: the next
    tests' too)."""
    kind = _kind(store)
    if kind == "s3":
        server: S3Server = request.getfixturevalue("s3_server")
        server.seed_objects(store.bucket, [f"{store.prefix}/{k}" for k in keys])
    elif kind == "azure":
        az: AzureServer = request.getfixturevalue("azure_server")
        request.addfinalizer(lambda: az.drop_container(store.bucket))
        az.seed_blobs(store.bucket, [f"{store.prefix}/{k}" for k in keys])
    else:
        _bulk_put(store, keys)


def _race(n: int, fn: Any) -> list[Any]:
    """Run fn(i) on n threads released together; returns each result or exception."""
    barrier = threading.Barrier(n)
    results: list[Any] = [None] * n

    def run(i: int) -> None:
        barrier.wait()
        try:
            results[i] = fn(i)
        except Exception as exc:  # noqa: BLE001 - collected for the assertions
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


# --------------------------------------------------------------------------- basics


def test_put_get_head_exists(store: Store) -> None:
    etag = store.put("a/b/c.bin", b"hello")
    assert store.get("a/b/c.bin") == b"hello"
    data, etag2 = store.get_with_etag("a/b/c.bin")
    assert (data, etag2) == (b"hello", etag)
    info = store.head("a/b/c.bin")
    assert info is not None
    assert (info.key, info.size, info.etag) == ("a/b/c.bin", 5, etag)
    assert info.mtime > 1_600_000_000
    assert store.exists("a/b/c.bin")
    assert not store.exists("a/b")  # a "directory" is not an object
    assert store.head("a/b") is None

    etag3 = store.put("a/b/c.bin", b"world!")
    assert etag3 != etag
    assert store.get("a/b/c.bin") == b"world!"
    assert store.head("a/b/c.bin").size == 6  # type: ignore[union-attr]


def test_missing_objects(store: Store) -> None:
    for call in (
        lambda: store.get("nope/x"),
        lambda: store.get_with_etag("nope/x"),
        lambda: store.get_range("nope/x", 0, 4),
    ):
        with pytest.raises(NotFoundError) as ei:
            call()
        assert store.uri_for("nope/x") in str(ei.value)
        assert ei.value.exit_code == 2
    assert store.head("nope/x") is None
    assert not store.exists("nope/x")
    assert list(store.list("nope/")) == []
    assert store.list_dirs("nope/") == []


def test_get_range(store: Store) -> None:
    data = bytes(range(100))
    store.put("f", data)
    assert store.get_range("f", 0, 10) == data[:10]
    assert store.get_range("f", 40, 5) == data[40:45]
    assert store.get_range("f", -16, 16) == data[-16:]  # a trailer
    assert store.get_range("f", -16, 4) == data[-16:-12]
    assert store.get_range("f", -500, 3) == data[:3]
    assert store.get_range("f", 95, 50) == data[95:]  # short read at the end
    assert store.get_range("f", 100, 5) == b""
    assert store.get_range("f", 500, 5) == b""
    assert store.get_range("f", 3, 0) == b""


def test_get_heads_reads_many_heads_in_order(store: Store) -> None:
    files = {f"_mem_wal/s{i % 3}/wal/{i:04d}.arrow": bytes([i]) * (i + 1) for i in range(12)}
    for key, data in files.items():
        store.put(key, data)
    keys = list(files)
    keys.insert(5, "_mem_wal/s1/wal/gone.arrow")
    keys.insert(0, "_mem_wal/nowhere/wal/x.arrow")
    want = [None if k not in files else files[k][:8] for k in keys]
    assert store.get_heads(keys, 8) == want
    assert store.get_heads(keys, 1000) == [files.get(k) for k in keys]
    assert store.get_heads([], 8) == []


def test_get_many_reads_whole_objects_in_order(store: Store) -> None:
    big = os.urandom(200_000)  # more than one read of a file (and than one fixed-size read)
    files = {f"_versions/{i:020d}.manifest": bytes([i]) * (i * 37 + 1) for i in range(12)}
    files["_versions/big.manifest"] = big
    for key, data in files.items():
        store.put(key, data)
    keys = list(files)
    keys.insert(5, "_versions/gone.manifest")
    keys.insert(0, "nowhere/_versions/x.manifest")
    assert store.get_many(keys) == [files.get(k) for k in keys]
    assert store.get_many([]) == []


def test_uri_for_and_child(store: Store) -> None:
    store.put("_mem_wal/s1/0001_gen_1/data.lance", b"d")
    child = store.child("_mem_wal/s1")
    assert child.get("0001_gen_1/data.lance") == b"d"
    assert child.uri_for("x") == store.uri_for("_mem_wal/s1/x")
    assert [o.key for o in child.list("")] == ["0001_gen_1/data.lance"]
    if _kind(store) != "local":
        assert store.uri_for("k/v").startswith(("s3://", "az://", "memory://"))
        assert store.uri_for("k/v").endswith("/tables/t1/k/v")
    else:
        assert os.path.isabs(store.uri_for("k/v"))
        assert store.uri_for("k/v").endswith(os.path.join("table", "k", "v"))


@pytest.mark.parametrize("key", ["../x", "a/../../x", "/", "", "a//b", "a/./b"])
def test_bad_keys_refused(store: Store, key: str) -> None:
    with pytest.raises(BadInputError):
        store.put(key, b"x")


# --------------------------------------------------------------------------- listing


def test_list_order_recursive_and_flat(store: Store) -> None:
    keys = ["a.txt", "a/b", "a/c/d", "a0", "b/c/d", "b/e", "top"]
    _bulk_put(store, keys, b"12345")
    got = list(store.list(""))
    assert [o.key for o in got] == sorted(keys)  # S3's lexicographic order everywhere
    assert all(o.size == 5 for o in got)
    assert [o.key for o in store.list("a/")] == ["a/b", "a/c/d"]
    assert [o.key for o in store.list("a/", recursive=False)] == ["a/b"]
    assert [o.key for o in store.list("", recursive=False)] == ["a.txt", "a0", "top"]
    # a non-directory prefix is a string prefix, as on S3
    assert [o.key for o in store.list("a")] == ["a.txt", "a/b", "a/c/d", "a0"]
    assert [o.key for o in store.list("b/c")] == ["b/c/d"]
    info = {o.key: o for o in got}
    assert info["a/b"].etag == store.head("a/b").etag  # type: ignore[union-attr]


def test_list_dirs(store: Store) -> None:
    _bulk_put(
        store,
        [
            "_mem_wal/s1/manifest/1.binpb",
            "_mem_wal/s1/00ab_gen_1/data/x.lance",
            "_mem_wal/s1/00cd_gen_2/data/y.lance",
            "_mem_wal/s2/wal/1.arrow",
            "_mem_wal/file-not-dir",
            "_versions/1.manifest",
        ],
    )
    assert store.list_dirs("") == ["_mem_wal", "_versions"]
    assert store.list_dirs("_mem_wal/") == ["s1", "s2"]
    assert store.list_dirs("_mem_wal") == ["s1", "s2"]  # trailing slash optional
    assert store.list_dirs("_mem_wal/s1/") == ["00ab_gen_1", "00cd_gen_2", "manifest"]
    assert store.list_dirs("_mem_wal/s2/wal/") == []


def _list_requests(request: pytest.FixtureRequest, store: Store) -> int | None:
    """Listing requests the server saw so far (None for stores without a server)."""
    kind = _kind(store)
    if kind == "s3":
        return sum(1 for m, p in request.getfixturevalue("s3_server").requests if m == "GET" and "list-type=2" in p)
    if kind == "azure":
        from tests.azureserver import request_log

        return request_log(request.getfixturevalue("azure_server")).count("comp=list")
    return None


def test_listing_pages_across_5000_keys(request: pytest.FixtureRequest, store: Store) -> None:
    """5,001 keys: more than one listing page on every server (S3 pages 1,000 keys, Azure 5,000)."""
    keys = [f"d/{i % 3}/{i:05d}" for i in range(5001)]  # 1,667 a folder: more than a page of S3 too
    _seed(request, store, keys + ["keep/me"])
    before = _list_requests(request, store)
    listed = [o.key for o in store.list("d/")]
    assert listed == sorted(keys)  # every key, once, in order across pages
    if before is not None:
        assert _list_requests(request, store) - before >= 2  # more than one page was listed
    assert [o.key for o in store.list("d/0/", recursive=False)] == sorted(k for k in keys if k.startswith("d/0/"))


def test_bulk_delete_of_1200_keys_and_keys_that_never_existed(request: pytest.FixtureRequest, store: Store) -> None:
    """One bulk delete of more keys than a request takes on every server (S3 1,000, Azure 256),
    with keys that never existed among them. 1,200, not the 5,001 of the listing above: Azurite
    deletes a blob in time that grows with the blobs it holds (5,001 took 112 s, 1,200 took 4 s)."""
    keys = [f"d/{i % 3}/{i:05d}" for i in range(1200)]
    _seed(request, store, keys + ["keep/me"])
    requested = keys + ["d/missing", "never/there"]
    assert store.delete_many(iter(requested)) == len(requested)
    assert [o.key for o in store.list("")] == ["keep/me"]
    assert store.list_dirs("") == ["keep"]  # emptied "directories" are gone (local too)
    assert store.delete_many([]) == 0


def test_deleting_missing_keys_is_not_an_error(store: Store) -> None:
    store.put("x/a", b"1")
    assert store.delete_many(["x/never"]) == 1
    assert store.delete_many(["x/a", "x/never", "y/z"]) == 3
    assert store.delete_many(["x/a"]) == 1  # deleting again is fine (a GC rerun)
    assert list(store.list("")) == []


def test_local_delete_prunes_only_what_it_emptied(tmp_path: Path) -> None:
    """Unsorted, repeated keys; each emptied directory goes, deepest first, up to a non-empty one."""
    store = LocalStore(str(tmp_path / "t"))
    keys = ["g/1/_versions/1.manifest", "g/1/data/a.lance", "g/1/data/b.lance", "g/2/data/c.lance", "g/keep"]
    for k in keys:
        store.put(k, k.encode())
    (tmp_path / "t" / "g" / "1" / "empty-before").mkdir()  # not emptied by this call: kept
    (tmp_path / "t" / "other" / "empty").mkdir(parents=True)
    assert store.delete_many(["g/2/data/c.lance", "g/1/data/b.lance", "g/1/_versions/1.manifest",
                              "g/2/data/c.lance", "g/1/data/a.lance"]) == 5
    assert [o.key for o in store.list("")] == ["g/keep"]
    assert sorted(p.name for p in (tmp_path / "t" / "g").iterdir()) == ["1", "keep"]
    assert [p.name for p in (tmp_path / "t" / "g" / "1").iterdir()] == ["empty-before"]
    assert (tmp_path / "t" / "other" / "empty").is_dir()
    store.delete_many(["g/keep"])
    assert (tmp_path / "t").is_dir() and not (tmp_path / "t" / "g" / "keep").exists()  # the root stays
    child = store.child("other")
    child.put("x/y", b"1")
    child.delete_many(["x/y"])
    assert (tmp_path / "t" / "other").is_dir() and not (tmp_path / "t" / "other" / "x").exists()


# --------------------------------------------------------------------------- conditional writes


def test_put_if_absent(store: Store) -> None:
    etag = store.put_if_absent("_mem_wal/_jobs/leases/x.json", b"first")
    assert store.head("_mem_wal/_jobs/leases/x.json").etag == etag  # type: ignore[union-attr]
    with pytest.raises(PreconditionFailedError):
        store.put_if_absent("_mem_wal/_jobs/leases/x.json", b"second")
    assert store.get("_mem_wal/_jobs/leases/x.json") == b"first"
    assert [o.key for o in store.list("_mem_wal/")] == ["_mem_wal/_jobs/leases/x.json"]


def test_move_folder_moves_a_whole_folder_on_a_disk_and_nothing_elsewhere(store: Store) -> None:
    files = {"s/gen/data/a.lance": b"rows", "s/gen/_versions/1.manifest": b"manifest", "s/gen/marker.json": b"{}"}
    for key, data in files.items():
        store.put(key, data)
    store.put("t/taken/x", b"keep")
    moved = store.move_folder("s/gen", "t/fresh")
    if not isinstance(store, LocalStore):  # no rename: the caller copies; nothing changed
        assert moved is None
        assert sorted(o.key for o in store.list("")) == sorted([*files, "t/taken/x"])
        return
    assert moved == sum(map(len, files.values()))
    assert {o.key: store.get(o.key) for o in store.list("t/fresh/")} == {
        k.replace("s/gen/", "t/fresh/"): v for k, v in files.items()}
    assert list(store.list("s/")) == []
    with pytest.raises(PreconditionFailedError, match="already exists"):  # never into a folder that holds anything
        store.move_folder("t/fresh", "t/taken")
    assert store.get("t/taken/x") == b"keep" and store.get("t/fresh/marker.json") == b"{}"
    with pytest.raises(NotFoundError):
        store.move_folder("s/gone", "t/other")


def test_a_staged_rollup_is_placed_whole_with_its_marker_on_every_store(store: Store) -> None:
    """A rollup's staged folder becomes its shard's folder with the marker in it: moved on a disk,
    copied elsewhere (the marker put straight into the target, the Lance manifests last)."""
    from memwal.rollup.write import _place_folder
    from memwal.table.naming import ROLLUP_MARKER

    files = {"data/a.lance": b"rows", "_pk_index/page_data.lance": b"keys", "_versions/1.manifest": b"manifest"}
    for name, data in files.items():
        store.put(f"stage/gen/{name}", data)
    size = _place_folder(store, "stage/gen", "shard/abcd0123_gen_7", marker=b'{"replaces": []}')
    placed = {o.key.removeprefix("shard/abcd0123_gen_7/"): store.get(o.key) for o in store.list("shard/")}
    assert placed == {**files, ROLLUP_MARKER: b'{"replaces": []}'}
    assert size == sum(map(len, placed.values()))
    with pytest.raises(PreconditionFailedError):  # never into a folder that holds anything
        for name, data in files.items():
            store.put(f"stage/again/{name}", data)
        _place_folder(store, "stage/again", "shard/abcd0123_gen_7", marker=b"{}")
    assert store.get(f"shard/abcd0123_gen_7/{ROLLUP_MARKER}") == b'{"replaces": []}'


def test_put_if_match(store: Store) -> None:
    e1 = store.put("k", b"v1")
    e2 = store.put_if_match("k", b"v2", e1)
    assert e2 != e1
    assert store.get_with_etag("k") == (b"v2", e2)
    with pytest.raises(PreconditionFailedError):
        store.put_if_match("k", b"v3", e1)  # stale etag
    assert store.get("k") == b"v2"
    with pytest.raises(PreconditionFailedError):
        store.put_if_match("absent", b"v", e2)  # no object: never created by a CAS
    assert not store.exists("absent")
    e3 = store.put_if_match("k", b"v3", e2)
    assert store.get_with_etag("k") == (b"v3", e3)


def test_put_if_match_etag_never_reused(store: Store) -> None:
    """Rewrites with same-size bodies in a tight loop never repeat an ETag (no ABA)."""
    etag = store.put("k", b"body-000")
    seen = {etag}
    for i in range(1, 40):
        etag = store.put_if_match("k", f"body-{i:03d}".encode(), etag)
        assert etag not in seen
        seen.add(etag)
        if i % 5 == 0:
            etag = store.put("k", f"body-{i:03d}".encode().upper())
            assert etag not in seen
            seen.add(etag)


def _assert_one_writer_won(store: Store, key: str, results: list[Any]) -> None:
    """Exactly one conditional write of ``_race`` succeeded (an ETag), every other one was refused,
    and the object holds the winner's bytes under the winner's ETag."""
    winners = [i for i, r in enumerate(results) if isinstance(r, str)]
    losers = [r for r in results if isinstance(r, PreconditionFailedError)]
    assert len(winners) == 1, results
    assert len(losers) == len(results) - 1, results
    assert store.get_with_etag(key) == (f"writer-{winners[0]}".encode(), results[winners[0]])


def test_put_if_absent_race(store: Store) -> None:
    n = 16
    results = _race(n, lambda i: store.put_if_absent("race/key", f"writer-{i}".encode()))
    _assert_one_writer_won(store, "race/key", results)


def test_put_if_match_race(store: Store) -> None:
    n = 16
    base = store.put("race/cas", b"base")
    results = _race(n, lambda i: store.put_if_match("race/cas", f"writer-{i}".encode(), base))
    _assert_one_writer_won(store, "race/cas", results)


# --------------------------------------------------------------------------- local specifics


def test_local_accepts_file_uri_and_skips_temp_files(tmp_path: Path) -> None:
    s = open_store(f"file://{tmp_path}/t")
    assert isinstance(s, LocalStore)
    s.put("d/obj", b"x")
    assert (tmp_path / "t" / "d" / "obj").read_bytes() == b"x"
    (tmp_path / "t" / "d" / f".obj{TEMP_MARKER}deadbeef").write_bytes(b"partial")
    assert [o.key for o in s.list("")] == ["d/obj"]
    assert s.uri_for("d/obj") == str(tmp_path / "t" / "d" / "obj")
    # No lock or temp files are left behind by conditional writes.
    e = s.put_if_absent("d/lease", b"1")
    s.put_if_match("d/lease", b"2", e)
    assert sorted(os.listdir(tmp_path / "t" / "d")) == [f".obj{TEMP_MARKER}deadbeef", "lease", "obj"]


def test_local_storage_options_ignored(tmp_path: Path) -> None:
    s = open_store(str(tmp_path), {"allow_http": "maybe", "whatever": "1"})
    assert isinstance(s, LocalStore)


