"""Credentials never on a command line, never echoed, never rendered; the options file is private and temporary.

Any local user reads every process's command line (``ps``, ``/proc/<pid>/cmdline``), so
launchers hand storage options to spark-submit in a 0600 file (``--storage-options-file``)
that is removed when the job ends. The Spark tests launch the real spark-submit and
watch ``/proc/*/cmdline`` of every process while it runs.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import pytest

from memwal.core.secrets import (
    read_storage_options_file,
    redact_pair,
    redact_storage_options,
    storage_options_file,
)
from memwal.demo import shard_ids_for
from tests.conftest import SMALL, table_rows
from tests.helpers import ROOT, assert_one_line_error, run_cli, spark_submit, tree_digest

pytestmark = pytest.mark.long  # the workers start this file first (tests/conftest.py)

VENV_BIN = Path(sys.executable).parent
SECRET = f"memwal-fake-secret-{uuid.uuid4().hex}"


# -- hostile option inputs: exit 2, one line, the secret never echoed -----------------------------
def options_file(content: bytes):
    def make(tmp: Path) -> list[str]:
        path = tmp / "options.json"
        path.write_bytes(content.replace(b"SECRET", SECRET.encode()))
        return ["--storage-options-file", str(path)]

    return make


OPTION_CASES = [
    ("pair-with-colon", lambda tmp: ["--storage-option", f"aws_secret_access_key:{SECRET}"], ["'***'", "KEY=VALUE"]),
    ("pair-without-key", lambda tmp: ["--storage-option", f"={SECRET}"], ["'=***'", "KEY=VALUE"]),
    ("file-missing", lambda tmp: ["--storage-options-file", str(tmp / "nope.json")], ["No such file"]),
    ("file-is-dir", lambda tmp: ["--storage-options-file", str(tmp)], ["is a directory"]),
    ("file-char-device", lambda tmp: ["--storage-options-file", "/dev/null"], ["not a regular file"]),
    ("file-truncated-json", options_file(b'{"aws_secret_access_key": "SECRET'), ["not valid JSON at line 1"]),
    ("file-json-list", options_file(b'["aws_session_token", "SECRET"]'), ["expected a JSON object", "list"]),
    ("file-nested-value", options_file(b'{"aws_session_token": {"v": "SECRET"}}'), ["'aws_session_token'", "dict"]),
    ("file-null-value", options_file(b'{"aws_session_token": null}'), ["'aws_session_token'", "NoneType"]),
    ("file-empty-key", options_file(b'{" ": "SECRET"}'), ["empty key"]),
    ("file-binary", options_file(b'{"aws_session_token": "\xff\xfeSECRET"}'), ["not UTF-8"]),
    ("file-too-big", options_file(b'{"k": "' + b"x" * (1 << 20) + b'SECRET"}'), ["larger than"]),
]


@pytest.mark.parametrize(("make", "needles"), [c[1:] for c in OPTION_CASES], ids=[c[0] for c in OPTION_CASES])
def test_hostile_storage_options_are_bad_input_and_never_echoed(make_table, tmp_path, make, needles):
    table, _ = make_table()
    before = tree_digest(table.uri)
    extra = make(tmp_path)
    run = run_cli("merge", table.uri, *extra)
    where = [f"--storage-options-file {extra[1]}"] if extra[0] == "--storage-options-file" else []
    assert_one_line_error(run, 2, *where, *needles)
    assert SECRET not in run.stdout + run.stderr
    assert tree_digest(table.uri) == before


def test_options_file_reaches_the_table_and_pairs_override_it(s3_server, tmp_path):
    """On S3 the endpoint is only in the file: the command works only if the file is read."""
    from memwal.demo import create_base_table, write_generations
    from memwal.table import open_table

    uri, opts = s3_server.new_table("secret-opts")
    opts = {**opts, "aws_secret_access_key": SECRET}  # moto accepts any secret: it must just travel
    _, model = create_base_table(uri, SMALL, opts)
    write_generations(uri, SMALL, model, storage_options=opts)
    good = tmp_path / "good.json"
    good.write_text(json.dumps(opts))
    status = run_cli("status", uri, "--storage-options-file", str(good), "--json")
    assert status.rc == 0, status.stderr
    assert json.loads(status.stdout)["table"].startswith("s3://")
    assert SECRET not in status.stdout + status.stderr

    wrong = tmp_path / "wrong-endpoint.json"
    wrong.write_text(json.dumps({**opts, "aws_endpoint": "http://127.0.0.1:1"}))
    merge = run_cli(
        "merge", uri, "--storage-options-file", str(wrong), "--storage-option", f"aws_endpoint={opts['aws_endpoint']}"
    )
    assert merge.rc == 0, merge.stderr
    assert SECRET not in merge.stdout + merge.stderr
    table = open_table(uri, opts)
    assert table.manifest().compacted == {s: 4 for s in shard_ids_for(SMALL)}
    assert table_rows(table) == model.sorted_rows()


def test_redaction_is_one_rule_everywhere():
    from memwal.airflow.plugin import MemWalPlugin

    assert redact_storage_options in MemWalPlugin.macros  # the template macro is the same function
    options = {"aws_secret_access_key": SECRET, "AWS_SESSION_TOKEN": SECRET, "sas_key": SECRET, "aws_region": "x"}
    expected = {"aws_secret_access_key": "***", "AWS_SESSION_TOKEN": "***", "sas_key": "***", "aws_region": "x"}
    assert redact_storage_options(options) == expected
    assert redact_pair(f"azure_client_secret={SECRET}") == "azure_client_secret=***"
    assert redact_pair("aws_region=eu-west-1") == "aws_region=eu-west-1"
    assert redact_pair(f"password{SECRET}") == "***"


def test_spark_entry_points_warn_when_secrets_came_on_the_command_line(capsys):
    from memwal.spark._entry import warn_secret_arguments

    warn_secret_arguments(["/t", "--storage-option", f"aws_session_token={SECRET}", f"--storage-option=token:{SECRET}"])
    err = capsys.readouterr().err
    assert "aws_session_token" in err and "--storage-options-file" in err and SECRET not in err
    warn_secret_arguments(["/t", "--storage-option", "aws_region=x", "--storage-options-file", "/f"])
    assert capsys.readouterr().err == ""


def test_the_options_file_is_private_and_removed_even_on_failure():
    with pytest.raises(RuntimeError), storage_options_file({"aws_session_token": SECRET}) as path:
        st, dir_st = os.stat(path), os.stat(os.path.dirname(path))
        assert stat.S_IMODE(st.st_mode) == 0o600 and stat.S_IMODE(dir_st.st_mode) == 0o700
        assert st.st_uid == os.getuid()
        assert read_storage_options_file(path) == {"aws_session_token": SECRET}
        raise RuntimeError("the job failed")
    assert not os.path.exists(path) and not os.path.exists(os.path.dirname(path))


def test_operator_templates_never_render_storage_options(make_table, monkeypatch):
    from memwal.airflow.operators import OPERATORS, MemWalMergeOperator

    table, _ = make_table()
    for cls in OPERATORS.values():
        assert not {"storage_options", "spark_env", "spark_conf", "spark_submit_kwargs"} & set(cls.template_fields)
    op = MemWalMergeOperator(
        task_id="m",
        table="{{ params.table }}",
        storage_options={"aws_secret_access_key": SECRET, "aws_region": "{{ params.table }}"},
    )
    op.render_template_fields({"params": {"table": table.uri}})
    assert op.table == table.uri  # templates do render
    rendered = {name: getattr(op, name) for name in op.template_fields}
    assert SECRET not in json.dumps(rendered, default=str)
    assert op.storage_options["aws_region"] == "{{ params.table }}"  # never rendered


# -- the real spark-submit: /proc/*/cmdline of the test's own processes, watched while they run ---------
def descendants(root: int) -> list[int]:
    """The processes descended from ``root`` now (children, their children...), from each
    process's parent in ``/proc/<pid>/stat``."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat_line = f.read()
        except OSError:
            continue
        fields = stat_line[stat_line.rindex(b")") + 2:].split()  # after "pid (comm) ": state, ppid, ...
        children.setdefault(int(fields[1]), []).append(int(name))
    out, todo = [], [root]
    while todo:
        kids = children.get(todo.pop(), [])
        out += kids
        todo += kids
    return out


class CmdlineWatch:
    """Polls the command lines of this test's own processes (every process descended from the
    one that entered the watch: the spark-submit it starts, the JVM, the Python driver) in a
    thread, and stats the options file named by those holding ``marker``, the table URI. Other
    tests' processes, on this machine at the same time, are not this test's to judge."""

    def __init__(self, marker: str) -> None:
        self.marker = marker.encode()
        self.root = os.getpid()
        self.cmdlines: set[bytes] = set()
        self.file_stats: list[tuple[int, int, int]] = []  # (file mode, dir mode, uid) while present
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def __enter__(self) -> CmdlineWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _poll(self) -> None:
        while not self._stop.is_set():
            for pid in descendants(self.root):
                try:
                    with open(f"/proc/{pid}/cmdline", "rb") as f:
                        cmdline = f.read()
                except OSError:
                    continue
                if cmdline not in self.cmdlines:
                    self.cmdlines.add(cmdline)
                self._stat_options_file(cmdline.split(b"\0"))
            self._stop.wait(0.05)

    def _stat_options_file(self, argv: list[bytes]) -> None:
        if b"--storage-options-file" not in argv[:-1] or self.marker not in argv:
            return
        path = argv[argv.index(b"--storage-options-file") + 1].decode()
        try:
            st, dir_st = os.stat(path), os.stat(os.path.dirname(path))
        except OSError:
            return
        self.file_stats.append((stat.S_IMODE(st.st_mode), stat.S_IMODE(dir_st.st_mode), st.st_uid))

    def options_files(self) -> set[str]:
        out = set()
        for cmdline in self.cmdlines:
            argv = cmdline.split(b"\0")
            if b"--storage-options-file" in argv[:-1] and self.marker in argv:
                out.add(argv[argv.index(b"--storage-options-file") + 1].decode())
        return out

    def assert_no_secret_and_private_file(self, secret: str, job: bytes = b"jobs/", processes: int = 2) -> None:
        """No command line ever held ``secret``; the watch saw ``processes`` job processes
        (spark-submit and its driver) naming the options file, which was private and is gone."""
        leaked = [c for c in self.cmdlines if secret.encode() in c]
        assert not leaked, leaked[0].replace(b"\0", b" ")[:300]
        job_processes = [c for c in self.cmdlines if b"--storage-options-file" in c and job in c and self.marker in c]
        assert len(job_processes) >= processes, "the watch did not see the job's processes"
        assert self.options_files(), "no options file named"
        assert self.file_stats and set(self.file_stats) == {(0o600, 0o700, os.getuid())}
        for path in self.options_files():
            assert not os.path.exists(path) and not os.path.exists(os.path.dirname(path))


def test_airflow_spark_operator_passes_connection_secrets_only_in_a_private_file(make_table, monkeypatch, capfd):
    from memwal.airflow.operators import MemWalMergeOperator

    table, model = make_table()
    password, token = SECRET + "-password", SECRET + "-token"
    monkeypatch.setenv(
        "AIRFLOW_CONN_MEMWAL_SECRETS",
        json.dumps(
            {
                "conn_type": "memwal",
                "host": table.uri,
                "password": password,
                "extra": {"storage_options": {"aws_session_token": token}},
            }
        ),
    )
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_LOCAL", json.dumps({"conn_type": "spark", "host": "local[2]"}))
    monkeypatch.setenv("PATH", f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}")  # spark-submit
    op = MemWalMergeOperator(
        task_id="merge",
        memwal_conn_id="memwal_secrets",
        engine="spark",
        spark_conn_id="spark_local",
        spark_conf={"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "4"},
        spark_env={"PYSPARK_PYTHON": sys.executable},
        asset_alias=None,
    )
    capfd.readouterr()
    with CmdlineWatch(table.uri) as watch:
        doc = op.execute({"params": {}})
    assert doc["engine"] == "spark" and doc["version"] == table.manifest().version
    assert table.manifest().compacted == {s: 4 for s in shard_ids_for(SMALL)}
    assert table_rows(table) == model.sorted_rows()
    watch.assert_no_secret_and_private_file(SECRET)
    logs = "".join(capfd.readouterr())  # Airflow's task logs (structlog writes them to the console)
    assert "--storage-options-file" in logs and "merged into version" in logs  # the command line and the job's output
    assert SECRET not in logs


def test_spark_submit_maintenance_reads_its_options_file(make_table, tmp_path):
    table, model = make_table()
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    result = tmp_path / "result.json"
    with CmdlineWatch(table.uri) as watch, storage_options_file({"aws_session_token": SECRET}) as path:
        proc = subprocess.run(
            spark_submit(
                "--master",
                "local[2]",
                "--conf",
                "spark.ui.enabled=false",
                str(ROOT / "jobs/maintenance.py"),
                table.uri,
                "--jobs",
                "merge",
                "--storage-options-file",
                path,
                "--result-file",
                str(result),
            ),
            capture_output=True,
            text=True,
            env=env,
            timeout=600,
        )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert SECRET not in proc.stdout + proc.stderr
    (merge,) = json.loads(result.read_text())["jobs"]  # memwal cycle's document
    assert merge["job"] == "merge" and merge["result"]["version"] == table.manifest().version
    assert table_rows(table) == model.sorted_rows()
    watch.assert_no_secret_and_private_file(SECRET)


def test_cli_spark_engine_keeps_the_options_file_path_only(make_table, tmp_path):
    """``memwal merge --engine spark`` starts Spark's JVM (spark-submit pyspark-shell) itself."""
    table, model = make_table()
    env = dict(
        os.environ,
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        PATH=f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
    )
    with CmdlineWatch(table.uri) as watch, storage_options_file({"aws_session_token": SECRET}) as path:
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "memwal.cli",
                "merge",
                table.uri,
                "--engine",
                "spark",
                "--storage-options-file",
                path,
                "--json",
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=600,
            cwd=ROOT,
        )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert SECRET not in proc.stdout + proc.stderr
    assert json.loads(proc.stdout)["engine"] == "spark"
    assert table_rows(table) == model.sorted_rows()
    assert any(b"pyspark-shell" in c for c in watch.cmdlines)  # Spark's own spark-submit ran, and was watched
    watch.assert_no_secret_and_private_file(SECRET, job=b"memwal.cli", processes=1)
