"""The driver JVM's class archive, the early-started local session (memwal.spark.engine.session)
and the spark-submit entry's session.

Each case runs Spark in a child process: the suite's own session (conftest) is this
process's, and a JVM's start-up options only apply to a new JVM.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT

pytestmark = pytest.mark.long  # the workers start this file first (tests/conftest.py)

#: Starts a session as the engines do and runs one job; prints the sum and the JVM's options.
SESSION_JOB = """
from memwal.spark.engine.frames import run_tasks
from memwal.spark.engine.session import active_or_local, start_session
start_session()
start_session()  # idempotent: still one session
spark = active_or_local()
assert active_or_local() is spark
print(sum(run_tasks(spark, list(range(10)), lambda i: [i])))
print(spark.sparkContext.getConf().get("spark.driver.extraJavaOptions"))
spark.stop()
again = active_or_local()  # stopped since: a new one
assert again is not spark and run_tasks(again, [1, 2, 3], lambda i: [i]) == [1, 2, 3]
"""


def _env(cache: Path) -> dict[str, str]:
    return dict(os.environ, MEMWAL_CACHE_DIR=str(cache), PYSPARK_PYTHON=sys.executable,
                PYSPARK_DRIVER_PYTHON=sys.executable)


def _python(code_or_args: list[str], cache: Path, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *code_or_args], cwd=cwd, env=_env(cache), capture_output=True,
                          text=True, timeout=600)


def _archive_path(cache: Path) -> Path:
    code = "from memwal.spark.engine.jvm_archive import archive_path; print(archive_path())"
    out = _python(["-c", code], cache, ROOT)
    assert out.returncode == 0, out.stderr
    return Path(out.stdout.strip())


def test_no_archive_means_plain_options(tmp_path: Path) -> None:
    out = _python(["-m", "memwal.spark.engine.jvm_archive", "--java-options"], tmp_path / "cache", ROOT)
    assert (out.returncode, out.stdout.strip()) == (0, "")
    assert not (tmp_path / "cache").exists()  # asking builds nothing


def test_build_once_then_sessions_use_it_and_survive_damage(tmp_path: Path) -> None:
    """The archive is built from nothing once a machine: by make's install step (the Makefile's venv
    target), whose archive this test copies when it is there (a second build took 80-280 s of the
    suite); else here."""
    from memwal.spark.engine.jvm_archive import cache_dir

    cache = tmp_path / "cache"
    archive = _archive_path(cache)
    installed = cache_dir() / archive.name
    if installed.is_file():
        assert installed.stat().st_size > 1 << 20
        assert not list(installed.parent.glob(f".{installed.name}.*.tmp"))  # no temporary file left
        cache.mkdir()
        shutil.copyfile(installed, archive)
    else:
        built = _python(["-m", "memwal.spark.engine.jvm_archive"], cache, ROOT)
        assert built.returncode == 0, built.stderr
        assert built.stdout.startswith(f"JVM class archive: {archive} (")
        assert archive.is_file() and archive.stat().st_size > 1 << 20
        assert [p.name for p in cache.iterdir()] == [archive.name]  # no temporary file left
    before = archive.stat()
    again = _python(["-m", "memwal.spark.engine.jvm_archive"], cache, ROOT)
    assert again.returncode == 0 and archive.stat().st_mtime_ns == before.st_mtime_ns  # not rebuilt

    run = _python(["-c", SESSION_JOB], cache, tmp_path)
    assert run.returncode == 0, run.stderr
    total, options = run.stdout.splitlines()[-2:]
    assert total == "45"
    assert f"-XX:SharedArchiveFile={archive}" in options and "-XX:TieredStopAtLevel=1" in options
    assert archive.is_file()

    # A truncated archive crashes the JVM (SIGBUS): the session is retried without it.
    archive.chmod(0o644)  # the JVM writes it read-only
    with archive.open("r+b") as f:
        f.truncate(1 << 20)
    run = _python(["-c", SESSION_JOB], cache, tmp_path)
    assert run.returncode == 0, run.stderr
    total, options = run.stdout.splitlines()[-2:]
    assert total == "45" and "SharedArchiveFile" not in options
    assert not archive.exists()
    assert f"removing the JVM class archive {archive}: the JVM did not start with it" in run.stderr
    assert not list(tmp_path.glob("hs_err_pid*.log"))  # the crash report went to the cache folder


#: The spark-submit entry's session, in a Python started by pyspark's launcher as spark-submit
#: starts the driver (PYSPARK_SUBMIT_ARGS: the same arguments, the same JVM system properties).
ENTRY_CONTEXT = """
from memwal.spark._entry import spark_session
from memwal.spark.engine.session import active_or_local
with spark_session("memwal-entry") as spark:
    assert active_or_local() is spark  # every engine of the process uses it
    conf = spark.sparkContext.getConf()
    print(conf.get("spark.log.level"), conf.get("spark.python.daemon.module"), conf.get("spark.app.name"))
"""


@pytest.mark.parametrize("submitted, expected", [
    ("", "WARN memwal.spark.engine.python_daemon memwal-entry"),
    ("--conf spark.log.level=ERROR --conf spark.python.daemon.module=pyspark.daemon",
     "ERROR pyspark.daemon memwal-entry"),
], ids=["defaults", "submitted-conf-wins"])
def test_the_entry_s_context_keeps_what_spark_submit_was_given(tmp_path: Path, submitted: str, expected: str) -> None:
    env = _env(tmp_path / "cache")
    env["PYSPARK_SUBMIT_ARGS"] = f"--master local[1] --conf spark.ui.enabled=false {submitted} pyspark-shell"
    out = subprocess.run([sys.executable, "-c", ENTRY_CONTEXT], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.splitlines()[-1] == expected


@pytest.mark.parametrize("bad", ["/nonexistent/table", "s3://bucket/t --storage-option bogus=1"])
def test_bad_input_starts_no_jvm(tmp_path: Path, bad: str) -> None:
    """Spark starts only once the table opened: bad input is one line, exit 2, no JVM output."""
    out = subprocess.run([sys.executable, "-m", "memwal.cli", "merge", *bad.split(), "--engine", "spark"],
                         cwd=tmp_path, env=_env(tmp_path / "cache"), capture_output=True, text=True, timeout=300)
    assert out.returncode == 2
    assert len(out.stderr.splitlines()) == 1 and out.stderr.startswith("memwal: error: ")


def _package(root: Path, package: str, version: str) -> None:
    (root / package).mkdir(parents=True)
    (root / package / "__init__.py").write_text("")
    (root / package / "version.py").write_text(f"__version__: str = '{version}'\n")


def _zipped(path: Path, package: str, version: str) -> str:
    import zipfile

    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{package}/__init__.py", "")
        z.writestr(f"{package}/version.py", f"__version__ = '{version}'\n")
    return str(path)


@pytest.mark.parametrize("installed", ["4.3.0", "4.2.1", None])
def test_the_python_daemon_puts_spark_s_zip_behind_only_the_same_installed_version(tmp_path: Path,
                                                                                  installed: str | None) -> None:
    from memwal.spark.engine.python_daemon import prefer_installed

    site = tmp_path / "site-packages"
    site.mkdir()
    if installed:
        _package(site, "pyspark", installed)
    _package(site, "py4j", "0.10.9.9")
    pyspark_zip = _zipped(tmp_path / "pyspark.zip", "pyspark", "4.3.0")
    py4j_zip = _zipped(tmp_path / "py4j-0.10.9.9-src.zip", "py4j", "0.10.9.9")
    other_zip = _zipped(tmp_path / "user-deps.zip", "pyspark", "4.3.0")  # not Spark's: never moves
    path = [pyspark_zip, py4j_zip, other_zip, str(site), "/usr/lib/python311.zip"]
    moved = prefer_installed(path)
    assert sorted(moved) == sorted(path)
    if installed == "4.3.0":
        assert moved == [other_zip, str(site), "/usr/lib/python311.zip", pyspark_zip, py4j_zip]
    else:  # the JVM's pyspark stays first; py4j's zip still matches its installed copy
        assert moved == [pyspark_zip, other_zip, str(site), "/usr/lib/python311.zip", py4j_zip]


def test_our_context_s_workers_import_the_installed_pyspark(spark_session) -> None:
    import pyspark
    from memwal.spark.engine.frames import run_tasks

    def where(_):
        import sys

        import pyspark as worker_pyspark
        return [(worker_pyspark.__file__, worker_pyspark.__version__, [p for p in sys.path if p.endswith(".zip")])]

    found = run_tasks(spark_session, [0, 1], where)
    installed = str(Path(pyspark.__file__))
    assert {f for f, _, _ in found} == {installed}
    assert {v for _, v, _ in found} == {pyspark.__version__}
    for _, _, zips in found:  # Spark's zips are still on the path, behind
        assert Path(zips[-2]).name == "pyspark.zip" and Path(zips[-1]).name.startswith("py4j-")
