#!/usr/bin/env bash
# Installs memwal-jobs from its wheel, with the Airflow and Spark extras, into the environment of
# the `python` on PATH (the image's, or a virtual environment's), pinned by the constraints file CI
# tested it with, and puts the fleet DAG's file into a DAG folder. docker/Dockerfile runs it; so
# does tests/package/test_image.py, in a clean venv: the image's install step is a tested one.
#
#   install-memwal.sh DIR [DAGS]   # DIR: memwal_jobs-<version>-py3-none-any.whl and constraints.txt
#                                  # DAGS: a DAG folder to copy memwal_fleet.py into
set -euo pipefail
dir=${1:?usage: install-memwal.sh DIR [DAGS] (DIR holds the wheel and constraints.txt)}
dags=${2:-}
shopt -s nullglob
wheels=("$dir"/memwal_jobs-*-py3-none-any.whl)
if [ "${#wheels[@]}" -ne 1 ]; then
    echo "install-memwal.sh: want one memwal_jobs wheel in $dir, found ${#wheels[@]} (make dist builds it)" >&2
    exit 2
fi
# Airflow's own version is part of the request, so that pip can never up- or downgrade the Airflow
# the image came with (Airflow's advice for extending its image); the constraints pin it.
airflow=$(grep -E '^apache-airflow==' "$dir/constraints.txt")
python -m pip install --constraint "$dir/constraints.txt" "$airflow" "${wheels[0]}[airflow,spark]"
# Over an image's preinstalled providers: what pip installed must agree with what was there.
python -m pip check
# What a worker needs, checked: the CLI, the Spark jobs' files, the provider, the fleet DAG.
memwal --version
example_dags=$(python -I - <<'PY'  # -I: the installed memwal, never a memwal/ folder in the current directory
import importlib.util
import os

spark = importlib.util.find_spec("memwal.spark").submodule_search_locations[0]
assert os.path.isfile(os.path.join(spark, "maintenance.py")), f"no maintenance.py in {spark}"
import memwal.airflow.plugin  # noqa: E402,F401  (the plugin: Airflow and the provider import)
import memwal.airflow.example_dags as dags  # noqa: E402

print(dags.__path__[0])
PY
)
if [ -n "$dags" ]; then
    mkdir -p "$dags"
    cp "$example_dags/memwal_fleet.py" "$dags/"
fi
