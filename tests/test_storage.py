"""memwal.storage against a local directory and a real (moto) S3 server."""

from __future__ import annotations

import http.server
import os
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from memwal.errors import BadInputError, MemWalError, NotFoundError, PreconditionFailedError
from memwal.s3_store import S3Store
from memwal.storage import TEMP_MARKER, LocalStore, Store, open_store
from tests.s3server import S3Server

# --------------------------------------------------------------------------- helpers
# (the ``store`` fixture, local and S3, and ``s3_server`` come from tests/conftest.py)


def _is_s3(store: Store) -> bool:
    return isinstance(store, S3Store)


def _bulk_put(store: Store, keys: list[str], body: bytes = b"x") -> None:
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda k: store.put(k, body), keys))


def _seed(request: pytest.FixtureRequest, store: Store, keys: list[str]) -> None:
    """Create many small objects fast: straight into moto's state on S3 (setup only)."""
    if isinstance(store, S3Store):
        server: S3Server = request.getfixturevalue("s3_server")
        server.seed_objects(store.bucket, [f"{store.prefix}/{k}" for k in keys])
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


def test_uri_for_and_child(store: Store) -> None:
    store.put("_mem_wal/s1/0001_gen_1/data.lance", b"d")
    child = store.child("_mem_wal/s1")
    assert child.get("0001_gen_1/data.lance") == b"d"
    assert child.uri_for("x") == store.uri_for("_mem_wal/s1/x")
    assert [o.key for o in child.list("")] == ["0001_gen_1/data.lance"]
    if _is_s3(store):
        assert store.uri_for("k/v").startswith("s3://")
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


def test_list_paginates(request: pytest.FixtureRequest, store: Store) -> None:
    n = 1105 if _is_s3(store) else 60  # > 1000: two ListObjectsV2 pages
    keys = [f"gen/{i:05d}" for i in range(n)]
    _seed(request, store, keys)
    listed = [o.key for o in store.list("gen/")]
    assert listed == keys
    assert [o.key for o in store.list("gen/", recursive=False)] == keys


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


def test_delete_many(request: pytest.FixtureRequest, store: Store) -> None:
    n = 2203 if _is_s3(store) else 40  # > 2000: three DeleteObjects batches
    keys = [f"d/{i % 7}/{i:05d}" for i in range(n)]
    _seed(request, store, keys + ["keep/me"])
    requested = keys + ["d/missing", "never/there"]
    assert store.delete_many(iter(requested)) == len(requested)
    assert [o.key for o in store.list("")] == ["keep/me"]
    assert store.list_dirs("") == ["keep"]  # emptied "directories" are gone (local too)
    assert store.delete_many([]) == 0
    assert store.delete_many(keys[:3]) == 3  # deleting again is fine


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


def test_put_if_absent_race(store: Store) -> None:
    n = 16
    results = _race(n, lambda i: store.put_if_absent("race/key", f"writer-{i}".encode()))
    winners = [i for i, r in enumerate(results) if isinstance(r, str)]
    losers = [r for r in results if isinstance(r, PreconditionFailedError)]
    assert len(winners) == 1, results
    assert len(losers) == n - 1, results
    assert store.get_with_etag("race/key") == (f"writer-{winners[0]}".encode(), results[winners[0]])


def test_put_if_match_race(store: Store) -> None:
    n = 16
    base = store.put("race/cas", b"base")
    results = _race(n, lambda i: store.put_if_match("race/cas", f"writer-{i}".encode(), base))
    winners = [i for i, r in enumerate(results) if isinstance(r, str)]
    losers = [r for r in results if isinstance(r, PreconditionFailedError)]
    assert len(winners) == 1, results
    assert len(losers) == n - 1, results
    assert store.get_with_etag("race/cas") == (f"writer-{winners[0]}".encode(), results[winners[0]])


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


# --------------------------------------------------------------------------- S3 options


def test_s3_bad_storage_options(s3_server: S3Server) -> None:
    uri, opts = s3_server.new_table()
    with pytest.raises(BadInputError, match="allow_http"):
        open_store(uri, {**opts, "allow_http": "maybe"})
    with pytest.raises(BadInputError, match="aws_endpoint"):
        open_store(uri, {**opts, "aws_endpoint": "not a url"})
    with pytest.raises(BadInputError, match="endpoint"):
        open_store(uri, {**opts, "aws_endpoint": s3_server.endpoint, "allow_http": "false"})
    with pytest.raises(BadInputError, match="virtual_hosted_style_request"):
        open_store(uri, {**opts, "virtual_hosted_style_request": "sometimes"})
    with pytest.raises(BadInputError, match="client_max_retries"):
        open_store(uri, {**opts, "client_max_retries": "lots"})
    with pytest.raises(BadInputError):
        open_store("s3:///no-bucket", opts)
    with pytest.raises(BadInputError, match="scheme"):
        open_store("gs://bucket/t", opts)


def test_s3_option_aliases_and_unknown_keys(s3_server: S3Server) -> None:
    uri, opts = s3_server.new_table()
    aliased = {
        "endpoint": s3_server.endpoint,
        "ALLOW_HTTP": "TRUE",
        "access_key_id": "testing",
        "secret_access_key": "testing",
        "region": "us-east-1",
        "virtual_hosted_style_request": "false",
        "timeout": "30s",  # a Lance option we don't use: ignored
        "aws_unknown_thing": "zzz",
    }
    s = open_store(uri, aliased)
    s.put("k", b"v")
    assert open_store(uri, opts).get("k") == b"v"


def test_s3_missing_bucket_is_not_found(s3_server: S3Server) -> None:
    s = open_store("s3://no-such-bucket-memwal/t", s3_server.storage_options)
    with pytest.raises(NotFoundError, match="no-such-bucket-memwal"):
        s.get("k")
    with pytest.raises(NotFoundError):
        list(s.list(""))


def test_s3_bucket_root_store(s3_server: S3Server) -> None:
    opts = s3_server.make_bucket()
    s = open_store(f"s3://{s3_server.last_bucket}", opts)
    s.put("x/y", b"1")
    assert s.list_dirs("") == ["x"]
    assert s.uri_for("x/y") == f"s3://{s3_server.last_bucket}/x/y"
    assert [o.key for o in s.child("x").list("")] == ["y"]


# --------------------------------------------------------------------------- S3 retries


class _Responder(http.server.BaseHTTPRequestHandler):
    """Answers every request with the server's canned status (or drops the connection)."""

    protocol_version = "HTTP/1.1"

    def _answer(self) -> None:
        server: _CannedServer = self.server  # type: ignore[assignment]
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        with server.lock:
            server.requests += 1
        if server.status == 0:  # drop the connection without an answer
            self.close_connection = True
            return
        code = {404: "NoSuchKey", 412: "PreconditionFailed", 503: "SlowDown", 403: "AccessDenied"}
        body = (
            f"<?xml version='1.0' encoding='UTF-8'?><Error><Code>{code.get(server.status, 'X')}"
            f"</Code><Message>canned</Message></Error>"
        ).encode()
        self.send_response(server.status)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    do_GET = do_PUT = do_HEAD = do_POST = do_DELETE = _answer  # noqa: N815

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass


class _CannedServer(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Responder)
        self.status = 503
        self.requests = 0
        self.lock = threading.Lock()


@pytest.fixture
def canned() -> Iterator[_CannedServer]:
    srv = _CannedServer()
    t = threading.Thread(target=srv.serve_forever, args=(0.02,), daemon=True)
    t.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def _canned_store(srv: _CannedServer) -> S3Store:
    opts = {
        "aws_endpoint": f"http://127.0.0.1:{srv.server_address[1]}",
        "allow_http": "true",
        "aws_access_key_id": "testing",
        "aws_secret_access_key": "testing",
        "aws_region": "us-east-1",
        "client_max_retries": "2",
    }
    s = open_store("s3://bucket/t", opts)
    assert isinstance(s, S3Store)
    s.retry_wait = (0.01, 0.02)
    return s


def test_s3_transient_errors_are_retried(canned: _CannedServer) -> None:
    s = _canned_store(canned)
    canned.status = 503
    with pytest.raises(MemWalError, match="3 attempts") as ei:
        s.get("k")
    assert type(ei.value) is MemWalError  # exit code 1, not bad input
    assert canned.requests == 3

    canned.requests, canned.status = 0, 0  # connection dropped
    with pytest.raises(MemWalError, match="3 attempts"):
        s.put("k", b"v")
    assert canned.requests == 3


@pytest.mark.parametrize(
    ("status", "call", "error"),
    [
        (404, lambda s: s.get("k"), NotFoundError),
        (412, lambda s: s.put_if_absent("k", b"v"), PreconditionFailedError),
        (412, lambda s: s.put_if_match("k", b"v", '"abc"'), PreconditionFailedError),
        (403, lambda s: s.get("k"), BadInputError),
    ],
)
def test_s3_client_errors_are_not_retried(
    canned: _CannedServer, status: int, call: Any, error: type[Exception]
) -> None:
    s = _canned_store(canned)
    canned.status = status
    with pytest.raises(error):
        call(s)
    assert canned.requests == 1
