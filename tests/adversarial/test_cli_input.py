"""Hostile CLI input: bad numbers, URIs, storage options, result files, our own folders
and lease objects. Each case asserts the exit code, exactly one ``memwal: error:`` line
naming the object, and for exit 2 that the table tree is byte-for-byte unchanged."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from memwal.demo import Workload, create_base_table, write_generations
from memwal.errors import BadInputError
from memwal.lease import lease_key
from memwal.table import open_table
from memwal.table.shards import all_shard_manifests
from tests.helpers import CliRun, assert_one_line_error, run_cli, tree_digest
from tests.s3server import S3Server

TINY = Workload(base_rows=60, shards=2, generations=2, rows_per_generation=10, seed=3)
JOBS = ("merge", "catchup", "snapshot", "gc")
SECRET = "Sup3rS3cretV4lue"


def build(uri: str) -> str:
    """A small MemWAL table written by pylance's ShardWriter."""
    _, model = create_base_table(uri, TINY, None)
    write_generations(uri, TINY, model)
    return uri


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One table for the cases that must change nothing (each proves it with a digest)."""
    return build(str(tmp_path_factory.mktemp("adv") / "t"))


@pytest.fixture
def fresh(tmp_path: Path) -> str:
    """A table of its own, for cases that change it or plant things in it."""
    return build(str(tmp_path / "t"))


_CLASS_NAME = re.compile(r"\b[A-Z]\w*(Error|Exception)\b")


def assert_error(run: CliRun, rc: int, *needles: str) -> None:
    """The harness's one-line check, plus: no exception class name in the line."""
    assert_one_line_error(run, rc, *needles)
    assert not _CLASS_NAME.search(run.error_lines[0]), run.error_lines[0]


def write_lease(uri: str, kind: str, **fields: object) -> Path:
    """Plant a lease object as some other process would have left it."""
    now = time.time()
    rec = {"kind": kind, "holder": "elsewhere:1:ab", "token": 3, "acquired_at": now, "expires_at": now + 3000}
    rec.update(fields)
    path = Path(uri, lease_key(kind))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rec))
    return path


def stored_lease(uri: str, kind: str) -> dict:
    return json.loads(Path(uri, lease_key(kind)).read_text())


# --------------------------------------------------------------------------- numbers
NUMERIC_OPTIONS = [
    ("merge", "--max-generations"),
    ("merge", "--max-rows"),
    ("merge", "--max-bytes"),
    ("catchup", "--max-deltas"),
    ("catchup", "--max-unindexed-fraction"),
    ("gc", "--grace-seconds"),
    ("gc", "--expire-versions"),
    ("gc", "--orphan-age-seconds"),
    *[(job, "--lease-ttl") for job in JOBS],
]
BAD_NUMBERS = ["nan", "inf", "-1", "1e300", "abc"]


@pytest.mark.parametrize("value", BAD_NUMBERS)
@pytest.mark.parametrize(("cmd", "option"), NUMERIC_OPTIONS)
def test_bad_number_is_refused_before_anything(shared, unchanged, cmd, option, value):
    with unchanged(shared):
        run = run_cli(cmd, shared, option, value)
    assert_error(run, 2, option, value)


@pytest.mark.parametrize(
    ("cmd", "option", "value"), [("merge", "--lease-ttl", "0"), ("catchup", "--max-unindexed-fraction", "1.5")]
)
def test_out_of_range_is_refused(shared, unchanged, cmd, option, value):
    with unchanged(shared):
        run = run_cli(cmd, shared, option, value)
    assert_error(run, 2, option, value)


@pytest.mark.parametrize(
    ("job", "options", "needle"),
    [
        ("gc", {"grace_seconds": float("nan")}, "grace_seconds"),
        ("gc", {"expire_versions": float("inf")}, "expire_versions"),
        ("gc", {"orphan_age_seconds": -5}, "orphan_age_seconds"),
        ("catchup", {"max_unindexed_fraction": float("nan")}, "max_unindexed_fraction"),
        ("merge", {"max_generations": 2.5}, "max_generations"),
        ("merge", {"lease_ttl": 1e300}, "lease_ttl"),
    ],
)
def test_python_api_validates_the_same(shared, unchanged, job, options, needle):
    from memwal.actions import run_action

    with unchanged(shared), pytest.raises(BadInputError, match=needle):
        run_action(job, shared, **options)


# --------------------------------------------------------------------------- URIs
BAD_URIS = ["s3a://b/t", "s3://b//t", "s3:///t", "ftp://x", "s3://bucket/a/../t"]


@pytest.mark.parametrize("uri", BAD_URIS)
@pytest.mark.parametrize("cmd", [*JOBS, "verify", "lease"])
def test_bad_uri_refused(cmd, uri):
    run = run_cli(cmd, uri)
    assert_error(run, 2, uri)


@pytest.mark.parametrize("cmd", JOBS)
def test_empty_uri_refused(cmd):
    assert_error(run_cli(cmd, ""), 2, "table")


@pytest.mark.parametrize("cmd", JOBS)
def test_file_instead_of_table(tmp_path, unchanged, cmd):
    f = tmp_path / "not-a-table"
    f.write_bytes(b"hello")
    with unchanged(str(tmp_path)):
        run = run_cli(cmd, str(f))
    assert_error(run, 2, str(f))


@pytest.mark.parametrize("cmd", JOBS)
def test_missing_table(tmp_path, unchanged, cmd):
    missing = tmp_path / "nope"
    with unchanged(str(tmp_path)):
        run = run_cli(cmd, str(missing))
    assert_error(run, 2, str(missing))
    assert not missing.exists()


# --------------------------------------------------------------------------- storage options
@pytest.mark.parametrize(
    ("pair", "suggestion"),
    [
        (f"aws_secret_acess_key={SECRET}", "aws_secret_access_key"),
        (f"aws_acces_key_id={SECRET}", "aws_access_key_id"),
        ("aws_regoin=us-east-1", "aws_region"),
        ("alow_http=true", "allow_http"),
        (f"AWS_SESION_TOKEN={SECRET}", "aws_session_token"),
    ],
)
def test_misspelt_storage_option_suggests_the_key(shared, unchanged, pair, suggestion):
    with unchanged(shared):
        run = run_cli("merge", shared, "--storage-option", pair)
    assert_error(run, 2, pair.split("=")[0], f"did you mean '{suggestion}'")
    assert SECRET not in run.stderr + run.stdout


def test_unknown_storage_option_refused(shared, unchanged):
    with unchanged(shared):
        run = run_cli("gc", shared, "--storage-option", "frobnicate=1")
    assert_error(run, 2, "frobnicate", "unknown storage option")


@pytest.mark.parametrize("pair", [f"aws_secret_access_key:{SECRET}", f"aws_session_token {SECRET}"])
def test_malformed_secret_pair_is_never_echoed(shared, unchanged, pair):
    with unchanged(shared):
        run = run_cli("snapshot", shared, "--storage-option", pair)
    assert_error(run, 2, "--storage-option", "KEY=VALUE")
    assert SECRET not in run.stderr + run.stdout


def test_python_api_refuses_unknown_storage_option(shared):
    with pytest.raises(BadInputError, match="aws_endpoint"):
        open_table(shared, {"aws_endpont": "http://127.0.0.1:1"})


def test_missing_s3_credentials_is_bad_input(s3_server: S3Server, monkeypatch):
    uri, _ = s3_server.new_table("t")
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/credentials")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent/config")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    run = run_cli(
        "merge", uri,
        "--storage-option", f"aws_endpoint={s3_server.endpoint}",
        "--storage-option", "allow_http=true",
        "--storage-option", "aws_region=us-east-1",
    )  # fmt: skip
    assert_error(run, 2, uri, "no credentials")
    assert list(s3_server.client().list_objects_v2(Bucket=s3_server.last_bucket).get("Contents", [])) == []


# --------------------------------------------------------------------------- result file
def test_result_file_in_missing_folder_refused_before_the_merge(fresh, tmp_path, unchanged):
    target = tmp_path / "no" / "such" / "dir" / "result.json"
    with unchanged(fresh):
        run = run_cli("merge", fresh, "--json", "--result-file", str(target))
    assert_error(run, 2, str(target), "does not exist")
    assert open_table(fresh).manifest().compacted == {}


def test_result_file_that_is_a_folder_refused(shared, tmp_path, unchanged):
    with unchanged(shared):
        run = run_cli("gc", shared, "--result-file", str(tmp_path))
    assert_error(run, 2, str(tmp_path), "folder")


# --------------------------------------------------------------------------- our own folders
def test_mem_wal_is_a_file(tmp_path, unchanged):
    uri = str(tmp_path / "t")
    create_base_table(uri, TINY, None)  # no ShardWriter yet: no _mem_wal folder
    Path(uri, "_mem_wal").write_bytes(b"squatter")
    for cmd in JOBS:
        with unchanged(uri):
            run = run_cli(cmd, uri)
        assert_error(run, 2, os.path.join(uri, "_mem_wal"), "is a file")


@pytest.mark.parametrize("cmd", JOBS)
def test_jobs_folder_is_a_file(fresh, unchanged, cmd):
    Path(fresh, "_mem_wal", "_jobs").write_bytes(b"squatter")
    with unchanged(fresh):
        run = run_cli(cmd, fresh)
    assert_error(run, 2, os.path.join(fresh, "_mem_wal", "_jobs"), "is a file")


# --------------------------------------------------------------------------- lease objects
@pytest.mark.parametrize(
    ("cmd", "kind"), [("merge", "merge"), ("gc", "gc"), ("snapshot", "merge"), ("catchup", "catchup")]
)
def test_lease_object_is_a_folder(fresh, unchanged, cmd, kind):
    folder = Path(fresh, lease_key(kind))
    folder.mkdir(parents=True)
    with unchanged(fresh):
        run = run_cli(cmd, fresh)
    # exit 2 naming the folder, not exit 3 "contended" after the 30 s merge-lease wait
    assert_error(run, 2, str(folder), "is a folder")


@pytest.mark.parametrize("expires", [1e18, "nan", "inf", -7])
def test_absurd_lease_expiry_is_corrupt(fresh, unchanged, expires):
    path = write_lease(fresh, "merge", expires_at=expires)
    with unchanged(fresh):
        run = run_cli("merge", fresh)
    assert_error(run, 2, str(path), "expires_at")


def test_unparseable_lease_is_corrupt(fresh, unchanged):
    path = Path(fresh, lease_key("gc"))
    path.parent.mkdir(parents=True)
    path.write_bytes(b"{not json")
    with unchanged(fresh):
        run = run_cli("gc", fresh)
    assert_error(run, 2, str(path), "corrupt lease")


def _dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_lease_of_a_dead_local_process_is_taken_over_at_once(fresh):
    write_lease(fresh, "merge", holder=f"{socket.gethostname()}:{_dead_pid()}:dead", token=7)
    run = run_cli("merge", fresh, "--json")
    assert run.rc == 0, run.stderr
    assert "dead holder" in run.stderr
    assert stored_lease(fresh, "merge")["token"] == 8
    table = open_table(fresh)
    assert set(table.manifest().compacted.values()) == {TINY.generations}


def test_lease_of_a_live_local_process_still_blocks(fresh):
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        write_lease(fresh, "gc", holder=f"{socket.gethostname()}:{sleeper.pid}:live")
        with_digest = tree_digest(fresh)
        run = run_cli("gc", fresh)
        assert_error(run, 3, f"{sleeper.pid}:live")
        assert tree_digest(fresh) == with_digest
    finally:
        sleeper.kill()
        sleeper.wait()


def test_lease_listing_shows_states(fresh):
    write_lease(fresh, "merge", holder="otherhost:1:ab")
    write_lease(fresh, "gc", holder=f"{socket.gethostname()}:{_dead_pid()}:dd")
    write_lease(fresh, "catchup", expires_at=0.0)
    write_lease(fresh, "snapshot", expires_at=float("inf"))
    run = run_cli("lease", fresh, "--json")
    assert run.rc == 0, run.stderr
    states = {lease["kind"]: lease["state"] for lease in json.loads(run.stdout)["leases"]}
    assert states == {"merge": "live", "gc": "dead-holder", "catchup": "released", "snapshot": "corrupt"}


def test_lease_break_needs_yes(fresh, unchanged):
    write_lease(fresh, "merge", holder="otherhost:42:ab", token=5)
    with unchanged(fresh):
        run = run_cli("lease", fresh, "--break", "merge")
    assert_error(run, 2, "would break", "otherhost:42:ab", "--yes")


def test_lease_break_with_yes_releases_keeping_the_token(fresh):
    write_lease(fresh, "merge", holder="otherhost:42:ab", token=5)
    run = run_cli("lease", fresh, "--break", "merge", "--yes")
    assert run.rc == 0, run.stderr
    rec = stored_lease(fresh, "merge")
    assert (rec["token"], rec["expires_at"]) == (5, 0.0)
    assert run_cli("merge", fresh).rc == 0
    assert stored_lease(fresh, "merge")["token"] == 6  # tokens never go backwards


def test_lease_break_clears_a_corrupt_lease(fresh):
    write_lease(fresh, "gc", expires_at=1e18, token=9)
    assert run_cli("lease", fresh, "--break", "gc", "--yes").rc == 0
    assert run_cli("gc", fresh).rc == 0
    assert stored_lease(fresh, "gc")["token"] == 10


@pytest.mark.parametrize(("kind", "needle"), [("../merge", "invalid job kind"), ("compact", "no compact lease")])
def test_lease_break_bad_kind(shared, unchanged, kind, needle):
    with unchanged(shared):
        run = run_cli("lease", shared, "--break", kind, "--yes")
    assert_error(run, 2, needle)


# --------------------------------------------------------------------------- verify
def _generation_dir(uri: str, number: int) -> Path:
    table = open_table(uri)
    shard_id, st = sorted(all_shard_manifests(table.store).items())[0]
    return Path(uri, st.generation_key(st.generation(number)))


def test_verify_reports_a_missing_generation(fresh):
    gen = _generation_dir(fresh, 2)
    for p in sorted(gen.rglob("*"), reverse=True):
        p.unlink() if p.is_file() else p.rmdir()
    gen.rmdir()
    run = run_cli("verify", fresh, "--json")
    assert run.rc == 1 and run.error_lines == [], run.stderr
    problems = json.loads(run.stdout)["problems"]
    assert [p["check"] for p in problems] == ["generations-present"]
    assert str(gen) in problems[0]["detail"]  # the full path, with its leading /


def test_verify_reports_a_broken_generation(fresh):
    gen = _generation_dir(fresh, 1)
    for f in (gen / "data").rglob("*.lance"):
        f.write_bytes(b"junk")
    run = run_cli("verify", fresh, "--json")
    assert run.rc == 1 and run.error_lines == [], run.stderr
    problems = json.loads(run.stdout)["problems"]
    # Found by Lance's fragment validation, before the LSM view is read (it would fail on it).
    assert {p["check"] for p in problems} == {"generations-readable"}
    broken = [p for p in problems if p["check"] == "generations-readable"]
    assert len(broken) == 1 and str(gen) in broken[0]["detail"]
    assert all(" tmp/" not in p["detail"] and ".rs:" not in p["detail"] for p in problems)


# -- issue 38, L5: bad input that was not refused -----------------------------------------------------
@pytest.mark.parametrize("since", ["nan", "inf", "-inf", "1e400", "-5", "1e300", "99999999999999999d"])
def test_history_since_that_no_run_can_have_is_bad_input(shared, unchanged, since):
    with unchanged(shared):
        run = run_cli("history", shared, f"--since={since}")
    assert_error(run, 2, "--since", since)


def test_a_fifo_as_storage_options_file_is_refused_at_once(shared, unchanged, tmp_path):
    fifo = tmp_path / "options.json"
    os.mkfifo(fifo)
    with unchanged(shared):
        # a child process: a read that waited for a writer would hang this test, not fail it
        proc = subprocess.run([sys.executable, "-m", "memwal.cli", "status", shared, "--storage-options-file",
                               str(fifo)], capture_output=True, text=True, timeout=60)
    run = CliRun(proc.returncode, proc.stdout, proc.stderr)
    assert_error(run, 2, "--storage-options-file", str(fifo), "not a regular file")


def test_an_options_file_others_can_read_is_used_with_a_warning(shared, tmp_path):
    loose = tmp_path / "options.json"
    loose.write_text("{}")
    loose.chmod(0o644)
    run = run_cli("status", shared, "--storage-options-file", str(loose))
    assert run.rc == 0, run.stderr
    assert "readable by others (mode 0644)" in run.stderr and str(loose) in run.stderr
    loose.chmod(0o600)
    assert "readable by others" not in run_cli("status", shared, "--storage-options-file", str(loose)).stderr


@pytest.mark.parametrize("argv", [["merge", "--max-generations"], ["gc"], ["merge", "T", "--bogus"],
                                  ["checkpoint", "create", "T", "--lifetime", "x"], ["nope"]])
def test_an_argument_error_is_one_line(argv):
    run = run_cli(*argv)
    assert run.rc == 2
    assert len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert run.stderr.startswith("memwal: error: ") and "--help)" in run.stderr


def test_the_spark_engine_without_pyspark_names_the_extra_to_install(shared, unchanged):
    """Without the ``spark`` extra (pyspark), ``--engine spark`` names the extra, exit 2,
    nothing written, even with nothing to do (issue 64: "No module named 'pyspark'"). The
    interpreter is told pyspark is absent the way Python's import system defines it (a ``None``
    in ``sys.modules``): the rest of the program is the installed one."""
    code = ("import sys; sys.modules['pyspark'] = None; from memwal.cli import main; "
            f"sys.exit(main(['merge', {shared!r}, '--engine', 'spark', '--max-generations', '1']))")
    with unchanged(shared):
        run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert_error(CliRun(run.returncode, run.stdout, run.stderr), 2,
                 "the spark engine needs pyspark", "pip install 'memwal-jobs[spark]'")
