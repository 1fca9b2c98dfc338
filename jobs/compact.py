"""``spark-submit jobs/compact.py TABLE [--target-rows-per-fragment N] [--max-fragments N] [--json]``.

Storage credentials go in ``--storage-options-file PATH`` (mode 0600), not on the command line.
"""

from memwal.spark._entry import run

if __name__ == "__main__":
    raise SystemExit(run("compact"))
