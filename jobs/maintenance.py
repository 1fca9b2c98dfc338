"""``spark-submit jobs/maintenance.py TABLE [--jobs merge,catchup,compact,gc,snapshot] [job options]``.

The whole maintenance cycle in one Spark application (one JVM start instead of five): the
``memwal cycle`` command on the Spark engine, so its flags, ``--json`` / ``--result-file``
document (:class:`memwal.cycle.CycleResult`) and exit codes are the CLI's.
"""

from memwal.spark._entry import run

if __name__ == "__main__":
    raise SystemExit(run("cycle", app="memwal-maintenance"))
