"""Object stores beyond the common contract: storage options, transient failures retried by
the one retry primitive, wrong credentials, missing buckets, and GCS generations.

Transient failures are real HTTP answers: a loopback proxy (tests/faultproxy.py) in front of
moto or Azurite answers a 503 once, then forwards. Wrong credentials are refused by the
servers themselves (moto's IAM authentication, Azurite's SharedKey check).
"""

from __future__ import annotations

import email.utils
import hashlib
import http.server
import json
import threading
from collections.abc import Iterator

import pytest

from memwal.errors import BadInputError, MemWalError, NotFoundError, PreconditionFailedError
from memwal.store import open_store
from memwal.store.failures import BucketNotFoundError
from memwal.store.object import ObjectStore
from memwal.store.options import for_obstore
from tests.azureserver import AzureServer
from tests.faultproxy import fault_proxy
from tests.helpers import assert_one_line_error, run_cli
from tests.s3server import S3Server

SECRET = "Wr0ngS3cretValue0123456789abcdef"


def _endpoint_key(kind: str) -> str:
    return {"s3": "aws_endpoint", "azure": "azure_storage_endpoint"}[kind]


@pytest.fixture(params=["s3", "azure"])
def remote(request: pytest.FixtureRequest) -> tuple[str, S3Server | AzureServer]:
    return request.param, request.getfixturevalue(f"{request.param}_server")


# --------------------------------------------------------------------------- options


def test_options_are_translated_once_for_obstore() -> None:
    opts = for_obstore("s3", {"AWS_ENDPOINT": "http://127.0.0.1:9", "ALLOW_HTTP": "TRUE", "region": "eu-west-1",
                              "aws_access_key_id": "AKIA", "aws_secret_access_key": SECRET,
                              "client_max_retries": "2", "timeout": "30s", "azure_storage_account_name": "x",
                              "aws_profile": "dev"})
    assert opts.config == {"endpoint": "http://127.0.0.1:9", "region": "eu-west-1", "access_key_id": "AKIA",
                           "secret_access_key": SECRET}  # the azure key is another family's: ignored
    assert opts.client_options == {"allow_http": True, "timeout": "30s"}
    assert (opts.attempts, opts.profile, opts.secrets) == (3, "dev", ("AKIA", SECRET))  # "key" names hide too
    az = for_obstore("az", {"azure_storage_account_key": SECRET, "azure_account_name": "acct",
                            "azure_storage_endpoint": "http://127.0.0.1:9/acct", "allow_http": "true"})
    assert az.config == {"azure_storage_account_key": SECRET, "account_name": "acct",
                         "azure_storage_endpoint": "http://127.0.0.1:9/acct"}
    gs = for_obstore("gs", {"google_service_account_key": "{}", "google_base_url": "https://example.test"})
    assert gs.config == {"service_account_key": "{}", "base_url": "https://example.test"}


@pytest.mark.parametrize(
    ("uri", "options", "message"),
    [
        ("s3://bucket/t", {"allow_http": "maybe"}, "allow_http"),
        ("s3://bucket/t", {"aws_endpoint": "not a url"}, "aws_endpoint"),
        ("s3://bucket/t", {"aws_endpoint": "http://127.0.0.1:9"}, "set allow_http=true"),
        ("s3://bucket/t", {"aws_virtual_hosted_style_request": "sometimes"}, "virtual_hosted_style_request"),
        ("s3://bucket/t", {"client_max_retries": "lots"}, "client_max_retries"),
        ("s3://bucket/t", {"aws_access_key_id": "AKIA"}, "must be given together"),
        ("s3://bucket/t", {"aws_secret_acess_key": SECRET}, "did you mean 'aws_secret_access_key'"),
        ("az://container/t", {"azure_storage_acount_key": SECRET}, "did you mean 'azure_storage_account_key'"),
        ("az://container/t", {"azure_storage_endpoint": "http://127.0.0.1:9/a"}, "set allow_http=true"),
        ("az://container/t", {"azure_use_emulator": SECRET}, "expected true or false"),
        ("gs://bucket/t", {"google_service_acount_key": SECRET}, "did you mean 'google_service_account_key'"),
        ("gs://bucket/t", {"google_base_url": "ftp://x"}, "google_base_url"),
    ],
)
def test_bad_storage_options_are_bad_input_naming_the_key(uri: str, options: dict, message: str) -> None:
    with pytest.raises(BadInputError) as ei:
        open_store(uri, options)
    assert message in str(ei.value) and SECRET not in str(ei.value)


@pytest.mark.parametrize(
    ("uri", "problem"),
    [
        ("az://Bad_Container/t", "bad container name"),
        ("az:///t", "no container"),
        ("abfss://c@evil.example.com/t", "abfss://container@account"),
        ("gs://B/t", "bad bucket name"),
        ("gs://bucket//t", "'.' or '..' component"),
        ("gcs://bucket/t", "unsupported table URI scheme"),
        ("adl://c/t", "unsupported table URI scheme"),
        (f"abfss://user:{SECRET}@acct.dfs.core.windows.net/t", "credentials in a URI"),
    ],
)
def test_object_store_uris_are_checked_before_any_request(uri: str, problem: str) -> None:
    with pytest.raises(BadInputError) as ei:
        open_store(uri, {})
    assert problem in str(ei.value) and SECRET not in str(ei.value)


def test_abfss_and_gs_uris_name_their_stores() -> None:
    s = open_store("abfss://data@acct.dfs.core.windows.net/lake/t", {"azure_storage_account_key": "a2V5"})
    assert isinstance(s, ObjectStore) and (s.bucket, s.prefix) == ("data", "lake/t")
    assert s.uri_for("_mem_wal/x") == "abfss://data@acct.dfs.core.windows.net/lake/t/_mem_wal/x"
    g = open_store("gs://bucket/a/t", {"google_bearer_token": "tok"})
    assert g.uri_for("k") == "gs://bucket/a/t/k" and g.delete_batch == 1  # GCS has no batch delete: a key a request


# --------------------------------------------------------------------------- transient failures


@pytest.mark.parametrize("call", ["get", "put", "put_if_absent", "put_if_match", "list", "delete_many"])
def test_a_transient_503_is_retried_by_the_retry_primitive(remote, call: str, caplog) -> None:
    kind, server = remote
    uri, opts = server.new_table("retried")
    direct = open_store(uri, opts)
    etag = direct.put("k", b"v1")
    endpoint = opts[_endpoint_key(kind)]
    with fault_proxy(endpoint) as proxy:
        proxied_opts = {**opts, _endpoint_key(kind): endpoint.replace(proxy.upstream, proxy.endpoint)}
        store = open_store(uri, proxied_opts)
        assert isinstance(store, ObjectStore)
        store.retry_wait = (0.01, 0.02)
        proxy.fail(lambda method, path: True, status=503, times=1)  # the very next request, whatever it is
        with caplog.at_level("WARNING", logger="memwal.core.retry"):
            result = {
                "get": lambda: store.get("k"),
                "put": lambda: store.put("k", b"v2"),
                "put_if_absent": lambda: store.put_if_absent("new", b"n"),
                "put_if_match": lambda: store.put_if_match("k", b"v2", etag),
                "list": lambda: [o.key for o in store.list("")],
                "delete_many": lambda: store.delete_many(["k"]),
            }[call]()
        assert len(proxy.failed) == 1 and len(proxy.requests) >= 2  # failed once, then sent again
        assert "attempt 1/5" in caplog.text and "503" in caplog.text
    expected = {"get": b"v1", "list": ["k"], "delete_many": 1}
    if call in expected:
        assert result == expected[call]
    if call in ("put", "put_if_match"):
        assert direct.get("k") == b"v2"
    if call == "put_if_absent":
        assert direct.get("new") == b"n"
    if call == "delete_many":
        assert not direct.exists("k")


def test_retries_stop_after_the_attempts_allowed(remote) -> None:
    kind, server = remote
    uri, opts = server.new_table("down")
    endpoint = opts[_endpoint_key(kind)]
    with fault_proxy(endpoint) as proxy:
        store = open_store(uri, {**opts, "client_max_retries": "2",
                                 _endpoint_key(kind): endpoint.replace(proxy.upstream, proxy.endpoint)})
        store.retry_wait = (0.01, 0.02)
        proxy.fail(lambda m, p: True, status=503, times=100)
        with pytest.raises(MemWalError, match="failed after 3 attempts") as ei:
            store.get("k")
        assert type(ei.value) is MemWalError and len(proxy.failed) == 3  # exit 1, three requests


def test_a_lost_race_is_not_retried(remote) -> None:
    kind, server = remote
    uri, opts = server.new_table("final")
    store = open_store(uri, opts)
    stale = store.put("k", b"1")
    store.put("k", b"2")
    endpoint = opts[_endpoint_key(kind)]
    with fault_proxy(endpoint) as proxy:
        proxied = open_store(uri, {**opts, _endpoint_key(kind): endpoint.replace(proxy.upstream, proxy.endpoint)})
        with pytest.raises(PreconditionFailedError):
            proxied.put_if_match("k", b"3", stale)  # CAS with a stale ETag
        with pytest.raises(NotFoundError):
            proxied.get("absent")
        assert len(proxy.requests) == 2  # one request each: a 4xx is final


def test_a_conditional_put_whose_first_attempt_landed_is_recognised(remote) -> None:
    """The server applied the write but its answer was lost (a 503 after forwarding): the
    retry loses its precondition, the object holds our bytes, and the write counts as ours."""
    kind, server = remote
    uri, opts = server.new_table("landed")
    endpoint = opts[_endpoint_key(kind)]
    with fault_proxy(endpoint) as proxy:
        store = open_store(uri, {**opts, _endpoint_key(kind): endpoint.replace(proxy.upstream, proxy.endpoint)})
        store.retry_wait = (0.01, 0.02)
        direct = open_store(uri, opts)
        direct.put_if_absent("lease", b"mine")  # as if our first attempt had landed ...
        proxy.fail(lambda m, p: m == "PUT", status=503, times=1)  # ... and its answer were a 503
        etag = store.put_if_absent("lease", b"mine")
        assert etag == direct.head("lease").etag
        with pytest.raises(PreconditionFailedError):
            store.put_if_absent("lease", b"someone else")


# --------------------------------------------------------------------------- credentials, buckets


@pytest.fixture
def wrong_credentials(remote, tmp_path) -> Iterator[tuple[str, str, dict[str, str]]]:
    """A real table whose server refuses the credentials given: (kind, uri, options)."""
    from memwal.demo import Workload, create_base_table

    kind, server = remote
    uri, opts = server.new_table("creds")
    create_base_table(uri, Workload(base_rows=10, shards=1, generations=1, rows_per_generation=5, seed=1), opts)
    if kind == "s3":
        with server.authentication():
            yield kind, uri, {**opts, "aws_secret_access_key": SECRET}
    else:
        import base64

        yield kind, uri, {**opts, "azure_storage_account_key": base64.b64encode(SECRET.encode()).decode()}


def test_wrong_credentials_are_exit_2_without_the_secret(wrong_credentials, tmp_path) -> None:
    kind, uri, opts = wrong_credentials
    path = tmp_path / "opts.json"
    path.write_text(json.dumps(opts))
    path.chmod(0o600)
    for cmd in ("status", "merge", "gc"):
        run = run_cli(cmd, uri, "--storage-options-file", str(path))
        assert_one_line_error(run, 2, uri, "access denied", "check the credentials")
        secret = opts.get("aws_secret_access_key") or opts["azure_storage_account_key"]
        assert secret not in run.stderr + run.stdout and SECRET not in run.stderr + run.stdout


def test_missing_bucket_or_container_is_not_found(remote) -> None:
    kind, server = remote
    opts = server.make_bucket() if kind == "s3" else server.make_container()
    uri = "s3://no-such-bucket-memwal/t" if kind == "s3" else "az://no-such-container-memwal/t"
    s = open_store(uri, opts)
    with pytest.raises(NotFoundError, match="no-such"):
        s.get("k")
    with pytest.raises(BucketNotFoundError, match="no-such"):
        list(s.list(""))


# --------------------------------------------------------------------------- GCS generations


class _GcsResponder(http.server.BaseHTTPRequestHandler):
    """The four XML-API calls object_store makes for our GCS store, answered as GCS does:
    a PUT carries ``x-goog-if-generation-match`` (0: create only; N: that generation only)
    and every answer names the object's generation in ``x-goog-generation``."""

    protocol_version = "HTTP/1.1"
    objects: dict[str, tuple[bytes, int]] = {}
    seen: list[tuple[str, str, str | None]] = []
    generation = 1_700_000_000_000_000

    def _send(self, code: int, headers: tuple = (), body: bytes = b"") -> None:
        self.send_response(code)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_PUT(self) -> None:  # noqa: N802
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        cond = self.headers.get("x-goog-if-generation-match")
        type(self).seen.append(("PUT", self.path, cond))
        current = self.objects.get(self.path)
        refused = (cond == "0" and current) or (cond not in (None, "0") and (not current or str(current[1]) != cond))
        if refused:
            return self._send(412, body=b"<Error><Code>PreconditionFailed</Code></Error>")
        type(self).generation += 1
        self.objects[self.path] = (body, self.generation)
        self._send(200, (("ETag", f'"{hashlib.md5(body).hexdigest()}"'), ("x-goog-generation", str(self.generation))))

    def do_GET(self) -> None:  # noqa: N802
        type(self).seen.append((self.command, self.path, None))
        current = self.objects.get(self.path)
        if current is None:
            return self._send(404, body=b"<Error><Code>NoSuchKey</Code></Error>")
        self._send(200, (("ETag", f'"{hashlib.md5(current[0]).hexdigest()}"'), ("x-goog-generation", str(current[1])),
                         ("Last-Modified", email.utils.formatdate(usegmt=True))), current[0])

    do_HEAD = do_GET  # noqa: N815

    def do_DELETE(self) -> None:  # noqa: N802
        type(self).seen.append(("DELETE", self.path, None))
        self._send(204 if self.objects.pop(self.path, None) is not None else 404)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


def test_gcs_generation_contract() -> None:
    """gs:// runs the same ObjectStore: create is ``generation-match: 0``, a CAS matches the
    generation recorded from the last write or read (never the ETag), a stale one is refused."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _GcsResponder)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    try:
        s = open_store("gs://bucket/t", {"google_base_url": f"http://127.0.0.1:{server.server_address[1]}",
                                         "google_bearer_token": "test-token", "allow_http": "true"})
        first = s.put_if_absent("_mem_wal/_jobs/leases/merge.json", b"one")
        with pytest.raises(PreconditionFailedError):
            s.put_if_absent("_mem_wal/_jobs/leases/merge.json", b"two")
        data, recorded = s.get_with_etag("_mem_wal/_jobs/leases/merge.json")
        assert (data, recorded) == (b"one", first) and recorded.isdigit()  # the generation, not an ETag
        second = s.put_if_match("_mem_wal/_jobs/leases/merge.json", b"two", recorded)
        assert int(second) > int(first) and s.head("_mem_wal/_jobs/leases/merge.json").etag == second
        with pytest.raises(PreconditionFailedError):
            s.put_if_match("_mem_wal/_jobs/leases/merge.json", b"three", first)  # stale generation
        assert s.delete_many(["_mem_wal/_jobs/leases/merge.json", "missing"]) == 2
        assert s.head("_mem_wal/_jobs/leases/merge.json") is None
        conds = [c for m, _, c in _GcsResponder.seen if m == "PUT"]
        assert conds == ["0", "0", first, first]
    finally:
        server.shutdown()
        server.server_close()


def test_a_store_at_the_bucket_root(remote) -> None:
    kind, server = remote
    opts = server.make_bucket() if kind == "s3" else server.make_container()
    root = f"s3://{server.last_bucket}" if kind == "s3" else f"az://{server.last_container}"
    s = open_store(root, opts)
    s.put("x/y", b"1")
    assert s.list_dirs("") == ["x"] and [o.key for o in s.list("")] == ["x/y"]
    assert s.uri_for("x/y") == f"{root}/x/y"
    assert [o.key for o in s.child("x").list("")] == ["y"]
    assert s.child("x").get("y") == b"1"


def test_a_rejected_sas_token_is_never_printed(azure_server, tmp_path) -> None:
    """object_store sends a SAS token in the request URL's query string, and names that URL in
    its errors: our one-line errors drop query strings (and any secret option value)."""
    from memwal.errors import first_line

    uri, opts = azure_server.new_table("sas")
    sas = f"sv=2022-11-02&ss=b&srt=co&sp=rwdl&se=2030-01-01T00:00:00Z&sig={SECRET}"
    options = {k: v for k, v in opts.items() if k != "azure_storage_account_key"}
    path = tmp_path / "opts.json"
    path.write_text(json.dumps({**options, "azure_storage_sas_token": sas}))
    run = run_cli("status", uri, "--storage-options-file", str(path))
    assert_one_line_error(run, 2, uri)
    assert SECRET not in run.stderr + run.stdout
    line = f"Error performing GET http://127.0.0.1:1/devstoreaccount1/c/t?restype=container&{sas} in 3ms"
    assert SECRET not in first_line(OSError(line)) and "http://127.0.0.1:1/devstoreaccount1/c/t?..." in first_line(
        OSError(line))
