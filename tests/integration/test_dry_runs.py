"""A dry run is the plan and nothing else: with ``--engine spark`` it starts no JVM and writes
nothing, for every action, through the real ``memwal`` program."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.helpers import tree_digest

#: Runs the CLI in a fresh interpreter, then reports whether this process ever had a Spark
#: context or a Java child: a dry run must have neither.
PROBE = """
import json, os, sys
from memwal.cli import main
rc = main(sys.argv[1:])
from pyspark import SparkContext
children = []
for pid in os.listdir("/proc"):
    try:
        with open(f"/proc/{pid}/stat") as f:
            parts = f.read().split()
        if parts[3] == str(os.getpid()):
            children.append(open(f"/proc/{pid}/comm").read().strip())
    except (OSError, IndexError):
        pass
print(json.dumps({"rc": rc, "spark": SparkContext._active_spark_context is not None,
                  "engine_loaded": "memwal.spark.engine.session" in sys.modules, "children": children}),
      file=sys.stderr)
"""


@pytest.mark.parametrize("argv", [
    ["merge"], ["catchup"], ["compact"], ["snapshot"], ["gc", "--grace-seconds", "0", "--writer-idle-seconds", "0",
                                                        "--expire-versions", "0"],
], ids=lambda a: a[0])
def test_a_spark_dry_run_starts_no_jvm_and_writes_nothing(make_table, argv):
    table, _ = make_table()
    before = tree_digest(table.uri)
    run = subprocess.run([sys.executable, "-c", PROBE, argv[0], table.uri, *argv[1:], "--engine", "spark",
                          "--dry-run", "--json"], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYSPARK_SUBMIT_ARGS": ""})
    probe = json.loads(run.stderr.strip().splitlines()[-1])
    assert probe == {"rc": 0, "spark": False, "engine_loaded": False, "children": []}, run.stderr
    assert json.loads(run.stdout)["dry_run"] is True
    assert tree_digest(table.uri) == before


def test_a_spark_merge_with_nothing_to_merge_boots_no_jvm(make_table):
    """The merge starts its session only after planning, for a plan with work (issue 23): a
    scheduled run that finds nothing new costs what the local engine's does."""
    import memwal

    table, _ = make_table()
    assert memwal.open(table.uri).merge().ok  # everything merged: the next plan is empty
    run = subprocess.run([sys.executable, "-c", PROBE, "merge", table.uri, "--engine", "spark", "--json"],
                         capture_output=True, text=True, timeout=120, env={**os.environ, "PYSPARK_SUBMIT_ARGS": ""})
    probe = json.loads(run.stderr.strip().splitlines()[-1])
    # the Spark engine is loaded (a run takes its engine), but no session nor Java child exists
    assert (probe["rc"], probe["spark"], probe["children"]) == (0, False, []), run.stderr
    doc = json.loads(run.stdout)
    assert doc["version"] is None and doc["shards"] == []
