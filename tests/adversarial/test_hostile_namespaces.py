"""Hostile Lance Namespaces (issues 47 and 56): a REST namespace server that answers too much,
pages forever, nests forever or never answers, hands out 1,000 new names of 1 KB at every
request, or describes every table with as many storage options as it may; locations that point
outside the namespace's roots (any local path, any bucket), through a link, relative to
wherever the fleet runs, or at one table twice.

The servers are real HTTP servers on loopback (``http.server`` in a thread); the bounded
cases run the real ``memwal`` program under a watcher that records its peak memory and its
time, and kills it past 120 s. Each case must end by itself within 60 s under 600 MB, exit 1
or 2, and name the source. Tables come from pylance's ShardWriter (``memwal.demo``); a canary
folder and every table outside the namespace must not change."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import uuid
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from memwal.demo import Workload, create_base_table, write_generations
from tests.helpers import memwal_program, run_cli, run_watched, tree_digest

TINY = Workload(base_rows=50, shards=1, generations=1, rows_per_generation=10, seed=3, indexes=False)
Reply = Callable[[BaseHTTPRequestHandler], None]


def send_json(handler: BaseHTTPRequestHandler, doc: object, status: int = 200) -> None:
    body = json.dumps(doc).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


class Server:
    """A namespace server on loopback whose every answer ``reply`` makes."""

    def __init__(self, reply: Reply) -> None:
        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body in two writes: no 40 ms wait on each answer

            def do_GET(self) -> None:  # noqa: N802
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    reply(self)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            do_POST = do_GET  # noqa: N815

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self) -> Server:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def huge(handler: BaseHTTPRequestHandler) -> None:
    """A 1 GiB answer, streamed with no length."""
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Connection", "close")
    handler.end_headers()
    handler.wfile.write(b'{"namespaces": ["')
    chunk = b"a" * (1 << 20)
    for _ in range(1024):
        handler.wfile.write(chunk)
    handler.wfile.write(b'"]}')


def wide(handler: BaseHTTPRequestHandler) -> None:
    """100,000 namespaces on a page, everywhere."""
    if "/table/list" in handler.path:
        send_json(handler, {"tables": []})
    else:
        send_json(handler, {"namespaces": [f"ns{i:06d}" for i in range(100_000)]})


def same_token(handler: BaseHTTPRequestHandler) -> None:
    """The same page token forever."""
    key = "tables" if "/table/list" in handler.path else "namespaces"
    send_json(handler, {key: [], "page_token": "again"})


def endless_depth(handler: BaseHTTPRequestHandler) -> None:
    """A child namespace inside every namespace."""
    if "/table/list" in handler.path:
        send_json(handler, {"tables": []})
    else:
        send_json(handler, {"namespaces": ["deeper"]})


def silent(handler: BaseHTTPRequestHandler) -> None:
    """Takes the request and never answers."""
    time.sleep(3600)


def new_names(handler: BaseHTTPRequestHandler) -> None:
    """1,000 new namespaces of 1 KB each in every namespace (within every per-answer cap)."""
    if "/table/list" in handler.path:
        send_json(handler, {"tables": []})
    else:
        send_json(handler, {"namespaces": [f"{uuid.uuid4().hex}{'n' * 992}" for _ in range(1000)]})


def options_everywhere(root: str, options: int, size: int) -> Reply:
    """Page after page of new tables, each described at a location under the root with
    ``options`` storage options of ``size`` bytes."""

    def reply(handler: BaseHTTPRequestHandler) -> None:
        if "/table/list" in handler.path:
            send_json(handler, {"tables": [uuid.uuid4().hex for _ in range(1000)], "page_token": uuid.uuid4().hex})
        elif handler.path.startswith("/v1/namespace/"):
            send_json(handler, {"namespaces": []})
        else:
            send_json(handler, {"location": f"{root}/{uuid.uuid4().hex}",
                                "storage_options": {f"k{i:03d}": "v" * size for i in range(options)}})

    return reply


BOUNDED = {"huge-answer": huge, "wide-page": wide, "same-page-token": same_token, "endless-depth": endless_depth,
           "never-answers": silent, "new-names-every-page": new_names,
           # as many options as a description may carry (64 of 250 bytes): the bytes kept are capped
           "options-on-every-table": (64, 250),
           # the case: 256 options of 4 KB, refused on each table, and the source stopped
           "big-options-on-every-table": (256, 4000)}


@pytest.mark.parametrize("case", sorted(BOUNDED))
def test_a_hostile_rest_namespace_ends_by_itself_bounded_and_named(case, canary, tmp_path, record_property):
    given = BOUNDED[case]
    reply = options_everywhere(str(tmp_path), *given) if isinstance(given, tuple) else given
    with Server(reply) as server:
        run = run_watched([memwal_program(), "fleet", "plan", "namespace:rest", "--namespace-property",
                           f"uri={server.uri}", "--namespace-property", f"root={tmp_path}"], cwd=str(tmp_path))
    record_property("peak_mb", round(run.peak_mb))
    record_property("seconds", run.seconds)
    print(f"{case}: exit {run.rc}, {run.peak_mb:.0f} MB, {run.seconds:.1f} s", file=sys.stderr)
    assert run.rc in (1, 2), run.stderr
    assert len(run.error_lines) == 1 and "namespace:rest" in run.error_lines[0], run.stderr
    assert "Traceback" not in run.stderr
    assert run.seconds < 60 and run.peak_mb < 600, (run.seconds, run.peak_mb)


def make_table(path: Path) -> None:
    _, model = create_base_table(str(path), TINY)
    write_generations(str(path), TINY, model)


def describing(tables: dict[str, str]) -> Reply:
    """A namespace of ``tables`` (name -> location) at its root."""

    def reply(handler: BaseHTTPRequestHandler) -> None:
        if "/table/list" in handler.path:
            send_json(handler, {"tables": sorted(tables)})
        elif handler.path.startswith("/v1/namespace/"):
            send_json(handler, {"namespaces": []})
        else:
            name = handler.path.split("/")[3]
            send_json(handler, {"location": tables[name], "table_uri": tables[name]})

    return reply


def test_a_rest_location_relative_to_the_working_folder_is_refused(canary, tmp_path):
    victim = tmp_path / "victim"
    make_table(victim)
    before = tree_digest(str(victim))
    relative = os.path.relpath(victim, os.getcwd())
    with Server(describing({"t": relative})) as server:
        run = run_cli("fleet", "run", "namespace:rest", "--namespace-property", f"uri={server.uri}",
                      "--namespace-property", f"root={tmp_path}")
    assert run.rc == 2, run.stderr
    assert "relative location" in run.stderr and "namespace:rest" in run.stderr
    assert tree_digest(str(victim)) == before


def test_one_table_listed_twice_and_spelled_two_ways_is_one_table(canary, tmp_path):
    table = tmp_path / "ns" / "t.lance"
    make_table(table)
    with Server(describing({"a": str(table), "b": f"{tmp_path}/ns/./t.lance/", "c": f"file://{table}"})) as server:
        run = run_cli("fleet", "plan", "namespace:rest", "--namespace-property", f"uri={server.uri}",
                      "--namespace-property", f"root={tmp_path}/ns", "--json")
    assert run.rc == 0, run.stderr
    doc = json.loads(run.stdout)
    assert [t["table"] for t in doc["tables"]] == [str(table)]


def test_a_rest_server_error_names_the_namespace_source(canary):
    def failing(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(500)
        handler.send_header("Content-Length", "14")
        handler.end_headers()
        handler.wfile.write(b"Internal error")

    with Server(failing) as server:
        run = run_cli("fleet", "plan", "namespace:rest", "--namespace-property", f"uri={server.uri}",
                      "--namespace-property", "root=s3://lake")
    assert run.rc == 1, run.stderr
    errors = run.error_lines
    assert len(errors) == 1 and "namespace:rest" in errors[0] and server.uri in errors[0], run.stderr
    assert "HTTP 500" in errors[0]


def test_a_link_in_a_directory_namespace_is_never_followed(canary, tmp_path):
    root = tmp_path / "ns"
    make_table(root / "own.lance")
    outside = tmp_path / "outside.lance"
    make_table(outside)
    os.symlink(outside, root / "linked.lance")
    before = tree_digest(str(outside))
    run = run_cli("fleet", "run", "namespace:dir", "--namespace-property", f"root={root}", "--json")
    assert run.rc == 0, run.stderr
    doc = json.loads(run.stdout)
    assert doc["plan"]["tables"] == [] or all(t["table"] == str(root / "own.lance") for t in doc["plan"]["tables"])
    assert {r["table"] for r in doc["runs"]} == {str(root / "own.lance")}
    assert tree_digest(str(outside)) == before  # no run record, no merge: nothing reached through the link


def test_a_table_described_with_too_many_options_is_skipped_and_the_others_found(canary, tmp_path):
    """The issue's case: 256 storage options of 4 KB on a table's description (past 2.5 GB when
    every table had them). That table is skipped with the reason; the good one is maintained."""
    good, bad = tmp_path / "ns" / "good", tmp_path / "ns" / "bad"
    make_table(good)
    make_table(bad)
    before = tree_digest(str(bad))

    def reply(handler: BaseHTTPRequestHandler) -> None:
        if "/table/list" in handler.path:
            send_json(handler, {"tables": ["bad", "good"]})
        elif handler.path.startswith("/v1/namespace/"):
            send_json(handler, {"namespaces": []})
        elif "/bad/" in handler.path:
            send_json(handler, {"location": str(bad), "storage_options": {f"k{i}": "v" * 4000 for i in range(256)}})
        else:
            send_json(handler, {"location": str(good)})

    with Server(reply) as server:
        run = run_cli("fleet", "run", "namespace:rest", "--namespace-property", f"uri={server.uri}",
                      "--namespace-property", f"root={tmp_path}/ns", "--json")
    assert run.rc == 0, run.stderr
    doc = json.loads(run.stdout)
    assert {r["table"] for r in doc["runs"]} == {str(good)}
    reasons = {s["path"]: s["reason"] for s in doc["plan"]["skipped"]}
    assert "storage_options is not a mapping of at most 64 strings" in reasons["namespace:rest bad"], reasons
    assert tree_digest(str(bad)) == before


def test_a_rest_namespace_cannot_point_the_fleet_at_a_path_or_bucket_outside_its_roots(canary, tmp_path):
    """A DescribeTable location answered with a local path nobody configured got three jobs run
    on it (issue 56, M7): the operator names the roots; anything else is skipped, and a REST
    source without roots is bad input."""
    own, victim = tmp_path / "ns" / "own", tmp_path / "victim"
    make_table(own)
    make_table(victim)
    before = tree_digest(str(victim))
    tables = {"own": str(own), "victim": str(victim), "bucket": "s3://someone-elses-bucket/t"}
    with Server(describing(tables)) as server:
        bare = run_cli("fleet", "run", "namespace:rest", "--namespace-property", f"uri={server.uri}")
        run = run_cli("fleet", "run", "namespace:rest", "--namespace-property", f"uri={server.uri}",
                      "--namespace-property", f"root={tmp_path}/ns,s3://lake/tables", "--json")
        remote = run_cli("fleet", "plan", "namespace:rest", "--namespace-property", f"uri={server.uri}",
                         "--namespace-property", "root=s3://lake", "--json")
    assert bare.rc == 2 and "needs the namespace property root" in bare.stderr, bare.stderr
    assert run.rc == 0, run.stderr
    doc = json.loads(run.stdout)
    assert {r["table"] for r in doc["runs"]} == {str(own)}
    reasons = {s["path"].rsplit(" ", 1)[-1]: s["reason"] for s in doc["plan"]["skipped"]}
    assert "outside the namespace's roots" in reasons["victim"] and "a local path" in reasons["victim"]
    assert "outside the namespace's roots" in reasons["bucket"]
    assert remote.rc == 2 and "holds no Lance table" in remote.stderr  # no local path taken under s3:// roots
    assert "a local path" in remote.stderr
    assert tree_digest(str(victim)) == before
